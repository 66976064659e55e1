//! The modules of `src/` import each other one way only, floor by floor: `app` on top, then
//! the sinks, the sources, the rules and the model, and the ground floor (`tail`, `parse`,
//! `clock`, …). A module that reaches itself through others is a loop this test names, with
//! the files that make each step; a source that imports a sink, a sink that imports a source,
//! or anything below `app` that imports it, is named likewise. Comments do not count;
//! `crate::x` in code does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → module it uses → the files of the first that use it.
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The folders that group modules of one kind: each file or folder in them is a module of its
/// own (`sources/log`), and the group's `mod.rs` is the module `sources`.
const GROUPS: [&str; 3] = ["app", "sources", "sinks"];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every `crate::NAME` in a file's code, comments left out, with its second step where the
/// first is a group (`crate::sources::log::X` is `sources/log`).
fn uses(source: &str) -> BTreeSet<String> {
    let word = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut names = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name = word(rest);
            if name.is_empty() {
                continue;
            }
            let after = &rest[name.len()..];
            match after.strip_prefix("::").map(word) {
                Some(inner) if GROUPS.contains(&name.as_str()) && !inner.is_empty() => {
                    names.insert(format!("{name}/{inner}"));
                }
                _ => {
                    names.insert(name);
                }
            }
        }
    }
    names
}

/// The modules: each folder with its files, each single file but the crate roots, and inside
/// a group each of its files and folders.
fn modules(src: &Path) -> BTreeMap<String, Vec<std::path::PathBuf>> {
    fn entries(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<std::path::PathBuf>>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if prefix.is_empty() && GROUPS.contains(&name.as_str()) {
                    entries(&path, &format!("{name}/"), out);
                    continue;
                }
                let mut files = Vec::new();
                rust_files(&path, &mut files);
                out.insert(format!("{prefix}{name}"), files);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                match (prefix, stem) {
                    ("", "lib" | "main") => {}
                    (group, "mod") => {
                        out.insert(group.trim_end_matches('/').to_owned(), vec![path]);
                    }
                    _ => {
                        out.insert(format!("{prefix}{stem}"), vec![path]);
                    }
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    entries(src, "", &mut out);
    out
}

fn module_edges(src: &Path) -> Edges {
    let modules = modules(src);
    let mut edges = Edges::new();
    for (module, files) in &modules {
        for file in files {
            let source = std::fs::read_to_string(file).unwrap();
            for used in uses(&source) {
                let used = match used.split_once('/') {
                    Some((group, _)) if !modules.contains_key(&used) => group.to_owned(),
                    _ => used,
                };
                if used != *module && modules.contains_key(&used) {
                    let shown = file.strip_prefix(src).unwrap().display().to_string();
                    edges
                        .entry(module.clone())
                        .or_default()
                        .entry(used)
                        .or_default()
                        .insert(shown);
                }
            }
        }
    }
    edges
}

/// Every loop, each said as its steps with the files that make them.
fn loops(edges: &Edges) -> Vec<String> {
    edges
        .keys()
        .filter_map(|module| loop_through(edges, module))
        .map(|path| {
            let steps: Vec<String> = path
                .windows(2)
                .map(|w| format!("{} → {} ({:?})", w[0], w[1], edges[&w[0]][&w[1]]))
                .collect();
            steps.join(", ")
        })
        .collect()
}

/// A path from `from` back to itself, if there is one.
fn loop_through(edges: &Edges, from: &str) -> Option<Vec<String>> {
    let mut stack = vec![vec![from.to_owned()]];
    let mut seen = BTreeSet::new();
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap();
        for next in edges.get(last).into_iter().flat_map(|e| e.keys()) {
            if next == from {
                let mut found = path.clone();
                found.push(next.clone());
                return Some(found);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push(longer);
            }
        }
    }
    None
}

#[test]
fn no_module_of_src_reaches_itself_through_its_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = module_edges(&src);
    assert!(
        edges.len() > 5,
        "the modules' imports were not found: {edges:?}"
    );
    let found = loops(&edges);
    assert!(found.is_empty(), "import loops:\n{}", found.join("\n"));
}

/// A circle made on purpose in a scratch copy of `src/`: the ground floor (`paths.rs`)
/// reaching up to the command line is caught, through a single-file module.
#[test]
fn a_circle_made_on_purpose_is_caught() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let scratch = tempfile::tempdir().unwrap();
    copy_tree(&src, scratch.path());
    let paths = scratch.path().join("paths.rs");
    let mut text = std::fs::read_to_string(&paths).unwrap();
    text.push_str("\n#[allow(unused_imports)]\nuse crate::app::cli::Cli;\n");
    std::fs::write(&paths, text).unwrap();
    let found = loops(&module_edges(scratch.path()));
    assert!(
        found
            .iter()
            .any(|l| l.contains("paths → app/cli") && l.contains("paths.rs")),
        "{found:?}"
    );
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn a_loop_is_found_and_comments_do_not_count() {
    assert_eq!(
        uses("use crate::sinks::alert::x; // crate::sinks::status\nlet y = crate::model::Run::new();"),
        ["sinks/alert", "model"].map(str::to_owned).into()
    );
    let mut edges = Edges::new();
    for (a, b) in [("alert", "status"), ("status", "rules"), ("rules", "alert")] {
        edges
            .entry(a.into())
            .or_default()
            .insert(b.into(), BTreeSet::new());
    }
    assert_eq!(
        loop_through(&edges, "alert"),
        Some(
            ["alert", "status", "rules", "alert"]
                .map(str::to_owned)
                .into()
        )
    );
    edges.get_mut("rules").unwrap().clear();
    assert_eq!(loop_through(&edges, "alert"), None);
}

/// What a kind of module may not import. `app` (the command line, the configuration and the
/// wiring that takes them) is on top and may import anything; the layers below take plain
/// values from it. Sources and sinks meet only in the model: a source tells the model, a sink
/// reads it, and neither knows the other. The model and the rules know neither; the ground
/// floor (`tail`, `parse`, `state`, …) knows none of the kinds above the model.
fn forbidden(kind: &str) -> &'static [&'static str] {
    match kind {
        "app" => &[],
        "sources" => &["app", "sinks"],
        "sinks" => &["app", "sources"],
        "model" | "rules" => &["app", "sources", "sinks"],
        _ => &["app", "sources", "sinks", "rules"],
    }
}

/// A module's kind: its group (`sources` for `sources/log`), else its own name where it is
/// `model` or `rules`, else the ground floor.
fn kind(module: &str) -> &str {
    match module.split('/').next().unwrap() {
        k @ ("app" | "sources" | "sinks" | "model" | "rules") => k,
        _ => "ground",
    }
}

/// Every import that crosses a floor the wrong way, as `from → to (files)`.
fn wrong_way(edges: &Edges) -> Vec<String> {
    edges
        .iter()
        .flat_map(|(module, used)| {
            used.iter()
                .filter(|(u, _)| forbidden(kind(module)).contains(&kind(u)))
                .map(move |(u, files)| format!("{module} → {u} ({files:?})"))
        })
        .collect()
}

#[test]
fn sources_and_sinks_meet_only_in_the_model_and_nothing_below_app_imports_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = module_edges(&src);
    let wrong = wrong_way(&edges);
    assert!(
        wrong.is_empty(),
        "imports across the floors the wrong way:\n{}",
        wrong.join("\n")
    );
    assert!(
        edges["app/sidecar"].contains_key("app/config")
            && edges["sinks/metrics"].contains_key("model")
            && edges["sources/log"].contains_key("model"),
        "the imports were not read: {edges:?}"
    );
    // A sink reaching into a source, made on purpose in a scratch copy, is caught.
    let scratch = tempfile::tempdir().unwrap();
    copy_tree(&src, scratch.path());
    let report = scratch.path().join("sinks/report.rs");
    let mut text = std::fs::read_to_string(&report).unwrap();
    text.push_str("\n#[allow(unused_imports)]\nuse crate::sources::log::LogSource;\n");
    std::fs::write(&report, text).unwrap();
    let wrong = wrong_way(&module_edges(scratch.path()));
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("sinks/report → sources/log")),
        "{wrong:?}"
    );
}

/// Each module's floor: one above the highest floor it imports (0 for one that imports
/// nothing of the crate). Only meaningful without loops, which the test above rules out.
fn floors(edges: &Edges, modules: &BTreeSet<String>) -> BTreeMap<String, usize> {
    fn floor(m: &str, edges: &Edges, memo: &mut BTreeMap<String, usize>) -> usize {
        if let Some(f) = memo.get(m) {
            return *f;
        }
        memo.insert(m.to_owned(), 0);
        let f = edges
            .get(m)
            .into_iter()
            .flat_map(|e| e.keys())
            .map(|u| floor(u, edges, memo) + 1)
            .max()
            .unwrap_or(0);
        memo.insert(m.to_owned(), f);
        f
    }
    let mut memo = BTreeMap::new();
    for m in modules {
        floor(m, edges, &mut memo);
    }
    memo
}

/// `docs/architecture.md`'s picture of the floors is the code's.
#[test]
fn the_architecture_docs_picture_of_the_layers_is_the_codes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let modules: BTreeSet<String> = modules(&src).into_keys().collect();
    let floors = floors(&module_edges(&src), &modules);
    let top = floors.values().copied().max().unwrap();
    let picture: String = (0..=top)
        .rev()
        .map(|f| {
            let on: Vec<&str> = floors
                .iter()
                .filter(|(_, at)| **at == f)
                .map(|(m, _)| m.as_str())
                .collect();
            format!("{f}: {}\n", on.join(", "))
        })
        .collect();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let drawn = doc
        .split_once("<!-- layers: checked by tests/it/layout.rs -->\n```\n")
        .and_then(|(_, rest)| rest.split_once("```\n<!-- /layers -->"))
        .map(|(block, _)| block)
        .expect("docs/architecture.md has the layers picture");
    assert_eq!(
        drawn, picture,
        "docs/architecture.md's layers differ from the code's"
    );
}

/// The longest a function may be: past it, a function is usually two concerns.
const LONGEST_FUNCTION: usize = 100;

/// The functions allowed past it: the families a scrape encodes, one declaration after
/// another, read top to bottom.
const DECLARATIVE: [&str; 3] = [
    "src/sinks/metrics/partitions.rs: encode",
    "src/sinks/metrics/gpu.rs: encode",
    "src/sinks/metrics/server.rs: encode",
];

/// `file: name` and the length in lines of every function of `source` longer than `limit`.
/// Braces are counted outside string and character literals and comments; a function ends
/// where its body's braces close (a declaration without a body is none).
fn long_functions(file: &str, source: &str, limit: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut long = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(at) = words.iter().position(|w| *w == "fn") else {
            continue;
        };
        let before_ok = words[..at].iter().all(|w| {
            [
                "pub",
                "pub(crate)",
                "pub(super)",
                "async",
                "unsafe",
                "const",
            ]
            .contains(w)
        });
        let Some(name) = words.get(at + 1).filter(|_| before_ok) else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let (mut depth, mut opened) = (0i64, false);
        for (end, l) in lines.iter().enumerate().skip(start) {
            let code = code_of(l);
            if !opened && code.trim_end().ends_with(';') && !code.contains('{') {
                break;
            }
            for c in code.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            if opened && depth <= 0 {
                let length = end - start + 1;
                if length > limit {
                    long.push((format!("{file}: {name}"), length));
                }
                break;
            }
        }
    }
    long
}

/// A line without its string and character literals and its comment.
fn code_of(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '\'' if matches!(chars.clone().nth(1), Some('\'')) => {
                chars.next();
                chars.next();
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn no_function_is_over_100_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let mut long: Vec<(String, usize)> = files
        .iter()
        .flat_map(|f| {
            let name = f.strip_prefix(root).unwrap().display().to_string();
            long_functions(
                &name,
                &std::fs::read_to_string(f).unwrap(),
                LONGEST_FUNCTION,
            )
        })
        .filter(|(f, _)| !DECLARATIVE.contains(&f.as_str()))
        .collect();
    long.sort_by_key(|(_, lines)| std::cmp::Reverse(*lines));
    assert!(
        long.is_empty(),
        "functions over {LONGEST_FUNCTION} lines (split each into its concerns): {long:?}"
    );
    // The scanner itself: a function of 101 lines is caught, one with braces in its strings
    // and characters is measured by its code, and a declaration is no function.
    let body = "    let x = \"{\";\n".repeat(99);
    let made = format!("fn made() {{\n{body}}}\nfn decl();\nfn brace() {{ let c = '}}'; }}\n");
    assert_eq!(
        long_functions("made.rs", &made, LONGEST_FUNCTION),
        [("made.rs: made".to_owned(), 101)]
    );
}

/// The fields of a `pub struct NAME { … }` in `source` declared `pub` (any `pub(…)` too).
fn public_fields(source: &str, name: &str) -> Vec<String> {
    let Some(start) = source.find(&format!("pub struct {name} {{")) else {
        return vec![format!("no `pub struct {name}`")];
    };
    let body = &source[start..];
    let body = &body[..body.find("\n}\n").unwrap_or(body.len())];
    body.lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| l.starts_with("pub ") || l.starts_with("pub("))
        .map(str::to_owned)
        .collect()
}

/// The model is the run's one writer (docs/architecture.md#one-writer): `Run`'s fields are
/// private to `model`, so a source or a sink changes the run only through its methods, and
/// the compiler refuses any other way in. A `pub` field would open one again.
#[test]
fn the_run_has_no_public_field_so_the_model_is_its_one_writer() {
    let model =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/model/mod.rs"))
            .unwrap();
    assert_eq!(public_fields(&model, "Run"), Vec::<String>::new());
    let opened = model.replacen("\n    partitions: ", "\n    pub partitions: ", 1);
    let caught = public_fields(&opened, "Run");
    assert!(
        caught.len() == 1 && caught[0].starts_with("pub partitions: "),
        "a field made public on purpose is caught: {caught:?}"
    );
}
