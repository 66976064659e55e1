//! One followed log: its follower and parser. A poll reads a batch of lines with no lock held,
//! then applies them to the model under its lock: a read that hangs (a hung NFS mount, a file
//! system that stops answering) can hold back this log alone, never a scrape, the alert engine
//! or another log.

use super::LogConfig;
use crate::clock;
use crate::lock::Locked;
use crate::model::{Run, TailCounts};
use crate::parse::envelope::{Envelope, Piece, Unwrap};
use crate::parse::{ansi, Event, Format, Parser};
use crate::state::LogPosition;
use crate::tail::{Follower, Tailed};
use std::sync::Mutex;

/// Bytes read from one log per model lock.
const BATCH_BYTES: u64 = 4 * 1024 * 1024;

pub(super) struct FollowedLog {
    pub(super) follower: Follower,
    pub(super) parser: Parser,
    /// Takes the envelope (JSON, CRI, Docker) off each line before the parser sees it.
    pub(super) unwrap: Unwrap,
    /// What we last said about this log's health, so a lasting problem is logged once.
    last_problem: Option<String>,
    /// Whether lines were read before (at start-up they are a backlog, stamped with the mtime).
    pub(super) has_read: bool,
    /// Holds a line while its ANSI escapes are removed.
    stripped: Vec<u8>,
    /// The follower's byte count when the pending frame was last applied: a frame is applied
    /// once, not at every poll (its logged ETA would be stamped afresh each time and never
    /// count down).
    peeked_at: Option<u64>,
    /// Whether the log file's birth time was asked for (`LogStats::began_at`).
    birth_asked: bool,
    /// The lines of the batch read last, back to back, and where each ends.
    batch: Vec<u8>,
    ends: Vec<usize>,
    /// Where in the batch the file was rewritten or replaced: the number of lines before, and
    /// whether another file took the path.
    resets: Vec<(usize, bool)>,
    /// The next line is the first of the log's new content (`Some(replaced)`): it may begin a
    /// new run.
    after_reset: Option<bool>,
    /// A snapshot's position to continue from, taken up at the first poll.
    resume: Option<LogPosition>,
}

/// A line's time: its envelope's, unless that is ahead of `now` (another clock, another
/// zone) or `now` is earlier (a backlog is stamped no later than the file's mtime).
fn line_time(at: Option<f64>, now: f64) -> f64 {
    at.filter(|at| *at <= now + 60.0)
        .map_or(now, |at| at.min(now))
}

/// What one poll of a log did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Polled {
    /// The log is present and readable.
    pub ok: bool,
    /// The follower's switch count: a change asks for a snapshot at once.
    pub switches: u64,
}

impl FollowedLog {
    pub(super) fn new(log: &LogConfig, max_line_bytes: usize) -> FollowedLog {
        let mut follower = Follower::new(&log.path, max_line_bytes);
        if matches!(log.envelope, Envelope::Cri | Envelope::Docker) {
            follower.end_lines_at_newlines();
        }
        FollowedLog {
            follower,
            parser: log.parser.clone(),
            unwrap: Unwrap::new(log.envelope),
            last_problem: None,
            has_read: false,
            stripped: Vec::new(),
            peeked_at: None,
            birth_asked: false,
            batch: Vec::new(),
            ends: Vec::new(),
            resets: Vec::new(),
            after_reset: None,
            resume: None,
        }
    }

    /// Continues from `saved` at the first poll.
    pub(super) fn resume_from(&mut self, saved: LogPosition) {
        self.resume = Some(saved);
    }

    /// Finds the files a snapshot was reading again and continues where it stopped.
    fn resume(&mut self, saved: LogPosition) {
        let path = &saved.path;
        let resumed = self
            .follower
            .resume(saved.position.as_ref(), &saved.draining);
        for (found, offset) in &resumed.draining {
            tracing::info!(
                path = %path,
                "{path}: draining the rotated file {} from byte {offset}",
                found.display()
            );
        }
        for lost in &resumed.lost {
            tracing::warn!(
                path = %path,
                "{path}: the file it was reading (inode {}) is gone from its folder; \
                 what was written to it after byte {} cannot be read",
                lost.ino,
                lost.offset
            );
        }
        match &saved.position {
            Some(position) if resumed.in_place => {
                tracing::info!(path = %path, "resuming {path} at byte {}", position.offset)
            }
            Some(_) => tracing::info!(
                path = %path,
                "{path} was replaced while the sidecar was down; reading it from the start"
            ),
            None => {}
        }
    }

    /// Where a restart resumes this log: taken with the lines it covers applied.
    pub(super) fn position(&self) -> LogPosition {
        LogPosition {
            path: self.follower.path().display().to_string(),
            position: self.follower.position(),
            draining: self.follower.draining_positions(),
            stats: self.follower.stats(),
        }
    }

    /// Reads this log to its end in batches, applying each to the model as it is read, and
    /// records its position in `positions[index]` under the same lock, so a snapshot never
    /// pairs a position with lines it does not cover. `progress` is called after every batch.
    pub(super) fn poll(
        &mut self,
        index: usize,
        run: &Mutex<Run>,
        positions: &Mutex<Vec<LogPosition>>,
        mut progress: impl FnMut(),
    ) -> Polled {
        if let Some(saved) = self.resume.take() {
            self.resume(saved);
            progress();
        }
        let mut now = clock::now();
        if !self.has_read {
            // Lines found at start were written no later than the file's mtime: stamping them
            // so keeps a sidecar started on a stalled run honest about how long it has stalled.
            if let Ok(modified) = std::fs::metadata(self.follower.path()).and_then(|m| m.modified())
            {
                now = now.min(clock::unix_seconds(modified));
            }
        }
        loop {
            self.batch.clear();
            self.ends.clear();
            self.resets.clear();
            let (batch, ends, resets) = (&mut self.batch, &mut self.ends, &mut self.resets);
            let result = self.follower.poll(BATCH_BYTES, |tailed| match tailed {
                Tailed::Line(line) => {
                    batch.extend_from_slice(line);
                    ends.push(batch.len());
                }
                Tailed::Reset { replaced } => resets.push((ends.len(), replaced)),
                _ => {}
            });
            progress();
            let birth = self.birth_wanted(run, index);
            let mut guard = run.locked();
            let model = &mut *guard;
            // Each line in order, a reset before a line telling that line it may begin a new run.
            // Inline here, not a method: split out, the per-line closure is no longer inlined and
            // reading a log costs 15% more (BENCHMARKS.md, issue 49).
            let mut start = 0;
            let utc_offset = model.utc_offset();
            let (parser, stripped) = (&mut self.parser, &mut self.stripped);
            let mut after_reset = self.after_reset;
            let mut resets = self.resets.iter().peekable();
            for (i, &end) in self.ends.iter().enumerate() {
                while let Some((_, replaced)) = resets.next_if(|r| r.0 <= i) {
                    after_reset = Some(after_reset.unwrap_or(false) || *replaced);
                }
                self.unwrap.lines(
                    &self.batch[start..end],
                    utc_offset,
                    &mut |piece| match piece {
                        Piece::Text(text, at) => {
                            let line = ansi::strip(text, stripped);
                            let at = line_time(at, now);
                            // The log rewritten from its start or replaced: with a first
                            // line that begins a run, a new run may be in its place.
                            if after_reset
                                .take()
                                .is_some_and(|replaced| model.is_new_run(index, line, replaced))
                            {
                                model.begin_new_run(index, line, at);
                            }
                            model.ingest(index, line, parser.parse(line), at);
                        }
                        Piece::Unreadable => {
                            let raw = &self.batch[start..end];
                            model.ingest(index, raw, Some(Event::Unparsed), now)
                        }
                    },
                );
                start = end;
            }
            self.after_reset = after_reset.or(resets.next().map(|r| r.1));
            if result.as_ref().is_ok_and(|p| !p.more) {
                self.peek_pending_frame(index, model, now);
            }
            self.note_log(index, model, birth);
            if let Some(p) = positions.locked().get_mut(index) {
                *p = self.position();
            }
            drop(guard);
            if let Some(polled) = self.polled(result) {
                return polled;
            }
        }
    }

    /// What one batch's read says of the poll: `None` to read on (there is more), else how it
    /// ended, the log's problems said once and its recovery too.
    fn polled(
        &mut self,
        result: Result<crate::tail::Polled, crate::tail::TailError>,
    ) -> Option<Polled> {
        let switches = self.follower.switches();
        match result {
            Ok(polled) if !polled.present => {
                let message = format!(
                    "log {} does not exist (yet); watching for it",
                    self.follower.path().display()
                );
                self.problem(tracing::Level::INFO, message);
                Some(Polled {
                    ok: false,
                    switches,
                })
            }
            Ok(polled) => {
                self.has_read = true;
                if polled.more {
                    return None;
                }
                self.recovered();
                Some(Polled { ok: true, switches })
            }
            Err(e) => {
                self.problem(tracing::Level::WARN, e.to_string());
                Some(Polled {
                    ok: false,
                    switches,
                })
            }
        }
    }

    /// Keeps in the model what the poll learnt of the log: its format and envelope once found,
    /// its birth time, and the follower's counts.
    fn note_log(&mut self, index: usize, model: &mut Run, birth: Option<Option<f64>>) {
        let format = self.parser.format();
        if model.set_log_format(index, format) {
            self.announce_format();
        }
        let envelope = self.unwrap.chosen();
        if model.set_log_envelope(index, envelope) {
            self.announce_envelope();
            // A record's `\r` (tqdm's frames) is the envelope's to split, knowing where a
            // cut record ends.
            if matches!(envelope, Some(Envelope::Cri | Envelope::Docker)) {
                self.follower.end_lines_at_newlines();
            }
        }
        let stats = self.follower.stats();
        let counts = TailCounts {
            rotations: stats.rotations,
            truncations: stats.truncations,
            oversized: stats.oversized_lines,
            refused: stats.refused,
        };
        model.tailed(index, counts, birth);
    }

    /// The log file's birth time, asked once the log has lines (a file system that keeps
    /// none will not start to), outside the model lock: `Some(None)` when it has none.
    fn birth_wanted(&mut self, run: &Mutex<Run>, index: usize) -> Option<Option<f64>> {
        if self.birth_asked || self.ends.is_empty() {
            return None;
        }
        {
            let run = run.locked();
            let log = &run.logs()[index];
            if log.began_at.is_some() || log.server {
                return None;
            }
        }
        self.birth_asked = true;
        // The birth time, not a line's stamp: a backlog's lines all carry the mtime, which
        // would make every output file look older than the run.
        Some(
            std::fs::metadata(self.follower.path())
                .and_then(|m| m.created())
                .ok()
                .map(clock::unix_seconds),
        )
    }

    /// tqdm ends a frame only when it draws the next one (each frame begins with `\r`), so the
    /// latest frame of a bar is always the file's unfinished last line, and a bar that stops
    /// would be shown one frame short forever. A pending tqdm frame that is whole (it ends with
    /// its bracket) is applied to the figures without being counted as a line; when its
    /// terminator arrives it is counted, and applying it again changes nothing.
    fn peek_pending_frame(&mut self, index: usize, run: &mut Run, now: f64) {
        let read = self.follower.stats().bytes;
        if self.parser.format() != Some(Format::Tqdm) || self.peeked_at == Some(read) {
            return;
        }
        self.peeked_at = Some(read);
        let pending = match self.unwrap.chosen() {
            Some(Envelope::Cri | Envelope::Docker) => self.unwrap.pending(),
            _ => self.follower.pending(),
        };
        let Some(pending) = pending else {
            return;
        };
        let line = ansi::strip(pending, &mut self.stripped);
        if !line.trim_ascii_end().ends_with(b"]") {
            return;
        }
        if let Some(event @ Event::Progress(_)) = self.parser.tqdm().parse(line) {
            run.peek(index, event, now);
        }
    }

    fn announce_format(&self) {
        let path = self.follower.path().display();
        match &self.parser {
            Parser::Auto(detect) => {
                if let (Some(format), Some(reason)) = (detect.chosen(), detect.reason()) {
                    tracing::info!(
                        path = %path,
                        "log {path}: format {format}, detected from the line {reason:?}"
                    )
                }
            }
            Parser::Server(server) => {
                if let Some(format) = server.format() {
                    tracing::info!(path = %path, "server log {path}: format {format}");
                }
            }
            parser => {
                if let Some(format) = parser.format() {
                    tracing::info!(path = %path, "log {path}: format {format}, as configured");
                }
            }
        }
    }

    fn announce_envelope(&self) {
        let path = self.follower.path().display();
        match self.unwrap.chosen() {
            Some(Envelope::Plain) | None => {}
            Some(envelope) => tracing::info!(
                path = %path,
                "log {path}: lines wrapped as {envelope}; the text inside is read"
            ),
        }
    }

    fn problem(&mut self, level: tracing::Level, message: String) {
        if self.last_problem.as_deref() != Some(message.as_str()) {
            let path = self.follower.path().display();
            if level == tracing::Level::WARN {
                tracing::warn!(path = %path, "{message}");
            } else {
                tracing::info!(path = %path, "{message}");
            }
            self.last_problem = Some(message);
        }
    }

    fn recovered(&mut self) {
        if self.last_problem.take().is_some() {
            let path = self.follower.path().display();
            tracing::info!(path = %path, "reading log {path}");
        }
    }
}
