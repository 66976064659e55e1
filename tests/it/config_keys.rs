//! The configuration keys and flags as the binary knows them, against `docs/configuration.md`'s
//! key table: a key the file format accepts and the table does not list, one the table lists
//! that the format refuses, or a `run` flag documented nowhere fails the test. The keys come
//! from the binary itself (serde names every field it expects when it meets an unknown one),
//! the flags from `run --help`.

use crate::common::{temp_dir, BIN};
use std::collections::BTreeSet;
use std::process::Command;

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .expect("docs/configuration.md")
}

/// The first cells of the key table: `| key / flag | default | range | meaning |`.
fn key_cells(doc: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| key / flag |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            break;
        }
        if in_table && !line.starts_with("|---") {
            cells.push(line.split('|').nth(1).unwrap_or("").trim().to_owned());
        }
    }
    assert!(cells.len() > 30, "the key table was not found: {cells:?}");
    cells
}

/// The top-level keys a cell names: `smtp_user`, `smtp_password_file` → both; `[[logs]]`
/// `path` → `logs`; `[rules.NAME]` → `rules`. Flags (`--x`) are not keys.
fn keys_of(cell: &str) -> Vec<String> {
    let quoted: Vec<&str> = cell.split('`').skip(1).step_by(2).collect();
    match quoted.first() {
        Some(table) if table.starts_with('[') => {
            let name = table.trim_matches(['[', ']']);
            vec![name.split('.').next().unwrap().to_owned()]
        }
        _ => quoted
            .iter()
            .filter(|q| !q.starts_with('-'))
            .map(|q| (*q).to_owned())
            .collect(),
    }
}

fn flags_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches('.').to_owned())
        .collect()
}

/// Every key the file format accepts, as the binary says when it meets one it does not.
fn accepted_keys() -> BTreeSet<String> {
    let dir = temp_dir();
    let file = dir.path().join("pulse.toml");
    std::fs::write(&file, "no_such_key = 1\n").unwrap();
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = stderr
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("no list of keys in {stderr:?}"))
        .1;
    expected
        .split(',')
        .map(|k| k.trim().trim_matches('`').to_owned())
        .filter(|k| !k.is_empty())
        .collect()
}

#[test]
fn every_key_the_format_accepts_is_documented_and_every_documented_one_is_accepted() {
    let documented: BTreeSet<String> = key_cells(&doc()).iter().flat_map(|c| keys_of(c)).collect();
    let accepted = accepted_keys();
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let refused: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty() && refused.is_empty(),
        "keys the format accepts but docs/configuration.md's table does not list: {undocumented:?}\nkeys the table lists but the format refuses: {refused:?}"
    );
}

#[test]
fn every_run_flag_is_documented_and_every_documented_flag_is_taken() {
    let help = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let taken: BTreeSet<String> = help
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with("--")))
        .map(|w| w.trim_end_matches(',').to_owned())
        .collect();
    let doc = doc();
    let in_table: BTreeSet<String> = key_cells(&doc).iter().flat_map(|c| flags_in(c)).collect();
    let anywhere = flags_in(&doc);
    let undocumented: Vec<_> = taken
        .iter()
        .filter(|f| *f != "--help" && !anywhere.contains(*f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "run flags docs/configuration.md never mentions: {undocumented:?}"
    );
    for flag in &in_table {
        let status = Command::new(BIN)
            .args(["run", flag, "--help"])
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&status.stderr).contains("unexpected argument"),
            "docs/configuration.md lists {flag}, which run does not take"
        );
    }
}

#[test]
fn a_cell_names_its_keys() {
    assert_eq!(
        keys_of("`smtp_user`, `smtp_ca_file`"),
        ["smtp_user", "smtp_ca_file"]
    );
    assert_eq!(keys_of("`[[logs]]` `path` / `--log`"), ["logs"]);
    assert_eq!(keys_of("`[rules.NAME]` `enabled`"), ["rules"]);
    assert_eq!(keys_of("`gpu` / `--gpu`"), ["gpu"]);
    assert_eq!(
        flags_in("`web_config_file` / `--web-config-file` (`--web.config.file`)"),
        ["--web-config-file", "--web.config.file"]
            .map(str::to_owned)
            .into()
    );
}
