use super::*;

fn read(log: &mut ServerLog, line: &str) -> ServerLine {
    log.parse(line.as_bytes())
        .unwrap_or_else(|| panic!("{line:?} is not a server line"))
        .line
}

fn report(line: &str) -> ServerReport {
    match read(&mut ServerLog::default(), line) {
        ServerLine::Report(r) => r,
        other => panic!("{line:?} → {other:?}"),
    }
}

fn event(line: &str) -> Option<ServerEvent> {
    match ServerLog::default().parse(line.as_bytes()).map(|r| r.line) {
        Some(ServerLine::Event(e)) => Some(e),
        _ => None,
    }
}

#[test]
fn sglang_decode_lines_of_every_release() {
    for line in [
        "[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317, ",
        "[2026-08-28 22:30:08 DP0 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 317",
        "[2026-08-28 22:30:08 TP0 EP0] Decode batch, #running-req: 233, #full token: 370959, full token usage: 0.82, #swa token: 100, swa token usage: 0.10, accept len: 1.73, gen throughput (token/s): 4594.01, #queue-req: 317, ",
        "[10:00:03 TP0] Decode batch. #running-req: 233, #token: 41230, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 317",
        "[2025-12-01 10:00:03] Decode batch [12345], #running-req: 233, #token: 41230, token usage: 0.82, gen throughput (token/s): 4594.01, #queue-req: 317",
        "[2025-07-08 10:00:03 TP0] Decode batch. #running-req: 233, #token: full=42000, swa=9800, token usage: full=0.82, swa=0.41, cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317",
    ] {
        let r = report(line);
        assert_eq!(r.running, Some(233.0), "{line}");
        assert_eq!(r.queued, Some(317.0), "{line}");
        assert_eq!(r.generation_tokens_per_second, Some(4594.01), "{line}");
        assert_eq!(r.kv_cache_usage, Some(0.82), "{line}");
        assert!(r.decode);
    }
    let p = report("[2026-08-28 22:30:01 TP0] Prefill batch, #new-seq: 5, #new-token: 1234, #cached-token: 4096, token usage: 0.31, #running-req: 228, #queue-req: 312, ");
    assert_eq!(
        (p.running, p.queued, p.kv_cache_usage),
        (Some(228.0), Some(312.0), Some(0.31))
    );
    assert_eq!(p.generation_tokens_per_second, None);
    assert!(!p.decode);
    // PD-disaggregated prefill (0.4.8 – 0.5.2) has no running count.
    let p = report("[2025-08-01 10:00:01 TP0] Prefill batch. #new-seq: 2, #new-token: 900, #cached-token: 0, token usage: 0.10, #unbootstrapped-req: 0, #queue-req: 3, #transferring-req: 1");
    assert_eq!((p.running, p.queued), (None, Some(3.0)));
    let m = report("[10:00:01 TP0] Prefill batch(mixed #running-req: 20). #new-seq: 2, #new-token: 700, #cached-token: 0, cache hit rate: 15.21%, #queue-req: 4");
    assert_eq!(m.running, Some(20.0));
}

#[test]
fn hybrid_pools_read_as_pools_and_the_fullest_is_the_usage() {
    let r = report("[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 10, #full token: 100, full token usage: 0.31, mamba num: 3, mamba usage: 0.45, gen throughput (token/s): 1.00, #queue-req: 0");
    assert_eq!(r.pools.full, Some(0.31));
    assert_eq!(r.pools.mamba, Some(0.45));
    assert_eq!(r.kv_cache_usage, Some(0.45));
    // `token usage` is matched whole: `full token usage` is not it.
    let r = report("[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 10, full token usage: 0.20, token usage: 0.70, gen throughput (token/s): 1.00, #queue-req: 0");
    assert_eq!(r.kv_cache_usage, Some(0.70));
}

#[test]
fn ranks_come_from_the_prefix_and_the_engine() {
    assert_eq!(
        report("[2026-06-02 10:00:03 DP1 TP4 EP4] Decode batch, #running-req: 75, gen throughput (token/s): 2.00, #queue-req: 7").rank,
        Rank::Of(1)
    );
    let r = report("(APIServer pid=1) INFO 08-17 02:59:34 [loggers.py:310] Engine 001: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 75 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%");
    assert_eq!(r.rank, Rank::Of(1));
    let r = report("(APIServer pid=1) INFO 08-17 02:59:34 [loggers.py:310] 2 Engines Aggregated: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 155 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%");
    assert_eq!((r.rank, r.running), (Rank::Aggregated, Some(155.0)));
}

#[test]
fn vllm_stats_lines_v1_and_v0_on_every_device() {
    let r = report("(APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%");
    assert_eq!(r.running, Some(1.0));
    assert_eq!(r.queued, Some(0.0));
    assert_eq!(r.generation_tokens_per_second, Some(1.5));
    assert_eq!(r.kv_cache_usage, Some(0.01));
    let r = report("INFO 08-17 02:59:34 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 52.3 tokens/s, Running: 3 reqs, Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 4.1%, CPU KV cache usage: 0.0%.");
    assert_eq!((r.running, r.queued), (Some(3.0), Some(2.0)));
    assert!((r.kv_cache_usage.unwrap() - 0.041).abs() < 1e-12);
    for device in ["CPU", "XPU", "NPU", "TPU"] {
        let r = report(&format!("INFO 12-01 22:37:11 [loggers.py:335] Engine 000: Avg prompt throughput: 19.8 tokens/s, Avg generation throughput: 156.1 tokens/s, Running: 4 reqs, Waiting: 0 reqs, Preemptions: 3, {device} KV cache usage: 22.4%, Prefix cache hit rate: 0.0%"));
        assert!(
            (r.kv_cache_usage.unwrap() - 0.224).abs() < 1e-12,
            "{device}"
        );
        assert_eq!(r.preemptions, Some(3));
    }
}

#[test]
fn a_report_line_that_cannot_be_read_is_unreadable_not_half_read() {
    let mut log = ServerLog::default();
    for line in [
        "[2026-08-28 22:30:08 TP0] Decode batch, #running-req: lots, gen throughput (token/s): 1.00, #queue-req: 0",
        "[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 3, token usage: 1.70, gen throughput (token/s): 1.00, #queue-req: 0",
        "INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg prompt throughput: 5.7 tokens/s, Avg generation throughput: fast, Running: 1 reqs",
    ] {
        assert_eq!(read(&mut log, line), ServerLine::Unreadable, "{line}");
    }
}

#[test]
fn events_are_the_engines_own_words() {
    for (line, want) in [
        ("[2026-08-28 22:31:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7", ServerEvent::Retract),
        ("[10:00:06 TP0] Decode out of memory happened. #retracted_reqs: 2, #new_token_ratio: 0.4000 -> 0.5600", ServerEvent::Retract),
        ("WARNING 08-17 03:00:00 scheduler.py:1089] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.", ServerEvent::Preemption),
        ("[2026-08-28 22:40:00] Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.", ServerEvent::HealthCheckFailed),
        ("Traceback (most recent call last):", ServerEvent::Traceback),
        ("[2025-07-08 10:00:30 TP0] Scheduler hit an exception: Traceback (most recent call last):", ServerEvent::Traceback),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", ServerEvent::Oom),
        ("[2024-11-20 10:05:07 DP-1 TP0] Watchdog timeout (self.watchdog_timeout=300)", ServerEvent::Fatal),
        ("[2026-06-02 10:05:07 DP1 TP4 EP4] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", ServerEvent::Fatal),
        ("[2026-06-02 10:05:12] Received sigquit from a child process. It usually means the child failed.", ServerEvent::Fatal),
        ("(APIServer pid=1) ERROR 12-01 22:40:01 [core_client.py:600] Engine core proc EngineCore pid=14417 died unexpectedly, shutting down client.", ServerEvent::Fatal),
        ("(APIServer pid=7) WARNING 03-01 10:00:00 [core_client.py:700] [shutdown] MPClient: engine core exited unexpectedly; starting cleanup", ServerEvent::Fatal),
        ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.", ServerEvent::Fatal),
    ] {
        assert_eq!(event(line), Some(want), "{line}");
    }
}

#[test]
fn request_logs_quoting_a_crash_are_requests() {
    let mut log = ServerLog::default();
    for (line, kind) in [
        (r#"[2025-07-08 10:00:08] Receive: obj=GenerateReqInput(text='Fix this:\nTraceback (most recent call last):\n  File "t.py"\ntorch.OutOfMemoryError: CUDA out of memory', sampling_params={})"#, RequestLine::Request),
        (r#"Receive: obj=GenerateReqInput(rid='3f', text='Traceback (most recent call last):\nWatchdog timeout')"#, RequestLine::Request),
        (r#"[2024-11-20 10:00:08] in=GenerateReqInput(text='Traceback (most recent call last):\nCUDA out of memory')"#, RequestLine::Request),
        (r#"[2025-07-08 10:00:09] Finish: obj=GenerateReqInput(text='x'), out={'text': 'Traceback (most recent call last): EngineDeadError'}"#, RequestLine::Request),
        (r#"(APIServer pid=1) INFO 12-01 22:37:09 [logger.py:41] Received request cmpl-1: prompt: 'Fix this:\nTraceback (most recent call last):\n CUDA out of memory', params: SamplingParams(n=1)"#, RequestLine::Request),
        ("(APIServer pid=1) INFO 12-01 22:37:09 [async_llm.py:578] Added request cmpl-81da0043c997f3b8-0-82d40fa4.", RequestLine::Request),
        (r#"INFO:     127.0.0.1:53650 - "GET /health HTTP/1.1" 200 OK"#, RequestLine::Access),
        (r#"[2026-06-02 10:00:06] INFO:     127.0.0.1:40512 - "GET /health HTTP/1.1" 200 OK"#, RequestLine::Access),
        (r#"(APIServer pid=9) INFO:     127.0.0.1:47906 - "POST /v1/completions HTTP/1.1" 200 OK"#, RequestLine::Access),
    ] {
        assert_eq!(read(&mut log, line), ServerLine::Request(kind), "{line}");
    }
    // Words inside another message are not the engine's.
    assert_eq!(
        event("[2026-08-28 22:31:00 TP0] Retrying after: Watchdog timeout"),
        None
    );
    assert!(log
        .parse(b"INFO: the user wrote - \"a quote\" and more")
        .is_none());
}

#[test]
fn the_format_found_sticks() {
    let mut log = ServerLog::default();
    assert_eq!(log.format(), None);
    log.parse(b"[2026-08-28 22:30:08 TP0] Decode batch, #running-req: 1, gen throughput (token/s): 1.0, #queue-req: 0, ");
    assert_eq!(log.format(), Some(Format::Sglang));
    // Decided: a vLLM line in an SGLang log is text.
    assert!(log
        .parse(b"INFO 08-17 02:59:34 [loggers.py:310] Avg generation throughput: 1.5 tokens/s, Running: 1 reqs")
        .is_none());
    let read = ServerLog::default()
        .parse(b"(APIServer pid=1) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg generation throughput: 1.5 tokens/s, Running: 1 reqs")
        .unwrap();
    assert_eq!(read.stamp.unwrap().date, Some((8, 17)));
}

#[test]
fn v0_preemption_warnings_carry_the_engines_count() {
    let mut log = ServerLog::default();
    assert_eq!(
        read(&mut log, "WARNING 08-17 03:00:00 scheduler.py:1089] Sequence group 12 is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=51"),
        ServerLine::Preempted { cumulative: 51 }
    );
}
