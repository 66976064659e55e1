//! `demo`: a simulated batch-inference pipeline in a folder, watched by the real sidecar.
//!
//! The simulation writes what a real `run_inference.py` writes, in the same layout: a progress
//! log and a `raw_responses.jsonl` per partition. Partway through it stalls for a while and
//! recovers, and later it crashes and begins a partition again, so a newcomer sees every state
//! the sidecar reports within a few minutes.

use crate::config::{Config, GpuMode, RawConfig, RawLog, RawOutputs, RawRule};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests per second the simulated server completes at speed 1.
const BASE_RATE: f64 = 25.0;
/// The pipeline prints a progress line every this many completions.
const REPORT_EVERY: u64 = 50;
/// Simulated seconds per step.
const STEP_SECONDS: f64 = 0.5;
/// Simulated seconds the stall lasts.
const STALL_SECONDS: f64 = 30.0;

struct Partition {
    name: &'static str,
    mode: &'static str,
    prompts: u64,
    concurrency: u64,
    max_tokens: u64,
    avg_tokens: f64,
    /// Fraction at which something goes wrong, if anything does.
    incident: Option<(f64, Incident)>,
}

#[derive(Clone, Copy, PartialEq)]
enum Incident {
    Stall,
    Crash,
}

const PARTITIONS: [Partition; 3] = [
    Partition {
        name: "B1_glaive",
        mode: "SHORT",
        prompts: 1500,
        concurrency: 150,
        max_tokens: 10240,
        avg_tokens: 290.0,
        incident: None,
    },
    Partition {
        name: "B2_opencodeinstruct",
        mode: "SHORT",
        prompts: 1200,
        concurrency: 150,
        max_tokens: 10240,
        avg_tokens: 610.0,
        incident: Some((0.4, Incident::Stall)),
    },
    Partition {
        name: "B3_longform",
        mode: "LONG",
        prompts: 2000,
        concurrency: 64,
        max_tokens: 32768,
        avg_tokens: 1850.0,
        incident: Some((0.3, Incident::Crash)),
    },
];

/// Where the simulation writes.
pub struct Layout {
    pub dir: PathBuf,
    pub log: PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_owned(),
            log: dir.join("logs").join("inference_all.log"),
        }
    }

    fn responses(&self, partition: &str) -> PathBuf {
        self.dir
            .join("prepared")
            .join(partition)
            .join("raw_responses.jsonl")
    }

    /// Where the demo's alert emails land, as `.eml` files.
    pub fn mail(&self) -> PathBuf {
        self.dir.join("mail")
    }

    /// The sidecar configuration that watches this layout: the real keys, as a user would
    /// write them, with alert timings scaled to the simulation's speed so its stall is caught.
    pub fn config(&self, listen: std::net::SocketAddr, speed: f64) -> Config {
        let scaled = |seconds: f64| {
            let d = Duration::from_secs_f64((seconds / speed).max(0.05));
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
        };
        let prepared = self.dir.join("prepared").display().to_string();
        let raw = RawConfig {
            listen: Some(listen.to_string()),
            logs: vec![RawLog {
                path: self.log.clone(),
                ..RawLog::default()
            }],
            outputs: vec![RawOutputs {
                glob: format!("{prepared}/*/raw_responses.jsonl"),
                ..RawOutputs::default()
            }],
            inputs: vec![format!("{prepared}/*/prompts.jsonl")],
            gpu: Some(GpuMode::Simulated),
            smtp: Some(format!("file://{}", self.mail().display())),
            email_to: vec!["you@example.com".into()],
            stall_after: Some(scaled(STALL_SECONDS * 2.0 / 3.0)),
            // The default 250ms at speed 1; faster when the simulation is, so that reading
            // late does not eat into the margin between the stall and its threshold.
            poll_interval: Some(scaled(STEP_SECONDS / 2.0)),
            alert_interval: Some(scaled(1.0)),
            rules: [(
                "RunFinished".to_owned(),
                RawRule {
                    for_: Some(scaled(5.0)),
                    ..RawRule::default()
                },
            )]
            .into(),
            ..RawConfig::default()
        };
        raw.validate().expect("the demo's configuration is valid")
    }
}

/// Runs the simulated pipeline until it finishes or `stop` is set. Sleeps in real time, scaled
/// by `speed`: this is the product's simulation, not a test.
pub fn simulate(layout: &Layout, speed: f64, stop: &AtomicBool) -> io::Result<()> {
    fs::create_dir_all(layout.log.parent().expect("log has a parent"))?;
    // A fresh run each time: the demo is not a resumed pipeline.
    let _ = fs::remove_file(&layout.log);
    for p in &PARTITIONS {
        let path = layout.responses(p.name);
        let folder = path.parent().expect("has a parent");
        fs::create_dir_all(folder)?;
        File::create(&path)?;
        // The prompts are prepared before the run starts, as a real pipeline's are.
        let mut prompts = BufWriter::new(File::create(folder.join("prompts.jsonl"))?);
        for i in 1..=p.prompts {
            writeln!(
                prompts,
                r#"{{"id":"{}-{i}","prompt":"Simulated prompt {i}"}}"#,
                p.name
            )?;
        }
        prompts.flush()?;
    }
    let mut log = Log(BufWriter::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&layout.log)?,
    ));
    let pause = |simulated: f64| -> bool {
        let mut left = Duration::from_secs_f64(simulated / speed);
        // Sleep in slices so Ctrl-C and --duration stop the writer promptly.
        while !left.is_zero() {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            let slice = left.min(Duration::from_millis(100));
            std::thread::sleep(slice);
            left -= slice;
        }
        !stop.load(Ordering::Relaxed)
    };
    log.line("Loading tokenizer from /shared/kimi-k2.5-int4...")?;
    log.line("Vocab size: 163840")?;
    log.line("Model: /shared/kimi-k2.5-int4")?;
    let mut rng = Lcg(0x5eed);
    for p in &PARTITIONS {
        let mut responses = BufWriter::new(
            OpenOptions::new()
                .append(true)
                .open(layout.responses(p.name))?,
        );
        let mut incident = p.incident;
        'attempt: loop {
            log.header(p)?;
            let (mut done, mut errors, mut elapsed, mut tokens) = (0u64, 0u64, 0.0f64, 0.0f64);
            while done < p.prompts {
                if !pause(STEP_SECONDS) {
                    return Ok(());
                }
                elapsed += STEP_SECONDS;
                if let Some((at, kind)) = incident {
                    if done as f64 >= at * p.prompts as f64 {
                        incident = None;
                        match kind {
                            Incident::Stall => {
                                if !pause(STALL_SECONDS) {
                                    return Ok(());
                                }
                                elapsed += STALL_SECONDS;
                            }
                            Incident::Crash => {
                                log.crash()?;
                                if !pause(3.0) {
                                    return Ok(());
                                }
                                continue 'attempt;
                            }
                        }
                    }
                }
                let batch = ((BASE_RATE * STEP_SECONDS) * (0.6 + 0.8 * rng.unit())).round() as u64;
                for _ in 0..batch.min(p.prompts - done) {
                    done += 1;
                    let n = (p.avg_tokens * (0.3 + 1.4 * rng.unit())) as u64;
                    let failed = rng.unit() < 0.002;
                    errors += u64::from(failed);
                    tokens += n as f64;
                    record(&mut responses, p, done, n, failed, rng.unit() < 0.03)?;
                    if done % REPORT_EVERY == 0 || done == p.prompts {
                        let rps = done as f64 / elapsed;
                        let eta = (p.prompts - done) as f64 / rps;
                        log.line(&format!(
                            "  {done}/{} ({errors} err) {rps:.1} req/s avg_comp={:.0}tok ETA={}",
                            p.prompts,
                            tokens / done as f64,
                            eta_text(eta)
                        ))?;
                    }
                }
                responses.flush()?;
            }
            break;
        }
        log.line(&format!("Done: {} ({} responses)", p.name, p.prompts))?;
    }
    log.line("All partitions complete.")?;
    Ok(())
}

struct Log(BufWriter<File>);

impl Log {
    /// One line, flushed at once, as Python's `print(..., flush=True)` does.
    fn line(&mut self, s: &str) -> io::Result<()> {
        writeln!(self.0, "{s}")?;
        self.0.flush()
    }

    fn header(&mut self, p: &Partition) -> io::Result<()> {
        let rule = "=".repeat(60);
        self.line(&rule)?;
        self.line(&format!("Processing: {} ({})", p.name, p.mode))?;
        self.line(&rule)?;
        self.line(&format!("{}: {} prompts", p.name, p.prompts))?;
        self.line(&format!(
            "Running {} requests (concurrency={}, max_tokens={})...",
            p.prompts, p.concurrency, p.max_tokens
        ))
    }

    fn crash(&mut self) -> io::Result<()> {
        for l in [
            "Traceback (most recent call last):",
            "  File \"run_inference.py\", line 212, in <module>",
            "    results = asyncio.run(run_all(prompts))",
            "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected",
            "Restarting partition after server reconnect...",
        ] {
            self.line(l)?;
        }
        Ok(())
    }
}

/// One SGLang `/generate`-style record.
fn record(
    out: &mut impl Write,
    p: &Partition,
    i: u64,
    tokens: u64,
    failed: bool,
    truncated: bool,
) -> io::Result<()> {
    if failed {
        return writeln!(
            out,
            r#"{{"id":"{}-{i}","error":"Request timed out after 600s","text":""}}"#,
            p.name
        );
    }
    let (tokens, reason) = if truncated {
        (p.max_tokens, "length")
    } else {
        (tokens, "stop")
    };
    writeln!(
        out,
        r#"{{"id":"{}-{i}","text":"Simulated response {i}.","meta_info":{{"completion_tokens":{tokens},"finish_reason":{{"type":"{reason}"}}}}}}"#,
        p.name
    )
}

fn eta_text(seconds: f64) -> String {
    if seconds >= 3600.0 {
        format!("{:.1}h", seconds / 3600.0)
    } else if seconds >= 60.0 {
        format!("{:.0}m", seconds / 60.0)
    } else {
        format!("{:.0}s", seconds)
    }
}

/// A tiny deterministic generator: the demo should look the same every time.
struct Lcg(u64);

impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Starts the simulation on its own thread; setting the returned flag stops it.
pub fn start(
    layout: Layout,
    speed: f64,
) -> io::Result<(Arc<AtomicBool>, std::thread::JoinHandle<()>)> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("demo-pipeline".into())
        .spawn(move || {
            if let Err(e) = simulate(&layout, speed, &flag) {
                tracing::error!("the simulated pipeline failed: {e}");
            }
        })?;
    Ok((stop, handle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Run;
    use crate::parse::{Parser, RunInference};

    #[test]
    fn eta_text_uses_the_logs_units() {
        assert_eq!(eta_text(8640.0), "2.4h");
        assert_eq!(eta_text(2100.0), "35m");
        assert_eq!(eta_text(12.0), "12s");
    }

    /// The simulated log, read by the real parser and model, has every state the demo promises.
    #[test]
    fn simulated_log_has_partitions_a_stall_and_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        simulate(&layout, 1e6, &AtomicBool::new(false)).unwrap();
        let text = fs::read_to_string(&layout.log).unwrap();
        let mut run = Run::new(&["demo".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in text.lines() {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 0.0);
        }
        assert_eq!(run.partitions.len(), 3);
        for p in &PARTITIONS {
            let got = &run.partitions[p.name];
            assert_eq!(got.completed, p.prompts, "{}", p.name);
            assert_eq!(got.planned, Some(p.prompts));
        }
        assert_eq!(run.partitions["B3_longform"].restarts, 1);
        assert_eq!(run.restarts(), 1);
        let records = fs::read_to_string(layout.responses("B1_glaive")).unwrap();
        assert_eq!(records.lines().count(), 1500);
    }
}
