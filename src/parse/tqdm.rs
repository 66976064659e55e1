//! The `tqdm` format: progress bars as tqdm 4.x renders them into a log (its `format_meter`).
//!
//! ```text
//! B1_glaive:  45%|████▌     | 4500/10000 [01:23<01:42, 54.20it/s]
//! B1_glaive:   0%|          | 0/10000 [00:00<?, ?it/s]
//! B3_big:  37%|███▋      | 4.50k/12.0k [00:53<01:29, 83.6kit/s]
//! slow:  10%|#         | 10/100 [00:18<02:45,  1.85s/it]
//! sp:   6%|▌         | 3/50 [00:00<00:04, 10.00 examples/s, loss=0.5]
//! B2: 4500it [01:23, 54.20it/s]
//! spn: 3 examples [00:00, 10.00 examples/s]
//! ```
//!
//! tqdm separates frames with `\r`, which the tailer splits on, so each frame arrives here as a
//! line of its own (ANSI cursor moves and colours are stripped before parsing). The description
//! names the partition. With `unit_scale`, counts carry SI suffixes and three significant
//! digits (`4.50k`): such a count is approximate and is reported as printed (4500). A frame
//! whose numbers cannot be read exactly, or disagree with each other, is [`Event::Unparsed`]:
//! it changes no figure, because a confident wrong number is worse than none.

use super::number::{clock_seconds, leading_decimal, parse_f64, trim};
use super::{Event, Progress};

/// tqdm's frames, read with the bar's `unit_divisor`: nothing in a frame tells 1024 from
/// 1000 (`1.91M` is 2,002,780 bytes with 1024), so a byte-unit bar must be told. tqdm applies
/// it to the count and the total only; its rate is always printed in powers of 1000.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tqdm {
    divisor: f64,
}

impl Default for Tqdm {
    fn default() -> Tqdm {
        Tqdm { divisor: 1000.0 }
    }
}

/// Bars that track setting up, not the work, by the start of their description: vLLM's
/// offline `LLM.generate` queues (`Adding requests`, to 0.10) or renders (`Rendering prompts`,
/// `Rendering conversations`) its prompts before the bar of the work; every engine loads its
/// weights (`Loading safetensors checkpoint shards`) and captures CUDA graphs; Hugging Face
/// `datasets` and `huggingface_hub`, which Curator and distilabel save their results with,
/// build, save, map and fetch tables (`Generating train split`, `Saving the dataset (1/1
/// shards)`, `Map (num_proc=4)`). None is a partition, and none counts as the run's work.
const SETUP_BARS: [&str; 14] = [
    "Adding requests",
    "Rendering ",
    "Loading ",
    "Capturing CUDA graph",
    "Generating ",
    "Saving the dataset",
    "Flattening the indices",
    "Casting ",
    "Creating parquet",
    "Resolving data files",
    "Downloading",
    "Fetching ",
    "Uploading",
    "Extracting data files",
];
/// `datasets`' bars named by one short word, alone or with its `(num_proc=N)`.
const SETUP_WORDS: [&str; 4] = ["Map", "Filter", "Casting", "Sorting"];

/// Bars of the work whose description names no partition: vLLM's offline `LLM.generate`
/// (`Processed prompts`, one bar per call) and its `run_batch` (`Running batch`). Their frames
/// belong to the partition the driver announced last (docs/formats.md#vllms-own-batch-tools).
const WORK_BARS: [&str; 2] = ["Processed prompts", "Running batch"];

/// Whether `line` is a frame of one of [`WORK_BARS`].
pub(super) fn is_work_bar(line: &[u8]) -> bool {
    let line = line.trim_ascii_start();
    WORK_BARS.iter().any(|bar| {
        line.strip_prefix(bar.as_bytes())
            .is_some_and(|rest| rest.starts_with(b":"))
    })
}

/// `Running batch:  52% Completed | 21/40 [00:05<00:04,  3.99req/s]`: vLLM's own bar format
/// (`run_batch`, weight loading), without a bar between the bars.
const COMPLETED_BAR: &[u8] = b"% Completed |";

/// tqdm's `format_sizeof` prefixes, in order.
const SI: &[u8] = b"kMGTPEZY";

impl Tqdm {
    /// A reader for bars drawn with `unit_divisor` (tqdm's default is 1000).
    pub fn with_divisor(divisor: u32) -> Tqdm {
        Tqdm {
            divisor: f64::from(divisor),
        }
    }

    pub fn parse<'a>(&self, line: &'a [u8]) -> Option<Event<'a>> {
        let frame = if let Some(pct) = memchr::memmem::find(line, b"%|") {
            with_bar(line, pct, 1, self.divisor)?
        } else if let Some(pct) = memchr::memmem::find(line, COMPLETED_BAR) {
            with_bar(line, pct, COMPLETED_BAR.len() - 2, self.divisor)?
        } else {
            without_total(line, self.divisor)?
        };
        let setup = |d: &str| {
            SETUP_BARS.iter().any(|s| d.starts_with(s))
                || SETUP_WORDS.iter().any(|w| {
                    d.strip_prefix(w)
                        .is_some_and(|r| r.is_empty() || r.starts_with(" ("))
                })
        };
        Some(match frame {
            Some(p) if p.partition.is_some_and(setup) => Event::Queued,
            Some(mut p) => {
                if p.partition.is_some_and(|d| WORK_BARS.contains(&d)) {
                    p.partition = None;
                }
                Event::Progress(p)
            }
            None => Event::Unparsed,
        })
    }
}

/// A count as tqdm prints it: `4500`, or with `unit_scale` `5.00`, `12.0`, `123`, `4.50k`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Count {
    value: u64,
    /// Printed with a suffix or decimals: approximate to three significant digits.
    scaled: bool,
    /// The SI prefix's power of 1000 (0 for none).
    power: u32,
}

/// Reads a count; `Err` when it has the shape of one but not a form tqdm prints.
fn count(s: &[u8], divisor: f64) -> Result<Count, ()> {
    let (num, suffix) = leading_decimal(s);
    let v = parse_f64(num).ok_or(())?;
    let power = match suffix {
        [] => 0,
        [c] => SI.iter().position(|b| b == c).ok_or(())? as u32 + 1,
        _ => return Err(()),
    };
    let value = (v * divisor.powi(power as i32)).round();
    if !value.is_finite() || value > u64::MAX as f64 {
        return Err(());
    }
    Ok(Count {
        value: value as u64,
        scaled: !suffix.is_empty() || num.contains(&b'.'),
        power,
    })
}

/// `desc:  45%|bar| n/total [elapsed<remaining, rate, postfix]`; the bar's text begins
/// `open + 1` bytes after the `%` (for vLLM's bar-less format, at the `|` that ends it).
/// `None`: not a frame; `Some(None)`: a frame that cannot be read exactly.
fn with_bar(line: &[u8], pct: usize, open: usize, divisor: f64) -> Option<Option<Progress<'_>>> {
    let head = &line[..pct];
    let digits = head.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    let percent = parse_f64(&head[head.len() - digits..])?;
    let desc = description(&head[..head.len() - digits]);
    let after = &line[pct + open + 1..];
    let close = memchr::memchr(b'|', after)?;
    let stats = &after[close + 1..];
    let open = memchr::memchr(b'[', stats)?;
    let counts = trim(&stats[..open]);
    let slash = memchr::memchr(b'/', counts)?;
    let bracket = bracket(&stats[open..])?;
    Some((|| {
        let completed = count(&counts[..slash], divisor).ok()?;
        let planned = count(&counts[slash + 1..], divisor).ok()?;
        // tqdm drops the total once the count passes it, and its percentage is n / total: a
        // frame that says otherwise was not drawn by tqdm as we read it.
        if completed.value > planned.value || !percent_agrees(percent, completed, planned) {
            return None;
        }
        let mut p = Progress {
            partition: desc,
            completed: Some(completed.value),
            planned: Some(planned.value),
            ..Progress::default()
        };
        bracket.apply(&mut p, completed)?;
        Some(p)
    })())
}

/// Whether the printed percentage (`{:3.0f}`) fits n / total, within the printed precision of
/// scaled counts (three significant digits each) and, where their prefixes differ, the 2.4%
/// per prefix that `unit_divisor=1024` makes them read high or low: prefixes are read as
/// printed (decimal), since a frame does not say which divisor drew it.
fn percent_agrees(percent: f64, n: Count, total: Count) -> bool {
    if total.value == 0 {
        return n.value == 0;
    }
    let ratio = 100.0 * n.value as f64 / total.value as f64;
    let slack = if n.scaled || total.scaled {
        let prefixes = n.power.abs_diff(total.power) as f64;
        1.0 + ratio * (0.011 + 0.025 * prefixes)
    } else {
        0.51
    };
    (ratio - percent).abs() <= slack
}

/// `desc: 4500it [01:23, 54.20it/s]` or `desc: 3 examples [00:00, ? examples/s]`: tqdm
/// without a known total (or with a count past its total).
fn without_total(line: &[u8], divisor: f64) -> Option<Option<Progress<'_>>> {
    let open = memchr::memmem::find(line, b" [")?;
    let bracket = bracket(&line[open + 1..])?;
    let head = trim(&line[..open]);
    // The count is the last number before the unit, which may be glued (`4500it`) or spaced
    // (`3 examples`); the unit is the rate's.
    let unit = bracket.unit;
    let before_unit = head.strip_suffix(unit)?;
    let before_unit = if unit.first().is_some_and(u8::is_ascii_whitespace) {
        before_unit
    } else {
        before_unit.trim_ascii_end()
    };
    let start = before_unit
        .iter()
        .rposition(|b| b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    let printed = &before_unit[start..];
    if printed.is_empty() || !printed[0].is_ascii_digit() {
        return None;
    }
    Some((|| {
        let completed = count(printed, divisor).ok()?;
        let mut p = Progress {
            partition: description(&before_unit[..start]),
            completed: Some(completed.value),
            ..Progress::default()
        };
        bracket.apply(&mut p, completed)?;
        Some(p)
    })())
}

/// `B1_glaive: ` → `Some("B1_glaive")`; whitespace or nothing → `None`.
fn description(s: &[u8]) -> Option<&str> {
    let s = trim(s);
    let s = trim(s.strip_suffix(b":").unwrap_or(s));
    std::str::from_utf8(s).ok().filter(|d| !d.is_empty())
}

/// The bracket after the counts: `[elapsed<remaining, rate, postfix…]`, or `[elapsed, rate…]`.
struct Bracket<'a> {
    remaining: Option<&'a [u8]>,
    elapsed: &'a [u8],
    rate: Rate,
    /// The unit the rate names (`it`, ` examples`, `B`), to find the count of a total-less bar.
    unit: &'a [u8],
    postfix: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Rate {
    Unknown,
    PerSecond(f64),
    /// `1.85s/it`: seconds per item.
    Inverse(f64),
    /// Printed as a number whose SI prefix we are not sure of (`5.42kB/s` with an unscaled
    /// count of 100–999 could be 5.42 "kB" or 5420 "B"): decided against the count.
    Prefixed(f64, usize),
    Unreadable,
}

fn bracket(s: &[u8]) -> Option<Bracket<'_>> {
    let inner = s.strip_prefix(b"[")?;
    let inner = &inner[..memchr::memrchr(b']', inner)?];
    // The times end at the first comma that does not follow a day count (`1 day, 2:03:04`).
    let times_end = memchr::memchr_iter(b',', inner)
        .find(|&i| !(inner[..i].ends_with(b"day") || inner[..i].ends_with(b"days")))?;
    let (times, rest) = (&inner[..times_end], &inner[times_end + 1..]);
    let (elapsed, remaining) = match memchr::memchr(b'<', times) {
        Some(lt) => (trim(&times[..lt]), Some(trim(&times[lt + 1..]))),
        None => (trim(times), None),
    };
    // The rate runs to the postfix's `, `, if any.
    let (rate, postfix) = match memchr::memmem::find(rest, b", ") {
        Some(i) => (&rest[..i], &rest[i + 2..]),
        None => (rest, &b""[..]),
    };
    let rate = rate.trim_ascii_start();
    let (value, unit) = parse_rate(rate)?;
    Some(Bracket {
        remaining,
        elapsed,
        rate: value,
        unit,
        postfix,
    })
}

/// `54.20it/s`, `83.6kit/s`, ` 1.85s/it`, `2.00s/ file`, `? examples/s`; the unit is returned
/// as printed. `None` when this is not a rate at all (the bracket is then not tqdm's).
fn parse_rate(s: &[u8]) -> Option<(Rate, &[u8])> {
    if let Some(rest) = s.strip_prefix(b"?") {
        let unit = rest
            .strip_suffix(b"/s")
            .or_else(|| rest.strip_prefix(b"s/"))?;
        return Some((Rate::Unknown, unit));
    }
    let (num, rest) = leading_decimal(s);
    if num.is_empty() {
        return None;
    }
    let Some(v) = parse_f64(num) else {
        return Some((Rate::Unreadable, rest));
    };
    let (prefix, unit_part) = match rest.first() {
        Some(c) if SI.contains(c) && rest.len() > 1 => {
            (SI.iter().position(|b| b == c).map(|i| i + 1), &rest[1..])
        }
        _ => (None, rest),
    };
    if let Some(unit) = unit_part.strip_prefix(b"s/") {
        let rate = match prefix {
            Some(power) => Rate::Inverse(v * 1000f64.powi(power as i32)),
            None => Rate::Inverse(v),
        };
        return Some((rate, unit));
    }
    if let Some(unit) = rest.strip_suffix(b"/s") {
        return Some(match prefix {
            Some(power) => (Rate::Prefixed(v, power), &unit[1..]),
            None => (Rate::PerSecond(v), unit),
        });
    }
    // `1.85s/it` without a prefix is handled above; anything else is not a rate.
    None
}

impl Bracket<'_> {
    /// Fills the times, the rate and the postfix's token rate into `p`; `None` when one of them
    /// has the shape of a figure but cannot be read.
    fn apply<'a>(&self, p: &mut Progress<'a>, count: Count) -> Option<()> {
        clock_seconds(self.elapsed)?;
        if let Some(remaining) = self.remaining.filter(|r| *r != b"?") {
            p.eta_seconds = Some(clock_seconds(remaining)?);
        }
        p.requests_per_second = match self.rate {
            Rate::Unknown => None,
            Rate::PerSecond(v) => Some(v),
            Rate::Inverse(v) if v > 0.0 => Some(1.0 / v),
            Rate::Inverse(_) => None,
            // An integer count of 1000 or more is printed so only without `unit_scale`, and
            // then the rate is not scaled either: the letter belongs to the unit.
            Rate::Prefixed(v, _) if !count.scaled && count.value >= 1000 => Some(v),
            Rate::Prefixed(v, power) => Some(v * 1000f64.powi(power as i32)),
            Rate::Unreadable => return None,
        };
        p.tokens_per_second = postfix_tokens_per_second(self.postfix);
        Some(())
    }
}

/// The output tokens per second a postfix reports: vLLM's `output: 11765.43 toks/s`, or a
/// `set_postfix` field such as `tok/s=1234` or `out_tok/s=1234`. Input (prompt) rates and
/// every other field are ignored.
fn postfix_tokens_per_second(postfix: &[u8]) -> Option<f64> {
    const RATE_UNITS: [&[u8]; 4] = [b"tok/s", b"toks/s", b"tokens/s", b"tokens/sec"];
    let mut found = None;
    for field in postfix.split(|&b| b == b',') {
        let field = trim(field);
        let (name, value) = match (memchr::memchr(b'=', field), memchr::memchr(b':', field)) {
            (Some(eq), _) => (&field[..eq], &field[eq + 1..]),
            (None, Some(colon)) => (&field[..colon], &field[colon + 1..]),
            _ => continue,
        };
        let name = trim(name).to_ascii_lowercase();
        let (num, unit) = leading_decimal(trim(value));
        let unit = trim(unit);
        let names_rate = RATE_UNITS.iter().any(|u| name.ends_with(u));
        let unit_is_rate = RATE_UNITS.contains(&unit);
        let is_input = [&b"input"[..], b"prompt", b"in_", b"prefill"]
            .iter()
            .any(|w| memchr::memmem::find(&name, w).is_some());
        if is_input || !(names_rate && unit.is_empty() || unit_is_rate) {
            continue;
        }
        if unit_is_rate && !names_rate && !name.starts_with(b"out") && !name.starts_with(b"gen") {
            continue;
        }
        found = parse_f64(num).or(found);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(line: &str) -> Progress<'_> {
        match Tqdm::default().parse(line.as_bytes()) {
            Some(Event::Progress(p)) => p,
            other => panic!("{line:?} → {other:?}"),
        }
    }

    #[test]
    fn unicode_bar_with_description() {
        let p = progress("B1_glaive:  45%|████▌     | 4500/10000 [01:23<01:42, 54.20it/s]");
        assert_eq!(p.partition, Some("B1_glaive"));
        assert_eq!((p.completed, p.planned), (Some(4500), Some(10000)));
        assert_eq!(p.eta_seconds, Some(102.0));
        assert_eq!(p.requests_per_second, Some(54.2));
    }

    #[test]
    fn ascii_bar_slow_rate() {
        let p = progress("slow:  10%|#         | 10/100 [00:18<02:45,  1.85s/it]");
        assert_eq!(p.partition, Some("slow"));
        assert_eq!(p.eta_seconds, Some(165.0));
        let rps = p.requests_per_second.unwrap();
        assert!((rps - 1.0 / 1.85).abs() < 1e-9);
        // The ASCII charset has digits in it.
        let p = progress("asc:  54%|#####4    | 27/50 [00:02<00:02, 10.00it/s]");
        assert_eq!((p.completed, p.planned), (Some(27), Some(50)));
    }

    #[test]
    fn start_frame_has_unknown_rate() {
        let p = progress("  0%|          | 0/10000 [00:00<?, ?it/s]");
        assert_eq!(p.partition, None);
        assert_eq!(p.completed, Some(0));
        assert_eq!(p.eta_seconds, None);
        assert_eq!(p.requests_per_second, None);
    }

    #[test]
    fn postfix_and_hours() {
        let p = progress("gen: 100%|██████████| 10/10 [1:00:05<00:00, 2.00req/s, err=0]");
        assert_eq!(p.completed, Some(10));
        assert_eq!(p.eta_seconds, Some(0.0));
        assert_eq!(p.requests_per_second, Some(2.0));
        assert_eq!(p.tokens_per_second, None);
    }

    #[test]
    fn unknown_total() {
        let p = progress("B2: 4500it [01:23, 54.20it/s]");
        assert_eq!(p.partition, Some("B2"));
        assert_eq!((p.completed, p.planned), (Some(4500), None));
        assert_eq!(p.requests_per_second, Some(54.2));
        let p = progress("spn: 3 examples [00:00, 10.00 examples/s]");
        assert_eq!((p.partition, p.completed), (Some("spn"), Some(3)));
        let p = progress("0it [00:00, ?it/s]");
        assert_eq!((p.partition, p.completed), (None, Some(0)));
        let p = progress("big: 4.50kit [00:53, 84.9it/s]");
        assert_eq!(
            (p.completed, p.requests_per_second),
            (Some(4500), Some(84.9))
        );
    }

    #[test]
    fn unit_scale_counts_and_rates() {
        let p = progress("B3_big: 100%|██████████| 12.0k/12.0k [00:00<00:00, 83.6kit/s]");
        assert_eq!((p.completed, p.planned), (Some(12000), Some(12000)));
        assert_eq!(p.requests_per_second, Some(83600.0));
        let p = progress("B3_big:   7%|▋         | 900/12.0k [00:00<00:00, 1.00kit/s]");
        assert_eq!((p.completed, p.planned), (Some(900), Some(12000)));
        let p = progress("B3_big:   0%|          | 5.00/12.0k [00:00<00:11, 1.00kit/s]");
        assert_eq!(p.completed, Some(5));
        let p = progress("m:  37%|███▋      | 45.6M/123M [00:01<00:02, 45.6MB/s]");
        assert_eq!(
            (p.completed, p.planned),
            (Some(45_600_000), Some(123_000_000))
        );
        assert_eq!(p.requests_per_second, Some(45_600_000.0));
        // Without unit_scale, a count of 1000 or more is an integer: the `k` is the unit's.
        let p = progress("x:  50%|█████     | 1000/2000 [00:01<00:01, 5.42kB/s]");
        assert_eq!(p.requests_per_second, Some(5.42));
    }

    #[test]
    fn custom_units_spaced_and_inverse() {
        let p = progress("sp:   6%|▌         | 3/50 [00:00<00:04, 10.00 examples/s]");
        assert_eq!(p.requests_per_second, Some(10.0));
        let p = progress("sl:   6%|▌         | 3/50 [00:06<01:34,  2.00s/ file]");
        assert_eq!(p.requests_per_second, Some(0.5));
        let p = progress("sp:   0%|          | 0/50 [00:00<?, ? examples/s]");
        assert_eq!(p.requests_per_second, None);
        let p = progress("b:  20%|██        | 20/100 [00:02<00:08, 10.00batches/s]");
        assert_eq!(p.requests_per_second, Some(10.0));
    }

    #[test]
    fn days_in_the_clock() {
        let p = progress("d:  50%|█████     | 50/100 [1 day, 2:03:04<1 day, 2:03:04, 1.85s/it]");
        assert_eq!(p.eta_seconds, Some(86400.0 + 7384.0));
        let p = progress("d:  50%|█████     | 50/100 [26:03:04<100:00:00, 1.85s/it]");
        assert_eq!(p.eta_seconds, Some(360000.0));
    }

    /// The libraries' logs hold `datasets`' bars (building and saving the result) and no bar
    /// of the run's work: none of their frames is progress or a partition
    /// (tests/testdata/libraries/*/gen.log, from real runs).
    #[test]
    fn library_logs_hold_no_bar_of_the_work() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/libraries");
        let mut bars = 0;
        for library in ["datatrove", "curator", "distilabel"] {
            let log = std::fs::read(root.join(library).join("gen.log")).unwrap();
            for frame in log.split(|b| *b == b'\r' || *b == b'\n') {
                match Tqdm::default().parse(frame) {
                    Some(Event::Progress(p)) => {
                        panic!("{library}: {p:?} from {}", String::from_utf8_lossy(frame))
                    }
                    Some(Event::Queued) => bars += 1,
                    _ => {}
                }
            }
        }
        assert!(bars > 0, "the samples hold datasets' bars");
        for bar in [
            "Map (num_proc=4):  50%|█████     | 5/10 [00:00<00:00, 50.0 examples/s]",
            "Filter: 100%|██████████| 10/10 [00:00<00:00, 2000.00 examples/s]",
        ] {
            assert_eq!(
                Tqdm::default().parse(bar.as_bytes()),
                Some(Event::Queued),
                "{bar}"
            );
        }
        let p = progress("Mapping_v2: 100%|██████████| 10/10 [00:00<00:00, 20.00it/s]");
        assert_eq!(p.partition, Some("Mapping_v2"));
    }

    #[test]
    fn vllm_offline_bars() {
        let p = progress("Processed prompts:  45%|████▌     | 4500/10000 [01:23<01:42, 54.20it/s, est. speed input: 23456.78 toks/s, output: 11765.43 toks/s]");
        // One bar per call: the frames are the partition the driver announced.
        assert_eq!(p.partition, None);
        assert_eq!(p.completed, Some(4500));
        assert_eq!(p.tokens_per_second, Some(11765.43));
        assert_eq!(p.requests_per_second, Some(54.2));
        assert_eq!(
            Tqdm::default().parse(
                "Adding requests: 100%|██████████| 10000/10000 [00:01<00:00, 9000.00it/s]"
                    .as_bytes()
            ),
            Some(Event::Queued)
        );
        // As vLLM 0.32 draws them (tests/testdata/tqdm/vllm-0.32.0-offline.log).
        for setup in [
            "Rendering prompts: 100%|██████████| 24/24 [00:00<00:00, 1354.42it/s]",
            "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 202.83it/s]",
        ] {
            assert_eq!(
                Tqdm::default().parse(setup.as_bytes()),
                Some(Event::Queued),
                "{setup}"
            );
        }
        let p = progress("Running batch:  52% Completed | 21/40 [00:05<00:04,  3.99req/s]");
        assert_eq!(
            (p.partition, p.completed, p.planned),
            (None, Some(21), Some(40))
        );
        assert_eq!(p.requests_per_second, Some(3.99));
    }

    #[test]
    fn postfix_token_rates() {
        let rate = |s: &str| postfix_tokens_per_second(s.as_bytes());
        assert_eq!(rate("loss=0.5, tok/s=1234.5"), Some(1234.5));
        assert_eq!(rate("out_tok/s=99"), Some(99.0));
        assert_eq!(rate("output: 11.5 toks/s"), Some(11.5));
        assert_eq!(rate("est. speed input: 23456.78 toks/s"), None);
        assert_eq!(rate("in_tok/s=5"), None);
        assert_eq!(rate("loss=0.5, acc=0.9"), None);
        assert_eq!(rate("speed: 12 toks/s"), None);
        assert_eq!(rate(""), None);
    }

    #[test]
    fn frames_that_cannot_be_read_exactly_are_unparsed() {
        for line in [
            // A suffix tqdm never prints.
            "x:  37%|███▋      | 4.50x/12.0k [00:53<01:29, 83.6kit/s]",
            // n > total: tqdm would have dropped the total.
            "x: 100%|██████████| 900/12 [00:00<00:00, 83.6it/s]",
            // The percentage disagrees with n / total.
            "x:   7%|▋         | 900/1000 [00:00<00:00, 83.6it/s]",
            "x:  45%|████▌     | 4500/10000 [01:23<1:xx:02, 54.20it/s]",
        ] {
            assert_eq!(
                Tqdm::default().parse(line.as_bytes()),
                Some(Event::Unparsed),
                "{line}"
            );
        }
    }

    #[test]
    fn non_bars() {
        assert_eq!(Tqdm::default().parse(b"loading 100% done"), None);
        assert_eq!(Tqdm::default().parse(b"see [docs] for more"), None);
        assert_eq!(Tqdm::default().parse(b"x%|no numbers|"), None);
        assert_eq!(Tqdm::default().parse(b"Loaded 5 shards [done, ok]"), None);
        assert_eq!(Tqdm::default().parse(b"INFO 2 items [a, b]"), None);
        assert_eq!(Tqdm::default().parse(b""), None);
    }
}
