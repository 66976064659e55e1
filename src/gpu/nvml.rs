//! The real GPUs, through NVML. `libnvidia-ml.so.1` is loaded at run time, so the binary
//! builds and runs on machines without a GPU; there [`NvmlReader::init`] returns an error.

use super::{process_name, GpuProcess, GpuReader, GpuReading, GpuSample};
use crate::model::Run;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::sync::{Arc, Mutex};

pub struct NvmlReader {
    nvml: Arc<Nvml>,
}

impl NvmlReader {
    /// NVML from `library`, or `libnvidia-ml.so.1` from the library path: one code path,
    /// nvml-wrapper's builder, for the real library and the tests' scripted one.
    pub fn init(library: Option<&std::path::Path>) -> Result<NvmlReader, String> {
        let mut builder = Nvml::builder();
        if let Some(path) = library {
            builder.lib_path(path.as_os_str());
        }
        builder
            .init()
            .map(|nvml| NvmlReader {
                nvml: Arc::new(nvml),
            })
            .map_err(|e| diagnose(&e, library))
    }

    pub fn nvml(&self) -> Arc<Nvml> {
        self.nvml.clone()
    }
}

impl GpuReader for NvmlReader {
    fn read(&mut self, processes: bool) -> Result<GpuReading, String> {
        let count = self.nvml.device_count().map_err(|e| e.to_string())?;
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            // A GPU that fell off the bus fails here; the others are still read, and the
            // missing one shows as fewer GPUs.
            match self.nvml.device_by_index(index) {
                Ok(device) => devices.push(sample(index, &device, processes)),
                Err(e) => tracing::debug!("GPU {index}: {e}"),
            }
        }
        Ok(GpuReading {
            driver_version: self.nvml.sys_driver_version().ok(),
            devices,
            at: 0.0,
        })
    }
}

/// What an init failure means for the person reading the log.
fn diagnose(e: &NvmlError, library: Option<&std::path::Path>) -> String {
    match e {
        NvmlError::LibRmVersionMismatch => format!(
            "NVML cannot start: the NVIDIA driver loaded in the kernel and its user-space library ({e}) are different versions; this usually means the driver was upgraded and the node needs a reboot (or the old kernel module unloaded)"
        ),
        NvmlError::DriverNotLoaded => {
            format!("NVML cannot start: the NVIDIA kernel driver is not loaded ({e})")
        }
        NvmlError::LibloadingError(_) => match library {
            Some(path) => format!("cannot load NVML from {} ({e})", path.display()),
            None => format!("NVML is not available ({e}); is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path?"),
        },
        _ => format!("NVML cannot start ({e})"),
    }
}

fn sample(index: u32, device: &Device<'_>, processes: bool) -> GpuSample {
    let utilization = device.utilization_rates().ok();
    let memory = device.memory_info().ok();
    GpuSample {
        index,
        uuid: device.uuid().unwrap_or_default(),
        name: device.name().unwrap_or_default(),
        pci_bus_id: device.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        utilization: utilization.as_ref().map(|u| f64::from(u.gpu) / 100.0),
        memory_utilization: utilization.as_ref().map(|u| f64::from(u.memory) / 100.0),
        memory_used_bytes: memory.as_ref().map(|m| m.used),
        memory_total_bytes: memory.as_ref().map(|m| m.total),
        temperature_celsius: device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .map(f64::from),
        power_watts: device.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        power_limit_watts: device
            .enforced_power_limit()
            .ok()
            .map(|mw| f64::from(mw) / 1000.0),
        sm_clock_hertz: device
            .clock_info(Clock::SM)
            .ok()
            .map(|mhz| f64::from(mhz) * 1e6),
        processes: if processes {
            device
                .running_compute_processes()
                .unwrap_or_default()
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    name: process_name(p.pid),
                    used_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => bytes,
                        UsedGpuMemory::Unavailable => 0,
                    },
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Counts critical XID errors per GPU, on a thread of its own: NVML's event wait blocks.
/// Returns an error when the event set cannot be registered (not supported on every GPU or
/// driver); the sampler works without it.
pub fn start_xid_watcher(nvml: Arc<Nvml>, run: Arc<Mutex<Run>>) -> Result<(), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gpu-xid".into())
        .spawn(move || {
            let set = match register(&nvml) {
                Ok(set) => {
                    let _ = ready_tx.send(Ok(()));
                    set
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            loop {
                match set.wait(1000) {
                    Ok(event) => {
                        let uuid = event.device.uuid().unwrap_or_default();
                        let xid = match event.event_data {
                            Some(XidError::Value(v)) => v.to_string(),
                            _ => "unknown".into(),
                        };
                        tracing::warn!("GPU {uuid}: critical XID error {xid}");
                        let mut run = run.lock().unwrap_or_else(|e| e.into_inner());
                        *run.xid_errors.entry(uuid).or_default() += 1;
                    }
                    Err(NvmlError::Timeout) => {}
                    Err(e) => {
                        tracing::warn!(
                            "waiting for GPU XID events failed ({e}); no longer counting them"
                        );
                        return;
                    }
                }
            }
        })
        .map_err(|e| e.to_string())?;
    ready_rx.recv().map_err(|e| e.to_string())?
}

fn register(nvml: &Nvml) -> Result<nvml_wrapper::EventSet<'_>, String> {
    let mut set = nvml.create_event_set().map_err(|e| e.to_string())?;
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| e.to_string())?;
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| format!("GPU {index}: {}", e.error))?;
    }
    Ok(set)
}
