//! The node's own faults, real ones: a FIFO where a log or an output file should be, and a
//! FUSE file system whose read hangs mid-file as a hung NFS or Lustre mount does. The sidecar
//! keeps answering, says which path hangs, loses and doubles nothing once it answers, and
//! stops on SIGTERM with its state saved.

use crate::common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers");

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path_str(path)).unwrap();
    // SAFETY: a plain syscall with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// Answers, with a whole answer, while a read hangs: what a supervisor's liveness probe and a
/// scrape need. A handler that waited on the hung read would never answer (the mount hangs
/// until the test releases it), so the request's own bound (`try_http`'s read timeout) is
/// what fails it, whatever the machine's speed; no verdict here is a duration. A scrape must
/// be a whole exposition, with the collectors' gauges in it.
fn answers(sidecar: &Sidecar, path: &str) -> bool {
    try_http(sidecar.addr, "GET", path, "").is_some_and(|(status, body)| {
        status == 200 && (path != "/metrics" || body.contains("pulse_collector_up{"))
    })
}

#[test]
fn a_fifo_as_the_log_is_refused_and_the_sidecar_keeps_answering() {
    let dir = temp_dir();
    let log = dir.path().join("run.log");
    mkfifo(&log);
    let sidecar = Sidecar::run(&["--log", path_str(&log)]);
    let line = sidecar.wait_log("not a regular file");
    assert!(
        line.contains(path_str(&log)) && line.contains("a FIFO"),
        "{line}"
    );
    let labels = format!("path=\"{}\"", path_str(&log));
    let m = sidecar.wait_metrics("the log collector down", |m| {
        m.get("pulse_collector_up", "collector=\"log\"") == Some(0.0)
    });
    assert_eq!(m.get("pulse_tail_refused_total", &labels), Some(1.0));
    for _ in 0..5 {
        assert!(answers(&sidecar, "/-/healthy"), "/-/healthy");
        assert!(answers(&sidecar, "/metrics"), "/metrics");
    }
    // Replaced by a regular file, it is read.
    std::fs::remove_file(&log).unwrap();
    std::fs::write(&log, "Processing: B1 (SHORT)\nB1: 100 prompts\n  10/100 (0 err) 1.0 req/s avg_comp=20tok ETA=90s\n").unwrap();
    sidecar.wait_metrics("the regular log", |m| {
        m.partition("pulse_partition_requests_completed", "B1") == Some(10.0)
            && m.get("pulse_collector_up", "collector=\"log\"") == Some(1.0)
    });
}

#[test]
fn a_fifo_among_the_outputs_holds_back_no_other_file() {
    let dir = temp_dir();
    let outputs = dir.path().join("outputs");
    for partition in ["B1", "B2"] {
        std::fs::create_dir_all(outputs.join(partition)).unwrap();
    }
    let b1 = outputs.join("B1/responses.jsonl");
    let record = "{\"id\": \"x\", \"content\": \"hello\"}\n";
    std::fs::write(&b1, record.repeat(35)).unwrap();
    let fifo = outputs.join("B2/responses.jsonl");
    mkfifo(&fifo);
    // A writer holds the FIFO open and never writes: opening it to read would not block, but
    // reading it would, forever.
    let _writer = Killed(
        Command::new("sh")
            .arg("-c")
            .arg(format!("exec 3>'{}'; sleep 600", path_str(&fifo)))
            .spawn()
            .unwrap(),
    );
    let glob = format!("{}/*/responses.jsonl", path_str(&outputs));
    let sidecar = Sidecar::run(&["--outputs", &glob]);
    sidecar.wait_metrics("B1's records", |m| {
        m.partition("pulse_output_records_total", "B1") == Some(35.0)
    });
    append(&b1, &record.repeat(15));
    sidecar.wait_metrics("B1 counted on", |m| {
        m.partition("pulse_output_records_total", "B1") == Some(50.0)
    });
    let line = sidecar.wait_log("not a regular file");
    assert!(line.contains(path_str(&fifo)), "{line}");
    sidecar.wait_metrics("the outputs collector down", |m| {
        m.get("pulse_collector_up", "collector=\"outputs\"") == Some(0.0)
            && m.get("pulse_output_files_refused", "") == Some(1.0)
    });
}

/// A FUSE mount serving `backing`'s file, whose reads hang from byte `block_at` on until
/// `release()`, and whose folder listings hang while `hang_dirs(true)` holds.
struct HungMount {
    fs: Child,
    mountpoint: PathBuf,
    release: PathBuf,
    hang_dirs: PathBuf,
}

impl HungMount {
    fn mount(dir: &Path, backing: &Path, block_at: usize) -> HungMount {
        assert!(
            Path::new("/dev/fuse").exists(),
            "no /dev/fuse: the hung file system test needs FUSE (apt-get install fuse3)"
        );
        let python = require_tool("/usr/bin/python3", "python3");
        let have = Command::new(&python)
            .args(["-c", "import fusepy"])
            .status()
            .unwrap();
        assert!(
            have.success(),
            "the hung file system test needs fusepy: apt-get install python3-fusepy fuse3"
        );
        let mountpoint = dir.join("mnt");
        std::fs::create_dir_all(&mountpoint).unwrap();
        let release = dir.join("release");
        let hang_dirs = dir.join("hang-dirs");
        let fs = Command::new(python)
            .arg(Path::new(PEERS).join("hung_fs.py"))
            .arg(backing)
            .arg(&mountpoint)
            .arg(block_at.to_string())
            .arg(&release)
            .arg(&hang_dirs)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let served = mountpoint.join(backing.file_name().unwrap());
        wait_for("the FUSE file system mounted", || served.exists());
        HungMount {
            fs,
            mountpoint,
            release,
            hang_dirs,
        }
    }

    fn release(&self) {
        std::fs::write(&self.release, "").unwrap();
    }

    fn hang_dirs(&self, hang: bool) {
        if hang {
            std::fs::write(&self.hang_dirs, "").unwrap();
        } else {
            std::fs::remove_file(&self.hang_dirs).unwrap();
        }
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        self.release();
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(&self.mountpoint)
            .status();
        let _ = self.fs.kill();
        let _ = self.fs.wait();
    }
}

/// A run_inference log: a header, then progress lines 1..=n, one per line.
fn progress(from: u32, to: u32) -> String {
    (from..=to)
        .map(|i| format!("  {i}/1000 (0 err) 1.0 req/s avg_comp=20tok ETA=900s\n"))
        .collect()
}

const HEADER: &str = "Processing: B1 (SHORT)\nB1: 1000 prompts\n";

#[test]
fn a_read_that_hangs_mid_file_holds_back_nothing_and_loses_nothing() {
    let dir = temp_dir();
    let backing = dir.path().join("run.log");
    let first = format!("{HEADER}{}", progress(1, 300));
    std::fs::write(&backing, format!("{first}{}", progress(301, 600))).unwrap();
    let mount = HungMount::mount(dir.path(), &backing, first.len());
    let log = mount.mountpoint.join("run.log");
    let other = dir.path().join("other.log");
    std::fs::write(&other, "Processing: B2 (SHORT)\nB2: 10 prompts\n").unwrap();
    let sidecar = Sidecar::run(&["--log", path_str(&log), "--log", path_str(&other)]);
    sidecar.wait_metrics("the part before the hang", |m| {
        m.partition("pulse_partition_requests_completed", "B1") == Some(300.0)
    });
    // The other log goes on while this one hangs.
    append(&other, "  5/10 (0 err) 1.0 req/s avg_comp=20tok ETA=5s\n");
    sidecar.wait_metrics("the other log", |m| {
        m.partition("pulse_partition_requests_completed", "B2") == Some(5.0)
    });
    wait_until("the hang reported", Duration::from_secs(30), || {
        assert!(
            answers(&sidecar, "/-/healthy"),
            "/-/healthy while a read hangs"
        );
        assert!(answers(&sidecar, "/metrics"), "/metrics while a read hangs");
        sidecar
            .metrics()
            .get("pulse_collector_up", "collector=\"log\"")
            == Some(0.0)
    });
    let line = sidecar.wait_log("does not answer");
    assert!(line.contains(path_str(&log)), "{line}");
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["hung_files"].get(path_str(&log)).is_some(),
        "{}",
        status["hung_files"]
    );
    mount.release();
    let m = sidecar.wait_metrics("the rest, once it answers", |m| {
        m.partition("pulse_partition_requests_completed", "B1") == Some(600.0)
            && m.get("pulse_collector_up", "collector=\"log\"") == Some(1.0)
    });
    // Every line once: the header's two and 600 progress lines.
    assert_eq!(
        m.get(
            "pulse_log_lines_total",
            &format!("path=\"{}\"", path_str(&log))
        ),
        Some(602.0)
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert_eq!(status["hung_files"], serde_json::json!({}));
}

#[test]
fn an_output_file_whose_read_hangs_is_named_holds_back_no_other_and_is_counted_once_it_answers() {
    let dir = temp_dir();
    let backing = dir.path().join("responses.jsonl");
    let record = "{\"id\": \"x\", \"content\": \"hello\"}\n";
    let first = record.repeat(1000);
    std::fs::write(&backing, format!("{first}{}", record.repeat(500))).unwrap();
    let mount = HungMount::mount(dir.path(), &backing, first.len());
    let served = mount.mountpoint.join("responses.jsonl");
    // A second file on a file system that answers: the hung one must not hold it back.
    let other = dir.path().join("other/responses.jsonl");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(&other, record.repeat(10)).unwrap();
    let sidecar = Sidecar::run(&[
        "--outputs",
        path_str(&served),
        "--outputs",
        path_str(&other),
    ]);
    sidecar.wait_metrics("the records before the hang", |m| {
        m.partition("pulse_output_records_total", "mnt") == Some(1000.0)
            && m.partition("pulse_output_records_total", "other") == Some(10.0)
    });
    // Up to its first read a collector is 0 anyway: the path named is what says it hangs.
    wait_until("the hang reported", Duration::from_secs(30), || {
        assert!(answers(&sidecar, "/metrics"), "/metrics while a read hangs");
        get_json(sidecar.addr, "/status")
            .is_some_and(|s| s["hung_files"].get(path_str(&served)).is_some())
    });
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_collector_up", "collector=\"outputs\""),
        Some(0.0)
    );
    append(&other, &record.repeat(5));
    sidecar.wait_metrics("the other file counted on while the first hangs", |m| {
        m.partition("pulse_output_records_total", "other") == Some(15.0)
    });
    let line = sidecar.wait_log("reading the other output files on a new thread");
    assert!(
        line.contains("WARN") && line.contains(path_str(&served)),
        "{line}"
    );
    mount.release();
    sidecar.wait_metrics("every record once it answers", |m| {
        m.partition("pulse_output_records_total", "mnt") == Some(1500.0)
            && m.partition("pulse_output_records_total", "other") == Some(15.0)
            && m.get("pulse_collector_up", "collector=\"outputs\"") == Some(1.0)
    });
}

#[test]
fn a_glob_over_a_hung_folder_holds_back_no_other_file_and_is_named() {
    let dir = temp_dir();
    let backing = dir.path().join("responses.jsonl");
    let record = "{\"id\": \"x\", \"content\": \"hello\"}\n";
    std::fs::write(&backing, record.repeat(10)).unwrap();
    let mount = HungMount::mount(dir.path(), &backing, usize::MAX);
    let glob = format!("{}/*.jsonl", path_str(&mount.mountpoint));
    let other = dir.path().join("other/responses.jsonl");
    std::fs::create_dir_all(other.parent().unwrap()).unwrap();
    std::fs::write(&other, record.repeat(10)).unwrap();
    let sidecar = Sidecar::run(&["--outputs", &glob, "--outputs", path_str(&other)]);
    sidecar.wait_metrics("both files counted", |m| {
        m.partition("pulse_output_records_total", "mnt") == Some(10.0)
            && m.partition("pulse_output_records_total", "other") == Some(10.0)
    });
    mount.hang_dirs(true);
    wait_until("the glob named hung", Duration::from_secs(30), || {
        assert!(answers(&sidecar, "/metrics"), "/metrics while a glob hangs");
        get_json(sidecar.addr, "/status").is_some_and(|s| s["hung_files"].get(&glob).is_some())
    });
    append(&other, &record.repeat(5));
    sidecar.wait_metrics("the other file counted on", |m| {
        m.partition("pulse_output_records_total", "other") == Some(15.0)
            && m.get("pulse_collector_up", "collector=\"outputs\"") == Some(0.0)
    });
    mount.hang_dirs(false);
    wait_until("the glob answering again", Duration::from_secs(30), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| s["hung_files"] == serde_json::json!({}))
    });
    sidecar.wait_metrics("the outputs collector up again", |m| {
        m.get("pulse_collector_up", "collector=\"outputs\"") == Some(1.0)
    });
}

#[test]
fn a_discovery_scan_over_a_hung_folder_is_named_and_the_sidecar_keeps_serving() {
    let dir = temp_dir();
    let backing = dir.path().join("responses.jsonl");
    std::fs::write(&backing, "{\"id\": \"x\", \"content\": \"hello\"}\n").unwrap();
    let mount = HungMount::mount(dir.path(), &backing, usize::MAX);
    let run_dir = path_str(&mount.mountpoint).to_owned();
    let sidecar = Sidecar::run(&["--run-dir", &run_dir, "--discover-interval", "1s"]);
    sidecar.wait_metrics("the discovered output counted", |m| {
        m.partition("pulse_output_records_total", "mnt") == Some(1.0)
    });
    mount.hang_dirs(true);
    wait_until("the folder named hung", Duration::from_secs(30), || {
        assert!(answers(&sidecar, "/metrics"), "/metrics while a scan hangs");
        assert!(
            answers(&sidecar, "/-/healthy"),
            "/-/healthy while a scan hangs"
        );
        get_json(sidecar.addr, "/status").is_some_and(|s| s["hung_files"].get(&run_dir).is_some())
    });
    let line = sidecar.wait_log("discovery's scan of");
    assert!(line.contains(&run_dir) && line.contains("WARN"), "{line}");
    mount.hang_dirs(false);
    sidecar.wait_log("discovery's scan returned again");
    wait_until("the folder no longer hung", Duration::from_secs(30), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| s["hung_files"].get(&run_dir).is_none())
    });
}

#[test]
fn sigterm_ends_it_while_a_read_hangs_with_the_state_saved() {
    let dir = temp_dir();
    let backing = dir.path().join("run.log");
    let first = format!("{HEADER}{}", progress(1, 100));
    std::fs::write(&backing, format!("{first}{}", progress(101, 200))).unwrap();
    let mount = HungMount::mount(dir.path(), &backing, first.len());
    let log = mount.mountpoint.join("run.log");
    let state = dir.path().join("state");
    let mut sidecar = Sidecar::run(&["--log", path_str(&log), "--state-dir", path_str(&state)]);
    sidecar.wait_metrics("the part before the hang", |m| {
        m.partition("pulse_partition_requests_completed", "B1") == Some(100.0)
    });
    // A sidecar that waited for the hung read would never exit (the mount hangs until the
    // test releases it): `terminate`'s bounded wait fails it, and the exit must be clean.
    let status = sidecar.terminate();
    assert!(status.success(), "{status}");
    let snapshot = read_json(&state.join("snapshot.json")).expect("a snapshot");
    let saved = &snapshot["logs"][0];
    assert_eq!(saved["path"], path_str(&log));
    assert_eq!(
        saved["position"]["offset"].as_u64(),
        Some(first.len() as u64),
        "the position of the last read that completed: {saved}"
    );
    drop(mount);
}
