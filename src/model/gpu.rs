//! The GPUs as the model knows them: one reading of every GPU at one moment, whichever
//! reader (NVML or the simulation) produced it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One GPU as read at one moment. A query the GPU does not support leaves its field `None`;
/// it never hides the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub pci_bus_id: String,
    pub utilization: Option<f64>,
    pub memory_utilization: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_celsius: Option<f64>,
    pub power_watts: Option<f64>,
    pub power_limit_watts: Option<f64>,
    pub sm_clock_hertz: Option<f64>,
    /// Processes using the GPU, when asked for (`gpu_processes = true`).
    pub processes: Vec<GpuProcess>,
    /// NVML answered this GPU's process list in this reading, so `processes` is all of them.
    /// Not where they were not asked for, where the query failed (an empty list then says
    /// nothing), nor on a failing GPU's row, whose list is the last one read.
    #[serde(default)]
    pub processes_read: bool,
    /// NVML cannot read the GPU now: the inventory and processes are the last ones read, the
    /// figures are gone (`pulse_gpu_up` 0).
    #[serde(default)]
    pub failing: bool,
    /// And the reason is that NVML says it is lost (fallen off the bus, XID 79): `GpuLost`.
    #[serde(default)]
    pub lost: bool,
}

/// The XID codes NVIDIA documents as critical (a GPU reset or a node drain follows), each its
/// own label value of `pulse_gpu_xid_errors_total`; any other code counts as `other`, so a
/// driver that reports free-form codes cannot grow the label set.
pub const CRITICAL_XIDS: [u64; 18] = [
    13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120,
];

/// The label value an XID code is counted under.
pub fn xid_label(code: u64) -> String {
    if CRITICAL_XIDS.contains(&code) {
        code.to_string()
    } else {
        "other".to_owned()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub name: String,
    pub used_bytes: u64,
    /// `server` or `driver` when the process is the inference server or the pipeline's driver
    /// (or a child of one: SGLang's and vLLM's workers are), `other` when it is neither, `None`
    /// when neither is known.
    #[serde(default)]
    pub role: Option<String>,
    /// Its pid in its own PID namespace (a container's), where that is not the sidecar's:
    /// what `ps` shows beside it.
    #[serde(default)]
    pub inner_pid: Option<u32>,
}

/// Whose pids the GPUs' process lists hold, as far as the sidecar can tell: what may be said
/// of who holds GPU memory (docs/deploy.md#what-each-deployment-sees).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuPids {
    /// Not read (`gpu_processes` off): nothing is known of who holds GPU memory, so nothing
    /// is said of it.
    #[default]
    NotRead,
    /// This PID namespace's: the sidecar runs in the host's, whose pids NVML lists, and each
    /// process it can see was told to the server, the driver or neither by its ancestry.
    Ours,
    /// The host's, read from another PID namespace (a container's, a pod's) that cannot map
    /// them: the driver does not translate pids (NVIDIA/nvidia-docker#1483), and a host pid
    /// may name another process here, or none.
    Host,
    /// Made up by the simulation: no process of this machine.
    MadeUp,
}

/// Every GPU at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub driver_version: Option<String>,
    pub devices: Vec<GpuSample>,
    pub at: f64,
    #[serde(default)]
    pub pids: GpuPids,
}

/// What is said where the process lists hold the host's pids.
pub const PIDS_IN_ANOTHER_NAMESPACE: &str = "the GPU processes live in another PID namespace (NVML lists the host's pids): per-process memory cannot be told to the server or the driver here";

/// Indexes as ranges, `0–3, 5`.
fn ranges(indexes: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indexes.len() {
        let start = indexes[i];
        let mut end = start;
        while i + 1 < indexes.len() && indexes[i + 1] == end + 1 {
            i += 1;
            end = indexes[i];
        }
        out.push(if end == start {
            start.to_string()
        } else {
            format!("{start}–{end}")
        });
        i += 1;
    }
    out.join(", ")
}

/// `GPU 3` or `GPUs 0–3, 5`.
fn gpus(indexes: &[u32]) -> String {
    let word = if indexes.len() == 1 { "GPU" } else { "GPUs" };
    format!("{word} {}", ranges(indexes))
}

impl GpuReading {
    /// Who holds GPU memory, for triage, from what was seen only: whether the server still
    /// does, and which GPUs a process that is neither the server nor the driver holds (a stale
    /// one from an earlier run). `None` without per-process figures or without a known server:
    /// a process NVML lists cannot be said not to be the server's when the server is not known.
    ///
    /// "Holds no memory: it may have crashed" needs every GPU's list read and every process
    /// on them seen here and told apart; a process that could not be (gone before it was
    /// looked up, hidden from this user) might be the server's.
    pub fn memory_summary(&self, server_pid: Option<u32>) -> Option<String> {
        match self.pids {
            GpuPids::NotRead | GpuPids::MadeUp => return None,
            GpuPids::Host => return Some(PIDS_IN_ANOTHER_NAMESPACE.to_owned()),
            GpuPids::Ours => {}
        }
        let pid = server_pid?;
        let read: Vec<&GpuSample> = self.devices.iter().filter(|g| g.processes_read).collect();
        let rows: Vec<(u32, &GpuProcess)> = read
            .iter()
            .flat_map(|g| g.processes.iter().map(move |p| (g.index, p)))
            .collect();
        let all_told =
            read.len() == self.devices.len() && rows.iter().all(|(_, p)| p.role.is_some());
        let mut lines = Vec::new();
        let mut server: Vec<u32> = rows
            .iter()
            .filter(|(_, p)| p.role.as_deref() == Some("server"))
            .map(|(g, _)| *g)
            .collect();
        server.sort_unstable();
        server.dedup();
        if !server.is_empty() {
            lines.push(format!(
                "the server process (pid {pid}) holds memory on {}",
                gpus(&server)
            ));
        } else if all_told && !self.devices.is_empty() {
            lines.push(format!(
                "the server process (pid {pid}) holds no memory on any GPU: it may have crashed"
            ));
        }
        let mut others: Vec<(u32, &str, Option<u32>)> = rows
            .iter()
            .filter(|(_, p)| p.role.as_deref() == Some("other"))
            .map(|(_, p)| (p.pid, p.name.as_str(), p.inner_pid))
            .collect();
        others.sort_unstable();
        others.dedup();
        for (other, name, inner) in others {
            let name = match inner {
                Some(inner) => format!("{name}, pid {inner} in its own PID namespace"),
                None => name.to_owned(),
            };
            let mut held: Vec<u32> = rows
                .iter()
                .filter(|(_, p)| p.pid == other)
                .map(|(g, _)| *g)
                .collect();
            held.sort_unstable();
            lines.push(format!(
                "{} held by pid {other} ({name}), which is not the server nor the driver: a stale process from an earlier run?",
                gpus(&held)
            ));
        }
        (!lines.is_empty()).then(|| lines.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU whose process list was read: each process with its role, `None` where it could
    /// not be told.
    fn gpu(index: u32, procs: &[(u32, &str, Option<&str>)]) -> GpuSample {
        GpuSample {
            index,
            processes: procs
                .iter()
                .map(|(pid, name, role)| GpuProcess {
                    pid: *pid,
                    name: (*name).into(),
                    used_bytes: 1,
                    role: role.map(str::to_owned),
                    ..GpuProcess::default()
                })
                .collect(),
            processes_read: true,
            ..GpuSample::default()
        }
    }

    fn reading(pids: GpuPids, devices: Vec<GpuSample>) -> GpuReading {
        GpuReading {
            driver_version: None,
            devices,
            at: 0.0,
            pids,
        }
    }

    #[test]
    fn who_holds_gpu_memory() {
        let healthy = reading(
            GpuPids::Ours,
            (0..8)
                .map(|i| gpu(i, &[(100 + i, "sglang", Some("server"))]))
                .collect(),
        );
        assert_eq!(
            healthy.memory_summary(Some(99)).unwrap(),
            "the server process (pid 99) holds memory on GPUs 0–7"
        );
        let crashed = reading(
            GpuPids::Ours,
            (0..8)
                .map(|i| gpu(i, &[(7, "python3", Some("other"))]))
                .collect(),
        );
        assert_eq!(
            crashed.memory_summary(Some(99)).unwrap(),
            "the server process (pid 99) holds no memory on any GPU: it may have crashed; GPUs 0–7 held by pid 7 (python3), which is not the server nor the driver: a stale process from an earlier run?"
        );
        assert_eq!(
            reading(GpuPids::Ours, vec![gpu(0, &[]), gpu(1, &[])]).memory_summary(None),
            None
        );
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0–2, 5, 7–8");
    }

    #[test]
    fn without_per_process_figures_nothing_is_said() {
        // `gpu_processes` off: the lists are empty because they were not read.
        let not_read = reading(
            GpuPids::NotRead,
            (0..8)
                .map(|index| GpuSample {
                    index,
                    memory_used_bytes: Some(60 << 30),
                    ..GpuSample::default()
                })
                .collect(),
        );
        assert_eq!(not_read.memory_summary(Some(99)), None);
        let made_up = reading(
            GpuPids::MadeUp,
            (0..8)
                .map(|i| gpu(i, &[(41000 + i, "sglang::scheduler", None)]))
                .collect(),
        );
        assert_eq!(made_up.memory_summary(Some(99)), None);
    }

    #[test]
    fn host_pids_seen_from_another_namespace_are_said_once_and_judged_never() {
        let host = reading(
            GpuPids::Host,
            (0..8).map(|i| gpu(i, &[(4000123, "", None)])).collect(),
        );
        assert_eq!(
            host.memory_summary(Some(5)).as_deref(),
            Some(PIDS_IN_ANOTHER_NAMESPACE)
        );
        assert_eq!(
            host.memory_summary(None).as_deref(),
            Some(PIDS_IN_ANOTHER_NAMESPACE)
        );
    }

    #[test]
    fn the_server_is_called_gone_only_when_every_process_was_told_apart() {
        // Pid 8 could not be looked up (gone, or hidden from this user): it may be the
        // server's worker, so the server's absence is not said.
        let untold = reading(
            GpuPids::Ours,
            vec![
                gpu(0, &[(7, "python3", Some("other"))]),
                gpu(1, &[(8, "", None)]),
            ],
        );
        assert_eq!(
            untold.memory_summary(Some(99)).unwrap(),
            "GPU 0 held by pid 7 (python3), which is not the server nor the driver: a stale process from an earlier run?"
        );
        // A GPU whose list NVML did not give: its processes are not known.
        let mut unread = reading(GpuPids::Ours, vec![gpu(0, &[]), gpu(1, &[])]);
        unread.devices[1].processes_read = false;
        assert_eq!(unread.memory_summary(Some(99)), None);
        // Every list read, every process told apart, none the server's.
        let gone = reading(
            GpuPids::Ours,
            vec![gpu(0, &[]), gpu(1, &[(3, "trainer", Some("driver"))])],
        );
        assert_eq!(
            gone.memory_summary(Some(99)).unwrap(),
            "the server process (pid 99) holds no memory on any GPU: it may have crashed"
        );
        // A leftover in a container, seen from the host: named as `ps` shows it there too.
        let mut leftover = gpu(0, &[(4000123, "python3", Some("other"))]);
        leftover.processes[0].inner_pid = Some(5);
        assert_eq!(
            reading(GpuPids::Ours, vec![leftover, gpu(1, &[(100, "sglang", Some("server"))])])
                .memory_summary(Some(99))
                .unwrap(),
            "the server process (pid 99) holds memory on GPU 1; GPU 0 held by pid 4000123 (python3, pid 5 in its own PID namespace), which is not the server nor the driver: a stale process from an earlier run?"
        );
        // Without a known server, a process cannot be said not to be the server's.
        assert_eq!(
            reading(
                GpuPids::Ours,
                vec![gpu(0, &[(7, "python3", Some("other"))])]
            )
            .memory_summary(None),
            None
        );
    }
}

/// The GPUs' facts in the run, as the GPU source and the XID watcher told them. Whether NVML
/// hangs is the model's one kind of hung ([`super::Calls`]).
#[derive(Debug, Clone, Default)]
pub struct Gpus {
    /// The latest reading; `None` until one succeeded.
    reading: Option<GpuReading>,
    /// Critical XID errors per (GPU UUID, code label) since the sidecar started.
    xid_errors: BTreeMap<(String, String), u64>,
    /// The last XID code per GPU UUID, for the `GpuLost` email.
    last_xid: BTreeMap<String, u64>,
    /// GPU time the run has held while it was at work: its cost, kept across restarts.
    seconds: f64,
}

impl Gpus {
    pub fn reading(&self) -> &Option<GpuReading> {
        &self.reading
    }

    pub fn xid_errors(&self) -> &BTreeMap<(String, String), u64> {
        &self.xid_errors
    }

    pub fn last_xid(&self) -> &BTreeMap<String, u64> {
        &self.last_xid
    }

    #[cfg(test)]
    pub(super) fn reading_mut(&mut self) -> &mut Option<GpuReading> {
        &mut self.reading
    }

    pub fn seconds(&self) -> f64 {
        self.seconds
    }

    /// Takes a new reading, counting the GPUs held since the last one where the run was at
    /// `work` and the readings are no more than `gap` apart (idle time between runs, or a
    /// sampler that was stuck, is not the run's).
    pub(super) fn take(&mut self, reading: GpuReading, work: bool, gap: super::Seconds) {
        if let Some(last) = &self.reading {
            let dt = reading.at - last.at;
            if work && dt > 0.0 && dt <= gap {
                self.seconds += last.devices.len() as f64 * dt;
            }
        }
        self.reading = Some(reading);
    }

    /// A new run begins: the GPU time held so far was the run before's.
    pub(super) fn new_run(&mut self) {
        self.seconds = 0.0;
    }

    /// A critical XID error on GPU `uuid`; `code` where NVML said it.
    pub(super) fn xid_error(&mut self, uuid: String, code: Option<u64>) {
        let label = code.map_or_else(|| "other".to_owned(), xid_label);
        *self.xid_errors.entry((uuid.clone(), label)).or_default() += 1;
        if let Some(code) = code {
            self.last_xid.insert(uuid, code);
        }
    }
}

/// A snapshot keeps of the GPUs only the time the run held them, as the number it always
/// was (`gpu_seconds`), so snapshots written before the GPUs' facts were grouped still read.
pub(super) mod held_seconds {
    use super::Gpus;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(gpus: &Gpus, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_f64(gpus.seconds)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Gpus, D::Error> {
        Ok(Gpus {
            seconds: f64::deserialize(from)?,
            ..Gpus::default()
        })
    }
}
