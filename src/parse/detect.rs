//! `--log-format auto`: which built-in format a log is in, decided from the log itself.
//!
//! A log is undecided until a line only one format can have arrives: a `run_inference` header
//! or progress line, or a tqdm frame. Until then every line is still offered to both parsers,
//! and what they agree is harmless (`Model: …`, `NAME: N prompts`) is applied, so a log that
//! opens with a banner and a page of warnings loses nothing while it is being recognised.

#[cfg(test)]
use super::Progress;
use super::{Event, Format, RunInference, Tqdm};

/// Bytes of the deciding line kept to say why the format was chosen.
const REASON_BYTES: usize = 120;

#[derive(Debug, Clone, Default)]
pub struct Detect {
    /// How a tqdm frame is read, once the log is found to be tqdm's.
    tqdm: Tqdm,
    chosen: Option<Format>,
    /// The line that decided, for the log message.
    reason: Option<String>,
}

impl Detect {
    /// Detection whose tqdm frames are read with `tqdm`'s divisor.
    pub fn with_tqdm(tqdm: Tqdm) -> Detect {
        Detect {
            tqdm,
            ..Detect::default()
        }
    }

    pub fn parse<'a>(&mut self, line: &'a [u8]) -> Option<Event<'a>> {
        // A driver announces its partitions in its own lines while a library draws the bars
        // of the work (vLLM's offline `Processed prompts`): once the log is found to be one,
        // the other's lines that cannot be mistaken still count, a tqdm log's headers and a
        // run_inference log's frames.
        // A library's own lines cannot be mistaken; they decide a log nothing else has.
        if let Some(event) = super::library::parse(line) {
            if self.chosen.is_none() {
                self.decide(Format::Library, line);
            }
            return Some(event);
        }
        match self.chosen {
            Some(Format::Tqdm) => return tqdm_line(self.tqdm, line),
            Some(_) => return run_inference_line(self.tqdm, line),
            None => {}
        }
        let run_inference = RunInference.parse(line);
        if let Some(Event::Partition { .. } | Event::Running { .. } | Event::Progress(_)) =
            run_inference
        {
            self.decide(Format::RunInference, line);
            return run_inference;
        }
        match self.tqdm.parse(line) {
            Some(frame) => {
                self.decide(Format::Tqdm, line);
                Some(frame)
            }
            None => run_inference,
        }
    }

    fn decide(&mut self, format: Format, line: &[u8]) {
        self.chosen = Some(format);
        let shown = &line[..line.len().min(REASON_BYTES)];
        self.reason = Some(String::from_utf8_lossy(shown).trim().to_owned());
    }

    /// How tqdm frames are read.
    pub fn tqdm(&self) -> Tqdm {
        self.tqdm
    }

    /// The format found, once one is.
    pub fn chosen(&self) -> Option<Format> {
        self.chosen
    }

    /// The line that decided it.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// Continues with a format found before (restored from a snapshot).
    pub fn assume(&mut self, format: Format) {
        if matches!(
            format,
            Format::RunInference | Format::Tqdm | Format::Library
        ) {
            self.chosen = Some(format);
            self.reason = Some("found before the restart".to_owned());
        }
    }
}

/// A line of a log in the `run_inference` format, found or configured: its own forms, else a
/// frame of a bar of the work (vLLM's `Running batch`), which is the announced partition's.
/// Only those bars: any other in a driver's log (a dataset's `Map`, a tokenizer's) is not its
/// progress.
pub(super) fn run_inference_line(tqdm: Tqdm, line: &[u8]) -> Option<Event<'_>> {
    RunInference.parse(line).or_else(|| {
        if !super::tqdm::is_work_bar(line) {
            return None;
        }
        match tqdm.parse(line) {
            Some(frame @ Event::Progress(_)) => Some(frame),
            _ => None,
        }
    })
}

/// A line of a log in the `tqdm` format, found or configured: a frame, else a driver's header
/// that cannot be mistaken (`Processing: B1`), which names the partition the bars are of.
pub(super) fn tqdm_line(tqdm: Tqdm, line: &[u8]) -> Option<Event<'_>> {
    tqdm.parse(line).or_else(|| match RunInference.parse(line) {
        Some(Event::Progress(_) | Event::Running { .. }) | None => None,
        header => header,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Discovery may hand over a log with the format it sniffed: configured, a format reads
    /// its lines as the same format found by `auto` does (vLLM's `run_batch` frames under a
    /// `Processing:` header, a tqdm log's headers).
    #[test]
    fn a_configured_format_reads_a_line_as_a_found_one_does() {
        let frame = b"Running batch:  52% Completed | 21/40 [00:05<00:04,  3.99req/s]";
        let mut configured = crate::parse::Parser::RunInference(RunInference);
        let Some(Event::Progress(p)) = configured.parse(frame) else {
            panic!("a work bar's frame under a configured run_inference");
        };
        assert_eq!((p.completed, p.planned), (Some(21), Some(40)));
        let mut configured = crate::parse::Parser::Tqdm(Tqdm::default());
        assert!(matches!(
            configured.parse(b"Processing: B1 (SHORT)"),
            Some(Event::Partition { name: "B1", .. })
        ));
    }

    #[test]
    fn a_banner_does_not_decide_and_loses_nothing() {
        let mut d = Detect::default();
        for line in [
            "Loading weights...",
            "WARNING: something",
            "Vocab size: 163840",
        ] {
            assert_eq!(d.parse(line.as_bytes()), None);
        }
        assert_eq!(d.parse(b"Model: /m"), Some(Event::Model("/m")));
        assert_eq!(d.chosen(), None);
        assert!(matches!(
            d.parse("B1:  45%|████▌     | 45/100 [00:01<00:01, 45.00it/s]".as_bytes()),
            Some(Event::Progress(_))
        ));
        assert_eq!(d.chosen(), Some(Format::Tqdm));
        assert_eq!(
            d.reason(),
            Some("B1:  45%|████▌     | 45/100 [00:01<00:01, 45.00it/s]")
        );
        // Decided: a header still names the partition; a run_inference progress line is text.
        assert_eq!(
            d.parse(b"Processing: B2 (SHORT)"),
            Some(Event::Partition {
                name: "B2",
                mode: Some("SHORT")
            })
        );
        assert_eq!(d.parse(b"  50/100 (0 err) 1.0 req/s"), None);
    }

    #[test]
    fn run_inference_is_decided_by_a_header_or_a_progress_line() {
        let mut d = Detect::default();
        assert!(d.parse(b"B1_glaive: 10 prompts").is_some());
        assert_eq!(d.chosen(), None);
        assert!(d.parse(b"Processing: B1_glaive (SHORT)").is_some());
        assert_eq!(d.chosen(), Some(Format::RunInference));
        let mut d = Detect::default();
        assert!(d.parse(b"  50/100 (0 err) 1.0 req/s").is_some());
        assert_eq!(d.chosen(), Some(Format::RunInference));
        assert_eq!(
            d.parse("x:  45%|████▌     | 45/100 [00:01<00:01, 45.00it/s]".as_bytes()),
            None
        );
        // vLLM's offline bar is the announced partition's progress.
        let frame = "Processed prompts:  45%|████▌     | 45/100 [00:01<00:01, 45.00it/s]";
        assert!(matches!(
            d.parse(frame.as_bytes()),
            Some(Event::Progress(Progress {
                partition: None,
                completed: Some(45),
                ..
            }))
        ));
    }
}
