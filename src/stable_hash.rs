//! A hash that is the same across runs, builds and machines (FNV-1a, 64 bits): for the
//! identifiers other programs compare, which `std`'s `DefaultHasher` does not promise.

/// FNV-1a's offset basis: the hash of nothing.
pub const EMPTY: u64 = 0xcbf2_9ce4_8422_2325;

/// `h` extended by `bytes`.
pub fn extend(mut h: u64, bytes: impl IntoIterator<Item = u8>) -> u64 {
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_published_test_vectors() {
        assert_eq!(super::extend(super::EMPTY, *b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::extend(super::EMPTY, *b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            super::extend(super::EMPTY, *b"foobar"),
            0x8594_4171_f739_67e8
        );
    }
}
