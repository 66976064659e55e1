//! What runs on the machine: the driver (the process writing the progress log) and the
//! inference server (an SGLang or vLLM command line), read from `/proc`.

use crate::model::{DiscoveredProcess, DiscoveredServer};
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
}

impl Proc {
    pub fn command(&self) -> String {
        self.args.join(" ")
    }
}

/// Every process but this one. Those whose open files cannot be read (another user's,
/// without `CAP_SYS_PTRACE`) come with `files: None`.
pub fn list() -> Vec<Proc> {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|pid| *pid != me)
        .collect();
    pids.sort_unstable();
    pids.into_iter().filter_map(read).collect()
}

fn read(pid: u32) -> Option<Proc> {
    let base = PathBuf::from(format!("/proc/{pid}"));
    let raw = std::fs::read(base.join("cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if args.is_empty() {
        return None; // a kernel thread
    }
    let (state, ppid) = crate::probe::process::stat(pid)?;
    if state == 'Z' || state == 'X' {
        return None;
    }
    let files = std::fs::read_dir(base.join("fd")).ok().map(|fds| {
        fds.flatten()
            .filter_map(|fd| {
                let target = std::fs::read_link(fd.path()).ok()?;
                let info = std::fs::read_to_string(base.join("fdinfo").join(fd.file_name())).ok();
                Some((target, info.as_deref().is_some_and(writable)))
            })
            .collect()
    });
    Some(Proc {
        pid,
        ppid,
        args,
        files,
        cwd: std::fs::read_link(base.join("cwd")).ok(),
    })
}

/// Whether `fdinfo`'s `flags:` (octal) say the file is open for writing.
fn writable(fdinfo: &str) -> bool {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
        .is_some_and(|flags| flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32)
}

/// The process that has one of `logs` open for writing. Where a wrapper (a shell, `nohup`)
/// and the program it started both hold it, the program: the writer none of whose children
/// writes it too.
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
    let leaf = writers
        .iter()
        .find(|p| !writers.iter().any(|c| c.ppid == p.pid))
        .or(writers.first())?;
    Some(DiscoveredProcess {
        pid: leaf.pid,
        command: leaf.command(),
    })
}

/// The SGLang or vLLM server among `procs`: one tied to the run folder (started there, named
/// in its arguments, or logging into it) before any other, then the lowest pid (the launcher
/// rather than its forked workers, which share its command line).
pub fn server(procs: &[Proc], run_dir: &Path) -> Option<DiscoveredServer> {
    let mut servers: Vec<(&Proc, &'static str)> = procs
        .iter()
        .filter_map(|p| Some((p, engine(&p.args)?)))
        .collect();
    let tied = |p: &Proc| {
        let dir = run_dir.to_string_lossy();
        p.cwd.as_deref().is_some_and(|c| c.starts_with(run_dir))
            || p.args.iter().any(|a| a.contains(dir.as_ref()))
            || stdout_file(p.pid).is_some_and(|f| f.starts_with(run_dir))
    };
    servers.sort_by_key(|(p, _)| (!tied(p), p.pid));
    servers.into_iter().next().map(|(p, engine)| {
        let value = |flag: &str| {
            let eq = format!("{flag}=");
            p.args.iter().enumerate().find_map(|(i, a)| {
                if a == flag {
                    p.args.get(i + 1).cloned()
                } else {
                    a.strip_prefix(&eq).map(str::to_owned)
                }
            })
        };
        let (default_port, metrics_always) = match engine {
            "sglang" => (30000, false),
            _ => (8000, true),
        };
        let port = value("--port")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p != 0)
            .unwrap_or(default_port);
        let host = match value("--host").as_deref() {
            // Listening everywhere (vLLM's default) includes the loopback.
            None | Some("" | "0.0.0.0" | "::" | "[::]") => "127.0.0.1".to_owned(),
            Some(h) if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            Some(h) => h.to_owned(),
        };
        let base = format!("http://{host}:{port}");
        let metrics = metrics_always || p.args.iter().any(|a| a == "--enable-metrics");
        let log = p.files.as_ref().and_then(|_| stdout_file(p.pid));
        DiscoveredServer {
            workers: descendants(procs, p.pid),
            pid: p.pid,
            engine: engine.to_owned(),
            command: p.command(),
            health_url: format!("{base}/health"),
            metrics_url: metrics.then(|| format!("{base}/metrics")),
            log: log.map(|l| l.display().to_string()),
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
                found.push(DiscoveredProcess {
                    pid: child.pid,
                    command: child.command(),
                });
                parents.push(child.pid);
            }
        }
    }
    found
}

/// `sglang` or `vllm` for an inference server's command line: `python -m
/// sglang.launch_server`, `sglang serve`, `vllm serve`, `python -m
/// vllm.entrypoints.openai.api_server`.
fn engine(args: &[String]) -> Option<&'static str> {
    let base = |a: &str| {
        Path::new(a)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
    };
    for (i, a) in args.iter().enumerate() {
        let next = args.get(i + 1).map(String::as_str);
        match a.as_str() {
            "sglang.launch_server" => return Some("sglang"),
            "vllm.entrypoints.openai.api_server" => return Some("vllm"),
            _ => {}
        }
        match (base(a).as_deref(), next) {
            (Some("sglang"), Some("serve")) => return Some("sglang"),
            (Some("vllm"), Some("serve")) => return Some("vllm"),
            _ => {}
        }
    }
    None
}

/// The regular file a process's stdout (else stderr) goes to.
fn stdout_file(pid: u32) -> Option<PathBuf> {
    [1, 2].into_iter().find_map(|fd| {
        let target = std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).ok()?;
        std::fs::metadata(&target)
            .is_ok_and(|m| m.is_file())
            .then_some(target)
    })
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| crate::config::normalize(path))
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
        ] {
            assert_eq!(engine(&args(line)), want, "{line}");
        }
    }

    #[test]
    fn urls_from_host_port_and_the_engines_defaults() {
        let proc = |line: &str| Proc {
            pid: 7,
            ppid: 1,
            args: args(line),
            files: None,
            cwd: None,
        };
        let s = server(
            &[proc("python -m sglang.launch_server --model-path m")],
            Path::new("/run"),
        )
        .unwrap();
        assert_eq!(s.health_url, "http://127.0.0.1:30000/health");
        assert_eq!(s.metrics_url, None, "SGLang serves metrics only when asked");
        let s = server(
            &[proc(
                "python -m sglang.launch_server --host 0.0.0.0 --port=31000 --enable-metrics",
            )],
            Path::new("/run"),
        )
        .unwrap();
        assert_eq!(
            s.metrics_url.as_deref(),
            Some("http://127.0.0.1:31000/metrics")
        );
        let s = server(&[proc("vllm serve m --host ::1")], Path::new("/run")).unwrap();
        assert_eq!(s.health_url, "http://[::1]:8000/health");
        assert_eq!(s.metrics_url.as_deref(), Some("http://[::1]:8000/metrics"));
    }

    #[test]
    fn the_writer_of_the_log_not_its_wrapper() {
        let log = PathBuf::from("/data/run/log.txt");
        let proc = |pid, ppid, w| Proc {
            pid,
            ppid,
            args: vec![format!("p{pid}")],
            files: Some(vec![(log.clone(), w)]),
            cwd: None,
        };
        let procs = [proc(10, 1, true), proc(11, 10, true), proc(12, 1, false)];
        assert_eq!(driver(&procs, std::slice::from_ref(&log)).unwrap().pid, 11);
        assert!(
            driver(&[proc(12, 1, false)], std::slice::from_ref(&log)).is_none(),
            "a reader is not the driver"
        );
        assert!(fdinfo_flags_writable());
    }

    fn fdinfo_flags_writable() -> bool {
        writable("pos:\t0\nflags:\t0102001\nmnt_id:\t25\n")
            && !writable("pos:\t0\nflags:\t0100000\n")
            && writable("flags:\t02\n")
    }
}
