//! `demo`: a simulated batch-inference pipeline in a folder, watched by the real sidecar.
//!
//! The simulation writes what a real `run_inference.py` writes, in the same layout: a progress
//! log and a `raw_responses.jsonl` per partition, beside one partition's files left from an
//! earlier run. It runs as a process of its own that holds its log open, and it starts a
//! simulated SGLang server ([`server`]) whose log is a file in the folder. The sidecar is given
//! the folder and nothing else about the sources, so the demo shows discovery too. Partway
//! through the run stalls (the server wedges) and recovers, and later it crashes and begins a
//! partition again, so a newcomer sees every state the sidecar reports within a few minutes.
//! With `--heal` the pipeline supervises its server, and an action of the sidecar's
//! (docs/alerts.md#actions) ends the wedged server when `ServerHung` fires: the pipeline starts
//! it again, the run moves, and the emails tell the story.

pub mod server;

use crate::app::config::{Config, ConfigError, GpuMode, RawAction, RawConfig, RawRule, Threshold};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufWriter, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ChildStdin;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests per second the simulated server completes at speed 1 for a partition run at
/// concurrency 150 (fewer at lower concurrency): hundreds to a few thousand tok/s.
const BASE_RATE: f64 = 6.0;
/// The pipeline prints a progress line every this many completions.
const REPORT_EVERY: u64 = 10;
/// Simulated seconds per step.
const STEP_SECONDS: f64 = 0.5;
/// Simulated seconds the stall lasts.
const STALL_SECONDS: f64 = 30.0;
/// Simulated seconds a restarted server takes to serve again (`--heal`).
const SERVER_LOADS_SECONDS: f64 = 6.0;
/// The partition an earlier run left in the folder.
pub const PREVIOUS_PARTITION: &str = "B0_pilot";
const PREVIOUS_RECORDS: u64 = 120;

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
        prompts: 300,
        concurrency: 150,
        max_tokens: 10240,
        avg_tokens: 290.0,
        incident: None,
    },
    Partition {
        name: "B2_opencodeinstruct",
        mode: "SHORT",
        prompts: 600,
        concurrency: 150,
        max_tokens: 10240,
        avg_tokens: 610.0,
        incident: Some((0.4, Incident::Stall)),
    },
    Partition {
        name: "B3_longform",
        mode: "LONG",
        prompts: 800,
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
    /// The simulated server's stdout and stderr.
    pub server_log: PathBuf,
}

impl Layout {
    pub fn new(dir: &Path) -> Layout {
        Layout {
            dir: dir.to_owned(),
            log: dir.join("logs").join("inference_all.log"),
            server_log: dir.join("logs").join("sglang_server.log"),
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

    /// The sidecar configuration that watches this layout: the run folder, to discover its
    /// sources from, with alert timings scaled to the simulation's speed so its stall is caught.
    pub fn config(
        &self,
        listen: std::net::SocketAddr,
        speed: f64,
        heal: bool,
    ) -> Result<Config, ConfigError> {
        let scaled = |seconds: f64, floor: f64| {
            let d = Duration::from_secs_f64((seconds / speed).max(floor));
            humantime::format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
        };
        let raw = RawConfig {
            run_dir: Some(self.dir.clone()),
            discover_interval: Some(scaled(10.0, 1.0)),
            listen: Some(listen.to_string().into()),
            gpu: Some(GpuMode::Simulated),
            smtp: Some(format!("file://{}", self.mail().display())),
            email_to: vec!["you@example.com".into()],
            stall_after: Some(scaled(STALL_SECONDS * 2.0 / 3.0, 0.1)),
            // The default 250ms at speed 1; faster when the simulation is, so that reading
            // late does not eat into the margin between the stall and its threshold.
            poll_interval: Some(scaled(STEP_SECONDS / 2.0, 0.05)),
            alert_interval: Some(scaled(1.0, 0.05)),
            // The run's deadline, which it meets with room to spare, and a price for its GPUs,
            // so the page shows the ETA's band against the one and the cost of the other. The
            // history is as fine as the clock allows, for the band to show within minutes.
            deadline: Some(scaled(DEADLINE_SECONDS, 60.0)),
            gpu_hour_price: Some(2.5),
            history_resolution: Some(scaled(5.0, 1.0)),
            history_span: Some(scaled(48.0 * 3600.0, 3600.0)),
            probe_interval: Some(scaled(1.0, 0.1)),
            rules: [(
                "RunFinished".to_owned(),
                RawRule {
                    for_: Some(scaled(5.0, 0.05)),
                    ..RawRule::default()
                },
            )]
            .into(),
            ..RawConfig::default()
        };
        crate::app::config::discovery::configure(if heal { healing(raw, &scaled) } else { raw })
    }
}

/// `demo --heal`: `ServerHung` a third into the stall, before `Stalled`, and the action that
/// ends the wedged server (this binary, `demo-kill-server`), once per episode.
fn healing(mut raw: RawConfig, scaled: &dyn Fn(f64, f64) -> String) -> RawConfig {
    raw.rules.insert(
        "ServerHung".to_owned(),
        RawRule {
            threshold: Some(Threshold::Text(scaled(STALL_SECONDS / 3.0, 0.1))),
            ..RawRule::default()
        },
    );
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "pipeline-pulse".to_owned());
    raw.actions.push(RawAction {
        name: Some("restart-sglang".to_owned()),
        on: vec!["ServerHung".to_owned()],
        command: vec![exe, "demo-kill-server".to_owned()],
        timeout: Some("30s".to_owned()),
        ..RawAction::default()
    });
    raw
}

/// `demo-kill-server`, the action of `demo --heal`: SIGTERM to the server the sidecar found
/// hung (`PULSE_SERVER_PID`), after checking it is the demo's SGLang, as
/// deploy/actions/kill-engine.sh does for a real one.
pub fn kill_server() -> anyhow::Result<()> {
    use anyhow::Context;
    let pid: i32 = std::env::var("PULSE_SERVER_PID")
        .ok()
        .and_then(|p| p.parse().ok())
        .context("no PULSE_SERVER_PID: the sidecar found no server")?;
    let command = u32::try_from(pid)
        .ok()
        .and_then(|pid| crate::procfs::Procfs::default().command(pid))
        .with_context(|| format!("pid {pid} is gone"))?;
    anyhow::ensure!(
        command.line().contains("sglang.launch_server"),
        "pid {pid} is not the demo's SGLang server: nothing killed"
    );
    println!(
        "{}: SIGTERM to the simulated SGLang server, pid {pid}",
        std::env::var("PULSE_ALERT").unwrap_or_default()
    );
    // SAFETY: a plain syscall on a pid just checked to be the demo's server.
    anyhow::ensure!(
        unsafe { libc::kill(pid, libc::SIGTERM) } == 0,
        "cannot signal pid {pid}: {}",
        io::Error::last_os_error()
    );
    Ok(())
}

/// What the simulated pipeline asks of its server.
pub trait Serving {
    /// The server's state for this step: requests running and queued, tokens per second.
    fn tell(&mut self, running: f64, queued: f64, tokens_per_second: f64);
    /// Whether the server ended and was started again since the last ask (`--heal`).
    fn restarted(&mut self) -> bool;
}

fn say(server: &mut Option<&mut dyn Serving>, running: f64, queued: f64, tokens_per_second: f64) {
    if let Some(server) = server {
        server.tell(running, queued, tokens_per_second);
    }
}

/// The demo's SGLang, a process of its own; supervised (started again when it ends) with
/// `--heal`.
struct SimulatedServer {
    log: PathBuf,
    port: u16,
    child: Child,
    stdin: ChildStdin,
    supervised: bool,
}

impl SimulatedServer {
    fn start(log: &Path, port: u16, supervised: bool) -> io::Result<SimulatedServer> {
        let out = OpenOptions::new().create(true).append(true).open(log)?;
        let mut child = Command::new(std::env::current_exe()?)
            // Its command line reads as a real SGLang's, for discovery to find it as one.
            .arg0("python3")
            .env(server::ENV, "1")
            .args([
                "-m",
                "sglang.launch_server",
                "--model-path",
                "/shared/kimi-k2.5-int4",
            ])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--enable-metrics")
            .stdin(Stdio::piped())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        Ok(SimulatedServer {
            log: log.to_owned(),
            port,
            child,
            stdin,
            supervised,
        })
    }
}

impl Serving for SimulatedServer {
    fn tell(&mut self, running: f64, queued: f64, tokens_per_second: f64) {
        let _ = writeln!(self.stdin, "{running} {queued} {tokens_per_second:.2}");
        let _ = self.stdin.flush();
    }

    fn restarted(&mut self) -> bool {
        if !self.supervised || !matches!(self.child.try_wait(), Ok(Some(_))) {
            return false;
        }
        match SimulatedServer::start(&self.log, self.port, true) {
            Ok(new) => {
                *self = new;
                true
            }
            Err(_) => false,
        }
    }
}

/// The demo run's deadline from its start, at speed 1 (the run takes about 25 minutes).
const DEADLINE_SECONDS: f64 = 3600.0;

/// Runs the simulated pipeline until it finishes or `stop` is set. Sleeps in real time, scaled
/// by `speed`: this is the product's simulation, not a test.
///
/// `server` takes the simulated server's state at each step (see [`server`]).
pub fn simulate(
    layout: &Layout,
    speed: f64,
    stop: &AtomicBool,
    mut server: Option<&mut dyn Serving>,
) -> io::Result<()> {
    prepare(layout)?;
    let mut log = Log(BufWriter::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&layout.log)?,
    ));
    let pause = |simulated: f64| pause(simulated / speed, stop);
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
            let mut a = Attempt {
                done: 0,
                errors: 0,
                elapsed: 0.0,
                tokens: 0.0,
            };
            while a.done < p.prompts {
                if !pause(STEP_SECONDS) {
                    return Ok(());
                }
                a.elapsed += STEP_SECONDS;
                if let Some((at, kind)) = incident {
                    if a.done as f64 >= at * p.prompts as f64 {
                        incident = None;
                        match kind {
                            Incident::Stall => {
                                // The server holds its requests and generates nothing, until
                                // it recovers or is started again.
                                say(&mut server, p.concurrency as f64, 0.0, 0.0);
                                let mut stalled = 0.0;
                                while stalled < STALL_SECONDS {
                                    if !pause(STEP_SECONDS) {
                                        return Ok(());
                                    }
                                    stalled += STEP_SECONDS;
                                    if server.as_mut().is_some_and(|s| s.restarted()) {
                                        // The new server loads its model before it serves.
                                        if !pause(SERVER_LOADS_SECONDS) {
                                            return Ok(());
                                        }
                                        stalled += SERVER_LOADS_SECONDS;
                                        break;
                                    }
                                }
                                a.elapsed += stalled;
                            }
                            Incident::Crash => {
                                log.crash()?;
                                say(&mut server, 0.0, 0.0, 0.0);
                                if !pause(3.0) {
                                    return Ok(());
                                }
                                continue 'attempt;
                            }
                        }
                    }
                }
                let before = a.tokens;
                step(p, &mut a, &mut rng, &mut responses, &mut log)?;
                let running = (p.prompts - a.done).min(p.concurrency);
                let queued = (p.prompts - a.done).saturating_sub(p.concurrency);
                say(
                    &mut server,
                    running as f64,
                    queued as f64,
                    (a.tokens - before) / STEP_SECONDS,
                );
            }
            break;
        }
        log.line(&format!("Done: {} ({} responses)", p.name, p.prompts))?;
    }
    log.line("All partitions complete.")?;
    say(&mut server, 0.0, 0.0, 0.0);
    Ok(())
}

/// The run folder as the pipeline finds it when it starts: no log yet (a fresh run each time:
/// the demo is not a resumed pipeline), an earlier run's partition, and each partition's empty
/// output file beside its prompts, prepared before the run as a real pipeline's are.
fn prepare(layout: &Layout) -> io::Result<()> {
    fs::create_dir_all(layout.log.parent().expect("log has a parent"))?;
    let _ = fs::remove_file(&layout.log);
    previous_run(layout)?;
    for p in &PARTITIONS {
        let path = layout.responses(p.name);
        let folder = path.parent().expect("has a parent");
        fs::create_dir_all(folder)?;
        File::create(&path)?;
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
    Ok(())
}

/// Sleeps `seconds` of real time, in slices so that Ctrl-C and `--duration` stop the writer
/// promptly; false once `stop` is set.
fn pause(seconds: f64, stop: &AtomicBool) -> bool {
    let mut left = Duration::from_secs_f64(seconds);
    while !left.is_zero() {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let slice = left.min(Duration::from_millis(100));
        std::thread::sleep(slice);
        left -= slice;
    }
    !stop.load(Ordering::Relaxed)
}

/// Where one attempt at a partition stands.
struct Attempt {
    done: u64,
    errors: u64,
    elapsed: f64,
    tokens: f64,
}

/// One simulated step of a partition: a batch of records written, and the log's progress
/// line every `REPORT_EVERY` records.
fn step(
    p: &Partition,
    a: &mut Attempt,
    rng: &mut Lcg,
    responses: &mut BufWriter<File>,
    log: &mut Log,
) -> io::Result<()> {
    let rate = BASE_RATE * p.concurrency as f64 / 150.0;
    let batch = ((rate * STEP_SECONDS) * (0.6 + 0.8 * rng.unit())).round() as u64;
    for _ in 0..batch.min(p.prompts - a.done) {
        a.done += 1;
        let n = (p.avg_tokens * (0.3 + 1.4 * rng.unit())) as u64;
        let failed = rng.unit() < 0.002;
        a.errors += u64::from(failed);
        a.tokens += n as f64;
        record(responses, p, a.done, n, failed, rng.unit() < 0.03)?;
        if a.done.is_multiple_of(REPORT_EVERY) || a.done == p.prompts {
            let rps = a.done as f64 / a.elapsed;
            let eta = (p.prompts - a.done) as f64 / rps;
            log.line(&format!(
                "  {}/{} ({} err) {rps:.1} req/s avg_comp={:.0}tok ETA={}",
                a.done,
                p.prompts,
                a.errors,
                a.tokens / a.done as f64,
                eta_text(eta)
            ))?;
        }
    }
    responses.flush()
}

/// One partition's records from an earlier run, last written a day ago, with no plan and no
/// header in this run's log: what the sidecar must show apart and leave out of the totals.
fn previous_run(layout: &Layout) -> io::Result<()> {
    let path = layout.responses(PREVIOUS_PARTITION);
    fs::create_dir_all(path.parent().expect("has a parent"))?;
    let mut out = BufWriter::new(File::create(&path)?);
    let old = Partition {
        name: PREVIOUS_PARTITION,
        ..PARTITIONS[0]
    };
    for i in 1..=PREVIOUS_RECORDS {
        record(&mut out, &old, i, 250, false, false)?;
    }
    out.into_inner()
        .map_err(|e| e.into_error())?
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(86_400))
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

/// The simulated pipeline as a child process (`demo-pipeline`), which starts the simulated
/// server in turn. Dropping it ends both: the pipeline stops when its stdin closes, and the
/// server when the pipeline's pipe to it does, so neither outlives the demo even on a SIGKILL.
pub struct Pipeline {
    child: Child,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        if self
            .child
            .wait_timeout_or_kill(Duration::from_secs(5))
            .is_err()
        {
            let _ = self.child.kill();
        }
    }
}

trait WaitTimeout {
    fn wait_timeout_or_kill(&mut self, limit: Duration) -> io::Result<()>;
}

impl WaitTimeout for Child {
    fn wait_timeout_or_kill(&mut self, limit: Duration) -> io::Result<()> {
        let deadline = std::time::Instant::now() + limit;
        while self.try_wait()?.is_none() {
            if std::time::Instant::now() > deadline {
                self.kill()?;
                self.wait()?;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

/// Starts the simulated pipeline and its server, and waits until the log is there and the
/// server answers, so that the sidecar's first discovery finds both.
pub fn start(layout: &Layout, speed: f64, heal: bool) -> io::Result<Pipeline> {
    // The pipeline starts a fresh log: an old one must not pass for it below.
    let _ = fs::remove_file(&layout.log);
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(std::env::current_exe()?)
        .arg("demo-pipeline")
        .arg("--dir")
        .arg(&layout.dir)
        .args([
            "--speed",
            &speed.to_string(),
            "--server-port",
            &port.to_string(),
        ])
        .args(heal.then_some("--heal"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let mut pipeline = Pipeline { child };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let server_up = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if server_up && layout.log.is_file() {
            return Ok(pipeline);
        }
        if let Some(status) = pipeline.child.try_wait()? {
            return Err(io::Error::other(format!(
                "the simulated pipeline exited at start: {status}"
            )));
        }
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(
                "the simulated pipeline and server did not start within 20 s",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `demo-pipeline`: the simulated pipeline's process. It runs until the run is done, then
/// idles (a finished driver with its server still up) until its stdin closes.
pub fn pipeline_main(dir: &Path, speed: f64, server_port: u16, heal: bool) -> io::Result<()> {
    let layout = Layout::new(dir);
    fs::create_dir_all(layout.log.parent().expect("log has a parent"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        // The demo holds our stdin; its end (the demo stopped, even killed) is our end.
        let _ = io::stdin().lock().lines().count();
        flag.store(true, Ordering::Relaxed);
    });
    File::create(&layout.server_log)?;
    let mut server = SimulatedServer::start(&layout.server_log, server_port, heal)?;
    let result = simulate(&layout, speed, &stop, Some(&mut server));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let SimulatedServer {
        mut child, stdin, ..
    } = server;
    drop(stdin);
    let _ = child.wait_timeout_or_kill(Duration::from_secs(5));
    result
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
        simulate(&layout, 1e6, &AtomicBool::new(false), None).unwrap();
        let text = fs::read_to_string(&layout.log).unwrap();
        let mut run = Run::new(&["demo".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in text.lines() {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 0.0);
        }
        assert_eq!(run.partitions().len(), 3);
        for p in &PARTITIONS {
            let got = &run.partitions()[p.name];
            assert_eq!(got.completed, p.prompts, "{}", p.name);
            assert_eq!(got.planned, Some(p.prompts));
        }
        assert_eq!(run.partitions()["B3_longform"].restarts, 1);
        assert_eq!(run.restarts(), 1);
        let records = fs::read_to_string(layout.responses("B1_glaive")).unwrap();
        assert_eq!(records.lines().count(), 300);
        let previous = fs::read_to_string(layout.responses(PREVIOUS_PARTITION)).unwrap();
        assert_eq!(previous.lines().count() as u64, PREVIOUS_RECORDS);
    }
}
