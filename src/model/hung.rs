//! One kind of "hung" for every blocking call a source makes on a worker of its own
//! ([`crate::deadline`]): a log's read, the output readers', discovery's scan, NVML's. Each
//! call that does not return, or may not, is one [`Hung`] under its caller; the files among
//! them are a stall's cause and `/status`'s `hung_files`, the GPUs' make `GpuHung`.

use super::{Seconds, HUNG_AFTER};
use std::collections::BTreeMap;

/// Who is in the call.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Caller {
    /// A read of a file or folder its source found hung (a log's, discovery's), by path.
    File(String),
    /// One of the output source's readers, in a file or glob, by a number of its own: a glob
    /// can spell a path, and a reader left behind stuck in a call is still in it.
    Output(u64),
    /// The GPU reader's NVML call.
    Gpu,
}

/// A call that does not return, or may not.
#[derive(Debug, Clone, PartialEq)]
pub struct Hung {
    /// What it is in: a path, a glob, NVML.
    pub what: String,
    /// Its latest progress.
    pub since: Seconds,
    /// How long with no progress before it counts as hung: 0 for one its source found hung.
    pub after: Seconds,
}

impl Hung {
    /// Whether it counts as hung at `now`.
    pub fn at(&self, now: Seconds) -> bool {
        now - self.since >= self.after
    }
}

/// The calls under way that may hang, and those that do.
#[derive(Debug, Clone, Default)]
pub struct Calls(BTreeMap<Caller, Hung>);

impl Calls {
    /// `caller`'s call has not returned since `since`, as its source found; returns whether
    /// that is news (the first `since` stands).
    pub fn hung(&mut self, caller: Caller, what: String, since: Seconds) -> bool {
        let news = !self.0.contains_key(&caller);
        self.0.entry(caller).or_insert(Hung {
            what,
            since,
            after: 0.0,
        });
        news
    }

    /// `caller` went into a call on `what` at `now`; hung if it makes no progress for
    /// [`HUNG_AFTER`].
    pub fn began(&mut self, caller: Caller, what: String, now: Seconds) {
        let call = Hung {
            what,
            since: now,
            after: HUNG_AFTER,
        };
        self.0.insert(caller, call);
    }

    /// `caller`'s call made progress.
    pub fn progressed(&mut self, caller: &Caller, now: Seconds) {
        if let Some(call) = self.0.get_mut(caller) {
            call.since = now;
        }
    }

    /// `caller`'s call returned; returns whether it was in one.
    pub fn answers(&mut self, caller: &Caller) -> bool {
        self.0.remove(caller).is_some()
    }

    /// Every file (or glob, or folder) whose read is hung at `now`, and since when.
    pub fn files(&self, now: Seconds) -> BTreeMap<String, Seconds> {
        let mut hung = BTreeMap::new();
        for (caller, call) in &self.0 {
            if matches!(caller, Caller::File(_) | Caller::Output(_)) && call.at(now) {
                let earliest = hung.entry(call.what.clone()).or_insert(call.since);
                *earliest = call.since.min(*earliest);
            }
        }
        hung
    }

    /// Whether one of the output readers is hung at `now`.
    pub fn outputs(&self, now: Seconds) -> bool {
        self.0
            .iter()
            .any(|(caller, call)| matches!(caller, Caller::Output(_)) && call.at(now))
    }

    /// Since when NVML has not answered, if it is hung.
    pub fn gpu(&self) -> Option<Seconds> {
        self.0.get(&Caller::Gpu).map(|call| call.since)
    }
}

#[cfg(test)]
mod tests {
    use super::{Caller, Calls, HUNG_AFTER};

    #[test]
    fn a_file_is_hung_once_from_its_earliest_call() {
        let mut calls = Calls::default();
        assert!(calls.hung(Caller::File("/a".into()), "/a".into(), 100.0));
        assert!(!calls.hung(Caller::File("/a".into()), "/a".into(), 200.0));
        calls.began(Caller::Output(1), "/a".into(), 50.0);
        calls.began(Caller::Output(2), "/b".into(), 300.0);
        let hung = calls.files(300.0);
        assert_eq!(hung.into_iter().collect::<Vec<_>>(), [("/a".into(), 50.0)]);
        assert!(calls.outputs(300.0));
        calls.progressed(&Caller::Output(1), 299.0);
        assert!(!calls.outputs(300.0));
        assert_eq!(calls.files(300.0)["/a"], 100.0);
        assert!(calls.files(300.0 + HUNG_AFTER).contains_key("/b"));
        assert!(calls.answers(&Caller::File("/a".into())));
        assert!(calls.answers(&Caller::Output(1)));
        assert!(!calls.files(300.0).contains_key("/a"));
        assert_eq!(calls.gpu(), None);
    }

    #[test]
    fn the_gpus_hang_apart_from_the_files() {
        let mut calls = Calls::default();
        assert!(calls.hung(Caller::Gpu, "NVML".into(), 10.0));
        assert!(!calls.hung(Caller::Gpu, "NVML".into(), 20.0));
        assert_eq!(calls.gpu(), Some(10.0));
        assert!(calls.files(1e9).is_empty());
        assert!(calls.answers(&Caller::Gpu));
        assert!(!calls.answers(&Caller::Gpu));
        assert_eq!(calls.gpu(), None);
    }
}
