//! The GPUs a host has, as a worker reports them to its manager: name, memory and compute
//! capability when it joins, memory in use with each heartbeat. Needs only the CUDA driver
//! (not NVRTC); without one the answer is an error saying why, never a panic.

use super::driver::{driver_present, drv};
use crate::device::ptx::guarded;
use crate::error::Result;
use cudarc::driver::CudaContext;
use std::sync::{Arc, OnceLock};

/// One context per GPU, kept for the memory queries of every heartbeat: releasing the last
/// reference to a device's primary context tears it down, and creating it again costs far
/// more than the query.
static CONTEXTS: OnceLock<Vec<Arc<CudaContext>>> = OnceLock::new();

/// One GPU as the CUDA driver describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    pub memory_bytes: u64,
    pub compute_capability: (i32, i32),
}

/// A context on every GPU the driver sees, made on first use. Call under [`guarded`].
fn contexts() -> Result<&'static [Arc<CudaContext>]> {
    if let Some(contexts) = CONTEXTS.get() {
        return Ok(contexts);
    }
    let count = drv("cuDeviceGetCount", CudaContext::device_count())?;
    let contexts = (0..usize::try_from(count).unwrap_or(0))
        .map(|ordinal| drv("context creation", CudaContext::new(ordinal)))
        .collect::<Result<Vec<_>>>()?;
    Ok(CONTEXTS.get_or_init(|| contexts))
}

/// Every GPU the driver sees (an empty list on a driver without devices), or why none can be
/// listed (no driver, a driver that fails).
pub fn list_gpus() -> Result<Vec<GpuInfo>> {
    driver_present()?;
    guarded("CUDA device query", || {
        contexts()?
            .iter()
            .enumerate()
            .map(|(ordinal, ctx)| {
                Ok(GpuInfo {
                    ordinal,
                    name: drv("cuDeviceGetName", ctx.name())?,
                    memory_bytes: drv("cuDeviceTotalMem", ctx.total_mem())? as u64,
                    compute_capability: drv("compute capability", ctx.compute_capability())?,
                })
            })
            .collect()
    })
}

/// Bytes in use on each GPU (all processes), in ordinal order.
pub fn memory_in_use() -> Result<Vec<u64>> {
    driver_present()?;
    guarded("CUDA memory query", || {
        contexts()?
            .iter()
            .map(|ctx| {
                let (free, total) = drv("cuMemGetInfo", ctx.mem_get_info())?;
                Ok(total.saturating_sub(free) as u64)
            })
            .collect()
    })
}

/// Each GPU's PCI address in ordinal order, as NVML takes it (see [`super::nvml::pci_bus_id`]):
/// how a CUDA device is matched to NVML's device, whose numbering differs.
pub fn pci_bus_ids() -> Result<Vec<String>> {
    use cudarc::driver::sys::CUdevice_attribute as A;
    driver_present()?;
    guarded("CUDA PCI address query", || {
        contexts()?
            .iter()
            .map(|ctx| {
                let attribute = |a| drv("cuDeviceGetAttribute (PCI)", ctx.attribute(a));
                Ok(super::nvml::pci_bus_id(
                    attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
                    attribute(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
                    attribute(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
                ))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With a GPU the list names it; without a driver it is an error saying why (CI has none):
    /// either way no panic.
    #[test]
    fn listing_never_panics_and_agrees_with_the_memory_query() {
        match list_gpus() {
            Ok(gpus) => {
                let used = memory_in_use().expect("memory query after a listing");
                assert_eq!(used.len(), gpus.len());
                for (gpu, used) in gpus.iter().zip(used) {
                    assert!(!gpu.name.is_empty());
                    assert!(gpu.memory_bytes > 0 && used <= gpu.memory_bytes, "{gpu:?}");
                }
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
}
