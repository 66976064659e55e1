//! Which records repeat an earlier one of their partition: the ids each output file holds.
//!
//! A record's identity is a 64-bit hash of its id (or of its prompt, without one): among 5
//! million distinct ids, the chance that two share a hash is under one in a million. Each
//! file keeps its own set, so that a file truncated and written again forgets its ids; a
//! record is a duplicate when any file of its partition holds its id. A set is a hash table
//! of at most 14 bytes per id. Past the node's cap, ids are no longer remembered: a record
//! whose id is not known counts as distinct, unchecked, and the distinct count is at most the
//! unchecked records too high (docs/formats.md#identity-duplicates-and-passes).

/// The smallest table: a file of a few records costs 128 bytes, so ten thousand small shards
/// cost a megabyte or two rather than the 80 MiB a 1,024-slot start would.
const SMALLEST: usize = 16;

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
    pub fn check(&mut self, slot: Slot, id: u64) -> Seen {
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

/// One file's ids: an open-addressing table of the 64-bit hashes, probed linearly from the
/// slot the hash maps to. It grows when 85% full to be 58% full: at most 14 bytes per id. 0 marks an empty slot (a hash of 0 is stored as 1).
#[derive(Debug, Default)]
struct IdSet {
    slots: Vec<u64>,
    len: usize,
}

impl IdSet {
    fn slot(&self, id: u64) -> usize {
        // The hash's high bits, scaled to the table: no power-of-two size needed.
        ((u128::from(id) * self.slots.len() as u128) >> 64) as usize
    }

    fn contains(&self, id: u64) -> bool {
        if self.slots.is_empty() {
            return false;
        }
        let id = id.max(1);
        let mut i = self.slot(id);
        loop {
            match self.slots[i] {
                0 => return false,
                s if s == id => return true,
                _ => i = if i + 1 == self.slots.len() { 0 } else { i + 1 },
            }
        }
    }

    /// Inserts an id not yet held.
    fn insert(&mut self, id: u64) {
        if (self.len + 1) * 100 > self.slots.len() * 85 {
            self.grow();
        }
        self.place(id.max(1));
        self.len += 1;
    }

    fn place(&mut self, id: u64) {
        let mut i = self.slot(id);
        while self.slots[i] != 0 {
            i = if i + 1 == self.slots.len() { 0 } else { i + 1 };
        }
        self.slots[i] = id;
    }

    fn grow(&mut self) {
        // 58% full after growing (about half as large again): at most 8 / 0.58 = 13.8 bytes
        // per id whatever size it grows from.
        let size = ((self.len + 1) * 100 / 58)
            .max(self.slots.len() + 1)
            .max(SMALLEST);
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        for id in old.into_iter().filter(|id| *id != 0) {
            self.place(id);
        }
    }

    fn len(&self) -> usize {
        self.len
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
    fn growing_keeps_every_id_within_14_bytes_each() {
        let mut next = crate::testing::numbers(7);
        let mut set = IdSet::default();
        let mut all = Vec::new();
        for _ in 0..20_000 {
            let id = (next(usize::MAX) as u64) << 32 | next(usize::MAX) as u64;
            if !set.contains(id) {
                set.insert(id);
                all.push(id);
            }
        }
        // The lowest and highest hashes land at the table's two ends.
        for id in [2, u64::MAX] {
            set.insert(id);
            all.push(id);
        }
        assert_eq!(set.len(), all.len());
        assert!(all.iter().all(|id| set.contains(*id)));
        assert!(!set.contains(12345));
        assert!(
            set.slots.len() * 8 <= all.len() * 14,
            "{} slots",
            set.slots.len()
        );
    }
}
