//! What runs on the machine: the driver (the process writing the progress log) and the
//! inference server (an SGLang or vLLM command line), read from `/proc`.

use super::sockets::{self, Socket};
use crate::model::{DiscoveredProcess, DiscoveredServer, BY_CONNECTION};
use crate::procfs::{Command, Procfs};
use crate::run_identity::Role;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One process as `/proc` shows it.
#[derive(Debug, Clone)]
pub struct Proc {
    pub pid: u32,
    pub ppid: u32,
    /// The arguments, as given.
    pub args: Vec<String>,
    /// Open files: (target, opened for writing). `None` where `/proc/PID/fd` is not ours to read.
    pub files: Option<Vec<(PathBuf, bool)>>,
    pub cwd: Option<PathBuf>,
    /// When it started, in clock ticks after boot.
    pub started: Option<u64>,
}

impl Proc {
    pub fn command(&self) -> String {
        self.args.join(" ")
    }
}

/// The processes as the last scan read them. A rescan reads only the processes that are new
/// since, the ones it is told to hold (the driver, the server) and those tied to the run
/// folder; the rest keep what was read of them. A node with thousands of sleeping processes
/// then costs one `/proc` listing per scan, not thousands of reads.
#[derive(Debug, Default)]
pub struct Table {
    procfs: Procfs,
    procs: Vec<Proc>,
    scans: u64,
}

/// Every so many scans every process is read again: one that opened the progress log after it
/// was first read, or a pid reused between two scans, is seen then.
const FULL_EVERY: u64 = 20;

impl Table {
    /// A table of the processes of `procfs`, the system's `/proc` or a fixture tree.
    pub fn at(procfs: Procfs) -> Table {
        Table {
            procfs,
            ..Table::default()
        }
    }

    pub fn procfs(&self) -> &Procfs {
        &self.procfs
    }

    /// Reads what is new in `/proc`; `held` are read again whatever they were.
    pub fn refresh(&mut self, dir: &Path, held: &[u32]) -> &[Proc] {
        let full = self.scans.is_multiple_of(FULL_EVERY);
        self.scans += 1;
        let mut before = std::mem::take(&mut self.procs).into_iter().peekable();
        for pid in self.procfs.processes() {
            while before.next_if(|p| p.pid < pid).is_some() {}
            let fresh = match before.next_if(|p| p.pid == pid) {
                Some(p) if !full && !held.contains(&pid) && !works_in_or_names(&p, dir) => Some(p),
                _ => read(&self.procfs, pid),
            };
            self.procs.extend(fresh);
        }
        &self.procs
    }

    /// Whether `p` still runs: its pid is not a zombie's, and where its start time is known,
    /// the process now under its pid started then (not a later one given the same pid).
    pub fn lives(&self, p: &DiscoveredProcess) -> bool {
        self.procfs
            .stat(p.pid)
            .is_some_and(|s| s.alive() && p.started.is_none_or(|t| s.started == Some(t)))
    }
}

/// Whether a process works in the run folder or names it in its arguments.
fn works_in_or_names(p: &Proc, dir: &Path) -> bool {
    let named = dir.to_string_lossy();
    p.cwd.as_deref().is_some_and(|c| c.starts_with(dir))
        || p.args.iter().any(|a| a.contains(named.as_ref()))
}

fn read(procfs: &Procfs, pid: u32) -> Option<Proc> {
    let Command { args, ppid } = procfs.command(pid)?;
    let files = procfs.open_files(pid).map(|files| {
        files
            .into_iter()
            .map(|f| {
                let writable = procfs.writable(pid, &f.fd);
                (f.target, writable)
            })
            .collect()
    });
    Some(Proc {
        pid,
        ppid,
        args,
        files,
        cwd: procfs.cwd(pid),
        started: procfs.stat(pid).and_then(|s| s.started),
    })
}

/// Programs that start the driver rather than being it: a shell, `nohup`, `env`, `timeout`…
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "nohup", "env", "timeout", "stdbuf", "setsid", "script", "nice",
    "ionice", "taskset", "numactl", "time", "flock", "srun", "uv",
];

/// The process that has one of `logs` open for writing: the first writer whose parent does
/// not write it, and where that is a wrapper (a shell, `nohup`), the writer it started. Not a
/// writer below the program: its own children inherit the log as their output (Python's
/// `resource_tracker`, vLLM's EngineCore), and come and go while it runs.
pub fn driver(procs: &[Proc], logs: &[PathBuf]) -> Option<DiscoveredProcess> {
    let logs: Vec<PathBuf> = logs.iter().map(|l| canonical(l)).collect();
    let writers: Vec<&Proc> = procs
        .iter()
        .filter(|p| {
            p.files
                .as_ref()
                .is_some_and(|files| files.iter().any(|(target, w)| *w && logs.contains(target)))
        })
        .collect();
    let mut driver = *writers
        .iter()
        .find(|p| !writers.iter().any(|w| w.pid == p.ppid))?;
    while WRAPPERS.contains(&basename(&driver.args[0]).as_str()) {
        match writers.iter().find(|c| c.ppid == driver.pid) {
            Some(child) => driver = child,
            None => break,
        }
    }
    Some(described(driver))
}

fn described(p: &Proc) -> DiscoveredProcess {
    DiscoveredProcess {
        pid: p.pid,
        command: p.command(),
        program: program(&p.args),
        started: p.started,
    }
}

/// Launchers that run a script or module named after their options: the program is the pair.
const INTERPRETERS: &[&str] = &[
    "python",
    "bash",
    "sh",
    "node",
    "ruby",
    "perl",
    "uv",
    "torchrun",
    "deepspeed",
    "accelerate",
];

/// The executable, and an interpreter's script (`python3 gen.py`), module (`python -m
/// pkg.main`) or inline script (`python -c ...`), joined as the command line is.
pub fn program(args: &[String]) -> String {
    let base = basename(&args[0]);
    // `python3`, `python3.11`: the name with a version.
    let interpreter = INTERPRETERS.iter().any(|i| {
        base.strip_prefix(i)
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    });
    if !interpreter {
        return args[0].clone();
    }
    let end = args
        .iter()
        .enumerate()
        .skip(1)
        .find_map(|(i, a)| match a.as_str() {
            "-m" | "-c" => Some(i + 1),
            _ if !a.starts_with('-') => Some(i),
            _ => None,
        })
        .unwrap_or(args.len() - 1)
        .min(args.len() - 1);
    args[..=end].join(" ")
}

fn basename(arg: &str) -> String {
    Path::new(arg)
        .file_name()
        .map_or_else(|| arg.to_owned(), |n| n.to_string_lossy().into_owned())
}

/// Which inference server is the run's, and what the node's command lines say of its role.
#[derive(Debug, Default)]
pub struct Found {
    pub server: Option<DiscoveredServer>,
    pub role: Option<Role>,
    /// Why no server was taken, where there were several.
    pub note: Option<String>,
}

/// The run's SGLang or vLLM server among `procs`, taken only with evidence: the one its
/// driver is connected to, else the one tied to the run folder (started there, named in its
/// arguments, or logging into it). The only one on the node is a guess, taken only while no
/// driver is found or while the driver talks to some local port no readable process holds (a
/// server in a container, or another user's); a driver that talks to no local service runs
/// its engine in-process (vLLM's `LLM.generate`, `run_batch`) and has no server. With several
/// and no tie, none: probing another run's server would triage this run with its health.
pub fn server(
    procfs: &Procfs,
    procs: &[Proc],
    run_dir: &Path,
    driver: Option<u32>,
    sockets: &[Socket],
) -> Found {
    let launchers = launchers(procs);
    let sockets_of = |pid: u32| {
        let family: Vec<&Proc> = std::iter::once(pid)
            .chain(descendants(procs, pid).iter().map(|d| d.pid))
            .filter_map(|pid| procs.iter().find(|p| p.pid == pid))
            .collect();
        sockets::inodes(
            family
                .iter()
                .flat_map(|p| p.files.iter().flatten().map(|(t, _)| t.as_path())),
        )
    };
    let reached = driver
        .map(|pid| sockets::reached(sockets, &sockets_of(pid)))
        .unwrap_or_default();
    let connected = |p: &Proc| !reached.is_disjoint(&sockets_of(p.pid));
    // A server whose sockets are not ours to read (another user's, or in a container with
    // the node's network) is still known by the port its command line gives it.
    let ports = driver
        .map(|pid| sockets::local_ports_reached(sockets, &sockets_of(pid)))
        .unwrap_or_default();
    let at_its_port =
        |p: &Proc| engine(&p.args).is_some_and(|engine| ports.contains(&port(&p.args, engine)));
    let in_folder = |p: &Proc| {
        works_in_or_names(p, run_dir)
            || stdout_file(procfs, p.pid).is_some_and(|f| f.starts_with(run_dir))
    };
    let ray_worker = procs.iter().any(|p| ray_worker(&p.args));
    let pick = |by: &dyn Fn(&Proc) -> bool| -> Vec<(&Proc, &'static str)> {
        launchers.iter().filter(|(p, _)| by(p)).copied().collect()
    };
    let (connected, at_its_port, in_folder) =
        (pick(&connected), pick(&at_its_port), pick(&in_folder));
    let (chosen, chosen_by) = match (
        connected.as_slice(),
        at_its_port.as_slice(),
        in_folder.as_slice(),
        launchers.as_slice(),
    ) {
        ([first, ..], _, _, _) => (*first, format!("{BY_CONNECTION} it")),
        (_, [one], _, _) => (
            *one,
            format!("{BY_CONNECTION} its port {}", port(&one.0.args, one.1)),
        ),
        (_, _, [first, ..], _) => (*first, format!("the run folder {}", run_dir.display())),
        // A guess is shown as one and changes nothing: not the node's role, not what is
        // followed or probed (docs/configuration.md, "Which server is the run's").
        (_, _, _, [only]) => {
            let (server, note) = match only_one(only, run_dir, driver, sockets, &sockets_of) {
                Ok(by) => (
                    Some(described_server(procfs, procs, only.0, only.1, by)),
                    None,
                ),
                Err(note) => (None, Some(note)),
            };
            return Found {
                note,
                role: ray_worker.then_some(Role::Worker),
                server,
            };
        }
        (_, _, _, []) => {
            return Found {
                role: ray_worker.then_some(Role::Worker),
                ..Found::default()
            }
        }
        (_, _, _, several) => return none_of_several(several, run_dir, ray_worker),
    };
    let server = described_server(procfs, procs, chosen.0, chosen.1, chosen_by);
    let role = if !server.serves_http || ray_worker {
        Role::Worker
    } else {
        Role::Server
    };
    Found {
        role: Some(role),
        server: Some(server),
        note: None,
    }
}

/// No server, among several on the node with no tie to the run; the note names them.
fn none_of_several(several: &[(&Proc, &str)], run_dir: &Path, ray_worker: bool) -> Found {
    let seen: Vec<String> = several
        .iter()
        .map(|(p, engine)| format!("pid {} ({engine}: {})", p.pid, p.command()))
        .collect();
    Found {
        note: Some(format!(
            "{} inference servers run on this node and none is the run's (the driver has no connection to one, none works in or logs into {}): {}; give --server-health-url and --server-metrics-url for the run's",
            several.len(),
            run_dir.display(),
            seen.join(", ")
        )),
        role: ray_worker.then_some(Role::Worker),
        server: None,
    }
}

/// The inference servers on the node, one process each. A server's forked workers share its
/// command line: the launcher stands for them. A shell or a wrapper whose arguments start the
/// engine stands aside for the engine it started.
fn launchers(procs: &[Proc]) -> Vec<(&Proc, &'static str)> {
    let engines: Vec<(&Proc, &'static str)> = procs
        .iter()
        .filter_map(|p| Some((p, engine(&p.args)?)))
        .collect();
    let running: BTreeSet<u32> = engines
        .iter()
        .filter(|(p, _)| runs_engine(&p.args))
        .map(|(p, _)| p.pid)
        .collect();
    engines
        .iter()
        .filter(|(p, _)| !running.contains(&p.ppid))
        .filter(|(p, _)| {
            running.contains(&p.pid)
                || !descendants(procs, p.pid)
                    .iter()
                    .any(|d| running.contains(&d.pid))
        })
        .copied()
        .collect()
}

/// Why the only server on the node may be taken as the run's, a guess said as such; or, where
/// the driver's sockets say it is not the run's, why it is passed over.
fn only_one(
    (p, engine): &(&Proc, &str),
    run_dir: &Path,
    driver: Option<u32>,
    sockets: &[Socket],
    sockets_of: &dyn Fn(u32) -> std::collections::BTreeSet<u64>,
) -> Result<String, String> {
    let only = crate::model::ONLY_ONE;
    match driver {
        None => Ok(format!("{only} (no driver found yet)")),
        Some(pid) if sockets::talks_out(sockets, &sockets_of(pid)) => Ok(format!(
            "{only} (the driver talks to a local port that no process it can read listens on)"
        )),
        Some(pid) => Err(format!(
            "{engine} server pid {} is not the run's: driver pid {pid} talks to no server on this node (its engine runs in-process, or it waits), and the server neither works in nor logs into {}; give --server-health-url for it if it is",
            p.pid,
            run_dir.display()
        )),
    }
}

/// A Ray worker node's agent: `ray start --address HEAD` (the head is `ray start --head`).
fn ray_worker(args: &[String]) -> bool {
    let start = args
        .iter()
        .position(|a| basename(a) == "ray")
        .filter(|i| args.get(i + 1).is_some_and(|a| a == "start"));
    start.is_some()
        && !args.iter().any(|a| a == "--head")
        && args
            .iter()
            .any(|a| a == "--address" || a.starts_with("--address="))
}

fn described_server(
    procfs: &Procfs,
    procs: &[Proc],
    p: &Proc,
    engine: &'static str,
    by: String,
) -> DiscoveredServer {
    let value = |flag: &str| flag_value(&p.args, flag);
    let metrics_always = engine != "sglang";
    let port = port(&p.args, engine);
    let host = match value("--host").as_deref() {
        // Listening everywhere (vLLM's default) includes the loopback.
        None | Some("" | "0.0.0.0" | "::" | "[::]") => "127.0.0.1".to_owned(),
        Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        Some(h) => h.to_owned(),
    };
    let base = format!("http://{host}:{port}");
    let metrics = metrics_always || p.args.iter().any(|a| a == "--enable-metrics");
    let log = p.files.as_ref().and_then(|_| stdout_file(procfs, p.pid));
    let rank = value("--node-rank").and_then(|r| r.parse::<u32>().ok());
    let headless = p.args.iter().any(|a| a == "--headless");
    DiscoveredServer {
        workers: descendants(procs, p.pid),
        workers_gone: Vec::new(),
        pid: p.pid,
        started: p.started,
        engine: engine.to_owned(),
        command: p.command(),
        health_url: format!("{base}/health"),
        metrics_url: metrics.then(|| format!("{base}/metrics")),
        log: log.map(|l| l.display().to_string()),
        by,
        serves_http: rank.unwrap_or(0) == 0 && !headless,
        tied_by_driver: None,
    }
}

/// The port a server's command line gives it (`--port N`, `--port=N`), else its engine's
/// default: SGLang's 30000, vLLM's 8000.
fn port(args: &[String], engine: &str) -> u16 {
    flag_value(args, "--port")
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|p| *p != 0)
        .unwrap_or(if engine == "sglang" { 30000 } else { 8000 })
}

/// The value of `--flag V` or `--flag=V`.
fn flag_value(args: &[String], flag: &str) -> Option<String> {
    let eq = format!("{flag}=");
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&eq).map(str::to_owned)
        }
    })
}

/// Every process below `pid`, nearest first.
fn descendants(procs: &[Proc], pid: u32) -> Vec<DiscoveredProcess> {
    let mut found = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for child in procs.iter().filter(|c| c.ppid == parent && c.pid != pid) {
            if found.iter().all(|f: &DiscoveredProcess| f.pid != child.pid) {
                found.push(described(child));
                parents.push(child.pid);
            }
        }
    }
    found
}

/// `sglang` or `vllm` for an inference server's command line: `python -m
/// sglang.launch_server`, `sglang serve`, `vllm serve`, `python -m
/// vllm.entrypoints.openai.api_server`, wherever in the line (a process met inside an `exec`
/// chain, `pyenv`'s shim, still shows its launcher's line: read once, it is not read again).
fn engine(args: &[String]) -> Option<&'static str> {
    // `vllm serve --help=all` prints and exits: it serves nothing.
    if args.iter().any(|a| a == "-h" || a.starts_with("--help")) {
        return None;
    }
    args.iter()
        .enumerate()
        .find_map(|(i, _)| launch(&args[i..]))
}

/// The engine a command line starts with: `vllm serve`, `sglang serve`, `python [flags] -m
/// MODULE`.
fn launch(args: &[String]) -> Option<&'static str> {
    let base = |a: &String| {
        Path::new(a)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    };
    match (
        args.first().map(String::as_str),
        args.first().and_then(base).as_deref(),
        args.get(1).map(String::as_str),
    ) {
        (Some("sglang.launch_server"), _, _) => Some("sglang"),
        (Some("vllm.entrypoints.openai.api_server"), _, _) => Some("vllm"),
        (_, Some("sglang"), Some("serve")) => Some("sglang"),
        (_, Some("vllm"), Some("serve")) => Some("vllm"),
        _ => None,
    }
}

/// Whether the process's own program is the engine, not a shell or a wrapper that has it in
/// its arguments (`bash -c '… vllm serve …'`, `timeout 3600 vllm serve`): such a process
/// starts the engine as its child, and the child is the server. An interpreter's program is
/// the module or script it runs.
fn runs_engine(args: &[String]) -> bool {
    if engine(args).is_none() {
        return false;
    }
    let mut program = args;
    if program
        .first()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|b| b.to_string_lossy().starts_with("python"))
    {
        program = &program[1..];
        while let Some(flag) = program.first().filter(|a| a.starts_with('-') && *a != "-m") {
            let takes_value = matches!(flag.as_str(), "-X" | "-W");
            program = &program[(if takes_value { 2 } else { 1 }).min(program.len())..];
        }
        if program.first().is_some_and(|m| m == "-m") {
            program = &program[1..];
        }
    }
    launch(program).is_some()
}

/// The regular file a process's stdout (else stderr) goes to.
fn stdout_file(procfs: &Procfs, pid: u32) -> Option<PathBuf> {
    [1, 2].into_iter().find_map(|fd| {
        let target = procfs.open_file(pid, fd)?;
        std::fs::metadata(&target)
            .is_ok_and(|m| m.is_file())
            .then_some(target)
    })
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| crate::paths::normalize(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_owned).collect()
    }

    #[test]
    fn engines_by_their_command_lines() {
        for (line, want) in [
            (
                "python3 -m sglang.launch_server --model-path m --port 30001",
                Some("sglang"),
            ),
            ("/opt/venv/bin/sglang serve --model-path m", Some("sglang")),
            ("/usr/bin/vllm serve Qwen/Qwen3-8B", Some("vllm")),
            (
                "python -m vllm.entrypoints.openai.api_server --model m",
                Some("vllm"),
            ),
            ("python run_inference.py --server sglang", None),
            ("grep vllm", None),
            ("vllm serve --help=all", None),
            ("python -m sglang.launch_server -h", None),
            (
                "/venv/bin/python3.11 -u -X dev /venv/bin/vllm serve m",
                Some("vllm"),
            ),
        ] {
            assert_eq!(engine(&args(line)), want, "{line}");
            assert_eq!(runs_engine(&args(line)), want.is_some(), "{line}");
        }
        // A supervisor's shell, a wrapper or pyenv's shim met inside its `exec` has the
        // engine in its arguments; it does not run it itself.
        for line in [
            "bash -c while true; do vllm serve m; done",
            "timeout 3600 python -m sglang.launch_server --model-path m",
            "bash /root/.pyenv/libexec/pyenv exec python3 -m sglang.launch_server --model-path m",
        ] {
            assert!(engine(&args(line)).is_some(), "{line}");
            assert!(!runs_engine(&args(line)), "{line}");
        }
    }

    /// `bash -c 'while …; do vllm serve …; done'` in the run folder: the supervisor's line names
    /// the engine, but the server is its child, which listens; a wrapper met inside its own
    /// `exec` (no engine below it) is the server all the same.
    #[test]
    fn a_supervisors_shell_stands_aside_for_the_engine_it_started() {
        let supervisor = proc(7, "bash -c while true; do vllm serve m; done vllm serve m");
        let mut engine = proc(8, "/venv/bin/python /venv/bin/vllm serve m --port 8000");
        engine.ppid = 7;
        let mut core = proc(9, "/venv/bin/python /venv/bin/vllm serve m --port 8000");
        core.ppid = 8;
        let found = server(
            &nowhere(),
            &[supervisor, engine, core],
            Path::new("/run"),
            None,
            &[],
        );
        let s = found.server.expect("the engine");
        assert_eq!((s.pid, s.workers.len()), (8, 1));
        let shim = proc(
            5,
            "bash /root/.pyenv/libexec/pyenv exec python3 -m sglang.launch_server --model-path m",
        );
        let found = server(&nowhere(), &[shim], Path::new("/run"), None, &[]);
        assert_eq!(found.server.map(|s| s.pid), Some(5));
    }

    /// A `/proc` with no process in it: the processes of these tests are given, and none of
    /// the machine's is read for their logs.
    fn nowhere() -> Procfs {
        Procfs::at("/nonexistent")
    }

    fn proc(pid: u32, line: &str) -> Proc {
        Proc {
            pid,
            ppid: 1,
            args: args(line),
            files: None,
            cwd: None,
            started: None,
        }
    }

    fn only(line: &str) -> DiscoveredServer {
        server(&nowhere(), &[proc(7, line)], Path::new("/run"), None, &[])
            .server
            .unwrap()
    }

    #[test]
    fn urls_from_host_port_and_the_engines_defaults() {
        let s = only("python -m sglang.launch_server --model-path m");
        assert_eq!(s.health_url, "http://127.0.0.1:30000/health");
        assert_eq!(s.metrics_url, None, "SGLang serves metrics only when asked");
        assert_eq!(
            s.by,
            format!("{} (no driver found yet)", crate::model::ONLY_ONE)
        );
        let s = only("python -m sglang.launch_server --host 0.0.0.0 --port=31000 --enable-metrics");
        assert_eq!(
            s.metrics_url.as_deref(),
            Some("http://127.0.0.1:31000/metrics")
        );
        let s = only("vllm serve m --host ::1");
        assert_eq!(s.health_url, "http://[::1]:8000/health");
        assert_eq!(s.metrics_url.as_deref(), Some("http://[::1]:8000/metrics"));
    }

    #[test]
    fn a_rank_above_0_or_a_ray_worker_makes_the_node_a_worker() {
        // Servers started in the run folder: tied to the run, so they say the node's role.
        let role = |procs: &[Proc]| {
            let procs: Vec<Proc> = procs
                .iter()
                .cloned()
                .map(|mut p| {
                    p.cwd = Some("/run".into());
                    p
                })
                .collect();
            server(&nowhere(), &procs, Path::new("/run"), None, &[]).role
        };
        let line = "python3 -m sglang.launch_server --model-path m --nnodes 2 --dist-init-addr 10.0.0.1:5000";
        assert_eq!(
            role(&[proc(7, &format!("{line} --node-rank 1"))]),
            Some(Role::Worker)
        );
        assert_eq!(
            role(&[proc(7, &format!("{line} --node-rank 0"))]),
            Some(Role::Server)
        );
        assert_eq!(
            role(&[proc(
                7,
                "vllm serve m --data-parallel-start-rank 2 --headless"
            )]),
            Some(Role::Worker)
        );
        assert_eq!(
            role(&[proc(
                9,
                "/venv/bin/ray start --address=10.0.0.1:6379 --block"
            )]),
            Some(Role::Worker)
        );
        assert_eq!(role(&[proc(9, "ray start --head --port=6379")]), None);
        assert!(!only(&format!("{line} --node-rank 1")).serves_http);
    }

    #[test]
    fn a_guessed_server_says_nothing_of_the_nodes_role() {
        let line = "python3 -m sglang.launch_server --model-path m";
        for line in [line.to_owned(), format!("{line} --node-rank 1")] {
            let found = server(&nowhere(), &[proc(7, &line)], Path::new("/run"), None, &[]);
            let s = found.server.expect("shown as a guess");
            assert!(!s.tied(), "{}", s.by);
            assert_eq!(found.role, None, "a guess made the node's role: {line}");
        }
    }

    /// A socket table where the driver (pid 20, socket 200) is connected to the listener of
    /// server pid 11 (socket 101, port 8001).
    fn two_servers() -> (Vec<Proc>, Vec<Socket>) {
        let mut a = proc(10, "vllm serve m --port 8000");
        a.files = Some(vec![("socket:[100]".into(), true)]);
        let mut b = proc(11, "vllm serve m --port 8001");
        b.files = Some(vec![("socket:[101]".into(), true)]);
        let mut driver = proc(20, "python3 gen.py");
        driver.files = Some(vec![("socket:[200]".into(), true)]);
        let listener = |inode, port| Socket {
            inode,
            local: ("0.0.0.0".parse().unwrap(), port),
            remote: ("0.0.0.0".parse().unwrap(), 0),
            state: 0x0A,
        };
        let connection = Socket {
            inode: 200,
            local: ("127.0.0.1".parse().unwrap(), 40000),
            remote: ("127.0.0.1".parse().unwrap(), 8001),
            state: 0x01,
        };
        (
            vec![a, b, driver],
            vec![listener(100, 8000), listener(101, 8001), connection],
        )
    }

    #[test]
    fn the_server_the_driver_talks_to_else_none_of_several() {
        let (procs, sockets) = two_servers();
        let found = server(&nowhere(), &procs, Path::new("/run"), Some(20), &sockets);
        let s = found.server.unwrap();
        assert_eq!(s.pid, 11);
        assert!(s.tied(), "{}", s.by);
        let found = server(&nowhere(), &procs, Path::new("/run"), None, &sockets);
        assert!(found.server.is_none(), "two servers, no tie: none taken");
        let note = found.note.unwrap();
        assert!(note.contains("pid 10") && note.contains("pid 11"), "{note}");
        assert!(note.contains("--server-health-url"), "{note}");
        let mut procs = procs;
        procs[0].cwd = Some("/run/logs".into());
        let s = server(&nowhere(), &procs, Path::new("/run"), None, &sockets)
            .server
            .unwrap();
        assert_eq!(
            (s.pid, s.tied()),
            (10, true),
            "the one started in the run folder"
        );
    }

    #[test]
    fn the_only_server_is_not_the_runs_once_its_driver_talks_to_no_local_service() {
        let mut vllm = proc(10, "vllm serve m --port 8000");
        vllm.files = Some(vec![("socket:[100]".into(), true)]);
        let mut driver = proc(20, "python3 gen.py");
        driver.files = Some(vec![("socket:[200]".into(), true)]);
        let mut engine_core = proc(21, "VLLM::EngineCore");
        engine_core.ppid = 20;
        engine_core.files = Some(vec![("socket:[300]".into(), true)]);
        let socket = |inode, local: (&str, u16), remote: (&str, u16), state| Socket {
            inode,
            local: (local.0.parse().unwrap(), local.1),
            remote: (remote.0.parse().unwrap(), remote.1),
            state,
        };
        let listener = socket(100, ("0.0.0.0", 8000), ("0.0.0.0", 0), 0x0A);
        let found = |procs: &[Proc], sockets: &[Socket]| {
            server(&nowhere(), procs, Path::new("/run"), Some(20), sockets)
        };
        // An offline driver: its only connection is to its own engine's store.
        let internal = [
            listener.clone(),
            socket(300, ("127.0.0.1", 29500), ("0.0.0.0", 0), 0x0A),
            socket(200, ("127.0.0.1", 40000), ("127.0.0.1", 29500), 0x01),
        ];
        let procs = [vllm.clone(), driver.clone(), engine_core];
        let none = found(&procs, &internal);
        assert!(none.server.is_none(), "an in-process engine has no server");
        let note = none.note.unwrap();
        assert!(note.contains("pid 10 is not the run's"), "{note}");
        assert!(
            found(&procs, std::slice::from_ref(&listener))
                .server
                .is_none(),
            "a driver with no connection at all"
        );
        // A driver talking to a port no readable process holds (a server in a container):
        // the only server is taken, and said to be a guess.
        let outward = [
            listener.clone(),
            socket(200, ("127.0.0.1", 40000), ("127.0.0.1", 30000), 0x01),
        ];
        let guessed = found(&[vllm.clone(), driver.clone()], &outward);
        let s = guessed.server.unwrap();
        assert!(!s.tied(), "{}", s.by);
        assert!(s.by.contains("talks to a local port"), "{}", s.by);
        assert_eq!(guessed.role, None, "a guess says nothing of the role");
        // The same driver talking to the port the server's command line gives it, whose
        // sockets are not ours to read (another user's): tied by that port.
        let mut unreadable = vllm.clone();
        unreadable.files = None;
        let at_port = [socket(200, ("127.0.0.1", 40000), ("127.0.0.1", 8000), 0x01)];
        let tied = found(&[unreadable, driver.clone()], &at_port);
        let s = tied.server.unwrap();
        assert!(s.tied(), "{}", s.by);
        assert_eq!(s.by, "the driver's connection to its port 8000");
        assert_eq!(tied.role, Some(Role::Server));
        // Without a driver yet, the only server is taken as such.
        let s = server(&nowhere(), &[vllm], Path::new("/run"), None, &outward)
            .server
            .unwrap();
        assert!(s.by.ends_with("(no driver found yet)"), "{}", s.by);
    }

    #[test]
    fn a_servers_forked_workers_are_not_other_servers() {
        let mut worker = proc(8, "python -m sglang.launch_server --model-path m");
        worker.ppid = 7;
        let procs = [
            proc(7, "python -m sglang.launch_server --model-path m"),
            worker,
        ];
        let s = server(&nowhere(), &procs, Path::new("/run"), None, &[])
            .server
            .unwrap();
        assert_eq!((s.pid, s.workers.len()), (7, 1));
    }

    #[test]
    fn a_program_is_its_executable_and_script() {
        for (line, want) in [
            ("python3 /opt/gen.py --shard 3", "python3 /opt/gen.py"),
            (
                "/usr/bin/python3.11 -u gen.py --shard 3",
                "/usr/bin/python3.11 -u gen.py",
            ),
            ("python -m pipeline.run --x 1", "python -m pipeline.run"),
            ("/opt/bin/run_inference --shard 3", "/opt/bin/run_inference"),
            ("bash", "bash"),
            ("pythonista x", "pythonista"),
        ] {
            assert_eq!(program(&args(line)), want, "{line}");
        }
    }

    #[test]
    fn a_rescan_reads_only_new_processes_and_the_held_ones() {
        let me = std::process::id();
        let mut table = Table::default();
        let first = table.refresh(Path::new("/nonexistent"), &[]).len();
        assert!(first > 0);
        // Mark a cached entry: a rescan keeps it as it was, a held one is read again.
        let parent = std::os::unix::process::parent_id();
        let mark = |table: &mut Table| {
            for p in table.procs.iter_mut().filter(|p| p.pid == parent) {
                p.args = vec!["marked".into()];
            }
        };
        mark(&mut table);
        let kept = table.refresh(Path::new("/nonexistent"), &[]);
        assert!(kept.iter().any(|p| p.pid == parent && p.args == ["marked"]));
        assert!(kept.iter().all(|p| p.pid != me), "never this process");
        mark(&mut table);
        let held = table.refresh(Path::new("/nonexistent"), &[parent]);
        assert!(held.iter().any(|p| p.pid == parent && p.args != ["marked"]));
    }

    #[test]
    fn the_writer_of_the_log_not_its_wrapper() {
        let log = PathBuf::from("/data/run/log.txt");
        let proc = |pid, ppid, w| Proc {
            pid,
            ppid,
            args: vec![if pid == 10 {
                "/bin/bash".into()
            } else {
                format!("p{pid}")
            }],
            files: Some(vec![(log.clone(), w)]),
            cwd: None,
            started: None,
        };
        let procs = [proc(10, 1, true), proc(11, 10, true), proc(12, 1, false)];
        assert_eq!(driver(&procs, std::slice::from_ref(&log)).unwrap().pid, 11);
        // The program's own children inherit the log as their output: not the driver.
        let procs = [proc(10, 1, true), proc(11, 10, true), proc(13, 11, true)];
        assert_eq!(driver(&procs, std::slice::from_ref(&log)).unwrap().pid, 11);
        assert!(
            driver(&[proc(12, 1, false)], std::slice::from_ref(&log)).is_none(),
            "a reader is not the driver"
        );
    }
}
