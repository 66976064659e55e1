//! The real GPUs, through NVML. `libnvidia-ml.so.1` is loaded at run time, so the binary
//! builds and runs on machines without a GPU; there [`NvmlReader::init`] returns an error.
//!
//! What GPUs do to exporters, and what this reader does about it:
//! - a GPU that cannot be read keeps its inventory row (the last name, UUID, PCI id and
//!   processes read) marked `failing`, and `lost` too when NVML answers `GPU_IS_LOST` (fallen
//!   off the bus, XID 79); the others are still read;
//! - after repeated failed reads or a lost GPU, NVML is shut down and initialised again, with
//!   backoff, so a driver reload or a GPU reset recovers without restarting the sidecar;
//! - the XID watcher has its own NVML handle and registers again after an error.
//!
//! A call that hangs is the sampler's concern ([`super::GpuSource`] gives it a deadline).

use super::{GpuProcess, GpuReader, GpuReading, GpuSample};
use crate::lock::Locked;
use crate::model::Run;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failed reads in a row (or reads with a lost GPU) before NVML is initialised again.
const REINIT_AFTER: u32 = 3;
const BACKOFF_FIRST: Duration = Duration::from_secs(5);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

pub struct NvmlReader {
    nvml: Nvml,
    library: Option<PathBuf>,
    /// The last readable sample of each GPU, by index: a lost GPU's inventory row.
    last: BTreeMap<u32, GpuSample>,
    failures: u32,
    next_reinit: Option<Instant>,
    backoff: Duration,
}

impl NvmlReader {
    /// NVML from `library`, or `libnvidia-ml.so.1` from the library path: one code path,
    /// nvml-wrapper's builder, for the real library and the tests' scripted one.
    pub fn init(library: Option<&Path>) -> Result<NvmlReader, String> {
        Ok(NvmlReader {
            nvml: open(library)?,
            library: library.map(Path::to_owned),
            last: BTreeMap::new(),
            failures: 0,
            next_reinit: None,
            backoff: BACKOFF_FIRST,
        })
    }

    /// After repeated failures, shuts NVML down and initialises it again, no more often than
    /// the backoff allows.
    fn recover(&mut self) {
        if self.failures < REINIT_AFTER || self.next_reinit.is_some_and(|t| Instant::now() < t) {
            return;
        }
        match open(self.library.as_deref()) {
            Ok(nvml) => {
                tracing::info!(
                    "NVML initialised again after {} failed reads",
                    self.failures
                );
                // The old handle's Drop shuts it down.
                self.nvml = nvml;
                self.failures = 0;
                self.next_reinit = None;
                self.backoff = BACKOFF_FIRST;
            }
            Err(e) => {
                tracing::warn!(
                    "initialising NVML again failed: {e}; next try in {:?}",
                    self.backoff
                );
                self.next_reinit = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

fn open(library: Option<&Path>) -> Result<Nvml, String> {
    let mut builder = Nvml::builder();
    if let Some(path) = library {
        builder.lib_path(path.as_os_str());
    }
    builder.init().map_err(|e| diagnose(&e, library))
}

impl GpuReader for NvmlReader {
    fn read(&mut self, processes: bool) -> Result<GpuReading, String> {
        let count = match self.nvml.device_count() {
            Ok(count) => count,
            Err(e) => {
                self.failures += 1;
                self.recover();
                return Err(e.to_string());
            }
        };
        let mut devices = Vec::with_capacity(count as usize);
        let mut any_failing = false;
        for index in 0..count {
            let read = self
                .nvml
                .device_by_index(index)
                .and_then(|device| sample(index, &device, processes));
            match read {
                Ok(sample) => {
                    self.last.insert(index, sample.clone());
                    devices.push(sample);
                }
                Err(e) => {
                    // Lost (or failing on every query): the last inventory row, marked so.
                    tracing::debug!("GPU {index}: {e}");
                    any_failing = true;
                    let mut row = self.last.get(&index).cloned().unwrap_or(GpuSample {
                        index,
                        ..GpuSample::default()
                    });
                    row.failing = true;
                    row.processes_read = false;
                    row.lost = matches!(e, NvmlError::GpuLost);
                    devices.push(row);
                }
            }
        }
        let driver_version = self.nvml.sys_driver_version().ok();
        if any_failing {
            self.failures += 1;
            self.recover();
        } else {
            self.failures = 0;
        }
        Ok(GpuReading {
            driver_version,
            devices,
            ..GpuReading::default()
        })
    }
}

/// What an init failure means for the person reading the log.
fn diagnose(e: &NvmlError, library: Option<&Path>) -> String {
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

/// One GPU. Its UUID is asked first: a GPU that cannot say even that is failing, and the
/// caller keeps its last inventory row. Any other query that fails leaves its field `None`.
fn sample(index: u32, device: &Device<'_>, processes: bool) -> Result<GpuSample, NvmlError> {
    let uuid = device.uuid()?;
    let utilization = device.utilization_rates().ok();
    // Named and told apart by the source, which knows whose pids these are.
    let listed = processes.then(|| {
        device.running_compute_processes().map(|list| {
            list.into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    used_bytes: match p.used_gpu_memory {
                        UsedGpuMemory::Used(bytes) => bytes,
                        UsedGpuMemory::Unavailable => 0,
                    },
                    ..GpuProcess::default()
                })
                .collect::<Vec<_>>()
        })
    });
    let memory = device.memory_info().ok();
    Ok(GpuSample {
        index,
        uuid,
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
        processes_read: matches!(listed, Some(Ok(_))),
        processes: listed.and_then(Result::ok).unwrap_or_default(),
        failing: false,
        lost: false,
    })
}

/// Counts critical XID errors per GPU and code, on a thread of its own (NVML's event wait
/// blocks) with its own NVML handle. Returns an error when the first registration fails (not
/// every GPU or driver supports it); the sampler works without it. After a later error it
/// initialises and registers again, with backoff, instead of stopping for good.
pub fn start_xid_watcher(library: Option<PathBuf>, run: Arc<Mutex<Run>>) -> Result<(), String> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("gpu-xid".into())
        .spawn(move || {
            let mut ready = Some(ready_tx);
            let mut backoff = BACKOFF_FIRST;
            loop {
                let watched: Result<(), String> = open(library.as_deref()).and_then(|nvml| {
                    let (set, gpus) = register(&nvml)?;
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(Ok(()));
                    }
                    backoff = BACKOFF_FIRST;
                    Err(watch(&set, &gpus, &run))
                });
                let Err(e) = watched else { continue };
                if let Some(tx) = ready.take() {
                    let _ = tx.send(Err(e));
                    return;
                }
                tracing::warn!(
                    "waiting for GPU XID events failed ({e}); registering again in {backoff:?}"
                );
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        })
        .map_err(|e| e.to_string())?;
    ready_rx.recv().map_err(|e| e.to_string())?
}

/// Waits for events until an error other than a timeout; returns that error.
fn watch(
    set: &nvml_wrapper::EventSet<'_>,
    gpus: &[(usize, u32, String)],
    run: &Mutex<Run>,
) -> String {
    loop {
        match set.wait(1000) {
            Ok(event) => {
                // SAFETY: the handle is only compared with those recorded at registration.
                let handle = unsafe { event.device.handle() } as usize;
                let (index, uuid) = gpus
                    .iter()
                    .find(|(h, _, _)| *h == handle)
                    .map(|(_, i, u)| (i.to_string(), u.clone()))
                    .unwrap_or_else(|| ("?".into(), event.device.uuid().unwrap_or_default()));
                let code = match event.event_data {
                    Some(XidError::Value(v)) => Some(v),
                    _ => None,
                };
                tracing::warn!(
                    "GPU {index} ({uuid}): critical XID error {}",
                    code.map_or("of unknown code".to_owned(), |c| c.to_string())
                );
                run.locked().xid_error(uuid, code);
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => return e.to_string(),
        }
    }
}

/// The event set, and each registered GPU's handle, index and UUID (a lost GPU's events still
/// name it, though it can no longer say its UUID).
type Registered<'n> = (nvml_wrapper::EventSet<'n>, Vec<(usize, u32, String)>);

fn register(nvml: &Nvml) -> Result<Registered<'_>, String> {
    let mut set = nvml.create_event_set().map_err(|e| e.to_string())?;
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    let mut gpus = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| e.to_string())?;
        // SAFETY: the handle is kept only to compare with the events' handles.
        let handle = unsafe { device.handle() } as usize;
        gpus.push((handle, index, device.uuid().unwrap_or_default()));
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| format!("GPU {index}: {}", e.error))?;
    }
    Ok((set, gpus))
}

/// `gpu-check`: initialises NVML, times every query the sampler makes on every GPU, and
/// registers the XID event set, as a table. For a real node (`scripts/gpu-smoke.sh`) and for
/// the tests' scripted library alike.
pub fn check(library: Option<&Path>) -> Result<String, String> {
    use std::fmt::Write;
    let started = Instant::now();
    let nvml = open(library)?;
    let mut out = format!("nvmlInit_v2\t{:.3} ms\n", ms(started));
    let time = |out: &mut String, what: &str, f: &mut dyn FnMut() -> Result<String, NvmlError>| {
        let t = Instant::now();
        let result = f();
        let _ = writeln!(
            out,
            "{what}\t{:.3} ms\t{}",
            ms(t),
            result.unwrap_or_else(|e| format!("error: {e}"))
        );
    };
    time(&mut out, "driver version", &mut || {
        nvml.sys_driver_version()
    });
    let count = nvml.device_count().map_err(|e| e.to_string())?;
    let _ = writeln!(out, "GPUs\t{count}");
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(d) => d,
            Err(e) => {
                let _ = writeln!(out, "GPU {index}\terror: {e}");
                continue;
            }
        };
        let q = |name: &str| format!("GPU {index} {name}");
        time(&mut out, &q("uuid"), &mut || device.uuid());
        time(&mut out, &q("name"), &mut || device.name());
        time(&mut out, &q("pci"), &mut || {
            device.pci_info().map(|p| p.bus_id)
        });
        time(&mut out, &q("utilization"), &mut || {
            device
                .utilization_rates()
                .map(|u| format!("{}% {}%", u.gpu, u.memory))
        });
        time(&mut out, &q("memory"), &mut || {
            device
                .memory_info()
                .map(|m| format!("{} / {} bytes", m.used, m.total))
        });
        time(&mut out, &q("temperature"), &mut || {
            device
                .temperature(TemperatureSensor::Gpu)
                .map(|t| format!("{t} C"))
        });
        time(&mut out, &q("power"), &mut || {
            device.power_usage().map(|p| format!("{p} mW"))
        });
        time(&mut out, &q("power limit"), &mut || {
            device.enforced_power_limit().map(|p| format!("{p} mW"))
        });
        time(&mut out, &q("sm clock"), &mut || {
            device.clock_info(Clock::SM).map(|c| format!("{c} MHz"))
        });
        time(&mut out, &q("processes"), &mut || {
            device
                .running_compute_processes()
                .map(|p| format!("{} processes", p.len()))
        });
    }
    let t = Instant::now();
    let registered = register(&nvml).map(|(_, gpus)| format!("{} GPUs registered", gpus.len()));
    let _ = writeln!(
        out,
        "XID event set\t{:.3} ms\t{}",
        ms(t),
        registered.unwrap_or_else(|e| format!("error: {e}"))
    );
    Ok(out)
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
