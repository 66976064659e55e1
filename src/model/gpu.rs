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
    /// NVML says the GPU is lost (fallen off the bus, XID 79) or every query of it fails:
    /// the inventory and processes are the last ones read, the figures are gone.
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
}

/// Every GPU at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuReading {
    pub driver_version: Option<String>,
    pub devices: Vec<GpuSample>,
    pub at: f64,
}
