//! The data-generation libraries people write runs with, read as they write: datatrove
//! (gzip JSONL), Curator (a response file per call in hashed folders) and distilabel (parquet
//! batches nine folders down). Each installed from PyPI into a virtualenv outside the
//! repository (`scripts/install-library-peers.sh`), run by its script under `tests/peers/`
//! against the real vLLM peer, with the sidecar on `--run-dir` started before the driver as a
//! user starts it. And the same libraries' recorded runs (`tests/testdata/libraries/`) read
//! against their goldens.

use crate::common::*;
use crate::vllm::{serve_args, tiny_model, venv, SERVE_ENV};
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const LIBRARIES: [&str; 3] = ["datatrove", "curator", "distilabel"];
const SAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/testdata/libraries");
const PEERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers");

/// The virtualenv `scripts/install-library-peers.sh` made for `library`.
fn library_python(library: &str) -> PathBuf {
    let var = format!("PULSE_{}_VENV", library.to_ascii_uppercase());
    let venv = std::env::var_os(&var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/var/cache/pipeline-pulse/{library}-venv")));
    let python = venv.join("bin/python");
    assert!(
        python.exists(),
        "no {library} at {}: run `bash scripts/install-library-peers.sh` (as root; a virtualenv per library, once per machine), or set {var}",
        venv.display()
    );
    python
}

/// Records on disk under `run`, by partition, as the library wrote them: complete lines of
/// its gzip JSONL and JSONL files, rows in its parquet footers. Counted by the test its own way
/// (flate2's whole-file decoder, the parquet crate's file reader), after the sidecar was read.
fn truth(library: &str, run: &Path) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    let mut files = Vec::new();
    collect(run, &mut files);
    for file in files {
        let name = file.file_name().unwrap().to_str().unwrap().to_owned();
        let partition = file
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let n = match library {
            "datatrove"
                if name.ends_with(".jsonl.gz") && file.to_str().unwrap().contains("/output/") =>
            {
                let mut text = Vec::new();
                // A stream still being written ends early: what inflated so far is what is there.
                let _ = flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
                    .read_to_end(&mut text);
                text.iter().filter(|b| **b == b'\n').count() as u64
            }
            "curator" if name.starts_with("responses_") && name.ends_with(".jsonl") => {
                let text = std::fs::read(&file).unwrap();
                text.iter().filter(|b| **b == b'\n').count() as u64
            }
            "distilabel"
                if name.ends_with(".parquet")
                    && file.to_str().unwrap().contains("/steps_outputs/") =>
            {
                use parquet::file::reader::FileReader;
                match parquet::file::reader::SerializedFileReader::new(
                    std::fs::File::open(&file).unwrap(),
                ) {
                    Ok(reader) => reader.metadata().file_metadata().num_rows() as u64,
                    Err(_) => 0,
                }
            }
            _ => continue,
        };
        *counts.entry(partition).or_default() += n;
    }
    counts
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// The figures of the records, not of the clock or the files' places.
fn output_lines(m: &Metrics, root: &Path) -> String {
    let root = format!("{}/", root.display());
    m.0.lines()
        .filter(|l| {
            l.starts_with("pulse_output_records_total")
                || l.starts_with("pulse_output_error_records_total")
                || l.starts_with("pulse_output_finish_reason_total")
                || l.starts_with("pulse_output_completion_tokens_total")
                || (l.starts_with("pulse_partition_requests_") && !l.contains("_per_second"))
                || l.starts_with("pulse_run_requests_")
        })
        .map(|l| format!("{}\n", l.replace(&root, "")))
        .collect()
}

/// Each library's recorded run (small, whole, `tests/testdata/libraries/LIB/small/run`), read
/// once: its record figures as its `outputs.golden` has them, and its log as the library's.
#[test]
fn the_recorded_library_runs_read_as_their_goldens() {
    for library in LIBRARIES {
        let dir = temp_dir();
        let run = dir.path().join("run");
        let copied = Command::new("cp")
            .args([
                "-a",
                &format!("{SAMPLES}/{library}/small/run"),
                path_str(&run),
            ])
            .status()
            .unwrap();
        assert!(copied.success());
        let m = run_once(dir.path(), &["--run-dir", path_str(&run)]);
        let got = output_lines(&m, &run);
        let golden = Path::new(SAMPLES).join(library).join("outputs.golden");
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden, &got).unwrap();
        }
        let want = std::fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e}; UPDATE_GOLDEN=1 writes it", golden.display()));
        assert_eq!(
            got,
            want,
            "{library} no longer reads as {}",
            golden.display()
        );
        // The golden holds what the test counts its own way.
        for (partition, n) in truth(library, &run) {
            let labels = format!("partition=\"{partition}\"");
            assert_eq!(
                m.get("pulse_partition_requests_completed", &labels),
                Some(n as f64),
                "{library} {partition}:\n{got}"
            );
        }
        if run.join("logs/gen.log").exists() {
            let log = format!(
                "path=\"{}\",format=\"library\"",
                path_str(&run.join("logs/gen.log"))
            );
            assert_eq!(
                m.get("pulse_log_format_info", &log),
                Some(1.0),
                "{library}: {}",
                m.0
            );
        }
    }
}

/// One figure of the sidecar's, by partition: `None` where it does not say.
fn per_partition(m: &Metrics, name: &str) -> std::collections::BTreeMap<String, f64> {
    m.0.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter_map(|l| {
            let partition = l
                .split("partition=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_owned();
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((partition, value))
        })
        .collect()
}

/// `library`'s script writing into `run`, its output in `run/logs/gen.log` as `nohup python
/// gen.py > logs/gen.log 2>&1` leaves it. The command is dropped here: its copies of the log's
/// descriptor would make the test the log's writer, and so the run's driver.
fn start_driver(library: &str, run: &Path, args: &[&str]) -> Group {
    let log = std::fs::File::create(run.join("logs/gen.log")).unwrap();
    let mut driver = Command::new(library_python(library));
    driver
        .arg(Path::new(PEERS).join(format!("{library}_gen.py")))
        .args(args)
        .args(["--out", path_str(run), "--max-tokens", "16"])
        .current_dir(run)
        .env("HF_HOME", run.join(".hf-home"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0);
    Group(dies_with_its_starter(&mut driver).spawn().unwrap())
}

/// An empty run folder `dir/name` and the sidecar on it, started before any driver, with
/// fast discovery and probes and `more` configuration.
fn watched_run(dir: &Path, name: &str, more: &str) -> (PathBuf, Sidecar) {
    let run = dir.join(name);
    std::fs::create_dir_all(run.join("logs")).unwrap();
    let config = dir.join(format!("{name}.toml"));
    let settings = "discover_interval = \"1s\"\nprobe_interval = \"500ms\"\n";
    std::fs::write(&config, format!("{settings}{more}")).unwrap();
    let sidecar = Sidecar::run(&[
        "--run-dir",
        path_str(&run),
        "--config",
        path_str(&config),
        "--gpu",
        "off",
    ]);
    (run, sidecar)
}

/// What one library's run showed while it ran.
#[derive(Default, Debug)]
struct Seen {
    polls: usize,
    with_rate: usize,
    with_eta: usize,
}

/// Runs `library`'s script into `run` against the server, the sidecar on the folder from
/// before the driver starts; checks at every poll that no partition reads above what is on
/// disk, and at the end that the records are exact and the run finished without a page.
fn drive(library: &str, server: (u16, &Path), dir: &Path, prompts: usize) -> Seen {
    let (run, sidecar) = watched_run(dir, library, "");
    let mut driver = start_driver(
        library,
        &run,
        &[
            "--base-url",
            &format!("http://127.0.0.1:{}/v1", server.0),
            "--model",
            path_str(server.1),
            "--subsets",
            "alpha,beta",
            "--prompts",
            &prompts.to_string(),
        ],
    );
    let mut seen = Seen::default();
    let started = std::time::Instant::now();
    let status = loop {
        let m = sidecar.metrics();
        let disk = truth(library, &run);
        for (partition, completed) in per_partition(&m, "pulse_partition_requests_completed") {
            let on_disk = disk.get(&partition).copied().unwrap_or(0) as f64;
            assert!(
                completed <= on_disk,
                "{library}: {partition} reads {completed} with {on_disk} on disk"
            );
        }
        seen.polls += 1;
        // The figures at each poll, for the record (docs/formats.md#libraries).
        eprintln!(
            "{library} +{:.1}s: completed {:?} on disk {:?} req/s {:?} eta {:?} finished {:?}",
            started.elapsed().as_secs_f64(),
            per_partition(&m, "pulse_partition_requests_completed"),
            disk,
            per_partition(&m, "pulse_partition_requests_per_second"),
            m.get("pulse_run_eta_seconds", ""),
            m.get("pulse_run_finished", ""),
        );
        if per_partition(&m, "pulse_partition_requests_per_second")
            .values()
            .any(|r| *r > 0.0)
        {
            seen.with_rate += 1;
        }
        if m.get("pulse_run_eta_seconds", "").is_some() {
            seen.with_eta += 1;
        }
        if let Some(status) = driver.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "{library} ran over 5 minutes:\n{}",
            std::fs::read_to_string(run.join("logs/gen.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        status.success(),
        "{library} failed ({status}):\n{}",
        std::fs::read_to_string(run.join("logs/gen.log")).unwrap_or_default()
    );
    // Within a minute of the exit the run reads finished, with every record counted.
    wait_until(
        &format!("{library}'s run finished"),
        Duration::from_secs(60),
        || sidecar.metrics().get("pulse_run_finished", "") == Some(1.0),
    );
    // distilabel writes its last batches as its driver ends: the files written last are read
    // within a few polls of the exit (a bound on the wait, not a verdict on speed).
    let disk = truth(library, &run);
    let read = || -> std::collections::BTreeMap<String, u64> {
        per_partition(&sidecar.metrics(), "pulse_partition_requests_completed")
            .into_iter()
            .map(|(p, n)| (p, n as u64))
            .collect()
    };
    wait_until(
        &format!("{library}'s last records read"),
        Duration::from_secs(30),
        || read() == disk,
    );
    assert_eq!(
        read(),
        disk,
        "{library}: the sidecar's records against the disk's"
    );
    let m = sidecar.metrics();
    assert_eq!(
        disk.values().sum::<u64>(),
        2 * prompts as u64,
        "{library} wrote every record"
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    let firing: Vec<&serde_json::Value> = status["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["firing"] == true && a["alert"] != "RunFinished")
        .collect();
    assert!(
        firing.is_empty(),
        "{library}: a healthy run paged: {firing:?}"
    );
    assert_eq!(
        m.get(
            "pulse_alert_firing",
            "alert=\"ProcessExited\",partition=\"\""
        )
        .unwrap_or(0.0),
        0.0
    );
    let said: Vec<String> = status["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| format!("{} {}: {}", a["alert"], a["firing"], a["summary"]))
        .collect();
    eprintln!("{library}: {seen:?}, records {disk:?}, alerts {said:?}");
    seen
}

/// The three libraries against one real vLLM, one after another; then datatrove again with
/// the engine stopped mid-run, paged as the server's.
#[test]
fn each_library_drives_a_real_vllm_and_reads_as_it_writes() {
    let pythons: Vec<PathBuf> = LIBRARIES.iter().map(|l| library_python(l)).collect();
    let venv = venv();
    let dir = temp_dir();
    let model = dir.path().join("tiny-model");
    tiny_model(&venv.join("bin/python"), &model);
    let port = free_port();
    // The server works and logs outside every run folder: only the drivers' connections tie it.
    let elsewhere = dir.path().join("server");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let log = std::fs::File::create(elsewhere.join("vllm.log")).unwrap();
    let mut serve = Command::new(venv.join("bin/vllm"));
    serve
        .args(serve_args(&model, port))
        .envs(SERVE_ENV)
        .current_dir(&elsewhere)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0);
    let mut server = Group(dies_with_its_starter(&mut serve).spawn().unwrap());
    wait_until(
        "vllm serve to answer /health",
        Duration::from_secs(300),
        || {
            if let Ok(Some(status)) = server.0.try_wait() {
                panic!(
                    "vllm serve exited ({status}):\n{}",
                    std::fs::read_to_string(elsewhere.join("vllm.log")).unwrap_or_default()
                );
            }
            try_http(([127, 0, 0, 1], port).into(), "GET", "/health", "")
                .is_some_and(|(status, _)| status == 200)
        },
    );
    assert_eq!(pythons.len(), 3);
    for library in LIBRARIES {
        let seen = drive(library, (port, &model), dir.path(), 60);
        assert!(
            seen.with_rate > 0,
            "{library}: a rate while it ran: {seen:?}"
        );
        // A plan is visible where the library keeps one: the prompts datatrove reads, the
        // requests Curator writes first. distilabel shows none (docs/formats.md#distilabel).
        if library != "distilabel" {
            assert!(
                seen.with_eta > 0,
                "{library}: an ETA while it ran: {seen:?}"
            );
        }
    }
    stopped_engine(port, &model, dir.path(), server.0.id());
}

/// datatrove again, with vLLM's EngineCore stopped once records are being written: the run
/// waits on its server, so the page is the server's (`ServerHung`), whatever the driver logs.
fn stopped_engine(port: u16, model: &Path, dir: &Path, server_pid: u32) {
    let (run, sidecar) = watched_run(
        dir,
        "datatrove-hung",
        "[rules.ServerHung]\nthreshold = \"5s\"\n",
    );
    let _driver = start_driver(
        "datatrove",
        &run,
        &[
            "--base-url",
            &format!("http://127.0.0.1:{port}/v1"),
            "--model",
            path_str(model),
            "--subsets",
            "alpha",
            "--prompts",
            "2000",
        ],
    );
    wait_until(
        "the server tied to the run",
        Duration::from_secs(120),
        || {
            get_json(sidecar.addr, "/status").is_some_and(|s| {
                s["discovered"]["server"]["pid"] == server_pid && s["server"]["up"] == true
            })
        },
    );
    let core = child_titled(server_pid, "EngineCore").expect("vllm serve has an EngineCore child");
    signal(core, libc::SIGSTOP);
    let hung = "alert=\"ServerHung\",partition=\"\"";
    let paged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(
            "ServerHung for the stopped engine",
            Duration::from_secs(90),
            || sidecar.metrics().get("pulse_alert_firing", hung) == Some(1.0),
        )
    }));
    signal(core, libc::SIGCONT);
    if let Err(e) = paged {
        let status = get_json(sidecar.addr, "/status").unwrap_or_default();
        panic!(
            "{e:?}: {}",
            serde_json::to_string_pretty(&status["alerts"]).unwrap()
        );
    }
    let status = get_json(sidecar.addr, "/status").unwrap();
    let stalled_idle = status["alerts"].as_array().unwrap().iter().any(|a| {
        a["firing"] == true
            && a["summary"]
                .as_str()
                .is_some_and(|s| s.contains("driver idle"))
    });
    assert!(!stalled_idle, "{}", status["alerts"]);
}
