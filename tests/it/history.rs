//! The run's history: restored from the state directory, served by `/api/history`, drawn by
//! the status page in a real browser.

use crate::common::*;
use serde_json::{json, Value};

fn sidecar_with_history(dir: &std::path::Path) -> (Sidecar, u32) {
    let state = dir.join("state");
    let start = hour_of_history(&state);
    let log = dir.join("run.log");
    std::fs::write(
        &log,
        "Processing: A\nA: 1000 prompts\n  595/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=7m\n",
    )
    .unwrap();
    let sidecar = Sidecar::run(&[
        "--log",
        path_str(&log),
        "--gpu",
        "simulated",
        "--state-dir",
        path_str(&state),
    ]);
    wait_for("readiness", || sidecar.get("/-/ready").status == 200);
    (sidecar, start)
}

/// Two busy loops, one per core of these machines: the sidecar's threads then start in any
/// order, which is what put a backlog's point at the start time once.
struct CpuHog {
    _loops: Vec<Killed>,
}

impl CpuHog {
    fn start() -> CpuHog {
        CpuHog {
            _loops: (0..2)
                .map(|_| {
                    Killed(
                        std::process::Command::new("sh")
                            .args(["-c", "while :; do :; done"])
                            .spawn()
                            .unwrap(),
                    )
                })
                .collect(),
        }
    }
}

#[test]
fn a_backlog_lands_at_its_logs_mtime_on_a_busy_machine() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    std::fs::write(
        &log,
        "Processing: A\nA: 1000 prompts\n  400/1000 (0 err) 1.0 req/s avg_comp=200tok ETA=10m\n",
    )
    .unwrap();
    set_mtime(&log, 3600);
    let written = unix_now() - 3600;
    let _hog = CpuHog::start();
    for _ in 0..3 {
        let sidecar = Sidecar::run(&["--log", path_str(&log), "--gpu", "off"]);
        wait_for("readiness", || sidecar.get("/-/ready").status == 200);
        let mut first = None;
        wait_for("the first history point", || {
            first = history(sidecar.addr, "")["partitions"]["A"]["completed"]
                .as_array()
                .and_then(|points| points.first().cloned());
            first.is_some()
        });
        let first = first.unwrap();
        let at = first[0].as_u64().unwrap() as i64;
        // On the resolution's grid, within one step of the mtime: not at the start time.
        assert!(
            (at - written as i64).abs() <= 30,
            "the backlog's point at {at}, its log written at {written}: {first}"
        );
        assert_eq!(first[1], 400.0);
    }
}

fn history(addr: std::net::SocketAddr, query: &str) -> Value {
    get_json(addr, &format!("/api/history{query}")).expect("/api/history answers JSON")
}

#[test]
fn the_history_is_restored_and_served_with_since_and_step() {
    let dir = temp_dir();
    let (sidecar, start) = sidecar_with_history(dir.path());
    let h = history(sidecar.addr, "");
    assert_eq!(h["resolution"], 30.0);
    assert_eq!(h["span"], 172800.0);
    let completed = h["run"]["completed"].as_array().unwrap();
    // The hour restored, and the points the sidecar sampled since it started (a gap between).
    assert!(completed.len() >= 120, "{}", completed.len());
    assert_eq!(completed[0], json!([start, 0.0]));
    assert_eq!(completed[119], json!([start + 119 * 30, 595.0]));
    assert_eq!(h["gpus"].as_object().unwrap().len(), 8);
    assert_eq!(h["marks"].as_array().unwrap().len(), 2);
    // since: only later points; step: one per step at most, the latest of each.
    let later = history(sidecar.addr, &format!("?since={}", start + 1800));
    let later = later["partitions"]["A"]["completed"].as_array().unwrap();
    assert_eq!(later[0], json!([start + 1800, 300.0]));
    assert_eq!(
        history(sidecar.addr, &format!("?since={}", start + 1801))["marks"]
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let stepped = history(sidecar.addr, &format!("?since={start}&step=600"));
    let stepped = stepped["partitions"]["A"]["completed"].as_array().unwrap();
    assert!(stepped.len() <= 8, "{stepped:?}");
    assert!(stepped
        .windows(2)
        .all(|w| w[1][0].as_u64().unwrap() - w[0][0].as_u64().unwrap() >= 30));
    // Gzip and HEAD, as for /status.
    let head = http_get(sidecar.addr, "HEAD", "/api/history", None);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("application/json"));
}

/// The numbers of an SVG path's `d`: its (x, y) pairs.
fn path_points(d: &str) -> Vec<(f64, f64)> {
    d.split(['M', 'L'])
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (x, y) = p.trim().split_once(',').unwrap();
            (x.parse().unwrap(), y.parse().unwrap())
        })
        .collect()
}

/// The `d` of the element that `marker` (e.g. `class="line"`) opens.
fn d_of<'a>(dom: &'a str, marker: &str) -> &'a str {
    let at = dom
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {dom}"));
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>').unwrap()];
    tag.split(" d=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
}

#[test]
fn the_page_draws_the_served_history_in_a_real_browser() {
    let dir = temp_dir();
    let (sidecar, _) = sidecar_with_history(dir.path());
    let url = format!("http://{}/", sidecar.addr);
    let before = history(sidecar.addr, "")["run"]["completed"]
        .as_array()
        .unwrap()
        .len();
    let out = chromium(&["--dump-dom"], &url, &dir.path().join("profile"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8_lossy(&out.stdout);
    let after = history(sidecar.addr, "")["run"]["completed"]
        .as_array()
        .unwrap()
        .len();
    // The progress line has a vertex per served point, left to right, rising.
    let progress = path_points(d_of(&dom, "class=\"line\""));
    assert!(
        (before..=after).contains(&progress.len()),
        "{} vertices for {before}..{after} points",
        progress.len()
    );
    assert!(progress.windows(2).all(|w| w[1].0 >= w[0].0), "x grows");
    assert!(progress[119].1 < progress[0].1, "the line rises (y falls)");
    // The ETA projection: a dashed segment from the last point onwards.
    let eta = path_points(d_of(&dom, "class=\"eta\""));
    assert_eq!(eta.len(), 2, "{eta:?}");
    assert!(eta[1].0 > eta[0].0);
    // tok/s for A, the GPU strip (a cell per point per GPU) and the stall's shading.
    let tps = path_points(d_of(&dom, "data-partition=\"A\" fill=\"none\""));
    assert!(tps.len() >= 120, "{}", tps.len());
    let cells = dom.matches("<title>GPU ").count();
    assert!(cells >= 8 * 120, "{cells} cells");
    assert!(
        dom.contains("fill=\"rgba(176,0,32,0.12)\""),
        "the alert is shaded"
    );
    // A picture for people (not compared: fonts differ between machines).
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("history-page.png");
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,1500",
            "--hide-scrollbars",
        ],
        &url,
        &dir.path().join("profile2"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::fs::metadata(&shot).unwrap().len() > 10_000);
}
