//! GPU utilisation (and memory) through NVML, loaded at run time (`libnvidia-ml.so.1`, shipped
//! with the NVIDIA driver): the CUDA driver API does not report how busy a device is.
//!
//! Five NVML calls, bound by hand with `libloading` (the version cudarc already loads the
//! CUDA driver with, so the build gains no crate) rather than `nvml-wrapper`, which would add
//! itself, its `-sys` bindings and a proc-macro crate for these few C functions (cudarc
//! 0.19.10 has no NVML module).
//!
//! NVML numbers devices in its own order (PCI order, ignoring `CUDA_VISIBLE_DEVICES`), so a
//! CUDA device is found by its PCI bus id (`nvmlDeviceGetHandleByPciBusId_v2`), never by
//! ordinal. Without NVML (no driver, a container without the library) [`usage`] is an error
//! saying why, and callers report utilisation as absent, not 0.

use crate::error::{Error, Result};
use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr, CString};
use std::sync::OnceLock;

/// NVML's `nvmlReturn_t`: 0 is success.
type Return = c_int;
type Device = *mut c_void;

#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

#[repr(C)]
#[derive(Default)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// The library and the functions used, resolved once, then called from any thread (NVML is
/// thread-safe after `nvmlInit`).
struct Nvml {
    error_string: unsafe extern "C" fn(Return) -> *const c_char,
    by_pci_bus_id: unsafe extern "C" fn(*const c_char, *mut Device) -> Return,
    utilization: unsafe extern "C" fn(Device, *mut Utilization) -> Return,
    memory: unsafe extern "C" fn(Device, *mut Memory) -> Return,
    /// Kept loaded for the life of the process (the function pointers point into it).
    _library: libloading::Library,
}

static NVML: OnceLock<std::result::Result<Nvml, String>> = OnceLock::new();

const LIBRARY: &str = "libnvidia-ml.so.1";

/// One device's figures as NVML reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmlUsage {
    /// Percent of the last sample period in which a kernel ran.
    pub utilisation_percent: u32,
    /// Bytes in use on the device (all processes).
    pub memory_used_bytes: u64,
}

impl Nvml {
    fn load() -> std::result::Result<Nvml, String> {
        // SAFETY: loading the NVIDIA management library runs its initialisers, which have no
        // preconditions; the symbols are looked up with their documented C signatures.
        unsafe {
            let library = libloading::Library::new(LIBRARY)
                .map_err(|e| format!("NVML ({LIBRARY}) not found: {e}"))?;
            let symbol = |name: &str| format!("NVML ({LIBRARY}) lacks {name}");
            let init = *library
                .get::<unsafe extern "C" fn() -> Return>(b"nvmlInit_v2\0")
                .map_err(|_| symbol("nvmlInit_v2"))?;
            let nvml = Nvml {
                error_string: *library
                    .get(b"nvmlErrorString\0")
                    .map_err(|_| symbol("nvmlErrorString"))?,
                by_pci_bus_id: *library
                    .get(b"nvmlDeviceGetHandleByPciBusId_v2\0")
                    .map_err(|_| symbol("nvmlDeviceGetHandleByPciBusId_v2"))?,
                utilization: *library
                    .get(b"nvmlDeviceGetUtilizationRates\0")
                    .map_err(|_| symbol("nvmlDeviceGetUtilizationRates"))?,
                memory: *library
                    .get(b"nvmlDeviceGetMemoryInfo\0")
                    .map_err(|_| symbol("nvmlDeviceGetMemoryInfo"))?,
                _library: library,
            };
            // Never shut down: the process reads it every heartbeat until it exits.
            nvml.check("nvmlInit_v2", init())?;
            Ok(nvml)
        }
    }

    fn check(&self, call: &str, code: Return) -> std::result::Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: nvmlErrorString returns a static NUL-terminated string for any code.
        let text = unsafe { (self.error_string)(code) };
        let text = if text.is_null() {
            String::from("unknown error")
        } else {
            // SAFETY: non-null, NUL-terminated, static (above).
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        };
        Err(format!("{call} failed: {text} (NVML error {code})"))
    }

    fn device_usage(&self, bus_id: &str) -> std::result::Result<NvmlUsage, String> {
        let id = CString::new(bus_id).map_err(|_| format!("bad PCI bus id {bus_id:?}"))?;
        let mut device: Device = std::ptr::null_mut();
        let mut rates = Utilization::default();
        let mut memory = Memory::default();
        // SAFETY: valid NUL-terminated id and out-pointers to live, correctly laid out structs.
        unsafe {
            self.check(
                "nvmlDeviceGetHandleByPciBusId_v2",
                (self.by_pci_bus_id)(id.as_ptr(), &mut device),
            )?;
            self.check(
                "nvmlDeviceGetUtilizationRates",
                (self.utilization)(device, &mut rates),
            )?;
            self.check(
                "nvmlDeviceGetMemoryInfo",
                (self.memory)(device, &mut memory),
            )?;
        }
        Ok(NvmlUsage {
            utilisation_percent: rates.gpu.min(100),
            memory_used_bytes: memory.used,
        })
    }
}

/// NVML's figures for each CUDA device, given the devices' PCI bus ids in CUDA ordinal order:
/// `None` for a device NVML cannot answer for (one failing device does not hide the others).
/// An error, saying why, when NVML itself is unavailable.
pub fn usage(bus_ids: &[String]) -> Result<Vec<Option<NvmlUsage>>> {
    let nvml = NVML
        .get_or_init(Nvml::load)
        .as_ref()
        .map_err(|why| Error::DeviceUnavailable(why.clone()))?;
    Ok(bus_ids
        .iter()
        .map(|id| match nvml.device_usage(id) {
            Ok(usage) => Some(usage),
            Err(why) => {
                tracing::debug!(bus_id = %id, error = %why, "NVML has no figures for a device");
                None
            }
        })
        .collect())
}

/// A PCI address as NVML's `nvmlDeviceGetHandleByPciBusId_v2` takes it
/// (`domain:bus:device.function`, hex), from the CUDA driver's domain, bus and device
/// attributes (a GPU is function 0).
pub fn pci_bus_id(domain: i32, bus: i32, device: i32) -> String {
    format!("{domain:08x}:{bus:02x}:{device:02x}.0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_ids_are_written_as_nvml_reads_them() {
        assert_eq!(pci_bus_id(0, 0x3b, 0), "00000000:3b:00.0");
        assert_eq!(pci_bus_id(1, 0xaf, 0x1f), "00000001:af:1f.0");
    }

    /// On a host without NVML (CI) the answer is an error naming the library, every time;
    /// with NVML, an unknown bus id is `None` rather than an error for every device.
    #[test]
    fn without_nvml_usage_is_an_error_and_an_unknown_device_is_absent() {
        let unknown = [pci_bus_id(0xffff, 0xff, 0x1f)];
        match usage(&unknown) {
            Ok(figures) => assert_eq!(figures, vec![None]),
            Err(e) => {
                assert!(e.to_string().contains("NVML"), "{e}");
                assert_eq!(usage(&[]).unwrap_err().to_string(), e.to_string());
            }
        }
    }
}
