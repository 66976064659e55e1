//! The lines data-generation libraries write about their own work: datatrove (loguru lines and
//! stats tables), distilabel (its step and batch lines, httpx's request lines) and Curator
//! (its request processor's lines). Formats and samples: docs/formats.md#libraries and
//! `tests/testdata/libraries/`.
//!
//! None of them names a count that is the run's: datatrove's `documents_processed` is one
//! task's, distilabel's batches are of a step, and rich wraps both libraries' lines at 80
//! columns when they go to a file. So these lines say only two things: the library is working
//! (evidence of work, no figure), and a stage is done (a task, a step, a call). The records
//! themselves are counted from the files the libraries write.

use super::Event;
use memchr::memmem;

/// Lines that say a stage of the library's work ended, each with its library.
const DONE: [&str; 4] = [
    // datatrove 0.10: each task, then the executor's merged stats.
    "Processing done for rank=",
    "Stats: All ",
    // distilabel 1.5: each step.
    "Finished running step",
    // Curator 0.1: a call's responses read back once all were written.
    " responses.",
];

/// Lines that show the library at work.
const WORKING: [&str; 5] = [
    // datatrove's metrics reporter, every `metric_interval` seconds.
    "run_inference:metrics_reporter",
    // distilabel: a step takes a batch; httpx says each request (distilabel's OpenAI client).
    "Processing batch ",
    "HTTP Request: POST ",
    // Curator: the requests written before any is sent, and each response appended.
    "Wrote ",
    "Successfully appended response",
];

/// What a library's line says, or `None` for any other line.
pub fn parse(line: &[u8]) -> Option<Event<'static>> {
    if done(line) {
        return Some(Event::StageDone);
    }
    WORKING
        .iter()
        .any(|w| memmem::find(line, w.as_bytes()).is_some() && working(line, w))
        .then_some(Event::Working)
}

fn done(line: &[u8]) -> bool {
    DONE.iter().any(|d| {
        let Some(at) = memmem::find(line, d.as_bytes()) else {
            return false;
        };
        match *d {
            "Stats: All " => memmem::find(&line[at..], b" tasks").is_some(),
            // `Read 300 responses.`: the word before is a count, and `Read` before it.
            " responses." => {
                let before = line[..at].trim_ascii_end();
                let digits = before
                    .iter()
                    .rev()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                digits > 0 && before[..before.len() - digits].ends_with(b"Read ")
            }
            _ => true,
        }
    })
}

/// The shorter marks need their context: `Wrote N requests to` is Curator's.
fn working(line: &[u8], mark: &str) -> bool {
    match mark {
        "Wrote " => memmem::find(line, b" requests to").is_some(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(library: &str) -> (usize, usize) {
        let log = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/testdata/libraries")
            .join(library)
            .join("gen.log");
        let log = std::fs::read(log).unwrap();
        let mut counts = (0, 0);
        for line in log.split(|b| *b == b'\n' || *b == b'\r') {
            match parse(line) {
                Some(Event::StageDone) => counts.0 += 1,
                Some(Event::Working) => counts.1 += 1,
                _ => {}
            }
        }
        counts
    }

    /// Counted in the real logs: two subsets of two tasks for datatrove (each task's line and
    /// each executor's stats), four steps for distilabel, two calls for Curator.
    #[test]
    fn the_real_logs_say_their_stages_done_and_their_work() {
        assert_eq!(events("datatrove").0, 6);
        assert_eq!(events("distilabel").0, 4);
        assert_eq!(events("curator").0, 2);
        for library in ["datatrove", "distilabel", "curator"] {
            assert!(events(library).1 > 0, "{library} works");
        }
    }

    #[test]
    fn lines_that_only_look_alike_say_nothing() {
        for line in [
            "We read 300 responses.",
            "Read many responses.",
            "Stats: All good",
            "Wrote the summary",
            "Processed prompts: 100%|██████████| 4/4",
        ] {
            assert_eq!(parse(line.as_bytes()), None, "{line}");
        }
        assert_eq!(
            parse(
                b"                    INFO     Read 300 responses.   base_request_processor.py:501"
            ),
            Some(Event::StageDone)
        );
    }
}
