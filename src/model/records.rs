//! What one output record says, and what is kept of the recent ones and of all of them:
//! the flags the rates over the last records read, and the distribution of their lengths.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Finish reasons of a response cut at its token limit: OpenAI's and the engines' `length`,
/// Anthropic's `max_tokens`.
pub const TRUNCATED: [&str; 2] = ["length", "max_tokens"];

/// What one record says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// Not a JSON object (not JSON at all, or an array, string, number).
    pub invalid: bool,
    pub tokens: Option<u64>,
    pub finish_reason: Option<String>,
    pub error: bool,
    /// Every text field present is empty and there is no error.
    pub empty: bool,
    /// A hash of the record's id, else of its prompt; `None` when it has neither.
    pub identity: Option<u64>,
    /// Bit i: the output's i-th required field is missing or empty.
    pub missing: u32,
}

impl Facts {
    pub fn truncated(&self) -> bool {
        self.finish_reason
            .as_deref()
            .is_some_and(|r| TRUNCATED.contains(&r))
    }
}

/// Records counted for the rates over recent records.
pub const RECENT_RECORDS: usize = 200;

const ERROR: u8 = 1;
const EMPTY: u8 = 2;
const TRUNCATED_FLAG: u8 = 4;
const MISSING: u8 = 8;

/// Flags of the last [`RECENT_RECORDS`] records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRecords {
    flags: VecDeque<u8>,
}

/// How many of the recent records carry each flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecentCounts {
    pub records: u64,
    pub errors: u64,
    pub empty: u64,
    pub truncated: u64,
    /// Records lacking any required field.
    pub missing: u64,
}

impl RecentRecords {
    pub(super) fn push(&mut self, facts: &Facts) {
        if self.flags.len() == RECENT_RECORDS {
            self.flags.pop_front();
        }
        let flag = |on: bool, bit: u8| if on { bit } else { 0 };
        self.flags.push_back(
            flag(facts.error, ERROR)
                | flag(facts.empty, EMPTY)
                | flag(facts.truncated(), TRUNCATED_FLAG)
                | flag(facts.missing != 0, MISSING),
        );
    }

    /// `n` records with no flag.
    pub(super) fn push_clean(&mut self, n: u64) {
        let n = n.min(RECENT_RECORDS as u64) as usize;
        let keep = RECENT_RECORDS - n;
        if self.flags.len() > keep {
            self.flags.drain(..self.flags.len() - keep);
        }
        self.flags.extend(std::iter::repeat_n(0, n));
    }

    pub fn counts(&self) -> RecentCounts {
        let with = |bit: u8| self.flags.iter().filter(|f| *f & bit != 0).count() as u64;
        RecentCounts {
            records: self.flags.len() as u64,
            errors: with(ERROR),
            empty: with(EMPTY),
            truncated: with(TRUNCATED_FLAG),
            missing: with(MISSING),
        }
    }

    pub(super) fn merge(&mut self, other: &RecentRecords) {
        for f in &other.flags {
            if self.flags.len() == RECENT_RECORDS {
                self.flags.pop_front();
            }
            self.flags.push_back(*f);
        }
    }
}

/// Completion tokens per record, in power-of-two buckets from 1 to 32768 and one above:
/// enough to tell a median of 300 from a tail at a 10240 limit, in 17 counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenHistogram {
    /// Records with at most `2^i` tokens for i < 16, and all of them at the end, cumulative
    /// only when exported.
    buckets: [u64; BUCKETS],
}

const BUCKETS: usize = 17;

impl TokenHistogram {
    /// The upper bounds of the buckets, the last one infinite.
    pub fn bounds() -> impl Iterator<Item = f64> {
        (0..BUCKETS).map(|i| {
            if i + 1 == BUCKETS {
                f64::INFINITY
            } else {
                (1u64 << i) as f64
            }
        })
    }

    pub fn observe(&mut self, tokens: u64) {
        let i = if tokens <= 1 {
            0
        } else {
            (64 - (tokens - 1).leading_zeros()) as usize
        };
        self.buckets[i.min(BUCKETS - 1)] += 1;
    }

    pub fn merge(&mut self, other: &TokenHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(other.buckets) {
            *a += b;
        }
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Each bucket's count, not cumulative.
    pub fn counts(&self) -> &[u64] {
        &self.buckets
    }

    /// The `q` quantile as Prometheus' `histogram_quantile` estimates it: linear within the
    /// bucket it falls in (the last bucket answers its lower bound).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * total as f64;
        let mut below = 0u64;
        let mut lower = 0.0;
        for (n, upper) in self.buckets.iter().zip(TokenHistogram::bounds()) {
            if (below + n) as f64 >= rank && *n > 0 {
                if upper.is_infinite() {
                    return Some(lower);
                }
                let within = (rank - below as f64) / *n as f64;
                return Some(lower + (upper - lower) * within);
            }
            below += n;
            lower = upper;
        }
        Some(lower)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_fall_in_power_of_two_buckets() {
        let mut h = TokenHistogram::default();
        for t in [0, 1, 2, 3, 4, 5, 1024, 1025, 32768, 32769, u64::MAX] {
            h.observe(t);
        }
        let c = h.counts();
        assert_eq!((c[0], c[1], c[2], c[3]), (2, 1, 2, 1), "≤1, ≤2, ≤4, ≤8");
        assert_eq!((c[10], c[11]), (1, 1), "1024 is ≤ 2^10, 1025 is not");
        assert_eq!(
            (c[15], c[16]),
            (1, 2),
            "32768 is the last bound; more is +Inf"
        );
        assert_eq!(h.count(), 11);
    }

    #[test]
    fn quantiles_are_interpolated_as_prometheus_does() {
        let mut h = TokenHistogram::default();
        // 95 answers of about 300 tokens (the 256–512 bucket), 5 cut at 10240.
        for _ in 0..95 {
            h.observe(300);
        }
        for _ in 0..5 {
            h.observe(10240);
        }
        let p50 = h.quantile(0.5).unwrap();
        assert!((256.0..=512.0).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99).unwrap();
        assert!((8192.0..=16384.0).contains(&p99), "{p99}");
        assert_eq!(TokenHistogram::default().quantile(0.5), None);
    }

    #[test]
    fn recent_flags_count_truncation_and_missing_fields() {
        let mut r = RecentRecords::default();
        let cut = Facts {
            finish_reason: Some("max_tokens".into()),
            ..Facts::default()
        };
        let lacking = Facts {
            missing: 0b10,
            ..Facts::default()
        };
        r.push(&cut);
        r.push(&lacking);
        r.push_clean(3);
        let c = r.counts();
        assert_eq!((c.records, c.truncated, c.missing, c.errors), (5, 1, 1, 0));
    }
}
