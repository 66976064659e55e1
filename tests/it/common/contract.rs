//! The families table of `docs/metrics.md`, read once for every test that holds the code to it.

use std::collections::{BTreeMap, BTreeSet};

/// A family as the contract states it: its type, its label names and the collectors that feed
/// it (none for the run's own families, which are always on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub kind: String,
    pub labels: BTreeSet<String>,
    pub collectors: BTreeSet<String>,
}

/// `| `name` | type | `a`, `b` | collector | meaning |`, row by row.
pub fn families() -> BTreeMap<String, Family> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))
        .expect("docs/metrics.md");
    let mut families = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let [_, name, kind, labels, collectors, _meaning, _] = cells.as_slice() else {
            continue;
        };
        let Some(name) = name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) else {
            continue;
        };
        let family = Family {
            kind: (*kind).to_owned(),
            labels: names(labels),
            collectors: names(collectors),
        };
        assert!(
            families.insert(name.to_owned(), family).is_none(),
            "{name} is documented twice in docs/metrics.md"
        );
    }
    assert!(families.len() > 50, "the table was not found: {families:?}");
    families
}

/// A cell's comma-separated `names`; `—` is none.
fn names(cell: &str) -> BTreeSet<String> {
    cell.split(',')
        .map(|l| l.trim().trim_matches('`'))
        .filter(|l| !l.is_empty() && *l != "—")
        .map(str::to_owned)
        .collect()
}
