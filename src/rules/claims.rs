//! Each statement the product makes holds only on its evidence (docs/claims.md): runs built at
//! random through the model's own updates, with the evidence a statement needs left out, never
//! produce it.

use super::*;
use crate::model::{
    Discovered, DiscoveredServer, GpuPids, GpuProcess, GpuReading, GpuSample, ProcessState,
    ONLY_ONE,
};
use crate::parse::{Parser, RunInference};
use proptest::prelude::*;

const T0: Seconds = 1_780_000_000.0;

/// One partition as its log says it: (planned, completed, seconds between reports).
type Shape = (u64, u64, u16);

fn partitions() -> impl Strategy<Value = Vec<Shape>> {
    prop::collection::vec((1u64..500, 0u64..600, 1u16..900), 1..4)
}

/// A run fed its progress lines as the driver printed them, one partition after the other.
fn run_of(shapes: &[Shape], complete_said: bool) -> (Run, Seconds) {
    let mut run = Run::new(&["log".into()]);
    let mut parser = Parser::RunInference(RunInference);
    let mut at = T0;
    let mut feed = |run: &mut Run, line: String, at: Seconds| {
        run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), at);
    };
    for (i, (planned, completed, gap)) in shapes.iter().enumerate() {
        feed(&mut run, format!("Processing: P{i} (SHORT)"), at);
        feed(&mut run, format!("P{i}: {planned} prompts"), at);
        let completed = (*completed).min(*planned);
        for done in [completed / 2, completed] {
            at += f64::from(*gap);
            feed(
                &mut run,
                format!("  {done}/{planned} (0 err) 1.0 req/s avg_comp=300tok ETA=1m"),
                at,
            );
        }
    }
    if complete_said {
        feed(&mut run, "All partitions complete.".into(), at);
    }
    (run, at)
}

fn guess() -> Discovered {
    Discovered {
        server: Some(DiscoveredServer {
            pid: 7,
            engine: "vllm".into(),
            command: "vllm serve m".into(),
            health_url: "http://127.0.0.1:8000/health".into(),
            by: format!("{ONLY_ONE} (no driver found yet)"),
            serves_http: true,
            ..DiscoveredServer::default()
        }),
        ..Discovered::default()
    }
}

/// The causes only a server's figures, health or log give.
const SERVER_CAUSES: &[Cause] = &[
    Cause::ServerCrashed,
    Cause::ServerDown,
    Cause::ServerAsleep,
    Cause::ServerHung,
    Cause::ServerBusyNothingWritten,
    Cause::RequestsLost,
    Cause::ServerIdleClientWaiting,
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// No server probed, configured or tied (at most discovery's guess shown): nothing is said
    /// of a server, however long the run waits and whatever its driver does.
    #[test]
    fn no_server_evidence_no_server_claim(
        shapes in partitions(),
        guessed in any::<bool>(),
        driver in prop::option::of(any::<bool>()),
        later in 0u32..7200,
    ) {
        let (mut run, last) = run_of(&shapes, false);
        if guessed {
            run.set_discovered(guess());
        }
        if let Some(up) = driver {
            run.process_seen(Some(42), T0);
            if !up {
                run.process_seen(None, last);
            }
        }
        let now = last + f64::from(later);
        for c in evaluate(&run, None, &Rules::default(), &History::default(), now) {
            prop_assert!(
                !matches!(c.alert, AlertName::ServerDown | AlertName::ServerHung),
                "{:?} without a server: {}", c.alert, c.summary
            );
            prop_assert!(
                !c.cause.is_some_and(|cause| SERVER_CAUSES.contains(&cause)),
                "{:?} without a server: {}", c.cause, c.summary
            );
            for cause in SERVER_CAUSES {
                prop_assert!(!c.summary.contains(cause.label()), "{}", c.summary);
            }
        }
        // What `/status` and the page show of a server is the model's.
        prop_assert!(run.server().is_none());
    }

    /// "all N partitions done" (`RunFinished`) only where every partition reached its plan, or
    /// the driver's log said the run is complete.
    #[test]
    fn all_done_only_when_each_partition_is(
        shapes in partitions(),
        complete_said in any::<bool>(),
        later in 0u32..7200,
    ) {
        let (run, last) = run_of(&shapes, complete_said);
        let now = last + f64::from(later);
        let each_done = shapes.iter().all(|(planned, completed, _)| completed >= planned);
        for c in evaluate(&run, None, &Rules::default(), &History::default(), now) {
            if c.alert == AlertName::RunFinished {
                prop_assert!(each_done || complete_said, "{} for {shapes:?}", c.summary);
            }
        }
    }

    /// `ProcessExited` only for a driver the sidecar watches and does not find now.
    #[test]
    fn process_exited_only_for_a_driver_not_found(
        shapes in partitions(),
        driver in prop::option::of(any::<bool>()),
        later in 0u32..7200,
    ) {
        let (mut run, last) = run_of(&shapes, false);
        if let Some(up) = driver {
            run.process_seen(Some(42), T0);
            if !up {
                run.process_seen(None, last);
            }
        }
        let now = last + f64::from(later);
        let gone = run.process().as_ref().is_some_and(|p: &ProcessState| !p.up);
        for c in evaluate(&run, None, &Rules::default(), &History::default(), now) {
            if c.alert == AlertName::ProcessExited {
                prop_assert!(gone, "{}", c.summary);
            }
        }
    }

    /// "It may have crashed" only where every GPU's process list was read in the sidecar's
    /// own PID namespace and every process on it was told apart, none the server's; "a stale
    /// process" only for one seen here and told to be neither the server nor the driver.
    #[test]
    fn gpu_memory_lines_only_from_what_was_seen(
        pids in prop::sample::select(vec![GpuPids::NotRead, GpuPids::Ours, GpuPids::Host, GpuPids::MadeUp]),
        server in prop::option::of(1u32..50),
        gpus in prop::collection::vec(
            (any::<bool>(), prop::collection::vec((1u32..50, prop::option::of(0u8..3)), 0..3)),
            0..5,
        ),
    ) {
        let role = |r: Option<u8>| r.map(|r| ["server", "driver", "other"][usize::from(r)].to_owned());
        let reading = GpuReading {
            pids,
            devices: gpus
                .iter()
                .enumerate()
                .map(|(i, (read, procs))| GpuSample {
                    index: i as u32,
                    processes_read: *read,
                    processes: procs
                        .iter()
                        .map(|(pid, r)| GpuProcess { pid: *pid, role: role(*r), ..GpuProcess::default() })
                        .collect(),
                    ..GpuSample::default()
                })
                .collect(),
            ..GpuReading::default()
        };
        let said = reading.memory_summary(server).unwrap_or_default();
        let ours = pids == GpuPids::Ours;
        if said.contains("may have crashed") {
            let all_told = gpus.iter().all(|(read, procs)| {
                *read && procs.iter().all(|(_, r)| r.is_some_and(|r| r != 0))
            });
            prop_assert!(ours && server.is_some() && all_told && !gpus.is_empty(), "{said} for {gpus:?}");
        }
        if said.contains("stale process") {
            prop_assert!(ours && server.is_some(), "{said}");
            prop_assert!(gpus.iter().any(|(read, procs)| *read && procs.iter().any(|(_, r)| *r == Some(2))), "{said}");
        }
        if pids == GpuPids::NotRead || pids == GpuPids::MadeUp {
            prop_assert_eq!(said, "");
        }
    }
}
