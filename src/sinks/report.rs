//! The dataset card: what a run's output files hold, per partition, judged against the
//! output rules' thresholds over all of their records. `pipeline-pulse report DIR`, the
//! sidecar's `/api/report` and the `RunFinished` email give it; a training job can gate on
//! `report`'s exit status. Pure: the model and the rules in, the card out.

use crate::model::{PartitionView, Run};
use crate::rules::{AlertName, Rules};
use crate::sinks::status::quantiles;
use serde::{Deserialize, Serialize};

/// One partition's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionCard {
    pub name: String,
    pub records: u64,
    /// Distinct records (an upper bound when `distinct_error` is not 0).
    pub distinct: u64,
    pub distinct_error: u64,
    pub duplicates: u64,
    pub errors: u64,
    pub empty: u64,
    pub invalid: u64,
    pub truncated: u64,
    /// Records lacking each required field.
    pub missing: std::collections::BTreeMap<String, u64>,
    /// Completion tokens per record, p50, p90 and p99.
    pub tokens: Option<[f64; 3]>,
    pub completion_tokens: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub partitions: Vec<PartitionCard>,
    /// The thresholds crossed, one line each: a dataset with any is not one to train on as is.
    pub problems: Vec<String>,
}

/// How many records of a card a rule counts.
type Count = fn(&PartitionCard) -> u64;

/// (rule, what it counts, the count of it in a card).
const JUDGED: [(AlertName, &str, Count); 4] = [
    (AlertName::ErrorRateHigh, "records carry an error", |c| {
        c.errors
    }),
    (AlertName::EmptyResponses, "responses are empty", |c| {
        c.empty
    }),
    (
        AlertName::TruncationHigh,
        "responses stop at the token limit",
        |c| c.truncated,
    ),
    (
        AlertName::MissingFields,
        "records lack a required field",
        |c| c.missing.values().copied().max().unwrap_or(0),
    ),
];

impl Report {
    /// The card of this run's partitions (not an earlier run's leftovers) that have output
    /// files.
    pub fn of(run: &Run, rules: &Rules) -> Report {
        let partitions: Vec<PartitionCard> = run
            .current_views()
            .iter()
            .filter_map(PartitionCard::of)
            .collect();
        let mut problems = Vec::new();
        for card in &partitions {
            for (alert, what, count) in JUDGED {
                let rule = rules.get(alert);
                let n = count(card);
                if rule.enabled
                    && card.records > 0
                    && n as f64 / card.records as f64 > rule.threshold
                {
                    problems.push(format!(
                        "{}: {n} of {} {what} ({:.1}%, over {alert}'s {:.1}%)",
                        card.name,
                        card.records,
                        100.0 * n as f64 / card.records as f64,
                        100.0 * rule.threshold
                    ));
                }
            }
        }
        // A card of nothing is no pass: a training job gating on the exit status must not
        // go on because no output file was found or read.
        if partitions.iter().all(|c| c.records == 0) {
            problems.push(
                "no output records were read: nothing to judge (give --outputs GLOB, or check that the run folder holds its output files)".to_owned(),
            );
        }
        Report {
            partitions,
            problems,
        }
    }

    /// The card as a table, then its problems.
    pub fn render(&self) -> String {
        let width = self
            .partitions
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(9)
            .max(9);
        let mut out = format!(
            "{:<width$}  {:>9}  {:>9}  {:>6}  {:>6}  {:>6}  {:>9}  {:>7}  {:>17}  {:>9}\n",
            "partition",
            "records",
            "distinct",
            "dups",
            "errors",
            "empty",
            "truncated",
            "missing",
            "tokens p50/90/99",
            "MB"
        );
        for c in &self.partitions {
            let tokens = c
                .tokens
                .map_or("-".to_owned(), |[a, b, d]| format!("{a:.0}/{b:.0}/{d:.0}"));
            let distinct = if c.distinct_error > 0 {
                format!("≤{}", c.distinct)
            } else {
                c.distinct.to_string()
            };
            out += &format!(
                "{:<width$}  {:>9}  {:>9}  {:>6}  {:>6}  {:>6}  {:>9}  {:>7}  {:>17}  {:>9.1}\n",
                c.name,
                c.records,
                distinct,
                c.duplicates,
                c.errors,
                c.empty,
                c.truncated,
                c.missing.values().sum::<u64>(),
                tokens,
                c.bytes as f64 / 1e6
            );
        }
        for (field, n) in self
            .partitions
            .iter()
            .flat_map(|c| c.missing.iter().map(move |m| (c, m)))
            .filter(|(_, (_, n))| **n > 0)
            .map(|(c, (f, n))| (format!("{} {f}", c.name), n))
        {
            out += &format!("missing: {field}: {n} records\n");
        }
        if self.problems.is_empty() {
            out += "\nNo threshold crossed.\n";
        } else {
            out += "\n";
            for p in &self.problems {
                out += &format!("PROBLEM {p}\n");
            }
        }
        out
    }
}

impl PartitionCard {
    fn of(v: &PartitionView<'_>) -> Option<PartitionCard> {
        let o = v.outputs.as_ref()?;
        Some(PartitionCard {
            name: v.name.to_owned(),
            records: o.records,
            distinct: o.distinct(),
            distinct_error: o.unchecked,
            duplicates: o.duplicates,
            errors: o.errors,
            empty: o.empty,
            invalid: o.invalid,
            truncated: o.truncated(),
            missing: o.missing.clone(),
            tokens: quantiles(&o.token_histogram),
            completion_tokens: o.tokens,
            bytes: o.bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Facts, OutputFile, OutputStats};

    fn run(records: &[Facts], duplicates: u64) -> Run {
        let mut run = Run::new(&[]);
        let mut stats = OutputStats::expecting(&["/reasoning".into()]);
        for f in records {
            stats.add(f, 99);
            stats.add_missing(f.missing, &["/reasoning".into()]);
        }
        for _ in 0..duplicates {
            stats.add(&Facts::default(), 99);
            stats.add_duplicate(|| None);
        }
        run.set_output_file(
            "/p/A/raw.jsonl".into(),
            OutputFile {
                partition: "A".into(),
                stats,
                last_write: None,
            },
        );
        run
    }

    #[test]
    fn a_clean_dataset_has_no_problem() {
        let ok = Facts {
            tokens: Some(300),
            finish_reason: Some("stop".into()),
            ..Facts::default()
        };
        let report = Report::of(&run(&vec![ok; 100], 20), &Rules::default());
        let card = &report.partitions[0];
        assert_eq!(
            (card.records, card.distinct, card.duplicates),
            (120, 100, 20)
        );
        assert_eq!(report.problems, Vec::<String>::new());
        assert!(report.render().contains("No threshold crossed."));
        let [p50, _, p99] = card.tokens.unwrap();
        assert!((256.0..=512.0).contains(&p50) && (256.0..=512.0).contains(&p99));
    }

    #[test]
    fn a_card_of_nothing_is_no_pass() {
        let report = Report::of(&Run::new(&[]), &Rules::default());
        assert!(report.partitions.is_empty());
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].contains("no output records were read"));
        assert!(!report.render().contains("No threshold crossed."));
    }

    #[test]
    fn every_threshold_crossed_is_a_problem() {
        let cut = Facts {
            finish_reason: Some("length".into()),
            missing: 1,
            ..Facts::default()
        };
        let ok = Facts::default();
        let mut records = vec![cut; 30];
        records.extend(vec![ok; 70]);
        let report = Report::of(&run(&records, 0), &Rules::default());
        assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
        assert!(report.problems[0].contains("A: 30 of 100 responses stop at the token limit"));
        assert!(report.problems[1].contains("lack a required field"));
        assert!(report.render().contains("PROBLEM A: 30 of 100"));
    }
}
