//! A scripted `libnvidia-ml.so` for tests: the sidecar loads it with `--nvml-library` and goes
//! through the same nvml-wrapper code as with the real library. The structs and return codes
//! are nvml-wrapper-sys's own, so the layouts cannot drift from what the wrapper expects.
//!
//! `FAKE_NVML_SCRIPT` names a JSON file:
//!
//! ```json
//! { "driver_version": "550.54.15", "init_error": null,
//!   "gpus": [ { "name": "NVIDIA H200", "uuid": "GPU-…", "pci_bus_id": "00000000:18:00.0",
//!               "utilization": 87, "memory_utilization": 41, "memory_total": 150000000000,
//!               "memory_used": 90000000000, "temperature": 61, "power_mw": 512000,
//!               "power_limit_mw": 700000, "sm_clock_mhz": 1980,
//!               "processes": [ { "pid": 4242, "used": 80000000000 } ] } ],
//!   "faults": [ { "kind": "block", "at": 2, "until": 62 },
//!               { "kind": "lost", "gpu": 3, "at": 1 },
//!               { "kind": "xid", "gpu": 3, "code": 79, "at": 1 },
//!               { "kind": "unknown", "at": 5, "until": 9 } ] }
//! ```
//!
//! Times are seconds since the library was first initialised in this process. `init_error`
//! (`LIB_RM_VERSION_MISMATCH`, `DRIVER_NOT_LOADED`) fails `nvmlInit_v2` until `init_error_until`.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use nvml_wrapper_sys::bindings::*;
use serde::Deserialize;
use std::ffi::{c_char, c_uint, c_ulonglong};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Script {
    driver_version: String,
    init_error: Option<String>,
    init_error_until: Option<f64>,
    gpus: Vec<Gpu>,
    faults: Vec<Fault>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Gpu {
    name: String,
    uuid: String,
    pci_bus_id: String,
    utilization: u32,
    memory_utilization: u32,
    memory_total: u64,
    memory_used: u64,
    temperature: u32,
    power_mw: u32,
    power_limit_mw: u32,
    sm_clock_mhz: u32,
    processes: Vec<Process>,
}

#[derive(Debug, Default, Deserialize)]
struct Process {
    pid: u32,
    used: u64,
}

#[derive(Debug, Deserialize)]
struct Fault {
    kind: String,
    /// `None`: every GPU, and calls that name none.
    gpu: Option<u32>,
    #[serde(default)]
    at: f64,
    until: Option<f64>,
    code: Option<u64>,
}

impl Fault {
    fn now(&self, t: f64) -> bool {
        t >= self.at && self.until.is_none_or(|u| t < u)
    }
}

fn script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let path = std::env::var("FAKE_NVML_SCRIPT").expect("FAKE_NVML_SCRIPT names the script");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
    })
}

fn elapsed() -> f64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// The fault of `kind` in force now for `gpu`, if any.
fn fault(kind: &str, gpu: Option<u32>) -> Option<&'static Fault> {
    let t = elapsed();
    script()
        .faults
        .iter()
        .find(|f| f.kind == kind && f.now(t) && (f.gpu.is_none() || f.gpu == gpu))
}

/// What every call goes through: a scripted block, then a scripted failure.
fn enter(gpu: Option<u32>) -> Result<(), nvmlReturn_t> {
    if let Some(block) = fault("block", gpu) {
        let until = block.until.unwrap_or(f64::MAX);
        while elapsed() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if fault("unknown", gpu).is_some() {
        return Err(nvmlReturn_enum_NVML_ERROR_UNKNOWN);
    }
    if gpu.is_some() && fault("lost", gpu).is_some() {
        return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
    }
    Ok(())
}

fn device(handle: nvmlDevice_t) -> Result<(u32, &'static Gpu), nvmlReturn_t> {
    let index = (handle as usize)
        .checked_sub(1)
        .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    let gpu = script()
        .gpus
        .get(index)
        .ok_or(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT)?;
    enter(Some(index as u32))?;
    Ok((index as u32, gpu))
}

macro_rules! call {
    ($body:expr) => {
        match (|| -> Result<(), nvmlReturn_t> { $body })() {
            Ok(()) => nvmlReturn_enum_NVML_SUCCESS,
            Err(code) => code,
        }
    };
}

unsafe fn copy_str(s: &str, out: *mut c_char, len: c_uint) -> Result<(), nvmlReturn_t> {
    if (s.len() + 1) > len as usize {
        return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(s.as_ptr().cast(), out, s.len());
    *out.add(s.len()) = 0;
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    let t = elapsed();
    let s = script();
    if s.init_error_until.is_none_or(|u| t < u) {
        match s.init_error.as_deref() {
            Some("LIB_RM_VERSION_MISMATCH") => {
                return nvmlReturn_enum_NVML_ERROR_LIB_RM_VERSION_MISMATCH
            }
            Some("DRIVER_NOT_LOADED") => return nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED,
            Some(_) => return nvmlReturn_enum_NVML_ERROR_UNKNOWN,
            None => {}
        }
    }
    INITS.lock().map(|mut n| *n += 1).ok();
    nvmlReturn_enum_NVML_SUCCESS
}

/// How many times the library was initialised: the test of re-initialisation reads it.
static INITS: Mutex<u64> = Mutex::new(0);

#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    nvmlReturn_enum_NVML_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(out: *mut c_char, len: c_uint) -> nvmlReturn_t {
    call!({
        enter(None)?;
        copy_str(&script().driver_version, out, len)
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    call!({
        enter(None)?;
        *count = script().gpus.len() as c_uint;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    handle: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    call!({
        if index as usize >= script().gpus.len() {
            return Err(nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
        }
        enter(Some(index))?;
        *handle = (index as usize + 1) as nvmlDevice_t;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(
    d: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    call!(copy_str(&device(d)?.1.name, out, len))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    d: nvmlDevice_t,
    out: *mut c_char,
    len: c_uint,
) -> nvmlReturn_t {
    call!(copy_str(&device(d)?.1.uuid, out, len))
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(
    d: nvmlDevice_t,
    pci: *mut nvmlPciInfo_t,
) -> nvmlReturn_t {
    call!({
        let gpu = device(d)?.1;
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        let id = &gpu.pci_bus_id;
        std::ptr::copy_nonoverlapping(
            id.as_ptr().cast(),
            info.busId.as_mut_ptr(),
            id.len().min(31),
        );
        let legacy = id.get(4..).unwrap_or("");
        std::ptr::copy_nonoverlapping(
            legacy.as_ptr().cast(),
            info.busIdLegacy.as_mut_ptr(),
            legacy.len().min(15),
        );
        *pci = info;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    d: nvmlDevice_t,
    out: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    call!({
        let gpu = device(d)?.1;
        *out = nvmlUtilization_t {
            gpu: gpu.utilization,
            memory: gpu.memory_utilization,
        };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    d: nvmlDevice_t,
    out: *mut nvmlMemory_v2_t,
) -> nvmlReturn_t {
    call!({
        let gpu = device(d)?.1;
        (*out).total = gpu.memory_total;
        (*out).used = gpu.memory_used;
        (*out).free = gpu.memory_total.saturating_sub(gpu.memory_used);
        (*out).reserved = 0;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    d: nvmlDevice_t,
    _sensor: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call!({
        *out = device(d)?.1.temperature;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call!({
        *out = device(d)?.1.power_mw;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    d: nvmlDevice_t,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call!({
        *out = device(d)?.1.power_limit_mw;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    d: nvmlDevice_t,
    clock: c_uint,
    out: *mut c_uint,
) -> nvmlReturn_t {
    call!({
        let gpu = device(d)?.1;
        if clock != nvmlClockType_enum_NVML_CLOCK_SM {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        *out = gpu.sm_clock_mhz;
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    d: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    call!({
        let gpu = device(d)?.1;
        let n = gpu.processes.len();
        if infos.is_null() || (*count as usize) < n {
            *count = n as c_uint;
            return if n == 0 {
                Ok(())
            } else {
                Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE)
            };
        }
        for (i, p) in gpu.processes.iter().enumerate() {
            *infos.add(i) = nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: p.used,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            };
        }
        *count = n as c_uint;
        Ok(())
    })
}

/// An event set: which GPUs registered, and which scripted XIDs it has handed out.
struct Set {
    gpus: Vec<u32>,
    delivered: Vec<usize>,
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut nvmlEventSet_t) -> nvmlReturn_t {
    call!({
        enter(None)?;
        let boxed = Box::new(Mutex::new(Set {
            gpus: Vec::new(),
            delivered: Vec::new(),
        }));
        *set = Box::into_raw(boxed) as nvmlEventSet_t;
        Ok(())
    })
}

unsafe fn set_of<'a>(set: nvmlEventSet_t) -> &'a Mutex<Set> {
    &*(set as *const Mutex<Set>)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    d: nvmlDevice_t,
    _types: c_ulonglong,
    set: nvmlEventSet_t,
) -> nvmlReturn_t {
    call!({
        let (index, _) = device(d)?;
        set_of(set).lock().unwrap().gpus.push(index);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: nvmlEventSet_t,
    data: *mut nvmlEventData_t,
    timeout_ms: c_uint,
) -> nvmlReturn_t {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.into());
    loop {
        if let Err(code) = enter(None) {
            return code;
        }
        let t = elapsed();
        {
            let mut set = set_of(set).lock().unwrap();
            let due = script().faults.iter().enumerate().find(|(i, f)| {
                f.kind == "xid"
                    && t >= f.at
                    && !set.delivered.contains(i)
                    && f.gpu.is_some_and(|g| set.gpus.contains(&g))
            });
            if let Some((i, f)) = due {
                set.delivered.push(i);
                let gpu = f.gpu.unwrap_or(0);
                *data = nvmlEventData_t {
                    device: (gpu as usize + 1) as nvmlDevice_t,
                    eventType: nvmlEventTypeXidCriticalError as c_ulonglong,
                    eventData: f.code.unwrap_or(0),
                    gpuInstanceId: u32::MAX,
                    computeInstanceId: u32::MAX,
                };
                return nvmlReturn_enum_NVML_SUCCESS;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return nvmlReturn_enum_NVML_ERROR_TIMEOUT;
        }
        // The real library blocks in the driver until an event or the timeout; polling every
        // 10 ms is needed only while a scripted event or block may begin, and would otherwise
        // be most of an idle sidecar's CPU in bench/idle.sh.
        let scripted = script()
            .faults
            .iter()
            .any(|f| f.kind == "xid" || f.kind == "block");
        let step = if scripted {
            Duration::from_millis(10)
        } else {
            deadline - now
        };
        std::thread::sleep(step.min(deadline - now));
    }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: nvmlEventSet_t) -> nvmlReturn_t {
    if !set.is_null() {
        drop(Box::from_raw(set as *mut Mutex<Set>));
    }
    nvmlReturn_enum_NVML_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(_code: nvmlReturn_t) -> *const c_char {
    c"scripted NVML error".as_ptr()
}
