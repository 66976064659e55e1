//! A simulated set of GPUs for `demo` and the tests: the sampler, the model and the exposition
//! run exactly as with NVML; only the numbers are made up, and every GPU is named `simulated`.

use super::{GpuProcess, GpuReader, GpuReading, GpuSample};
use crate::clock;

const MEMORY_TOTAL: u64 = 141 * 1024 * 1024 * 1024;
/// The first simulated worker's pid; made up, like everything here.
const SERVER_PID: u32 = 41000;

pub struct Simulated {
    count: u32,
}

impl Simulated {
    pub fn new(count: u32) -> Simulated {
        Simulated { count }
    }
}

impl GpuReader for Simulated {
    fn read(&mut self, processes: bool) -> Result<GpuReading, String> {
        let t = clock::now();
        let devices = (0..self.count)
            .map(|i| {
                // Busy, with a slow wave per GPU so graphs move.
                let load = 0.85 + 0.1 * ((t / 30.0) + f64::from(i)).sin();
                let used = (MEMORY_TOTAL as f64 * 0.92) as u64;
                GpuSample {
                    index: i,
                    uuid: format!("GPU-00000000-0000-0000-0000-{i:012}"),
                    name: "simulated".into(),
                    pci_bus_id: format!("00000000:{:02X}:00.0", 0x18 + i),
                    utilization: Some(load),
                    memory_utilization: Some(load * 0.6),
                    memory_used_bytes: Some(used),
                    memory_total_bytes: Some(MEMORY_TOTAL),
                    temperature_celsius: Some((45.0 + 25.0 * load).round()),
                    power_watts: Some((700.0 * load).round()),
                    power_limit_watts: Some(700.0),
                    sm_clock_hertz: Some(1.98e9),
                    // One tensor-parallel server worker per GPU, as SGLang runs them.
                    processes: if processes {
                        vec![GpuProcess {
                            pid: SERVER_PID + i,
                            name: format!("sglang::scheduler_TP{i}"),
                            used_bytes: used,
                            ..GpuProcess::default()
                        }]
                    } else {
                        Vec::new()
                    },
                    processes_read: processes,
                    failing: false,
                    lost: false,
                }
            })
            .collect();
        Ok(GpuReading {
            driver_version: Some("simulated".into()),
            devices,
            at: t,
            ..GpuReading::default()
        })
    }

    /// Its workers are made up: a pid it lists may be any process here, or none.
    fn lists_real_pids(&self) -> bool {
        false
    }
}
