//! A scripted HTTP receiver for webhooks and heartbeats: it answers requests in the order of a
//! script (a status, a status with `Retry-After`, or a hang), then 200, and keeps what came.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub enum Reply {
    Status(u16),
    /// A status with `Retry-After: SECONDS`.
    RetryAfter(u16, u32),
    /// Read the request, then answer nothing for this long.
    Hang(Duration),
}

#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// What it was answered (0 for a hang).
    pub answered: u16,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub struct Receiver {
    pub port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// Listens on a free loopback port until the test ends.
    pub fn start(script: &[Reply]) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let script = Arc::new(Mutex::new(script.iter().copied().collect::<VecDeque<_>>()));
        let received = Arc::new(Mutex::new(Vec::new()));
        let (s, r) = (script, received.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (s, r) = (s.clone(), r.clone());
                std::thread::spawn(move || answer(stream, &s, &r));
            }
        });
        Receiver { port, received }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (at most `limit`) until `enough` accepts what came.
    pub fn wait(
        &self,
        what: &str,
        limit: Duration,
        enough: impl Fn(&[Received]) -> bool,
    ) -> Vec<Received> {
        super::poll(what, limit, || {
            let got = self.received();
            if enough(&got) {
                Ok(got)
            } else {
                Err(format!("{got:#?}"))
            }
        })
    }
}

fn answer(stream: TcpStream, script: &Mutex<VecDeque<Reply>>, received: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_owned();
    let path = parts.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((n, v)) = h.trim_end().split_once(':') {
            headers.push((n.trim().to_owned(), v.trim().to_owned()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let reply = script
        .lock()
        .unwrap()
        .pop_front()
        .unwrap_or(Reply::Status(200));
    let (status, extra) = match reply {
        Reply::Status(s) => (s, String::new()),
        Reply::RetryAfter(s, after) => (s, format!("Retry-After: {after}\r\n")),
        Reply::Hang(d) => {
            received.lock().unwrap().push(Received {
                method,
                path,
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
                answered: 0,
                at: Instant::now(),
            });
            std::thread::sleep(d);
            return;
        }
    };
    received.lock().unwrap().push(Received {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
        answered: status,
        at: Instant::now(),
    });
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\n{extra}Content-Length: 2\r\nConnection: close\r\n\r\nok"
    );
}
