//! An inference server as discovery sees one, without an engine: a Python process whose
//! command line is an SGLang or vLLM launch (`python3 -m sglang.launch_server --model-path /m
//! … --port N`, from a module of that name made here), serving `/health` and a few of the
//! engine's gauges over HTTP/1.1 with kept-alive connections, or listening on nothing (a rank
//! above 0, a server whose port is never probed). The real engines run in tests/it/vllm.rs.

use super::{dies_with_its_starter, free_port, require_tool, try_http, wait_for, Killed};
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sglang,
    Vllm,
}

impl Engine {
    /// The module its launch runs, and the options every launch of it has.
    fn launch(self) -> (&'static str, &'static [&'static str]) {
        match self {
            Engine::Sglang => ("sglang.launch_server", &["--model-path", "/m"]),
            Engine::Vllm => ("vllm.entrypoints.openai.api_server", &["--model", "m"]),
        }
    }
}

/// Serves what the engine would on `--port`, unless `PULSE_FAKE_SERVES` is 0.
const SERVER: &str = r#"
import http.server, os, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
if os.environ.get("PULSE_FAKE_SERVES") == "0":
    time.sleep(600)
    sys.exit(0)
METRICS = {
    "sglang": b"sglang:num_running_reqs 12\nsglang:num_queue_reqs 3\nsglang:gen_throughput 850.5\nsglang:token_usage 0.4\n",
    "vllm": b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 1\n',
}[os.environ["PULSE_FAKE_ENGINE"]]
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = {"/health": b"", "/metrics": METRICS}.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// The launch options of the second node of a two-node SGLang server: a rank above 0, which
/// serves no HTTP of its own.
pub const SGLANG_RANK_1: &[&str] = &[
    "--nnodes",
    "2",
    "--node-rank",
    "1",
    "--dist-init-addr",
    "127.0.0.1:5000",
];

pub struct FakeServer {
    pub process: Killed,
    pub port: u16,
    /// The server's pid as the test sees it (its host's, where it runs in a PID namespace of
    /// its own).
    pid: u32,
    _modules: tempfile::TempDir,
}

impl FakeServer {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `engine`'s launch with `args` and a free `--port`, started in `cwd`, once it answers
    /// `/health` (or, where it serves nothing, once its command line is the launch's).
    pub fn start(engine: Engine, args: &[&str], cwd: &Path, serves: bool) -> FakeServer {
        FakeServer::launch(&[], engine, args, cwd, serves)
    }

    /// The same, serving, in a new PID namespace (and a mount namespace with its own `/proc`),
    /// as a pod's or a container's processes are: `sh` is its pid 1 and the server its child,
    /// and `nsenter --target PID --pid --mount` runs a command beside it. Needs root.
    pub fn start_in_pid_namespace(engine: Engine, cwd: &Path) -> FakeServer {
        let unshare = require_tool("unshare", "util-linux");
        let wrapper = [
            unshare.to_str().unwrap(),
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
            "sh",
            "-c",
            "\"$@\" & wait",
            "sh",
        ];
        FakeServer::launch(&wrapper, engine, &[], cwd, true)
    }

    fn launch(
        wrapper: &[&str],
        engine: Engine,
        args: &[&str],
        cwd: &Path,
        serves: bool,
    ) -> FakeServer {
        let modules = tempfile::tempdir().unwrap();
        let (module, options) = engine.launch();
        let file = modules
            .path()
            .join(format!("{}.py", module.replace('.', "/")));
        let mut package = file.parent().unwrap();
        std::fs::create_dir_all(package).unwrap();
        std::fs::write(&file, SERVER).unwrap();
        while package != modules.path() {
            std::fs::write(package.join("__init__.py"), "").unwrap();
            package = package.parent().unwrap();
        }
        let port = free_port();
        let python = require_tool("python3", "python3");
        let mut command = match wrapper.split_first() {
            Some((program, wrapper_args)) => {
                let mut command = Command::new(program);
                command.args(wrapper_args).arg(&python);
                command
            }
            None => Command::new(&python),
        };
        let child = dies_with_its_starter(&mut command)
            .args(["-m", module])
            .args(options)
            .args(args)
            .args(["--port", &port.to_string()])
            .env("PYTHONPATH", modules.path())
            .env(
                "PULSE_FAKE_ENGINE",
                if engine == Engine::Sglang {
                    "sglang"
                } else {
                    "vllm"
                },
            )
            .env("PULSE_FAKE_SERVES", if serves { "1" } else { "0" })
            .current_dir(cwd)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a fake inference server");
        let pid = child.id();
        let mut server = FakeServer {
            process: Killed(child),
            port,
            pid,
            _modules: modules,
        };
        if !wrapper.is_empty() {
            wait_for(&format!("the fake {module} in its namespace"), || {
                server.pid = grandchild(pid).unwrap_or(pid);
                server.pid != pid
            });
        }
        if serves {
            let addr = format!("127.0.0.1:{port}").parse().unwrap();
            wait_for(&format!("the fake {module} to answer"), || {
                matches!(try_http(addr, "GET", "/health", ""), Some((200, _)))
            });
        } else {
            // Until the child has exec'd, /proc shows the test's own command line.
            wait_for(&format!("the fake {module}'s command line"), || {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(module))
            });
        }
        server
    }
}

/// The child of `ancestor`'s child, by the pid the test's namespace gives it: the server
/// that the wrapper's `sh` started (a pyenv shim on the way execs in the same process).
fn grandchild(ancestor: u32) -> Option<u32> {
    let parent = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 1..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| parent(*pid).and_then(parent) == Some(ancestor))
}
