//! The page followed by the fix (docs/alerts.md#actions), on the real engines: the engine under
//! a supervisor that starts it again whenever it ends (a shell loop, as systemd's
//! `Restart=always` would), a driver that retries what fails, as the seed's does. The engine's
//! worker (vLLM's EngineCore, SGLang's scheduler) stopped with SIGSTOP pages `ServerHung`; the
//! action `deploy/actions/kill-engine.sh` ends the engine; the supervisor starts a new one; the
//! run moves again and finishes with every record. The page says what the action does,
//! `/-/engine` answers 503 while the engine is hung, and the RESOLVED email comes when the run
//! moves, saying how long after the action. Each prints the times from the hang to the page,
//! to the action's end, to the run moving again.

use crate::common::smtp;
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The program and arguments that serve a model on a port.
type Serve = Box<dyn Fn(&Path, u16) -> (PathBuf, Vec<String>)>;

/// One engine as the scenario runs it.
struct Engine {
    /// The action's name, in the emails.
    action: &'static str,
    /// Its virtualenv's python, which makes the tiny model and runs the driver.
    python: PathBuf,
    /// The program and arguments that serve `model` on `port`.
    serve: Serve,
    env: Vec<(&'static str, &'static str)>,
    /// The title of the worker whose stop hangs the engine.
    worker: &'static str,
    /// Sidecar settings of its own (SGLang's generating `/health` needs a timeout past its 20 s).
    config: &'static str,
}

fn vllm() -> Engine {
    let venv = crate::vllm::venv();
    Engine {
        action: "restart-vllm",
        python: venv.join("bin/python"),
        serve: Box::new(move |model, port| {
            (venv.join("bin/vllm"), crate::vllm::serve_args(model, port))
        }),
        env: crate::vllm::SERVE_ENV.to_vec(),
        worker: "EngineCore",
        config: "",
    }
}

fn sglang() -> Engine {
    let venv = crate::sglang::venv();
    let python = venv.join("bin/python");
    Engine {
        action: "restart-sglang",
        python: python.clone(),
        serve: Box::new(move |model, port| {
            (python.clone(), crate::sglang::launch_args(model, port))
        }),
        env: crate::sglang::LAUNCH_ENV.to_vec(),
        worker: "sglang::scheduler",
        config: "server_health_interval = \"2s\"\nserver_health_timeout = \"25s\"\n",
    }
}

#[test]
fn a_hung_vllm_is_restarted_by_an_action_and_the_run_finishes() {
    healed(vllm());
}

#[test]
fn a_hung_sglang_is_restarted_by_an_action_and_the_run_finishes() {
    healed(sglang());
}

fn healed(engine: Engine) {
    let dir = temp_dir();
    let run = dir.path().join("run");
    let model = dir.path().join("tiny-model");
    std::fs::create_dir_all(&run).unwrap();
    crate::vllm::tiny_model(&engine.python, &model);
    let port = free_port();
    let (program, args) = (engine.serve)(&model, port);
    let supervisor = Group(
        Command::new("bash")
            .arg("-c")
            .arg(r#"while [ ! -e stop ]; do "$0" "$@" >>engine.log 2>&1; sleep 1; done"#)
            .arg(program)
            .args(args)
            .envs(engine.env.iter().copied())
            .current_dir(&run)
            .stdin(Stdio::null())
            // Its own word when the action kills its child ("Killed") is not the test's.
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the engine's supervisor"),
    );
    let serving = |what: &str| {
        wait_until(what, Duration::from_secs(400), || {
            try_http(([127, 0, 0, 1], port).into(), "GET", "/health", "")
                .is_some_and(|(status, _)| status == 200)
        })
    };
    serving("the engine to answer /health");
    let first = child_titled(supervisor.0.id(), "serve")
        .or_else(|| child_titled(supervisor.0.id(), "launch_server"))
        .expect("the engine under its supervisor");
    let worker = child_titled(first, engine.worker).expect("the engine's worker");

    // Four requests at a time, one after another: the engine is never idle when it stops, so
    // its frozen gauges hold running requests (an idle engine stopped is not hung).
    let prompts = 200;
    let mut driver = batch_driver(
        &engine.python,
        &run,
        (port, &model),
        [prompts, 4, 32],
        &[("PULSE_RETRY", "1")],
    );
    let kill = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/actions/kill-engine.sh");
    let config = dir.path().join("pulse.toml");
    std::fs::write(
        &config,
        format!(
            "probe_interval = \"500ms\"\ndiscover_interval = \"1s\"\nalert_interval = \"1s\"\n{}\
             smtp = \"file://{}\"\nemail_to = [\"oncall@example.com\"]\n\
             [rules.ServerHung]\nthreshold = \"5s\"\n\
             [[actions]]\nname = {:?}\non = [\"ServerHung\"]\ncommand = [{:?}]\ntimeout = \"60s\"\n",
            engine.config,
            path_str(&dir.path().join("mail")),
            engine.action,
            path_str(&kill)
        ),
    )
    .unwrap();
    // kill-engine.sh's SIGKILL comes 5 s after its SIGTERM (an engine stopped in a
    // collective ignores SIGTERM), not 20: the action reads it from the sidecar's environment.
    let sidecar = Sidecar::run_with_env(
        &[
            "--run-dir",
            path_str(&run),
            "--outputs",
            &format!("{}/outputs/*.jsonl", path_str(&run)),
            "--config",
            path_str(&config),
            "--gpu",
            "off",
        ],
        &[("GRACE", Path::new("5"))],
    );
    poll("the server discovered", Duration::from_secs(60), || {
        let s = get_json(sidecar.addr, "/status").unwrap_or_default();
        let found = s["discovered"]["server"]["pid"] == first && s["server"]["up"] == true;
        found.then_some(()).ok_or_else(|| {
            format!(
                "the engine is {first}; /status discovered {} server {}",
                s["discovered"], s["server"]
            )
        })
    });
    // The records of `outputs/*.jsonl` are counted under their folder's name.
    let records = |m: &Metrics| {
        m.partition("pulse_output_records_total", "outputs")
            .unwrap_or(0.0)
    };
    sidecar.wait_metrics("the run under way", |m| {
        records(m) >= 12.0 && m.get("pulse_server_running_requests", "") > Some(0.0)
    });
    let liveness = || try_http(sidecar.addr, "GET", "/-/engine", "").map(|(status, _)| status);
    assert_eq!(liveness(), Some(200));

    let hung_at = Instant::now();
    signal(worker, libc::SIGSTOP);
    let hung = "alert=\"ServerHung\",partition=\"\"";
    let mut liveness_said_503 = false;
    wait_until("ServerHung", Duration::from_secs(90), || {
        let firing = sidecar.metrics().get("pulse_alert_firing", hung) == Some(1.0);
        liveness_said_503 |= firing && liveness() == Some(503);
        firing
    });
    let paged = hung_at.elapsed();
    let mut ran = serde_json::Value::Null;
    wait_until("the action's run ended", Duration::from_secs(90), || {
        let status = get_json(sidecar.addr, "/status").unwrap_or_default();
        liveness_said_503 |= liveness() == Some(503);
        ran = status["actions"]
            .as_array()
            .and_then(|runs| runs.iter().find(|r| r["action"] == engine.action))
            .cloned()
            .unwrap_or_default();
        ran["result"].as_str().is_some_and(|r| r != "running")
    });
    let acted = hung_at.elapsed();
    assert!(
        liveness_said_503,
        "/-/engine answered 503 while the engine was hung"
    );
    assert_eq!(ran["result"], "ok", "{ran}");
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert!(
        ran["output"]
            .as_str()
            .is_some_and(|o| o.contains(&format!("pid {first}"))),
        "the action was told the engine's pid: {ran}"
    );

    // The supervisor's new engine, found by discovery; the driver's retries go through.
    serving("the restarted engine to answer /health");
    wait_until("the new server discovered", Duration::from_secs(60), || {
        get_json(sidecar.addr, "/status").is_some_and(|s| {
            s["discovered"]["server"]["pid"]
                .as_u64()
                .is_some_and(|p| p != u64::from(first))
                && s["server"]["up"] == true
        })
    });
    let mail = dir.path().join("mail");
    // The emails the `file://` channel wrote, their text decoded.
    let told = |word: &str| {
        std::fs::read_dir(&mail)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .find(|m| smtp::subject(m).contains(&format!("{word} ServerHung")))
            .map(|m| String::from_utf8(smtp::part(&m, "Content-Type: text/plain")).unwrap())
    };
    let mut resolved = None;
    wait_until("ServerHung's RESOLVED", Duration::from_secs(300), || {
        resolved = told("RESOLVED");
        resolved.is_some()
    });
    let moved = hung_at.elapsed();
    let resolved = resolved.unwrap();
    let line = resolved
        .lines()
        .find(|l| l.contains("the run moved again"))
        .unwrap_or_else(|| panic!("the RESOLVED says when the run moved:\n{resolved}"));
    assert!(
        line.contains(&format!("after `{}`", engine.action)),
        "{line}"
    );
    // The page says the action runs, or what it did where it ended within the 3 s a page
    // waits for it.
    let page = told("FIRING").expect("ServerHung's page");
    assert!(
        page.contains(&format!("running `{}`", engine.action))
            || page.contains(&format!("ran `{}` (exit 0, ", engine.action)),
        "{page}"
    );

    let status = poll("the driver to finish", Duration::from_secs(400), || {
        driver.0.try_wait().unwrap().ok_or_else(String::new)
    });
    assert!(status.success(), "the driver finished its partition");
    let m = sidecar.wait_metrics("every record", |m| records(m) == f64::from(prompts));
    assert_eq!(
        m.get(
            "pulse_actions_total",
            &format!("action=\"{}\",result=\"ok\"", engine.action)
        ),
        Some(1.0),
        "one restart: {}",
        m.0
    );
    assert_eq!(liveness(), Some(200));
    let outputs = std::fs::read_to_string(run.join("outputs/B1.jsonl")).unwrap();
    assert!(
        outputs.lines().all(|l| !l.contains("\"error\"")),
        "no error record: the driver retried"
    );
    eprintln!(
        "healed: hang at 0 s, page at {:.1} s, the action ended at {:.1} s ({}), RESOLVED at {:.1} s: {}; the run done at {:.1} s",
        paged.as_secs_f64(),
        acted.as_secs_f64(),
        ran["said"],
        moved.as_secs_f64(),
        line.trim(),
        hung_at.elapsed().as_secs_f64()
    );
    std::fs::write(run.join("stop"), "").unwrap();
    drop(supervisor);
}
