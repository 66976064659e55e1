//! The demo's simulated SGLang server: a process of its own whose command line reads as an
//! SGLang launch (so discovery finds it as it would a real one), serving `/health` and
//! `/metrics` with SGLang's names on a loopback port, and writing SGLang decode lines to its
//! stdout, which the pipeline points at a log file in the demo folder.
//!
//! The pipeline drives it through its stdin, one line per step: `RUNNING QUEUED TOK_PER_S`.
//! During the stall the pipeline sends requests still running at 0 tok/s: the server is
//! wedged, as a real one with a stuck collective is. End of stdin ends the server.

use crate::lock::Locked;
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, Default)]
struct State {
    running: f64,
    queued: f64,
    tokens_per_second: f64,
}

/// The variable that tells the binary it is the demo's server: its command line reads as a real
/// SGLang's (`python3 -m sglang.launch_server …`), for discovery to find it as one.
pub const ENV: &str = "PULSE_DEMO_SERVER";

/// Runs the server; `args` are its command line after the program (`--host`, `--port`).
pub fn main(args: &[String]) -> std::io::Result<()> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let host = value("--host").unwrap_or_else(|| "127.0.0.1".into());
    let port = value("--port").unwrap_or_else(|| "30000".into());
    let listener = TcpListener::bind(format!("{host}:{port}"))?;
    let state = Arc::new(Mutex::new(State::default()));
    let shared = state.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let state = *shared.locked();
            let _ = answer(stream, state);
        }
    });
    let mut out = std::io::stdout().lock();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let figures: Vec<f64> = line
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        let [running, queued, tokens_per_second] = figures[..] else {
            continue;
        };
        *state.locked() = State {
            running,
            queued,
            tokens_per_second,
        };
        // A wedged server writes nothing; an idle one neither.
        if tokens_per_second > 0.0 {
            let at = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            let at = at.trim_end_matches('Z').replace('T', " ");
            writeln!(
                out,
                "[{at} TP0] Decode batch, #running-req: {running:.0}, #token: {:.0}, token usage: {:.2}, cuda graph: True, gen throughput (token/s): {tokens_per_second:.2}, #queue-req: {queued:.0}, ",
                running * 600.0,
                usage(running)
            )?;
            out.flush()?;
        }
    }
    Ok(())
}

fn usage(running: f64) -> f64 {
    (running / 400.0).min(0.95)
}

fn answer(mut stream: TcpStream, state: State) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("");
    let (status, body) = match path {
        "/health" => ("200 OK", String::new()),
        "/metrics" => ("200 OK", exposition(state)),
        _ => ("404 Not Found", "not found\n".to_owned()),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn exposition(s: State) -> String {
    let labels = r#"{model_name="/shared/kimi-k2.5-int4"}"#;
    [
        (
            "sglang:num_running_reqs",
            "The number of running requests.",
            s.running,
        ),
        (
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue.",
            s.queued,
        ),
        (
            "sglang:gen_throughput",
            "The generation throughput (token/s).",
            s.tokens_per_second,
        ),
        ("sglang:token_usage", "The token usage.", usage(s.running)),
    ]
    .iter()
    .map(|(name, help, value)| {
        format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name}{labels} {value}\n")
    })
    .collect()
}
