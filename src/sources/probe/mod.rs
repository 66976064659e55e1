//! The probes: is the driver process alive, is the inference server up, and how busy is it.
//!
//! They run as one task on the async runtime, every `probe_interval`, each request bounded by
//! `probe_timeout`; a scrape only ever reads what the last round stored in the model.

pub mod exposition;
pub mod process;

use crate::clock;
use crate::collectors::Collector;
use crate::http_client::{self, Url};
use crate::lock::Locked;
use crate::model::{ProcessChange, Run, ServerState};
use crate::sources::{
    Awaited, Built, Context, FirstRead, Following, Round, Runs, SourceConfig, Task,
};
use process::ProcessTarget;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// An inference server's exposition is a few hundred KiB at most; more is not one.
const METRICS_LIMIT: usize = 16 * 1024 * 1024;
const HEALTH_LIMIT: usize = 64 * 1024;

/// Which metric names mean what, for SGLang and vLLM, in every release still in use: SGLang
/// 0.3 named its gauges `num_requests_running`, `num_requests_waiting` and `queue_req` (with a
/// `name` label); vLLM renamed `gpu_cache_usage_perc` to `kv_cache_usage_perc`. The first
/// name an exposition has is read.
const RUNNING: [&str; 3] = [
    "sglang:num_running_reqs",
    "vllm:num_requests_running",
    "sglang:num_requests_running",
];
const QUEUED: [&str; 4] = [
    "sglang:num_queue_reqs",
    "vllm:num_requests_waiting",
    "sglang:num_requests_waiting",
    "sglang:queue_req",
];
const THROUGHPUT: [&str; 1] = ["sglang:gen_throughput"];
/// 0-1 in every release (vLLM's `_perc` is a ratio despite its name).
const KV_USAGE: [&str; 3] = [
    "sglang:token_usage",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
];
const GENERATED_TOTAL: [&str; 2] = [
    "vllm:generation_tokens_total",
    "sglang:generation_tokens_total",
];
/// Requests the engine preempted (vLLM; `_total` from prometheus_client's counter naming) or
/// retracted (SGLang ≥ 0.5.10's counter; 0.4.10–0.5.2's cumulative gauge) for lack of KV
/// cache. SGLang's `num_retracted_reqs` is reset every log interval: not a count.
const PREEMPTIONS: [&str; 4] = [
    "vllm:num_preemptions_total",
    "vllm:num_preemptions",
    "sglang:num_retracted_requests_total",
    "sglang:total_retracted_reqs",
];

/// SGLang's `/health` (0.5 on) sends a one-token request and waits up to 20 s for it: asked
/// once a minute with time to answer, a connection to its port in between. Its bounds for a
/// server known to be SGLang, by its command line (discovery) or its metrics' names, where
/// `server_health_interval` and `server_health_timeout` are not given.
pub const SGLANG_HEALTH_INTERVAL: Duration = Duration::from_secs(60);
pub const SGLANG_HEALTH_TIMEOUT: Duration = Duration::from_secs(25);

/// Whether an exposition is SGLang's: its engine's own series are named `sglang:…`.
fn is_sglang(text: &str) -> bool {
    exposition::samples(text).any(|(name, _, _)| name.starts_with("sglang:"))
}

/// Whether an exposition is vLLM's (`vllm:…`).
fn is_vllm(text: &str) -> bool {
    exposition::samples(text).any(|(name, _, _)| name.starts_with("vllm:"))
}

/// Whether every engine is asleep: vLLM's `vllm:engine_sleep_state` has a series per engine
/// and state, `sleep_state="awake"` 0 while that engine sleeps (0.34).
fn asleep(text: &str) -> Option<bool> {
    let awake: Vec<f64> = exposition::samples(text)
        .filter(|(name, labels, _)| {
            *name == "vllm:engine_sleep_state"
                && exposition::label_pairs(labels).contains(&"sleep_state=\"awake\"")
        })
        .map(|(_, _, v)| v)
        .collect();
    (!awake.is_empty()).then(|| awake.iter().all(|v| *v == 0.0))
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProbeConfig {
    pub process: Option<ProcessTarget>,
    pub health_url: Option<Url>,
    pub metrics_url: Option<Url>,
    pub timeout: Duration,
    /// How often the health URL is asked, where given (else every round, or SGLang's
    /// interval for SGLang); between asks, a connection to its port says the server lives.
    pub health_interval: Option<Duration>,
    /// The most one ask of the health URL may take, where given (else `timeout`, or SGLang's
    /// bound for SGLang).
    pub health_timeout: Option<Duration>,
}

/// How the health URL is asked.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HealthBounds {
    /// How often; `None`: every round, and the round waits for the answer.
    interval: Option<Duration>,
    timeout: Duration,
    /// Its 503 says one forward pass outlasted the engine's own bound (a generating
    /// `/health`, asked on an interval): busy, not down.
    generating: bool,
}

impl ProbeConfig {
    pub fn is_empty(&self) -> bool {
        self.process.is_none() && !self.probes_server()
    }

    /// The bounds given, and for what was not given SGLang's where the server is known to be
    /// SGLang, else every round within `timeout`.
    fn health_bounds(&self, sglang: bool) -> HealthBounds {
        let (interval, timeout) = if sglang {
            (Some(SGLANG_HEALTH_INTERVAL), SGLANG_HEALTH_TIMEOUT)
        } else {
            (None, self.timeout)
        };
        let interval = self.health_interval.or(interval);
        HealthBounds {
            interval,
            timeout: self.health_timeout.unwrap_or(timeout),
            generating: interval.is_some(),
        }
    }

    fn probes_server(&self) -> bool {
        self.health_url.is_some() || self.metrics_url.is_some()
    }
}

pub struct Probes {
    config: ProbeConfig,
    /// A new configuration from discovery (a server found later, a new driver).
    updates: Option<tokio::sync::watch::Receiver<ProbeConfig>>,
    run: Arc<Mutex<Run>>,
    /// The previous reading of a generated-tokens counter, for a rate.
    generated: Option<(f64, f64)>,
    /// The ask of the health URL under way, on a task of its own: SGLang's generating
    /// `/health` may take 20 s, and the round does not wait for it.
    health: Option<tokio::task::JoinHandle<Health>>,
    /// When the health URL was last asked, and the server's health as last known.
    health_asked: Option<Instant>,
    last_health: Option<Health>,
    /// The server's metrics named it SGLang: its health is asked as SGLang's, configured or
    /// discovered (docs/configuration.md).
    sglang: bool,
}

/// What one ask of the health URL found.
#[derive(Debug, Clone, PartialEq)]
enum Health {
    Up,
    /// A generating `/health` (SGLang's, asked every `server_health_interval`) answered 503:
    /// one forward pass outlasted its 20 s. Alive and busy, not down; a dead engine behind it
    /// is told by its processes (`Run::engine_dead`).
    Busy(String),
    /// It accepts connections but gave no answer within `server_health_timeout`. Accepting
    /// proves nothing: the kernel completes the handshake for a process that is stopped,
    /// frozen in D state or deadlocked in its event loop, and both engines bound their own
    /// handlers, so no answer in time means the HTTP process itself is wedged: not up.
    Hung(String),
    Down(String),
    /// Its port accepts connections again and its health URL was not asked since: alive, but
    /// not known to pass (a restarted server loading its weights).
    Accepting,
}

/// Asks `url` for the server's health; an ask that gets no answer is told apart from a server
/// that is gone by a connection to its port (hung where it accepts one, down where it does
/// not). A 503 is the server's own word that it is unwell (vLLM's dead engine), except from a
/// `generating` health URL, whose 503 says one forward pass outlasted its 20 s.
async fn ask_health(url: Url, timeout: Duration, generating: bool) -> Health {
    let why = match http_client::get(&url, timeout, HEALTH_LIMIT).await {
        Ok((status, _)) if (200..300).contains(&status) => return Health::Up,
        Ok((503, _)) if generating => return Health::Busy(format!("{url} answered 503")),
        Ok((status, _)) => return Health::Down(format!("{url} answered {status}")),
        Err(e) if e.starts_with("cannot connect") => return Health::Down(format!("{url}: {e}")),
        Err(e) => format!("{url}: {e}"),
    };
    match accepts(&url, timeout).await {
        Ok(()) => Health::Hung(format!(
            "{why}: it accepts connections but gives no answer within {timeout:?}, so its HTTP process is hung (stopped, or wedged in its event loop)"
        )),
        Err(e) => Health::Down(format!("{why}; {e}")),
    }
}

/// Whether the engine's gauges are frozen: its token counter stood still since the last
/// scrape while they claim running requests. SGLang sets its gauges only when it logs a
/// batch, so an idle SGLang keeps the last batch's figures (a request running, hundreds of
/// tok/s) for as long as nothing runs; so does one whose scheduler is stopped or gone.
fn frozen(total: Option<f64>, previous: Option<(f64, f64)>, running: Option<f64>) -> bool {
    let (Some(total), Some((_, before))) = (total, previous) else {
        return false;
    };
    total == before && running.is_some_and(|r| r > 0.0)
}

/// Whether the server accepts a connection on the URL's port: it lives, at no cost to it.
async fn accepts(url: &Url, timeout: Duration) -> Result<(), String> {
    let connect = tokio::net::TcpStream::connect((url.host.as_str(), url.port));
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!(
            "{}:{} refuses connections: {e}",
            url.host, url.port
        )),
        Err(_) => Err(format!(
            "{}:{} does not accept a connection",
            url.host, url.port
        )),
    }
}

/// The probes' section of the configuration: what to probe, and how often.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The driver process and the server's URLs, those of the collectors switched off left
    /// out.
    pub probes: ProbeConfig,
    /// `probe_interval`.
    pub interval: Duration,
}

impl SourceConfig for Following<Settings, tokio::sync::watch::Receiver<ProbeConfig>> {
    fn build(self: Box<Self>, cx: &mut Context) -> anyhow::Result<Option<Built>> {
        let Following {
            settings: this,
            found: updates,
        } = *self;
        if this.probes.is_empty() && updates.is_none() {
            return Ok(None);
        }
        let mut probes = Probes::new(this.probes, cx.run.clone());
        if let Some(updates) = updates {
            probes = probes.with_updates(updates);
        }
        Ok(Some(Built {
            name: "probes",
            collectors: &[Collector::Process, Collector::Server],
            interval: this.interval,
            awaited: Awaited::ByAll,
            runs: Runs::Task(Box::new(probes)),
        }))
    }
}

impl Task for Probes {
    fn round(&mut self) -> Round<'_> {
        Box::pin(Probes::round(self))
    }

    fn run_every(self: Box<Self>, interval: Duration, first_read: FirstRead) -> Round<'static> {
        Box::pin(Probes::run_every(*self, interval, first_read))
    }
}

impl Probes {
    pub fn new(config: ProbeConfig, run: Arc<Mutex<Run>>) -> Probes {
        {
            let mut run = run.locked();
            if config.process.is_some() {
                run.expect_collector(Collector::Process);
            }
            if config.probes_server() {
                run.expect_collector(Collector::Server);
            }
        }
        Probes {
            config,
            updates: None,
            run,
            generated: None,
            health: None,
            health_asked: None,
            last_health: None,
            sglang: false,
        }
    }

    /// Takes the configurations discovery finds later, before each round.
    pub fn with_updates(mut self, updates: tokio::sync::watch::Receiver<ProbeConfig>) -> Probes {
        self.updates = Some(updates);
        self
    }

    fn take_update(&mut self) {
        let Some(updates) = &mut self.updates else {
            return;
        };
        if !updates.has_changed().unwrap_or(false) {
            return;
        }
        let config = updates.borrow_and_update().clone();
        let mut run = self.run.locked();
        if config.process.is_some() {
            run.expect_collector(Collector::Process);
        }
        if config.probes_server() {
            run.expect_collector(Collector::Server);
        }
        if config.metrics_url != self.config.metrics_url {
            self.generated = None;
            self.sglang = false;
        }
        if self.config.probes_server() && !config.probes_server() {
            run.forget_server();
            self.health = None;
            self.health_asked = None;
            self.last_health = None;
        }
        self.config = config;
    }

    /// Probes every `interval`, forever; abort the task to stop it. The first round done, it
    /// marks its first read done on `first_read`.
    pub async fn run_every(mut self, interval: Duration, mut first_read: FirstRead) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        self.round().await;
        first_read.done();
        loop {
            ticks.tick().await;
            self.round().await;
        }
    }

    /// One round of every configured probe.
    pub async fn round(&mut self) {
        self.take_update();
        if let Some(target) = self.config.process.clone() {
            self.process_round(target).await;
        }
        if self.config.probes_server() {
            self.server_round().await;
        }
    }

    async fn process_round(&mut self, target: ProcessTarget) {
        let started = Instant::now();
        let known = {
            let run = self.run.locked();
            run.process().as_ref().and_then(|p| p.pid)
        };
        // Reading /proc can block on a process stuck in the kernel (a hung CUDA call): the
        // round must end anyway, with the process state unknown this time.
        let find = tokio::task::spawn_blocking(move || {
            process::find(&crate::procfs::Procfs::default(), &target, known)
        });
        let found = tokio::time::timeout(self.config.timeout, find).await;
        let mut run = self.run.locked();
        let Ok(found) = found else {
            tracing::warn!(
                "looking for the pipeline process in /proc took over {:?}",
                self.config.timeout
            );
            run.set_collector(Collector::Process, false, started.elapsed().as_secs_f64());
            return;
        };
        match run.process_seen(found.unwrap_or(None), clock::now()) {
            Some(ProcessChange::Started(pid)) => {
                tracing::info!(pid, "pipeline process {pid} is running")
            }
            Some(ProcessChange::Exited(pid)) => {
                tracing::warn!(pid, "pipeline process {pid} exited")
            }
            Some(ProcessChange::Replaced { old, new }) => tracing::warn!(
                pid = new,
                old_pid = old,
                "pipeline process {old} exited; {new} runs in its place"
            ),
            None => {}
        }
        run.set_collector(Collector::Process, true, started.elapsed().as_secs_f64());
    }

    async fn server_round(&mut self) {
        let started = Instant::now();
        let server = self.server().await;
        let mut run = self.run.locked();
        if let (Some(error), Some(old)) = (&server.error, &run.server()) {
            if old.error.as_ref() != Some(error) {
                tracing::warn!("inference server probe: {error}");
            }
        }
        let worked = server.error.is_none();
        run.set_server(server, clock::now());
        run.set_collector(Collector::Server, worked, started.elapsed().as_secs_f64());
    }

    async fn server(&mut self) -> ServerState {
        let timeout = self.config.timeout;
        let mut state = ServerState {
            checked_at: Some(clock::now()),
            ..ServerState::default()
        };
        // The metrics first: a server they name SGLang has its health asked as SGLang's from
        // this round on, its first ask included.
        let mut metrics_error = None;
        if let Some(url) = self.config.metrics_url.clone() {
            match http_client::get(&url, timeout, METRICS_LIMIT).await {
                Ok((status, body)) if (200..300).contains(&status) => {
                    let text = String::from_utf8_lossy(&body);
                    self.learn_engine(&text);
                    self.read_server_metrics(&text, &mut state)
                }
                Ok((status, _)) => metrics_error = Some(format!("{url} answered {status}")),
                Err(e) => metrics_error = Some(format!("{url}: {e}")),
            }
        }
        let mut errors = Vec::new();
        if let Some(url) = self.config.health_url.clone() {
            let health = self.health(&url).await;
            if let Health::Down(why) | Health::Hung(why) = &health {
                errors.push(why.clone());
            }
            if let (Health::Busy(why), false) = (&health, self.last_health == Some(health.clone()))
            {
                tracing::info!(
                    "inference server health: {why} (its /health waits for a token): busy, not down"
                );
            }
            state.up = Some(matches!(
                health,
                Health::Up | Health::Busy(_) | Health::Accepting
            ));
            state.hung = matches!(health, Health::Hung(_));
            state.busy = matches!(health, Health::Busy(_));
            state.health_passed = health == Health::Up;
            self.last_health = Some(health);
        }
        errors.extend(metrics_error);
        state.error = (!errors.is_empty()).then(|| errors.join("; "));
        state
    }

    /// Notes which engine the server's metrics name, and says so where that changes how its
    /// health is asked. An exposition that names no engine changes nothing; one that names
    /// vLLM (another server on the same port) ends SGLang's bounds.
    fn learn_engine(&mut self, text: &str) {
        if self.sglang && is_vllm(text) {
            self.sglang = false;
            if let Some(asked) = self.health.take() {
                asked.abort();
            }
            self.health_asked = None;
            return;
        }
        if self.sglang || !is_sglang(text) {
            return;
        }
        self.sglang = true;
        let (before, now) = (
            self.config.health_bounds(false),
            self.config.health_bounds(true),
        );
        if self.config.health_url.is_some() && before != now {
            tracing::info!(
                "the server's metrics say it is SGLang, whose /health generates a token: asked every {:?} within {:?}",
                now.interval.unwrap_or(SGLANG_HEALTH_INTERVAL),
                now.timeout
            );
        }
    }

    /// The server's health now: the health URL's answer when one is due and back, else (when
    /// it is asked on an interval) whether it accepts a connection, else the last answer.
    async fn health(&mut self, url: &Url) -> Health {
        let bounds = self.config.health_bounds(self.sglang);
        let Some(interval) = bounds.interval else {
            return ask_health(url.clone(), bounds.timeout, false).await;
        };
        if let Some(asked) = self.health.take_if(|h| h.is_finished()) {
            if let Ok(answer) = asked.await {
                return answer;
            }
        }
        if self.health.is_none() && self.health_asked.is_none_or(|t| t.elapsed() >= interval) {
            self.health_asked = Some(Instant::now());
            self.health = Some(tokio::spawn(ask_health(
                url.clone(),
                bounds.timeout,
                bounds.generating,
            )));
        }
        match accepts(url, self.config.timeout).await {
            Ok(()) => match &self.last_health {
                Some(Health::Down(_)) | None => Health::Accepting,
                Some(known) => known.clone(),
            },
            Err(e) => Health::Down(e),
        }
    }

    /// The rate comes from the generated-tokens counter where the server exports one: a
    /// counter cannot claim work it did not do. SGLang's gauge stands in until two scrapes
    /// give a rate, and where no counter is exported.
    fn read_server_metrics(&mut self, text: &str, state: &mut ServerState) {
        use exposition::Combine;
        let first = |names: &[&str], how| exposition::first_of(text, names, how);
        state.running_requests = first(&RUNNING, Combine::Sum);
        state.queued_requests = first(&QUEUED, Combine::Sum);
        let ratio = |u: &f64| (0.0..=1.0).contains(u);
        state.kv_cache_usage = first(&KV_USAGE, Combine::Mean).filter(ratio);
        state.kv_cache_usage_max = first(&KV_USAGE, Combine::Max).filter(ratio);
        state.preemptions_total = first(&PREEMPTIONS, Combine::Sum);
        state.asleep = asleep(text);
        let total = first(&GENERATED_TOTAL, Combine::Sum);
        state.frozen = frozen(total, self.generated, state.running_requests);
        let counted = total.and_then(|total| {
            let now = clock::now();
            let previous = self.generated.replace((now, total));
            let (then, before) = previous?;
            // A counter that went down means the server restarted: no rate this time.
            (now > then && total >= before).then(|| (total - before) / (now - then))
        });
        state.generation_tokens_per_second = counted.or_else(|| first(&THROUGHPUT, Combine::Sum));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exposition_with_sglang_series_is_sglangs() {
        assert!(is_sglang(
            "# HELP sglang:num_running_reqs The number of running requests.\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 12.0\n"
        ));
        assert!(!is_sglang(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
        ));
        // A comment that names SGLang is no series of its.
        assert!(!is_sglang(
            "# HELP process_cpu sglang:like\nprocess_cpu_seconds_total 4\n"
        ));
        assert!(!is_sglang(""));
        assert!(is_vllm(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"
        ));
    }

    #[test]
    fn another_engine_on_the_port_ends_sglangs_bounds() {
        let run = Arc::new(Mutex::new(Run::new(&[])));
        let mut probes = Probes::new(ProbeConfig::default(), run);
        probes.learn_engine("sglang:num_running_reqs 12\n");
        assert!(probes.sglang);
        probes.learn_engine("process_cpu_seconds_total 4\n");
        assert!(
            probes.sglang,
            "an exposition naming no engine changes nothing"
        );
        probes.learn_engine("vllm:num_requests_running{model_name=\"m\"} 3\n");
        assert!(!probes.sglang);
    }

    #[test]
    fn sglang_is_asked_as_sglang_unless_its_bounds_are_given() {
        let config = ProbeConfig {
            timeout: Duration::from_secs(2),
            ..ProbeConfig::default()
        };
        let every_round = HealthBounds {
            interval: None,
            timeout: Duration::from_secs(2),
            generating: false,
        };
        assert_eq!(config.health_bounds(false), every_round);
        assert_eq!(
            config.health_bounds(true),
            HealthBounds {
                interval: Some(SGLANG_HEALTH_INTERVAL),
                timeout: SGLANG_HEALTH_TIMEOUT,
                generating: true,
            }
        );
        // A bound given wins, each on its own.
        let given = ProbeConfig {
            health_timeout: Some(Duration::from_secs(40)),
            ..config.clone()
        };
        assert_eq!(
            given.health_bounds(true),
            HealthBounds {
                interval: Some(SGLANG_HEALTH_INTERVAL),
                timeout: Duration::from_secs(40),
                generating: true,
            }
        );
        let given = ProbeConfig {
            health_interval: Some(Duration::from_secs(10)),
            ..config
        };
        assert_eq!(
            given.health_bounds(true),
            HealthBounds {
                interval: Some(Duration::from_secs(10)),
                timeout: SGLANG_HEALTH_TIMEOUT,
                generating: true,
            }
        );
        assert_eq!(
            given.health_bounds(false),
            HealthBounds {
                interval: Some(Duration::from_secs(10)),
                timeout: Duration::from_secs(2),
                generating: true,
            }
        );
    }
}
