//! The source folders import each other one way only: a folder that reaches itself through
//! others (`alert/` → `status/` → `alert/`) is a loop this test names, with the files that
//! make each step. Comments do not count; `crate::x` in code does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Folder → folder it uses → the files of the first that use it.
type Edges = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

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

/// Every `crate::NAME` in a file's code, comments left out.
fn uses(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

fn folder_edges(src: &Path) -> Edges {
    let folders: BTreeSet<String> = std::fs::read_dir(src)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let mut edges = Edges::new();
    for folder in &folders {
        let mut files = Vec::new();
        rust_files(&src.join(folder), &mut files);
        for file in files {
            let source = std::fs::read_to_string(&file).unwrap();
            for used in uses(&source) {
                if used != *folder && folders.contains(&used) {
                    let shown = file.strip_prefix(src).unwrap().display().to_string();
                    edges
                        .entry(folder.clone())
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
fn no_folder_of_src_reaches_itself_through_its_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = folder_edges(&src);
    assert!(
        edges.len() > 5,
        "the folders' imports were not found: {edges:?}"
    );
    let loops: Vec<String> = edges
        .keys()
        .filter_map(|folder| loop_through(&edges, folder))
        .map(|path| {
            let steps: Vec<String> = path
                .windows(2)
                .map(|w| format!("{} → {} ({:?})", w[0], w[1], edges[&w[0]][&w[1]]))
                .collect();
            steps.join(", ")
        })
        .collect();
    assert!(loops.is_empty(), "import loops:\n{}", loops.join("\n"));
}

#[test]
fn a_loop_is_found_and_comments_do_not_count() {
    assert_eq!(
        uses("use crate::alert::x; // crate::status\nlet y = crate::model::Run::new();"),
        ["alert", "model"].map(str::to_owned).into()
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
