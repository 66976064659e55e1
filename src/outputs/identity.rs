//! Which records repeat an earlier one of their partition: the ids each output file holds.
//!
//! A record's identity is a 128-bit hash of its id (or of its prompt, without one). Each
//! file keeps its own set, so that a file truncated and written again forgets its ids; a
//! record is a duplicate when any file of its partition holds its id. A set is sorted
//! hashes, 16 bytes each, plus a staging set of up to 1/32 of that (a sorted insert per record
//! would move the whole set). Past the node's cap, ids are no longer remembered: a record
//! whose id is not known counts as distinct, unchecked, and the distinct count is at most the
//! unchecked records too high (docs/formats.md#identity).

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

/// Staging sets are folded into the sorted set at this size, or at 1/32 of it if larger.
const STAGING: usize = 4096;

/// What a record's id was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    New,
    /// Another record of the partition had it.
    Duplicate,
    /// Not known, and not remembered: the node's cap is reached.
    Unchecked,
}

/// A file's place in [`Identities`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    partition: usize,
    file: usize,
}

#[derive(Debug, Default)]
pub struct Identities {
    cap: usize,
    stored: usize,
    partitions: Vec<(String, Vec<IdSet>)>,
}

impl Identities {
    pub fn new(cap: usize) -> Identities {
        Identities {
            cap,
            ..Identities::default()
        }
    }

    /// A new file of `partition`.
    pub fn register(&mut self, partition: &str) -> Slot {
        let p = match self
            .partitions
            .iter()
            .position(|(name, _)| name == partition)
        {
            Some(p) => p,
            None => {
                self.partitions.push((partition.to_owned(), Vec::new()));
                self.partitions.len() - 1
            }
        };
        let files = &mut self.partitions[p].1;
        files.push(IdSet::default());
        Slot {
            partition: p,
            file: files.len() - 1,
        }
    }

    /// Checks a record's id, and remembers it for its file when it is new.
    pub fn check(&mut self, slot: Slot, id: u128) -> Seen {
        let files = &mut self.partitions[slot.partition].1;
        if files.iter().any(|set| set.contains(id)) {
            return Seen::Duplicate;
        }
        if self.stored >= self.cap {
            return Seen::Unchecked;
        }
        files[slot.file].insert(id);
        self.stored += 1;
        Seen::New
    }

    /// The file was truncated or replaced: the records it held are gone.
    pub fn forget(&mut self, slot: Slot) {
        let set = std::mem::take(&mut self.partitions[slot.partition].1[slot.file]);
        self.stored -= set.len();
    }

    /// Ids remembered on the node.
    pub fn stored(&self) -> usize {
        self.stored
    }
}

/// One file's ids: sorted, and the ones since the last fold.
#[derive(Debug, Default)]
struct IdSet {
    sorted: Vec<u128>,
    staging: HashSet<u128, BuildHasherDefault<Low64>>,
}

impl IdSet {
    fn contains(&self, id: u128) -> bool {
        self.staging.contains(&id) || self.sorted.binary_search(&id).is_ok()
    }

    fn insert(&mut self, id: u128) {
        self.staging.insert(id);
        if self.staging.len() >= STAGING.max(self.sorted.len() / 32) {
            let mut merged = Vec::with_capacity(self.sorted.len() + self.staging.len());
            let mut staged: Vec<u128> = self.staging.drain().collect();
            staged.sort_unstable();
            let (mut a, mut b) = (self.sorted.iter().peekable(), staged.iter().peekable());
            while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
                if x < y {
                    merged.push(*a.next().expect("peeked"));
                } else {
                    merged.push(*b.next().expect("peeked"));
                }
            }
            merged.extend(a);
            merged.extend(b);
            self.sorted = merged;
        }
    }

    fn len(&self) -> usize {
        self.sorted.len() + self.staging.len()
    }
}

/// The ids are hashes already: their low 64 bits are the hash.
#[derive(Default)]
struct Low64(u64);

impl Hasher for Low64 {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u128(&mut self, id: u128) {
        self.0 = id as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_id_is_a_duplicate_in_its_partition_only() {
        let mut ids = Identities::new(100);
        let a1 = ids.register("A");
        let a2 = ids.register("A");
        let b = ids.register("B");
        assert_eq!(ids.check(a1, 7), Seen::New);
        assert_eq!(ids.check(a1, 7), Seen::Duplicate);
        assert_eq!(ids.check(a2, 7), Seen::Duplicate, "another file of A");
        assert_eq!(ids.check(b, 7), Seen::New, "B is another partition");
        ids.forget(a1);
        assert_eq!(
            ids.check(a2, 7),
            Seen::New,
            "the file that held it was truncated"
        );
        assert_eq!(ids.stored(), 2);
    }

    #[test]
    fn past_the_cap_unknown_ids_are_unchecked() {
        let mut ids = Identities::new(2);
        let a = ids.register("A");
        assert_eq!(ids.check(a, 1), Seen::New);
        assert_eq!(ids.check(a, 2), Seen::New);
        assert_eq!(ids.check(a, 3), Seen::Unchecked);
        assert_eq!(
            ids.check(a, 1),
            Seen::Duplicate,
            "known ids are still known"
        );
    }

    #[test]
    fn folding_keeps_every_id() {
        let mut next = crate::testing::numbers(7);
        let mut set = IdSet::default();
        let mut all = Vec::new();
        for _ in 0..20_000 {
            let id = (next(usize::MAX) as u128) << 64 | next(usize::MAX) as u128;
            set.insert(id);
            all.push(id);
        }
        assert_eq!(set.len(), 20_000);
        assert!(set.sorted.windows(2).all(|w| w[0] < w[1]));
        assert!(all.iter().all(|id| set.contains(*id)));
        assert!(!set.contains(12345));
    }
}
