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
