//! The HTTP habits of a production exporter: gzip when asked, HEAD as GET without the body,
//! nothing cached, a bounded number of connections, a GET body never buffered.

use crate::common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The raw answer to a raw request, read to the end (the server closes after it).
fn raw(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    answer
}

fn split(answer: &[u8]) -> (String, Vec<u8>) {
    let end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    (
        String::from_utf8_lossy(&answer[..end]).into_owned(),
        answer[end + 4..].to_vec(),
    )
}

/// The head's lines, without the date (it moves between two requests).
fn head_lines(head: &str) -> Vec<String> {
    head.lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_owned)
        .collect()
}

fn series(exposition: &str) -> Vec<String> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.rsplit_once(' ').map_or(l, |(s, _)| s).to_owned())
        .collect()
}

#[test]
fn metrics_and_status_are_gzipped_when_asked_and_nothing_is_cached() {
    let sidecar = Sidecar::run(&["--gpu", "simulated"]);
    sidecar.wait_metrics("the GPUs", |m| m.get("pulse_gpus", "") == Some(8.0));
    for path in ["/metrics", "/status"] {
        let ask = |encoding: &str| {
            raw(
                sidecar.addr,
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {encoding}\r\nConnection: close\r\n\r\n").as_bytes(),
            )
        };
        let (head, body) = split(&ask("gzip, deflate"));
        let head = head.to_ascii_lowercase();
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert!(head.contains("cache-control: no-store"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let mut plain = String::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_string(&mut plain)
            .expect("a gzip stream");
        let (identity_head, identity) = split(&ask("identity"));
        assert!(!identity_head
            .to_ascii_lowercase()
            .contains("content-encoding"));
        let identity = String::from_utf8(identity).unwrap();
        if path == "/metrics" {
            assert_eq!(
                series(&plain),
                series(&identity),
                "the same series either way"
            );
        } else {
            let a: serde_json::Value = serde_json::from_str(&plain).unwrap();
            let b: serde_json::Value = serde_json::from_str(&identity).unwrap();
            assert_eq!(a["partitions"], b["partitions"]);
            assert_eq!(a["host"], b["host"]);
        }
        let (q0, _) = split(&ask("gzip;q=0, identity"));
        assert!(
            !q0.to_ascii_lowercase().contains("content-encoding"),
            "q=0 refuses gzip: {q0}"
        );
    }
    // A real client agrees: curl asks for gzip and decodes it.
    let curl = require_tool("curl", "curl");
    let out = std::process::Command::new(curl)
        .args([
            "-sf",
            "--compressed",
            &format!("http://{}/metrics", sidecar.addr),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("pulse_gpus 8"));
}

#[test]
fn head_answers_what_get_does_without_the_body() {
    let sidecar = Sidecar::run(&["--gpu", "off"]);
    for (path, encoding) in [
        ("/", "identity"),
        ("/-/healthy", "identity"),
        ("/metrics", "gzip"),
    ] {
        let ask = |method: &str| {
            raw(
                sidecar.addr,
                format!("{method} {path} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: {encoding}\r\nConnection: close\r\n\r\n").as_bytes(),
            )
        };
        let (get_head, get_body) = split(&ask("GET"));
        let head = ask("HEAD");
        let (head_head, head_body) = split(&head);
        assert!(head_body.is_empty(), "HEAD has no body");
        if path != "/metrics" {
            // A fixed body: the heads are the same, byte for byte but the date.
            assert_eq!(head_lines(&head_head), head_lines(&get_head), "{path}");
            assert!(get_head.contains(&format!("content-length: {}", get_body.len())));
        } else {
            // The exposition moves between two scrapes; its length may too.
            let names = |h: &str| -> Vec<String> {
                head_lines(h)
                    .iter()
                    .filter(|l| !l.starts_with("content-length"))
                    .cloned()
                    .collect()
            };
            assert_eq!(names(&head_head), names(&get_head));
        }
    }
}

#[test]
fn connections_waiting_for_their_request_hold_no_place_and_are_cut_at_the_header_timeout() {
    let sidecar = Sidecar::run(&[
        "--gpu",
        "off",
        "--max-connections",
        "64",
        "--header-read-timeout",
        "2s",
    ]);
    // Many more clients than places: half send nothing, half half a request head.
    let mut held = slow_clients(sidecar.addr, 200, false);
    // A scrape still gets through, at once.
    for _ in 0..5 {
        let answer = raw(sidecar.addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
    }
    // The slow heads are cut at the header timeout.
    let slow = &mut held[1];
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || rest.starts_with("HTTP/1.1 408"),
        "{rest:?}"
    );
}

#[test]
fn a_body_sent_with_get_is_not_buffered() {
    let sidecar = Sidecar::run(&["--gpu", "off"]);
    let mut stream = TcpStream::connect(sidecar.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(b"GET /-/healthy HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n")
        .unwrap();
    let _ = stream.write_all(&vec![b'x'; 1 << 20]);
    let mut answer = [0u8; 64];
    let n = stream.read(&mut answer).unwrap();
    assert!(
        answer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer[..n])
    );
}

#[test]
fn every_listen_address_is_served() {
    let sidecar = Sidecar::start(&[
        "run",
        "--listen",
        "127.0.0.1:0",
        "--listen",
        "127.0.0.2:0",
        "--gpu",
        "off",
    ]);
    let line = sidecar.wait_log("listening on http://127.0.0.2:");
    let second: std::net::SocketAddr = line
        .split("listening on http://")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for addr in [sidecar.addr, second] {
        assert_eq!(
            try_http(addr, "GET", "/-/healthy", "").map(|(c, _)| c),
            Some(200),
            "{addr}"
        );
    }
    let out = std::process::Command::new(BIN)
        .args([
            "run",
            "--once",
            "--listen",
            "127.0.0.1:9721",
            "--listen",
            "127.0.0.1:9721",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`listen[1]`: 127.0.0.1:9721 is given twice")
    );
}
