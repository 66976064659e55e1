//! The modules of `src/` import each other one way only, floor by floor: `app` on top, then
//! the sinks, the sources, the rules and the model, and the ground floor (`tail`, `parse`,
//! `clock`, …). A module that reaches itself through others is a loop this test names, with
//! the files that make each step, and so is a file that reaches itself through other files
//! (two files of one module that import each other are one concern split in two, or two
//! concerns tangled); a source that imports a sink, a sink that imports a source, or anything
//! below `app` that imports it, is named likewise. Comments do not count; paths in code do,
//! from `crate::`, `super::` or `self::`, grouped (`use crate::{a, b::c}`) or not. A path from
//! a name brought in by `use` (`keys::field` after `use super::keys`) is read at its `use`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module (or file) → module (or file) it uses → the files of the first that use it.
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// The folders that group modules of one kind: each file or folder in them is a module of its
/// own (`sources/log`), and the group's `mod.rs` is the module `sources`.
const GROUPS: [&str; 3] = ["app", "sources", "sinks"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A file's module path from the crate's root: `app/config/keys.rs` is `app::config::keys`,
/// `app/config/mod.rs` is `app::config`, `lib.rs` is the root.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let mut parts: Vec<String> = file
        .strip_prefix(src)
        .unwrap()
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if !(stem == "mod" || parts.is_empty() && stem == "lib") {
        parts.push(stem.to_owned());
    }
    parts
}

/// A file's code as tokens: words, `::`, and every other character on its own; comments,
/// string and character literals left out.
fn tokens(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in source.lines() {
        let code = code_of(line);
        let mut chars = code.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_ascii_alphanumeric() || c == '_' {
                let mut word = c.to_string();
                while let Some(&n) = chars
                    .peek()
                    .filter(|n| n.is_ascii_alphanumeric() || **n == '_')
                {
                    word.push(n);
                    chars.next();
                }
                out.push(word);
            } else if c == ':' && chars.peek() == Some(&':') {
                chars.next();
                out.push("::".to_owned());
            } else if !c.is_whitespace() {
                out.push(c.to_string());
            }
        }
    }
    out
}

fn is_word(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
}

/// The paths of a use tree starting at `tokens[at]`, groups expanded (`a::{b, c::{self, d}}`
/// is `a::b`, `a::c::self` and `a::c::d`), and where the tree ends.
fn tree(tokens: &[String], mut at: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    loop {
        match tokens.get(at).map(String::as_str) {
            Some(word) if is_word(word) => {
                prefix.push(word.to_owned());
                at += 1;
                if tokens.get(at).map(String::as_str) != Some("::") {
                    return (vec![prefix], at);
                }
                at += 1;
            }
            Some("{") => {
                at += 1;
                let mut all = Vec::new();
                loop {
                    match tokens.get(at).map(String::as_str) {
                        None => return (all, at),
                        Some("}") => return (all, at + 1),
                        Some(",") => at += 1,
                        _ => {
                            let (inner, end) = tree(tokens, at);
                            all.extend(inner.into_iter().map(|p| [prefix.clone(), p].concat()));
                            at = end.max(at + 1);
                            if tokens.get(at).map(String::as_str) == Some("as") {
                                at += 2;
                            }
                        }
                    }
                }
            }
            _ => return (vec![prefix], at),
        }
    }
}

/// Every path a file's code names from `crate::`, `super::` or `self::`, from the crate's
/// root; `module` is the file's module path. `super::` inside an inline `mod tests { … }`
/// is the file's own module.
fn paths(source: &str, module: &[String]) -> Vec<Vec<String>> {
    let tokens = tokens(source);
    let mut found = Vec::new();
    // The inline modules the scan is in, with the brace depth inside each.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut at = 0;
    while at < tokens.len() {
        let token = tokens[at].as_str();
        let starts = ["crate", "super", "self"].contains(&token)
            && tokens.get(at + 1).map(String::as_str) == Some("::")
            && (at == 0 || tokens[at - 1] != "::");
        if starts {
            let (trees, end) = tree(&tokens, at);
            let here: Vec<String> = module
                .iter()
                .cloned()
                .chain(inline.iter().map(|(name, _)| name.clone()))
                .collect();
            found.extend(trees.into_iter().map(|p| from_root(&here, &p)));
            at = end.max(at + 1);
            continue;
        }
        match token {
            "mod" if tokens.get(at + 2).map(String::as_str) == Some("{") => {
                depth += 1;
                inline.push((tokens[at + 1].clone(), depth));
                at += 3;
                continue;
            }
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                inline.retain(|(_, d)| *d <= depth);
            }
            _ => {}
        }
        at += 1;
    }
    found
}

/// A path written in module `here` (`super::keys::field`), from the crate's root.
fn from_root(here: &[String], path: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, step) in path.iter().enumerate() {
        match (i, step.as_str()) {
            (0, "crate") => {}
            (0, "self") => out = here.to_vec(),
            (0, "super") => {
                out = here.to_vec();
                out.pop();
            }
            (_, "super") if path[..i].iter().all(|s| s == "super" || s == "self") => {
                out.pop();
            }
            (_, "self") => {}
            _ => out.push(step.clone()),
        }
    }
    out
}

/// Every `crate::NAME` in a file of the root's code, comments left out, with its second step
/// where the first is a group (`crate::sources::log::X` is `sources/log`).
fn uses(source: &str) -> BTreeSet<String> {
    paths(source, &[])
        .into_iter()
        .filter_map(|p| match (p.first(), p.get(1)) {
            (Some(group), Some(inner)) if GROUPS.contains(&group.as_str()) => {
                Some(format!("{group}/{inner}"))
            }
            (first, _) => first.cloned(),
        })
        .collect()
}

/// The modules: each folder with its files, each single file but the crate roots, and inside
/// a group each of its files and folders.
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    fn entries(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<PathBuf>>) {
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
                // `parse/envelope.rs` beside `parse/envelope/`: one module.
                out.entry(format!("{prefix}{name}"))
                    .or_default()
                    .extend(files);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                match (prefix, stem) {
                    ("", "lib" | "main") => {}
                    (group, "mod") => {
                        out.insert(group.trim_end_matches('/').to_owned(), vec![path]);
                    }
                    _ => {
                        out.entry(format!("{prefix}{stem}")).or_default().push(path);
                    }
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    entries(src, "", &mut out);
    out
}

/// File → file it uses → itself (the file that makes the step), for the files of the
/// library (`main.rs` is a crate of its own). A path is the file of its longest prefix that
/// is a module with a file: `crate::app::config::keys::field` is `app/config/keys.rs`.
fn file_edges(src: &Path) -> Edges {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| f != &src.join("main.rs"));
    let by_module: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| (module_path(src, f), shown(src, f)))
        .collect();
    let mut edges = Edges::new();
    for file in &files {
        let from = shown(src, file);
        let source = std::fs::read_to_string(file).unwrap();
        for path in paths(&source, &module_path(src, file)) {
            let to = (0..=path.len())
                .rev()
                .find_map(|n| by_module.get(&path[..n]));
            if let Some(to) = to.filter(|to| **to != from) {
                edges
                    .entry(from.clone())
                    .or_default()
                    .entry(to.clone())
                    .or_default()
                    .insert(from.clone());
            }
        }
    }
    edges
}

fn shown(src: &Path, file: &Path) -> String {
    file.strip_prefix(src).unwrap().display().to_string()
}

/// The file edges, gathered by module.
fn module_edges(src: &Path) -> Edges {
    let module_of: BTreeMap<String, String> = modules(src)
        .into_iter()
        .flat_map(|(module, files)| {
            files
                .into_iter()
                .map(move |f| (shown(src, &f), module.clone()))
        })
        .collect();
    let mut edges = Edges::new();
    for (from, used) in file_edges(src) {
        for (to, by) in used {
            let (Some(a), Some(b)) = (module_of.get(&from), module_of.get(&to)) else {
                continue;
            };
            if a != b {
                edges
                    .entry(a.clone())
                    .or_default()
                    .entry(b.clone())
                    .or_default()
                    .extend(by);
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

/// No file reaches itself through its imports, inside a module as across modules.
#[test]
fn no_file_of_src_reaches_itself_through_its_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = file_edges(&src);
    assert!(
        edges
            .get("app/config/alerts.rs")
            .is_some_and(|e| e.contains_key("app/config/mod.rs")),
        "`super::` was not read: {edges:?}"
    );
    let found = loops(&edges);
    assert!(
        found.is_empty(),
        "import loops between files:\n{}",
        found.join("\n")
    );
}

/// Two files of one module that import each other through `super::`, made on purpose in a
/// scratch copy of `src/`, are named.
#[test]
fn a_circle_between_two_files_of_a_module_is_caught() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let scratch = tempfile::tempdir().unwrap();
    copy_tree(&src, scratch.path());
    for (file, import) in [
        ("tail/split.rs", "use super::{position::Made, inflate};"),
        ("tail/position.rs", "use self::super::split::Made;"),
    ] {
        let path = scratch.path().join(file);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str(&format!("\n#[allow(unused_imports)]\n{import}\n"));
        std::fs::write(&path, text).unwrap();
    }
    let found = loops(&file_edges(scratch.path()));
    assert!(
        found
            .iter()
            .any(|l| l.contains("tail/split.rs → tail/position.rs")),
        "{found:?}"
    );
}

/// Groups, `self`, `super`, renames and inline modules, read as the compiler reads them.
#[test]
fn imports_are_resolved_from_the_root() {
    let module = ["app".to_owned(), "config".to_owned(), "keys".to_owned()];
    let source = "use super::{actions::RawAction, alerts::{self, RawRule as R}};\n\
                  use crate::{sinks, sources::gpu::{GpuMode, self}};\n\
                  // use super::commented::Out;\n\
                  fn f() { let _ = self::inner::g(); let _ = x::crate::y; }\n\
                  mod tests {\n    use super::*;\n    use super::super::unique;\n}\n\
                  use super::after;\n";
    let found: Vec<String> = paths(source, &module)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    assert_eq!(
        found,
        [
            "app::config::actions::RawAction",
            "app::config::alerts",
            "app::config::alerts::RawRule",
            "sinks",
            "sources::gpu::GpuMode",
            "sources::gpu",
            "app::config::keys::inner::g",
            "app::config::keys",
            "app::config::unique",
            "app::config::after",
        ]
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
