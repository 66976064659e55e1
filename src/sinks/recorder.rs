//! Samples the model into its history every `history_resolution`, and saves the history to
//! the state directory (`history.json`, atomically) every few minutes and at shutdown.
//!
//! Not with every snapshot: a full history is megabytes, and a snapshot is written every few
//! seconds. A kill loses at most the points since the last save, which shows as a gap.

use crate::clock;
use crate::lock::Locked;
use crate::model::history::History;
use crate::model::Run;
use crate::sinks::{Context, SinkConfig, Task};
use crate::state::StateDir;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const SAVED: &str = "history.json";

/// How often the history is written out.
const SAVE_EVERY: Duration = Duration::from_secs(300);

/// The recorder's section of the configuration: the history's resolution and span, in
/// seconds, where the history collector is on.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub on: bool,
    pub resolution: f64,
    pub span: f64,
}

impl SinkConfig for Settings {
    fn prepare(&self, cx: &Context) {
        if self.on {
            let saved = restore(cx.state.as_ref(), self.resolution, self.span);
            cx.run.locked().set_history(saved);
        }
    }

    fn start(&self, cx: &Context) -> Option<Task> {
        self.on.then(|| {
            let task = run_every(cx.run.clone(), cx.state.clone(), cx.unread.clone());
            Box::pin(task) as Task
        })
    }

    fn stop(&self, cx: &Context) {
        if self.on {
            save(&cx.run, cx.state.as_ref());
        }
    }
}

/// The saved history if it matches this resolution and span, else an empty one.
pub fn restore(state: Option<&StateDir>, resolution: f64, span: f64) -> History {
    let Some(path) = state.map(|s| s.path(SAVED)) else {
        return History::new(resolution, span);
    };
    // Streamed, not read whole first: a full history file is megabytes, and the sidecar's
    // memory would keep the high-water mark of holding it twice.
    let saved = std::fs::File::open(&path).ok().and_then(|file| {
        serde_json::from_reader::<_, History>(std::io::BufReader::new(file))
            .map_err(|e| {
                tracing::warn!(
                    path = %path.display(),
                    "cannot read the history {}: {e}; starting it afresh",
                    path.display()
                )
            })
            .ok()
    });
    match saved {
        Some(saved) => History::restored(saved, resolution, span),
        None => History::new(resolution, span),
    }
}

pub fn save(run: &Mutex<Run>, state: Option<&StateDir>) {
    let Some(state) = state else {
        return;
    };
    // Copied under the lock, written outside it: a scrape never waits for the disk.
    let history = run.locked().history().clone();
    if let Err(e) = state.save_json(SAVED, &history) {
        let path = state.path(SAVED);
        tracing::warn!(
            path = %path.display(),
            "cannot save the history to {}: {e}",
            path.display()
        );
    }
}

/// Samples forever; abort the task to stop it (then call [`save`]). The first sample waits
/// until the backlog is read (`unread` at 0): it places the backlog's points at the times
/// their figures held, which only a model holding the backlog knows.
pub async fn run_every(
    run: Arc<Mutex<Run>>,
    state: Option<StateDir>,
    unread: Arc<std::sync::atomic::AtomicUsize>,
) {
    // A source stuck in its first read (a hung mount) delays the history a while, not for
    // ever.
    let waiting = tokio::time::Instant::now();
    while unread.load(std::sync::atomic::Ordering::Acquire) > 0
        && waiting.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resolution = run.locked().history().resolution;
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(resolution));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut saved_at = tokio::time::Instant::now();
    loop {
        ticks.tick().await;
        {
            run.locked().sample_history(clock::now());
        }
        if saved_at.elapsed() >= SAVE_EVERY {
            let (run, state) = (run.clone(), state.clone());
            let _ = tokio::task::spawn_blocking(move || save(&run, state.as_ref())).await;
            saved_at = tokio::time::Instant::now();
        }
    }
}
