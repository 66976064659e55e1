//! The GPUs as the model knows them: one reading of every GPU at one moment, whichever
//! reader (NVML or the simulation) produced it.

use serde::{Deserialize, Serialize};

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
}

/// Every GPU at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub driver_version: Option<String>,
    pub devices: Vec<GpuSample>,
    pub at: f64,
}

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

impl GpuReading {
    /// Who holds GPU memory, for triage: whether the server still does (a crashed server holds
    /// none), and which GPUs a process that is neither the server nor the driver holds (a
    /// stale process from an earlier run). `None` without per-process figures.
    pub fn memory_summary(&self, server_pid: Option<u32>) -> Option<String> {
        let rows: Vec<(u32, &GpuProcess)> = self
            .devices
            .iter()
            .flat_map(|g| g.processes.iter().map(move |p| (g.index, p)))
            .collect();
        if rows.is_empty() && server_pid.is_none() {
            return None;
        }
        let mut lines = Vec::new();
        let on = |role: &str| {
            let mut gpus: Vec<u32> = rows
                .iter()
                .filter(|(_, p)| p.role.as_deref() == Some(role))
                .map(|(g, _)| *g)
                .collect();
            gpus.sort_unstable();
            gpus.dedup();
            gpus
        };
        let server = on("server");
        match (server_pid, server.is_empty()) {
            (Some(pid), true) => lines.push(format!(
                "the server process (pid {pid}) holds no memory on any GPU: it may have crashed"
            )),
            (Some(pid), false) => lines.push(format!(
                "the server process (pid {pid}) holds memory on GPUs {}",
                ranges(&server)
            )),
            (None, _) => {}
        }
        let mut others: Vec<(u32, &str)> = rows
            .iter()
            .filter(|(_, p)| p.role.as_deref() == Some("other"))
            .map(|(_, p)| (p.pid, p.name.as_str()))
            .collect();
        others.sort_unstable();
        others.dedup();
        for (pid, name) in others {
            let mut gpus: Vec<u32> = rows
                .iter()
                .filter(|(_, p)| p.pid == pid)
                .map(|(g, _)| *g)
                .collect();
            gpus.sort_unstable();
            lines.push(format!(
                "GPUs {} held by pid {pid} ({name}), which is not the server nor the driver: a stale process from an earlier run?",
                ranges(&gpus)
            ));
        }
        (!lines.is_empty()).then(|| lines.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, procs: &[(u32, &str, &str)]) -> GpuSample {
        GpuSample {
            index,
            processes: procs
                .iter()
                .map(|(pid, name, role)| GpuProcess {
                    pid: *pid,
                    name: (*name).into(),
                    used_bytes: 1,
                    role: Some((*role).into()),
                })
                .collect(),
            ..GpuSample::default()
        }
    }

    #[test]
    fn who_holds_gpu_memory() {
        let reading = |devices| GpuReading {
            driver_version: None,
            devices,
            at: 0.0,
        };
        let healthy = reading(
            (0..8)
                .map(|i| gpu(i, &[(100 + i, "sglang", "server")]))
                .collect(),
        );
        assert_eq!(
            healthy.memory_summary(Some(99)).unwrap(),
            "the server process (pid 99) holds memory on GPUs 0–7"
        );
        let crashed = reading((0..8).map(|i| gpu(i, &[(7, "python3", "other")])).collect());
        assert_eq!(
            crashed.memory_summary(Some(99)).unwrap(),
            "the server process (pid 99) holds no memory on any GPU: it may have crashed; GPUs 0–7 held by pid 7 (python3), which is not the server nor the driver: a stale process from an earlier run?"
        );
        assert_eq!(
            reading(vec![gpu(0, &[]), gpu(1, &[])]).memory_summary(None),
            None
        );
        assert_eq!(ranges(&[0, 1, 2, 5, 7, 8]), "0–2, 5, 7–8");
    }
}
