//! Shared helpers for the integration tests: the real binary, real files, real sockets.
//!
//! Waiting is done by polling an observable condition with a deadline, never by a fixed sleep:
//! a test is as fast as the sidecar and fails with a message when it is not.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod contract;
pub mod fake_server;
pub mod prometheus;
pub mod receiver;
pub mod repo;
pub mod slurm;
pub mod smtp;
pub mod stepped;
pub mod tls;

pub use fake_server::{Engine, FakeServer, SGLANG_RANK_1};

pub const BIN: &str = env!("CARGO_BIN_EXE_pipeline-pulse");

/// A running sidecar, killed when dropped.
pub struct Sidecar {
    pub child: Child,
    pub addr: SocketAddr,
    stderr: mpsc::Receiver<String>,
    /// What it logged before it was listening.
    startup_log: Vec<String>,
}

impl Sidecar {
    /// Starts `pipeline-pulse run ARGS --listen 127.0.0.1:0 --poll-interval 20ms` and waits
    /// until it is listening.
    pub fn run(args: &[&str]) -> Sidecar {
        let mut all = vec!["run", "--listen", "127.0.0.1:0", "--poll-interval", "20ms"];
        all.extend_from_slice(args);
        Sidecar::start(&all)
    }

    pub fn start(args: &[&str]) -> Sidecar {
        Sidecar::start_with_env(args, &[])
    }

    /// `run ARGS` as [`Sidecar::run`] does, with these environment variables set.
    pub fn run_with_env(args: &[&str], env: &[(&str, &Path)]) -> Sidecar {
        let mut all = vec!["run", "--listen", "127.0.0.1:0", "--poll-interval", "20ms"];
        all.extend_from_slice(args);
        Sidecar::start_with_env(&all, env)
    }

    pub fn start_with_env(args: &[&str], env: &[(&str, &Path)]) -> Sidecar {
        let mut command = Command::new(BIN);
        command.envs(env.iter().copied()).args(args);
        Sidecar::start_command(command)
    }

    /// Starts `command` (the binary, or a wrapper that execs it, such as `prlimit`) and waits
    /// until it is listening.
    pub fn start_command(mut command: Command) -> Sidecar {
        let mut child = dies_with_its_starter(&mut command)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start pipeline-pulse");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                eprintln!("[sidecar] {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut startup_log = Vec::new();
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .expect("the sidecar did not say where it listens within 20 s");
            startup_log.push(line.clone());
            let rest = line.split("listening on http://").nth(1);
            if let Some(rest) = rest.or_else(|| line.split("listening on https://").nth(1)) {
                let addr = rest.split_whitespace().next().unwrap();
                break addr.parse().expect("a socket address");
            }
        };
        Sidecar {
            child,
            addr,
            stderr: rx,
            startup_log,
        }
    }

    pub fn get(&self, path: &str) -> Response {
        http_get(self.addr, "GET", path, None)
    }

    pub fn metrics(&self) -> Metrics {
        let resp = self.get("/metrics");
        assert_eq!(resp.status, 200, "{}", resp.body);
        Metrics(resp.body)
    }

    /// Scrapes until `check` accepts the exposition, or fails after 15 s showing the last one.
    pub fn wait_metrics(&self, what: &str, check: impl Fn(&Metrics) -> bool) -> Metrics {
        poll(what, Duration::from_secs(15), || {
            let m = self.metrics();
            if check(&m) {
                Ok(m)
            } else {
                Err(format!("the exposition:\n{}", m.0))
            }
        })
    }

    /// Waits up to 10 s for a line of the sidecar's log that contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        if let Some(line) = self.startup_log.iter().find(|l| l.contains(needle)) {
            return line.clone();
        }
        self.log_until(needle).pop().expect("the matching line")
    }

    /// Every line the sidecar logs from now until one containing `needle` (the last one), or
    /// fails after 10 s.
    pub fn log_until(&self, needle: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut lines = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    lines.push(line);
                    if found {
                        return lines;
                    }
                }
                Err(_) => panic!("the sidecar never logged {needle:?}"),
            }
        }
    }

    /// Sends SIGKILL: no chance to save anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        wait_exit(&mut self.child, Duration::from_secs(10))
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Has `command`'s process killed when the thread that starts it ends (`PR_SET_PDEATHSIG`):
/// with the test that started it, or, for a fixture started once from a thread that lives as
/// long as the test binary (tests/it/fleet.rs), with the binary. A static is never dropped,
/// and its processes must not outlive the tests.
pub fn dies_with_its_starter(command: &mut Command) -> &mut Command {
    no_slurm_job(command);
    // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// A test's sidecar is no SLURM job's, even where the tests run inside one (its job would be
/// the run's: its time limit the deadline), unless the test gives it one.
pub fn no_slurm_job(command: &mut Command) -> &mut Command {
    for var in ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID"] {
        let given = command.get_envs().any(|(k, v)| k == var && v.is_some());
        if !given {
            command.env_remove(var);
        }
    }
    command
}

/// Polls `ready` until it holds, or fails after 15 s naming `what`.
pub fn wait_for(what: &str, ready: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(15), ready);
}

/// Polls `ready` until it holds, or fails after `limit` naming `what`.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    poll(what, limit, || {
        ready().then_some(()).ok_or_else(String::new)
    })
}

/// The tests' one deadline loop: calls `check` until it returns `Ok`, or fails after `limit`
/// naming `what` and showing what it last saw. It looks again soon at first and less often
/// as the wait goes on (20 ms up to 250 ms), so a quick condition is met quickly and a slow
/// peer (a real vLLM, Prometheus) is not asked hundreds of times a second.
pub fn poll<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    let mut pace = Duration::from_millis(20);
    loop {
        match check() {
            Ok(done) => return done,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "timed out after {limit:?} waiting for {what}{}{seen}",
                if seen.is_empty() { "" } else { "; last seen: " }
            ),
        }
        std::thread::sleep(pace);
        pace = (pace * 2).min(Duration::from_millis(250));
    }
}

/// A JSON file as it is now, if it exists and parses.
pub fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

pub fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    poll("the process to exit", limit, || {
        child.try_wait().unwrap().ok_or_else(String::new)
    })
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A minimal HTTP/1.1 client: one request, `Connection: close`, read to the end.
pub fn http_get(addr: SocketAddr, method: &str, path: &str, accept: Option<&str>) -> Response {
    let mut s = TcpStream::connect(addr).expect("connect to the sidecar");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a complete response");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Response {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// A text exposition with lookups by name and labels.
pub struct Metrics(pub String);

impl Metrics {
    /// The value of the sample `name{labels}`; `labels` must match exactly, in order, as
    /// `k="v",k2="v2"` (empty for none).
    pub fn get(&self, name: &str, labels: &str) -> Option<f64> {
        let key = if labels.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{labels}}}")
        };
        self.0.lines().find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == key).then(|| v.parse().expect("a number"))
        })
    }

    pub fn partition(&self, name: &str, partition: &str) -> Option<f64> {
        self.get(name, &format!("partition=\"{partition}\""))
    }

    pub fn has_line_starting(&self, prefix: &str) -> bool {
        self.0.lines().any(|l| l.starts_with(prefix))
    }
}

/// `n` clients of `addr` that are slow to ask: the odd ones (every one with `all_partial`)
/// send the start of a request head and then nothing, the others nothing at all.
pub fn slow_clients(addr: SocketAddr, n: usize, all_partial: bool) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = TcpStream::connect(addr).expect("connect to the sidecar");
            if all_partial || i % 2 == 1 {
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                    .unwrap();
            }
            s
        })
        .collect()
}

/// Appends to a file, creating it, and flushes: what a pipeline's `print(flush=True)` does.
pub fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

pub fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A child process, killed when dropped.
/// A `demo` process simulating a pipeline in a folder, once it has printed where to look.
pub struct Demo {
    pub process: Killed,
    /// Where its sidecar listens.
    pub addr: SocketAddr,
    /// What it printed up to and including its `metrics:` line.
    pub banner: Vec<String>,
}

impl Demo {
    pub fn start(dir: &Path, speed: &str, duration: &str) -> Demo {
        Demo::start_with(dir, speed, duration, &[])
    }

    /// The demo with `more` flags (`--heal`).
    pub fn start_with(dir: &Path, speed: &str, duration: &str, more: &[&str]) -> Demo {
        let mut child = Command::new(BIN)
            .args(["demo", "--listen", "127.0.0.1:0", "--speed", speed])
            .args(["--duration", duration, "--dir"])
            .arg(dir)
            .args(more)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pipeline-pulse demo");
        let stdout = child.stdout.take().unwrap();
        let process = Killed(child);
        let (tx, rx) = mpsc::channel();
        // Keeps reading to the end, so the demo never writes into a closed pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut banner = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .expect("the demo printed where to look");
            banner.push(line.clone());
            if let Some(url) = line.trim().strip_prefix("metrics:") {
                let addr = url
                    .trim()
                    .trim_start_matches("http://")
                    .trim_end_matches("/metrics")
                    .parse()
                    .expect("an address");
                return Demo {
                    process,
                    addr,
                    banner,
                };
            }
        }
    }
}

/// A sidecar on the run folder `root`, looking again every second and probing every 200 ms.
pub fn watching(root: &str) -> Sidecar {
    Sidecar::run(&[
        "--run-dir",
        root,
        "--discover-interval",
        "1s",
        "--probe-interval",
        "200ms",
        "--gpu",
        "off",
    ])
}

pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn find_in_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// One HTTP/1.0 request (so the answer is never chunked), read to the end. `None` while
/// nothing answers.
pub fn try_http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let raw = String::from_utf8_lossy(&raw);
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// The JSON body of a GET, whatever its status (Prometheus explains a bad query in JSON).
pub fn get_json(addr: SocketAddr, path: &str) -> Option<serde_json::Value> {
    let (_, body) = try_http(addr, "GET", path, "")?;
    serde_json::from_str(&body).ok()
}

pub fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A tool the tests need from the system. Missing: fail and say how to install it.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    find_in_path(name).unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed; this test needs it. Install it with: \
             apt-get update && apt-get install -y --no-install-recommends {package} \
             (or run .ci/run, which does)"
        )
    })
}

/// The property tests' settings: `cases` cases (or `PROPTEST_CASES`) from a fixed seed (or
/// `PROPTEST_SEED`), so CI runs the same ones every time; no regression files written.
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
    proptest::test_runner::Config {
        cases: env("PROPTEST_CASES").map_or(cases, |c: u64| c as u32),
        rng_seed: proptest::test_runner::RngSeed::Fixed(
            env("PROPTEST_SEED").unwrap_or(0x5eed_0fa11),
        ),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// `promtool check metrics` on an exposition: whether it passed, and what it said.
pub fn promtool_check_metrics(promtool: &Path, exposition: &str) -> (bool, String) {
    let mut check = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let result = check.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    (result.status.success(), said)
}

/// A port nothing listens on right now (bind to 0, read it, release it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a Python writer script (the "pipeline") with arguments; returns the child.
pub fn python(script: &str, args: &[&str]) -> Child {
    let python = require_tool("python3", "python3");
    dies_with_its_starter(&mut Command::new(python))
        .arg("-c")
        .arg(script)
        .args(args)
        .spawn()
        .expect("start the python writer")
}

/// Runs a Python writer script to completion and checks it succeeded.
pub fn python_done(script: &str, args: &[&str]) {
    let status = python(script, args).wait().unwrap();
    assert!(status.success(), "the writer failed: {status}");
}

/// Serves the files of `dir` over HTTP (Python's `http.server`): an inference server's
/// `/health` and `/metrics` as a test writes them. Returns it and its port, once it answers.
pub fn static_http_server(dir: &Path) -> (Killed, u16) {
    let python = require_tool("python3", "python3");
    let port = free_port();
    let child = Command::new(python)
        .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
        .arg(dir)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start python3 -m http.server");
    let server = Killed(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    std::fs::write(dir.join("health"), "ok\n").unwrap();
    wait_for("the HTTP server to answer", || {
        matches!(try_http(addr, "GET", "/health", ""), Some((200, _)))
    });
    (server, port)
}

/// Sets a file's modification time to `seconds_ago`: lines found in a log at start-up are
/// stamped with it, so a test can show a run that went quiet long ago without waiting.
/// `YYYY-MM-DD HH:MM:SS` in the local time zone, `seconds_ago`, as an engine's log prints it.
pub fn local_stamp(seconds_ago: u64) -> String {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - seconds_ago;
    let out = Command::new("date")
        .args([&format!("-d@{at}"), "+%Y-%m-%d %H:%M:%S"])
        .output()
        .expect("run date");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn set_mtime(path: &Path, seconds_ago: u64) {
    std::fs::File::options()
        .append(true)
        .open(path)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(seconds_ago))
        .unwrap();
}

/// Runs `read` on every `.log` sample in `dir` (by file name, from `dir`) and compares what
/// it returns with the sample's `.golden` file; `UPDATE_GOLDEN=1` rewrites them. Returns how
/// many samples were checked.
pub fn check_goldens(dir: &Path, read: impl Fn(&str) -> String) -> usize {
    check_goldens_of(dir, "log", read)
}

/// [`check_goldens`] for the samples ending in `.EXT`; other than `.log`'s, their goldens are
/// `NAME.EXT.golden` (a log and an exposition of one release share a name).
pub fn check_goldens_of(dir: &Path, ext: &str, read: impl Fn(&str) -> String) -> usize {
    let mut checked = 0;
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        if path.extension().is_none_or(|e| e != ext) {
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        let got = read(name);
        let golden = if ext == "log" {
            path.with_extension("golden")
        } else {
            path.with_extension(format!("{ext}.golden"))
        };
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &got).unwrap();
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e}; UPDATE_GOLDEN=1 writes it", golden.display()));
        assert_eq!(got, want, "{name} no longer reads as {}", golden.display());
        checked += 1;
    }
    checked
}

/// `run --once --gpu off ARGS` from `cwd`: the exposition after reading every input once.
pub fn run_once(cwd: &Path, args: &[&str]) -> Metrics {
    run_once_with(cwd, &[&["--gpu", "off"], args].concat())
}

/// `run --once ARGS` from `cwd`, the GPUs as `ARGS` say.
pub fn run_once_with(cwd: &Path, args: &[&str]) -> Metrics {
    run_once_in(cwd, args, &[])
}

/// [`run_once_with`] with these environment variables set (a SLURM job's, say).
pub fn run_once_in(cwd: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> Metrics {
    let mut command = Command::new(BIN);
    command.envs(env.iter().copied());
    Metrics(stdout_of(
        no_slurm_job(&mut command)
            .current_dir(cwd)
            .args(["run", "--once"])
            .args(args),
    ))
}

/// What `command` prints, once it has succeeded (its errors in the failure's message).
pub fn stdout_of(command: &mut Command) -> String {
    let out = command.output().expect("run the command");
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `tests/peers/vllm_driver.py` in a process group of its own: `[prompts, concurrency,
/// max_tokens]` completions to the OpenAI API on `port`, its log and records in `run`; `env`
/// its switches (`PULSE_PARTITION`, `PULSE_RETRY`, `PULSE_PACE`, `PULSE_MORE`).
pub fn batch_driver(
    python: &Path,
    run: &Path,
    (port, model): (u16, &Path),
    shape: [u32; 3],
    env: &[(&str, &str)],
) -> Group {
    let peers = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers");
    Group(
        Command::new(python)
            .arg(peers.join("vllm_driver.py"))
            .arg(run)
            .arg(port.to_string())
            .arg(model)
            .args(shape.map(|n| n.to_string()))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start tests/peers/vllm_driver.py"),
    )
}

/// Debian names the Alertmanager server `prometheus-alertmanager`; upstream `alertmanager`.
pub fn alertmanager_binary() -> PathBuf {
    find_in_path("prometheus-alertmanager")
        .or_else(|| find_in_path("alertmanager"))
        .unwrap_or_else(|| {
            panic!(
                "`alertmanager` is not installed; this test needs it. Install it with: \
                 apt-get update && apt-get install -y --no-install-recommends \
                 prometheus-alertmanager"
            )
        })
}

/// A real Alertmanager on `config`, its data in `data`, on a free loopback port and ready;
/// killed when the first value is dropped.
pub fn start_alertmanager(config: &Path, data: &Path) -> (Killed, SocketAddr) {
    let port = free_port();
    let child = Command::new(alertmanager_binary())
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.path={}", data.display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .arg("--cluster.listen-address=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start alertmanager");
    let killed = Killed(child);
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_for("Alertmanager to be ready", || {
        matches!(try_http(addr, "GET", "/-/ready", ""), Some((200, _)))
    });
    (killed, addr)
}

/// Headless Chromium on `url` with these extra arguments (`--dump-dom`, `--screenshot=…`), a
/// fresh profile in `profile`, 5 s of virtual time for the page's scripts.
pub fn chromium(args: &[&str], url: &str, profile: &Path) -> std::process::Output {
    let chromium = require_tool("chromium", "chromium");
    Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
        ])
        .args(args)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .unwrap()
}

pub fn unix_now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

/// An hour of history at 30 s, as the sidecar saves it: progress rising, tok/s for A,
/// eight GPUs, and a stall that fired and resolved.
pub fn hour_of_history(state: &std::path::Path) -> u32 {
    let now = unix_now() / 30 * 30;
    let start = now - 3600;
    let points = |f: &dyn Fn(u32) -> f64| -> serde_json::Value {
        serde_json::Value::Array(
            (0..120)
                .map(|i| serde_json::json!([start + i * 30, f(i)]))
                .collect(),
        )
    };
    let gpus: serde_json::Map<String, serde_json::Value> = (0..8)
        .map(|g| {
            (
                g.to_string(),
                serde_json::json!({ "utilization": points(&|i| f64::from((i + g * 7) % 20) / 20.0) }),
            )
        })
        .collect();
    let history = serde_json::json!({
        "resolution": 30.0,
        "span": 172800.0,
        "run": {
            "completed": points(&|i| f64::from(i) * 5.0),
            "tokens_per_second": points(&|i| 1000.0 + f64::from(i % 10) * 50.0),
        },
        "partitions": {
            "A": {
                "completed": points(&|i| f64::from(i) * 5.0),
                "tokens_per_second": points(&|i| 1000.0 + f64::from(i % 10) * 50.0),
            }
        },
        "gpus": gpus,
        "server": {},
        "marks": [
            { "t": start + 1200, "alert": "Stalled", "partition": "A", "firing": true },
            { "t": start + 1800, "alert": "Stalled", "partition": "A", "firing": false },
        ],
    });
    std::fs::create_dir_all(state).unwrap();
    std::fs::write(state.join("history.json"), history.to_string()).unwrap();
    start
}

/// The labels of an exposition's one `pulse_run_info` sample; `None` without one.
pub fn run_info(m: &Metrics) -> Option<std::collections::BTreeMap<String, String>> {
    let lines: Vec<&str> =
        m.0.lines()
            .filter(|l| l.starts_with("pulse_run_info{"))
            .collect();
    assert!(
        lines.len() <= 1,
        "pulse_run_info is exported once per sidecar, got {lines:?}"
    );
    let (series, value) = lines.first()?.rsplit_once(' ')?;
    assert_eq!(value, "1", "pulse_run_info is always 1: {series} {value}");
    let labels = series.strip_prefix("pulse_run_info{")?.strip_suffix('}')?;
    Some(
        labels
            .split(',')
            .filter_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                Some((name.to_owned(), value.trim_matches('"').to_owned()))
            })
            .collect(),
    )
}

/// A process group killed with the test, whatever happens to it (continued first, should the
/// test have stopped one of its processes).
pub struct Group(pub std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        let pgid = self.0.id() as i32;
        // SAFETY: plain syscalls on a process group this test started.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
            libc::kill(-pgid, libc::SIGCONT);
        }
        let _ = self.0.wait();
    }
}

/// Sends `sig` to a process of the test's own.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: a plain syscall on a process of this test's own.
    assert_eq!(
        unsafe { libc::kill(pid as i32, sig) },
        0,
        "signal {sig} to {pid}"
    );
}

/// An inference server's own `/metrics` on a local port, when it answers 200.
pub fn server_metrics(port: u16) -> Option<String> {
    try_http(([127, 0, 0, 1], port).into(), "GET", "/metrics", "")
        .filter(|(status, _)| *status == 200)
        .map(|(_, body)| body)
}

/// The sum over all series of `name` in an exposition (one engine here, every label set).
pub fn total(text: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        *sum.get_or_insert(0.0) += value;
    }
    sum
}

/// The pid of a child of `parent` whose command line holds `title` (vLLM's `EngineCore`,
/// SGLang's `sglang::scheduler`: the names the engines give their processes).
pub fn child_titled(parent: u32, title: &str) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = &stat[stat.rfind(')')? + 2..];
        let ppid: u32 = after.split(' ').nth(1)?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (ppid == parent && String::from_utf8_lossy(&cmdline).contains(title)).then_some(pid)
    })
}

/// Waits until the sidecar's `ours` equals the server's own `theirs` (its `/metrics` on
/// `port`), at a moment both agree on.
pub fn wait_figure(sidecar: &Sidecar, port: u16, ours: &str, theirs: &str, limit: Duration) {
    wait_until(&format!("{ours} to match {theirs}"), limit, || {
        let Some(text) = server_metrics(port) else {
            return false;
        };
        let m = sidecar.metrics();
        let (a, b) = (m.get(ours, ""), total(&text, theirs));
        a.is_some() && b.is_some() && (a.unwrap() - b.unwrap()).abs() < 1e-9
    })
}

/// A log whose partition made progress and then stopped two minutes ago.
pub fn stalled_log(dir: &Path) -> std::path::PathBuf {
    let log = dir.join("run.log");
    std::fs::write(
        &log,
        "Processing: B1 (SHORT)\nB1: 1000 prompts\n  100/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=15m\n",
    )
    .unwrap();
    std::fs::File::options()
        .append(true)
        .open(&log)
        .unwrap()
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(120))
        .unwrap();
    log
}
