//! The repository's shipped files as the tests read them: dashboards, rule files, the
//! scripted NVML library.

use super::BIN;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

pub fn read_repo(relative: &str) -> String {
    let path = repo_file(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// Every panel, those nested in collapsed rows included.
pub fn all_panels(panels: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for panel in panels.as_array().into_iter().flatten() {
        out.push(panel);
        out.extend(all_panels(&panel["panels"]));
    }
    out
}

pub fn variable<'a>(dashboard: &'a Value, name: &str) -> &'a Value {
    dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == name)
        .unwrap_or_else(|| panic!("the dashboard has no `{name}` variable"))
}

/// A query variable's query, in either of the forms Grafana saves.
pub fn variable_query(var: &Value) -> String {
    var["query"]
        .as_str()
        .or_else(|| var["query"]["query"].as_str())
        .expect("a query variable has a query")
        .to_owned()
}

/// `label_values(EXPR, LABEL)` → (EXPR, LABEL).
pub fn split_label_values(query: &str) -> (String, String) {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .unwrap_or_else(|| panic!("not a label_values() query: {query}"));
    let (expr, label) = inner.rsplit_once(',').expect("label_values(EXPR, LABEL)");
    (expr.trim().to_owned(), label.trim().to_owned())
}

/// The names of the rules a rule file defines, from its `- alert:` or `- record:` lines.
pub fn names_after(text: &str, prefix: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix(prefix))
        .map(|name| name.trim().to_owned())
        .collect()
}

/// The scripted library, built once per test run beside the binary under test.
pub fn fake_nvml() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        // Into the profile of the binary under test (`cargo test --release` too).
        let release = Path::new(BIN)
            .parent()
            .is_some_and(|d| d.ends_with("release"));
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "fake-nvml"])
            .args(release.then_some("--release"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p fake-nvml");
        assert!(status.success(), "cargo build -p fake-nvml failed");
        let lib = Path::new(BIN).parent().unwrap().join("libfake_nvml.so");
        assert!(lib.is_file(), "{} was not built", lib.display());
        lib
    })
}
