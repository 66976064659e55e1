//! Helpers shared by the unit tests.

/// A fixed sequence of pseudo-random numbers below `n` (a 64-bit LCG): the same cases on every
/// run, many of them, without a dependency.
pub fn numbers(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed;
    move |n| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize % n
    }
}

/// Checks that the part of the page at `path` (under the repository) between `begin` and `end`
/// is `generated`, naming the first line that differs and `how` to regenerate it; with
/// `PULSE_WRITE_DOCS` set, writes it instead.
pub fn generated_section(path: &str, begin: &str, end: &str, generated: &str, how: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let page = std::fs::read_to_string(&path).unwrap();
    let (before, rest) = page.split_once(begin).expect("the begin marker");
    let (table, after) = rest.split_once(end).expect("the end marker");
    if table != generated && std::env::var_os("PULSE_WRITE_DOCS").is_some() {
        std::fs::write(&path, format!("{before}{begin}{generated}{end}{after}")).unwrap();
        return;
    }
    let differs = generated
        .lines()
        .zip(table.lines())
        .find(|(a, b)| a != b)
        .map_or_else(
            || "a row more or less".to_owned(),
            |(a, b)| format!("generated: {a}\npage:      {b}"),
        );
    assert!(
        table == generated,
        "{} differs from what the code generates ({differs}): run {how}",
        path.display()
    );
}

/// Checks `got` against the golden file at `path` (under the repository), as the integration
/// tests' `check_goldens` does; with `UPDATE_GOLDEN` set, writes it first.
pub fn golden(path: &str, got: &str) {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, got).unwrap();
    }
    let want = std::fs::read_to_string(&golden)
        .unwrap_or_else(|e| panic!("{}: {e}; UPDATE_GOLDEN=1 writes it", golden.display()));
    assert_eq!(got, want, "no longer {}", golden.display());
}
