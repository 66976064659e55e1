//! A real SLURM (Debian's slurm-wlm 22.05 and munge, started by `tests/slurm/cluster.sh` in
//! each test's own folder) running the run's driver as a batch job, and the sidecar beside it
//! as a node service would run: it reads the job from the driver's environment, or the
//! prolog's file, and asks the controller about that job alone (`scontrol show job`). Time
//! limits of 2 or 3 minutes, the shortest SLURM enforces to the minute; the controller checks
//! them every 30 s. `sdiag` counts what the sidecar asked the controller.

use crate::common::receiver::Receiver;
use crate::common::repo::repo_file;
use crate::common::slurm::Cluster;
use crate::common::*;
use std::path::Path;
use std::time::Duration;

const DRIVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/slow_driver.py");

/// The batch script: the driver at `rate` requests a second for `total`, its log in `run`.
fn job_script(log: &Path, total: u32, rate: f64) -> String {
    format!(
        "#!/bin/bash\nexec /usr/bin/python3 {DRIVER} {} {total} {rate}\n",
        path_str(log)
    )
}

/// The sidecar beside the job: the progress log, the driver by its log's path on its command
/// line, the controller through `SLURM_CONF`, asked at once (no spread); every notification to
/// `hook`; `extra`: top-level keys of the test's own.
fn sidecar(cluster: &Cluster, dir: &Path, log: &Path, hook: &Receiver, extra: &str) -> Sidecar {
    let keys = format!(
        "slurm_timeout = \"3s\"\nslurm_spread = \"0s\"\n{extra}[rules.RunLate]\nfor = \"0s\"\n"
    );
    sidecar_with_defaults(cluster, dir, log, hook, &keys)
}

fn told(hook: &Receiver, alert: &str, status: &str) -> Vec<serde_json::Value> {
    hook.received()
        .iter()
        .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["labels"]["alertname"] == alert && a["status"] == status)
        .collect()
}

fn wait_told(hook: &Receiver, alert: &str, limit: Duration) -> serde_json::Value {
    hook.wait(alert, limit, |_| !told(hook, alert, "firing").is_empty());
    told(hook, alert, "firing").remove(0)
}

fn job_info(sidecar: &Sidecar) -> Option<std::collections::BTreeMap<String, String>> {
    let m = sidecar.metrics();
    let line =
        m.0.lines()
            .find(|l| l.starts_with("pulse_slurm_job_info{"))?;
    let labels = &line[line.find('{')? + 1..line.rfind('}')?];
    Some(
        labels
            .split("\",")
            .filter_map(|kv| kv.split_once("=\""))
            .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
            .collect(),
    )
}

#[test]
fn a_job_that_will_miss_its_time_limit_pages_run_late_then_its_end_is_told_not_a_crash() {
    let dir = temp_dir();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    let log = dir.path().join("run.log");
    let hook = Receiver::start(&[]);
    let sidecar = sidecar(&cluster, dir.path(), &log, &hook, "");
    // 1,000 requests at 2 a second need over 8 minutes; the job has 2.
    let job = cluster.sbatch(&["-t", "2", "-J", "synth"], &job_script(&log, 1000, 2.0));
    cluster.wait_state(job, "RUNNING", Duration::from_secs(60));

    // The job, from the driver's environment and the controller.
    let info = poll("the job known", Duration::from_secs(90), || {
        job_info(&sidecar)
            .filter(|i| i["state"] == "RUNNING")
            .ok_or_else(|| sidecar.metrics().0)
    });
    assert_eq!(info["job_id"], job.to_string());
    assert_eq!(info["name"], "synth");
    assert_eq!(info["partition"], "debug");
    let theirs = cluster.job(job).unwrap();
    let end = sidecar
        .metrics()
        .get("pulse_slurm_job_end_time_seconds", "")
        .unwrap();
    assert_eq!(end.to_string(), theirs["EndTime"], "{theirs:?}");
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_run_deadline_timestamp_seconds", ""),
        Some(end),
        "the job's end is the run's deadline"
    );

    // RunLate at once, naming the job's time limit and what to do: not at the end.
    let late = wait_told(&hook, "RunLate", Duration::from_secs(60));
    let summary = late["annotations"]["summary"].as_str().unwrap();
    let description = late["annotations"]["description"].as_str().unwrap();
    eprintln!("RunLate: {summary}\n{description}");
    assert!(
        summary.contains(&format!("past its SLURM job {job}'s time limit")),
        "{summary}"
    );
    assert!(
        description.contains(&format!("scontrol update JobId={job} TimeLimit=")),
        "{description}"
    );
    assert_eq!(cluster.state(job).as_deref(), Some("RUNNING"));

    // The limit: SLURM ends the driver (TIMEOUT). Told as such; no crash page, no
    // ProcessExited, and the status page says it.
    let ended = wait_told(&hook, "SlurmJobEnded", Duration::from_secs(240));
    let summary = ended["annotations"]["summary"].as_str().unwrap();
    eprintln!(
        "SlurmJobEnded: {summary}\n{}",
        ended["annotations"]["description"]
    );
    assert_eq!(
        summary,
        format!("SLURM job {job} was ended by its time limit")
    );
    assert_eq!(cluster.state(job).as_deref(), Some("TIMEOUT"));
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert_eq!(status["slurm"]["ended"], "was ended by its time limit");
    assert_eq!(status["slurm"]["controller"]["state"], "TIMEOUT");
    // A while past ProcessExited's minute: the driver's exit stays the job's end.
    let rounds = |s: &Sidecar| {
        s.metrics()
            .get("pulse_alert_rounds_total", "outcome=\"evaluated\"")
            .unwrap_or(0.0)
    };
    let after = rounds(&sidecar);
    // Rounds, not seconds: a loaded machine's rounds come later, never fewer.
    wait_until("the driver's exit judged", Duration::from_secs(300), || {
        rounds(&sidecar) >= after + 150.0
    });
    for alert in ["ProcessExited", "Stalled", "ServerDown"] {
        assert!(told(&hook, alert, "firing").is_empty(), "{alert} paged");
    }
}

#[test]
fn a_requeued_job_resumes_as_the_same_run_a_cancel_is_told_and_a_stopped_controller_blocks_nothing()
{
    let dir = temp_dir();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    let log = dir.path().join("run.log");
    let hook = Receiver::start(&[]);
    // Asked every 30 s, so that a stopped controller is met within the test's minutes.
    let sidecar = sidecar(
        &cluster,
        dir.path(),
        &log,
        &hook,
        "slurm_interval = \"30s\"\n",
    );
    let job = cluster.sbatch(&["-t", "10", "-J", "synth"], &job_script(&log, 2000, 2.0));
    poll("the job known", Duration::from_secs(90), || {
        job_info(&sidecar)
            .filter(|i| i["state"] == "RUNNING")
            .ok_or_else(|| sidecar.metrics().0)
    });
    let run_id = || run_info(&sidecar.metrics()).map(|i| i["run_id"].clone());
    let before = run_id().expect("a run id");
    let done = |s: &Sidecar| {
        s.metrics()
            .partition("pulse_partition_requests_completed", "B1")
    };

    // Requeued: SLURM ends it, holds it, starts it again with SLURM_RESTART_COUNT=1; the
    // driver resumes in the same log. The same run, its restart counted, said resumed.
    cluster.run("scontrol", &["requeue", &job.to_string()]);
    let resumed = wait_told(&hook, "SlurmJobResumed", Duration::from_secs(180));
    assert_eq!(
        resumed["annotations"]["summary"],
        format!("SLURM job {job} resumed after 1 requeue(s)")
    );
    assert_eq!(
        sidecar.metrics().get("pulse_slurm_job_restarts", ""),
        Some(1.0)
    );
    assert_eq!(run_id(), Some(before), "the same run");
    let at = done(&sidecar).unwrap();
    wait_until(
        "progress after the requeue",
        Duration::from_secs(30),
        || done(&sidecar).is_some_and(|d| d > at),
    );

    // The controller stopped: asks time out (counted), every endpoint answers meanwhile.
    let ctld: u32 = std::fs::read_to_string(cluster.dir.join("slurmctld.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(ctld, libc::SIGSTOP);
    let errors = |s: &Sidecar| {
        s.metrics()
            .get("pulse_slurm_controller_errors_total", "")
            .unwrap_or(0.0)
    };
    wait_until("an ask timed out", Duration::from_secs(90), || {
        for path in ["/metrics", "/status", "/-/healthy", "/-/ready", "/"] {
            let (status, _) = try_http(sidecar.addr, "GET", path, "").expect(path);
            assert_eq!(status, 200, "{path} while the controller is stopped");
        }
        errors(&sidecar) >= 1.0
    });
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert!(
        status["slurm"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer within 3s")),
        "{status}"
    );
    assert_eq!(
        status["slurm"]["controller"]["state"], "RUNNING",
        "its last known state"
    );
    signal(ctld, libc::SIGCONT);

    // Cancelled: told as a cancel, not as the driver's crash. (The requeue, asked about at its
    // driver's exit, may have been told as one before.)
    let before = told(&hook, "SlurmJobEnded", "firing").len();
    cluster.run("scancel", &[&job.to_string()]);
    hook.wait("SlurmJobEnded", Duration::from_secs(90), |_| {
        told(&hook, "SlurmJobEnded", "firing").len() > before
    });
    let ended = told(&hook, "SlurmJobEnded", "firing").remove(before);
    assert_eq!(
        ended["annotations"]["summary"],
        format!("SLURM job {job} was cancelled")
    );
    assert!(told(&hook, "ProcessExited", "firing").is_empty());
}

#[test]
fn an_arrays_tasks_are_counted_from_any_one_of_them() {
    let dir = temp_dir();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    let hook = Receiver::start(&[]);
    // Four tasks, two at a time, each 40 requests at 2 a second in its own log; the sidecar
    // beside task 0.
    let script = format!(
        "#!/bin/bash\nexec /usr/bin/python3 {DRIVER} {}/task-$SLURM_ARRAY_TASK_ID.log 40 2\n",
        path_str(dir.path())
    );
    let log = dir.path().join("task-0.log");
    // Asked every 30 s: the later tasks end after task 0's driver, whose exit asks too.
    let sidecar = sidecar(
        &cluster,
        dir.path(),
        &log,
        &hook,
        "slurm_interval = \"30s\"\n",
    );
    cluster.reset_rpcs();
    let array = cluster.sbatch(&["-t", "5", "--array=0-3%2", "-J", "parts"], &script);
    // Known from its environment at once; its array counted once the controller answered.
    let info = poll("task 0 known", Duration::from_secs(90), || {
        job_info(&sidecar)
            .filter(|i| !i["state"].is_empty())
            .ok_or_else(|| sidecar.metrics().0)
    });
    assert_eq!(info["array_job_id"], array.to_string());
    assert_eq!(info["array_task_id"], "0");
    let tasks = |state: &str| {
        sidecar
            .metrics()
            .get("pulse_slurm_array_tasks", &format!("state=\"{state}\""))
    };
    assert_eq!(
        tasks("pending").unwrap() + tasks("running").unwrap() + tasks("done").unwrap(),
        4.0
    );
    wait_until("every task done", Duration::from_secs(240), || {
        tasks("done") == Some(4.0)
    });
    assert_eq!(tasks("failed"), Some(0.0));
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert_eq!(status["slurm"]["array"]["total"], 4, "{status}");
    assert!(told(&hook, "SlurmJobEnded", "firing").is_empty());
    // Counted from the array's own records, never from a listing of the queue.
    let rpcs = cluster.rpcs();
    assert!(!rpcs.contains_key("REQUEST_JOB_INFO"), "{rpcs:?}");
    assert!(rpcs.contains_key("REQUEST_JOB_INFO_SINGLE"), "{rpcs:?}");
}

/// deploy/slurm/pipeline-pulse.sbatch as a user submits it: the sidecar inside the job on a
/// free port written for Prometheus' file_sd, the run named for the job; SLURM's warning signal
/// passed on and told; a cancel told by the sidecar itself on its way out; its file_sd entry
/// removed.
#[test]
fn the_sbatch_template_runs_the_sidecar_inside_the_job_and_tells_its_warning_and_its_end() {
    let dir = temp_dir();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    let run = dir.path().join("run");
    let file_sd = dir.path().join("file_sd");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(&file_sd).unwrap();
    let hook = Receiver::start(&[]);
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "alert_interval = \"500ms\"\n[[webhooks]]\nurl = {:?}\nformat = \"alertmanager\"\n",
            hook.url("/hook")
        ),
    )
    .unwrap();
    let export = format!(
        "--export=ALL,RUN_DIR={},PULSE={},PULSE_FILE_SD={},PULSE_CONFIG={}",
        path_str(&run),
        env!("CARGO_BIN_EXE_pipeline-pulse"),
        path_str(&file_sd),
        path_str(&config)
    );
    let out = stdout_of(
        cluster
            .command("sbatch")
            .args(["--parsable", "-t", "2", "--signal=B:USR1@60", &export])
            .arg(repo_file("deploy/slurm/pipeline-pulse.sbatch"))
            .args([
                "/usr/bin/python3",
                DRIVER,
                path_str(&run.join("run.log")),
                "1000",
                "2",
            ]),
    );
    let job: u64 = out.trim().parse().unwrap();

    let sd = file_sd.join(format!("pipeline-pulse-{job}.json"));
    let target = poll("the file_sd entry", Duration::from_secs(60), || {
        read_json(&sd).ok_or_else(|| format!("no {}", sd.display()))
    });
    assert_eq!(target[0]["labels"]["slurm_job_id"], job.to_string());
    let host_port = target[0]["targets"][0].as_str().unwrap().to_owned();
    let port: u16 = host_port.rsplit(':').next().unwrap().parse().unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let metrics = || {
        try_http(addr, "GET", "/metrics", "")
            .map(|(_, body)| Metrics(body))
            .unwrap_or(Metrics(String::new()))
    };
    wait_until("the job read inside it", Duration::from_secs(60), || {
        metrics()
            .0
            .lines()
            .any(|l| l.starts_with("pulse_slurm_job_info{") && l.contains("state=\"RUNNING\""))
    });
    let run_label = run_info(&metrics()).expect("pulse_run_info");
    assert_eq!(run_label["run"], format!("slurm-{job}"));

    // SLURM's warning, 60 s (to 90 s) before the limit: the batch shell passes it on.
    // When it ends is the controller's word ("ends at 08:07Z"); a controller that has not
    // answered yet leaves "ends within minutes".
    let ending = wait_told(&hook, "SlurmJobEnding", Duration::from_secs(120));
    let summary = ending["annotations"]["summary"].as_str().unwrap();
    let slurm = get_json(addr, "/status").map(|s| s["slurm"].clone());
    assert!(
        summary.starts_with(&format!("SLURM job {job} ends "))
            && summary.ends_with(": its warning signal came"),
        "{summary}; /status slurm: {slurm:?}"
    );

    // Cancelled: the sidecar gets SIGTERM with the rest of the job, asks the controller,
    // tells the cancel and saves its state before it goes; its file_sd entry goes with it.
    cluster.run("scancel", &[&job.to_string()]);
    let ended = wait_told(&hook, "SlurmJobEnded", Duration::from_secs(30));
    assert_eq!(
        ended["annotations"]["summary"],
        format!("SLURM job {job} was cancelled")
    );
    wait_until("the file_sd entry removed", Duration::from_secs(30), || {
        !sd.exists()
    });
    assert!(
        run.join(".pipeline-pulse").join("alerts.json").exists(),
        "its state saved in the run folder"
    );
}

/// Held jobs in the busy queue: the 10,000 (about 100 s to submit on two busy cores),
/// where one `squeue --json` is 31 MB; `PULSE_SLURM_QUEUE` sets another size.
fn busy_queue() -> usize {
    std::env::var("PULSE_SLURM_QUEUE")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000)
}

/// A sidecar with the defaults that matter here (RunLate's `for` of 15 minutes, asks spread
/// over 30 s and every 5 minutes), quick looks, every notification to `hook`.
fn sidecar_with_defaults(
    cluster: &Cluster,
    dir: &Path,
    log: &Path,
    hook: &Receiver,
    extra: &str,
) -> Sidecar {
    let config = dir.join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "probe_interval = \"1s\"\nalert_interval = \"500ms\"\n{extra}\
             [[webhooks]]\nurl = {:?}\nformat = \"alertmanager\"\n",
            hook.url("/hook")
        ),
    )
    .unwrap();
    Sidecar::run_with_env(
        &[
            "--log",
            path_str(log),
            "--process-match",
            path_str(log),
            "--run-name",
            "synth",
            "--config",
            path_str(&config),
            "--gpu",
            "off",
        ],
        &[("SLURM_CONF", &cluster.conf)],
    )
}

/// The driver of `log` (it names its log on its command line).
fn driver_pid(log: &Path) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let cmdline = String::from_utf8_lossy(&cmdline);
        (cmdline.contains("slow_driver.py") && cmdline.contains(path_str(log))).then_some(pid)
    })
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn single_lookups(rpcs: &std::collections::BTreeMap<String, (u64, u64)>) -> u64 {
    rpcs.get("REQUEST_JOB_INFO_SINGLE").map_or(0, |r| r.0)
}

/// A cluster whose queue is busy: the sidecar asks about its one job (a single-job lookup,
/// never the whole queue), a handful of times; a 3-minute job that cannot finish is paged
/// while a minute and more is left; the driver's exit at the limit is asked about and told.
#[test]
fn a_busy_queue_is_asked_about_one_job_rarely_and_a_short_job_is_warned_in_time() {
    let dir = temp_dir();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    cluster.fill_queue(busy_queue());
    let log = dir.path().join("run.log");
    let hook = Receiver::start(&[]);
    // 1,000 requests at 2 a second need over 8 minutes; the job has 3.
    let job = cluster.sbatch(&["-t", "3", "-J", "synth"], &job_script(&log, 1000, 2.0));
    cluster.wait_state(job, "RUNNING", Duration::from_secs(120));
    let end: f64 = cluster.job(job).unwrap()["EndTime"].parse().unwrap();
    // From here only the sidecar asks the controller about jobs.
    cluster.reset_rpcs();
    let sidecar = sidecar_with_defaults(&cluster, dir.path(), &log, &hook, "");

    let info = poll("the job known", Duration::from_secs(90), || {
        job_info(&sidecar)
            .filter(|i| i["state"] == "RUNNING")
            .ok_or_else(|| sidecar.metrics().0)
    });
    assert_eq!(info["job_id"], job.to_string());
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_slurm_job_end_time_seconds", ""),
        Some(end)
    );

    // RunLate while the job runs, with time left to act on it: its 15-minute `for` is
    // bounded by a quarter of the time left.
    let late = wait_told(&hook, "RunLate", Duration::from_secs(150));
    let left = end - unix_now();
    let summary = late["annotations"]["summary"].as_str().unwrap();
    eprintln!("RunLate {left:.0} s before the job's end: {summary}");
    assert!(
        left >= 60.0,
        "RunLate came {left:.0} s before the job's end"
    );
    assert!(
        summary.contains(&format!("past its SLURM job {job}'s time limit")),
        "{summary}"
    );
    let rpcs = cluster.rpcs();
    eprintln!("sdiag, the sidecar's first minute and more: {rpcs:?}");
    assert!(
        !rpcs.contains_key("REQUEST_JOB_INFO"),
        "a whole-queue dump: {rpcs:?}"
    );
    assert!((1..=2).contains(&single_lookups(&rpcs)), "{rpcs:?}");

    // The limit ends the driver; the sidecar asks within its spread and tells the job's end.
    let pid = driver_pid(&log).expect("the driver runs");
    wait_until(
        "the limit ends the driver",
        Duration::from_secs(240),
        || !Path::new(&format!("/proc/{pid}")).exists(),
    );
    let ended = wait_told(&hook, "SlurmJobEnded", Duration::from_secs(60));
    assert_eq!(
        ended["annotations"]["summary"],
        format!("SLURM job {job} was ended by its time limit")
    );
    let rpcs = cluster.rpcs();
    eprintln!("sdiag, the whole job: {rpcs:?}");
    assert!(
        !rpcs.contains_key("REQUEST_JOB_INFO"),
        "a whole-queue dump: {rpcs:?}"
    );
    let asked = single_lookups(&rpcs);
    assert!((2..=4).contains(&asked), "{rpcs:?}");
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_slurm_controller_asks_total", ""),
        Some(asked as f64),
        "every job lookup the controller counted is the sidecar's"
    );
    assert!(told(&hook, "ProcessExited", "firing").is_empty());
}

/// The shipped prolog writes the job's file on the node from its one ask at the job's start;
/// a sidecar that reads it asks the controller nothing until the driver exits, and the shipped
/// epilog removes it.
#[test]
fn the_prologs_file_gives_the_job_with_no_question_to_the_controller() {
    let dir = temp_dir();
    let root = dir.path().join("slurm");
    let runtime = dir.path().join("run");
    std::fs::create_dir_all(&root).unwrap();
    // slurmd runs them as root in the job's environment; these point the shipped scripts at
    // this test's cluster and folder, with no sidecar of their own (no PULSE there).
    let wrapper = |name: &str| {
        let path = root.join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/bash\nexport PATH=/usr/bin:/bin:/usr/sbin SLURM_CONF={} \
                 PULSE_RUNTIME={} PULSE=/nonexistent\nexec /bin/bash {}\n",
                path_str(&root.join("slurm.conf")),
                path_str(&runtime),
                path_str(&repo_file(&format!("deploy/slurm/{name}.sh"))),
            ),
        )
        .unwrap();
        let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&path, executable).unwrap();
        path
    };
    let (prolog, epilog) = (wrapper("prolog"), wrapper("epilog"));
    let cluster = Cluster::start_with(
        &root,
        &format!(
            "Prolog={}\nEpilog={}\n",
            path_str(&prolog),
            path_str(&epilog)
        ),
    );
    let log = dir.path().join("run.log");
    let hook = Receiver::start(&[]);
    let job = cluster.sbatch(&["-t", "3", "-J", "synth"], &job_script(&log, 1000, 2.0));
    let file = runtime.join("slurm").join(format!("job-{job}.env"));
    let text = poll("the prolog's file", Duration::from_secs(60), || {
        std::fs::read_to_string(&file)
            .ok()
            .filter(|t| t.contains("\nTIME_LIMIT=3\n"))
            .ok_or_else(|| format!("{}: {:?}", file.display(), std::fs::read_to_string(&file)))
    });
    eprintln!("{}:\n{text}", file.display());
    let end: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("END_TIME="))
        .unwrap()
        .parse()
        .unwrap();
    cluster.reset_rpcs();
    let sidecar = sidecar_with_defaults(
        &cluster,
        dir.path(),
        &log,
        &hook,
        &format!("slurm_job_dir = {:?}\n", path_str(&runtime.join("slurm"))),
    );

    poll("the job known", Duration::from_secs(30), || {
        job_info(&sidecar)
            .filter(|i| i["state"] == "RUNNING")
            .ok_or_else(|| sidecar.metrics().0)
    });
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_slurm_job_end_time_seconds", ""),
        Some(end)
    );
    let status = get_json(sidecar.addr, "/status").unwrap();
    assert_eq!(status["slurm"]["file"], path_str(&file), "{status}");
    let late = wait_told(&hook, "RunLate", Duration::from_secs(150));
    assert!(
        late["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains(&format!("past its SLURM job {job}'s time limit")),
        "{late}"
    );
    let rpcs = cluster.rpcs();
    eprintln!("sdiag, the sidecar on the prolog's file: {rpcs:?}");
    assert!(!rpcs.contains_key("REQUEST_JOB_INFO"), "{rpcs:?}");
    assert_eq!(single_lookups(&rpcs), 0, "no question at all: {rpcs:?}");
    assert_eq!(
        sidecar
            .metrics()
            .get("pulse_slurm_controller_asks_total", ""),
        Some(0.0)
    );

    // Cancelled: the driver's exit is the one question, and the cancel is told; the epilog
    // removes the file.
    cluster.run("scancel", &[&job.to_string()]);
    let ended = wait_told(&hook, "SlurmJobEnded", Duration::from_secs(60));
    assert_eq!(
        ended["annotations"]["summary"],
        format!("SLURM job {job} was cancelled")
    );
    wait_until(
        "the epilog removes the file",
        Duration::from_secs(30),
        || !file.exists(),
    );
    assert_eq!(single_lookups(&cluster.rpcs()), 1);
}
