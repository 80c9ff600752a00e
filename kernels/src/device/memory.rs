//! The GPU's memory pools: device buffers and pinned host staging buffers from cudarc, kept
//! in [`Pool`]s, and the copies through them (host slice → pinned → device and back).
//!
//! Pinned staging makes the copies true DMA transfers (a pageable copy goes through a
//! driver-owned bounce buffer). A device block and its staging block are in the same size
//! class, so each copy moves the whole class (at most 25% more than the data).

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, CudaView, CudaViewMut, PinnedHostSlice};

use super::driver::drv;
use super::pool::{Lease, Pool, PoolStats, RawAllocator};
use super::ptx::guarded;
use crate::error::{Error, Result};

/// Device memory (`cuMemAllocAsync` on the pool's stream).
pub struct DeviceMemory {
    stream: Arc<CudaStream>,
}

impl RawAllocator for DeviceMemory {
    type Block = CudaSlice<u8>;
    type Error = crate::Error;
    fn allocate(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        guarded("device alloc", || {
            // SAFETY: the contents are unset; every user writes before reading (uploads,
            // memsets, kernels that fill their outputs).
            drv("cuMemAlloc", unsafe { self.stream.alloc::<u8>(bytes) })
        })
    }
}

/// Page-locked host memory, cacheable (not write-combined: results are read back on the CPU).
pub struct PinnedMemory {
    ctx: Arc<CudaContext>,
}

impl RawAllocator for PinnedMemory {
    type Block = PinnedHostSlice<u8>;
    type Error = crate::Error;
    fn allocate(&self, bytes: usize) -> Result<PinnedHostSlice<u8>> {
        guarded("pinned alloc", || {
            // SAFETY: as above, written before it is read.
            drv("cuMemHostAlloc", unsafe {
                self.ctx.alloc_pinned_with_flags::<u8>(bytes, 0)
            })
        })
    }
}

pub type DeviceLease<'p> = Lease<'p, DeviceMemory>;

/// Both pools of one GPU, shared by every stream (engine instance) on it.
pub struct Pools {
    pub device: Pool<DeviceMemory>,
    pub pinned: Pool<PinnedMemory>,
}

/// What the gateway exports: the two pools' counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub device: PoolStats,
    pub pinned: PoolStats,
}

impl Pools {
    pub fn new(
        ctx: Arc<CudaContext>,
        stream: Arc<CudaStream>,
        device_limit: usize,
        pinned_limit: usize,
    ) -> Self {
        Self {
            device: Pool::new(DeviceMemory { stream }, device_limit),
            pinned: Pool::new(PinnedMemory { ctx }, pinned_limit),
        }
    }

    pub fn stats(&self) -> MemoryStats {
        MemoryStats {
            device: self.device.stats(),
            pinned: self.pinned.stats(),
        }
    }
}

/// The bytes of a slice of plain data (`f32`, `u32`, `#[repr(C)]` candidates).
fn bytes_of<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: `T` is plain old data without padding (f32, u32, i32, u64, Candidate's six
    // 4-byte fields); any initialised value is valid as bytes.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

/// Copies `host` to a pooled device buffer through a pooled pinned buffer. Enqueued on
/// `stream`; the staging buffer returns to its pool once the copy has been enqueued (cudarc
/// records an event on it, and its next user waits for that event).
pub fn upload<'p, T: Copy>(
    pools: &'p Pools,
    stream: &Arc<CudaStream>,
    host: &[T],
) -> Result<DeviceLease<'p>> {
    upload_parts(pools, stream, &[bytes_of(host)])
}

/// As [`upload`], packing `parts` back to back (a batch of images) in one buffer.
pub fn upload_parts<'p>(
    pools: &'p Pools,
    stream: &Arc<CudaStream>,
    parts: &[&[u8]],
) -> Result<DeviceLease<'p>> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut staging = pools.pinned.take(len)?;
    let mut device = pools.device.take(len)?;
    guarded("upload", || {
        let pinned = drv("pinned access", staging.block_mut().as_mut_slice())?;
        fill_staging(&mut pinned[..len], parts);
        drv(
            "memcpy htod",
            stream.memcpy_htod(staging.block(), device.block_mut()),
        )
    })?;
    Ok(device)
}

/// Below this many bytes one thread copies into the staging buffer; above it the copy is
/// spread over rayon's threads in [`STAGING_CHUNK`] pieces.
const PARALLEL_STAGING_BYTES: usize = 4 << 20;
const STAGING_CHUNK: usize = 1 << 20;

/// Copies `parts` back to back into `staging` (exactly their total length). Large batches are
/// copied by every core: one thread's memcpy of a batch of 1080p images (6.2 MB each) takes
/// longer than the transfer to the GPU and many times the kernel's own time (`cargo bench -p
/// infergate-kernels`).
fn fill_staging(staging: &mut [u8], parts: &[&[u8]]) {
    use rayon::prelude::*;
    let parallel = staging.len() >= PARALLEL_STAGING_BYTES;
    let mut pieces = Vec::with_capacity(parts.len());
    let mut rest = staging;
    for part in parts {
        let (head, tail) = rest.split_at_mut(part.len());
        pieces.push((head, *part));
        rest = tail;
    }
    if !parallel {
        pieces.into_iter().for_each(|(d, s)| d.copy_from_slice(s));
        return;
    }
    pieces
        .into_par_iter()
        .flat_map(|(d, s)| {
            d.par_chunks_mut(STAGING_CHUNK)
                .zip(s.par_chunks(STAGING_CHUNK))
        })
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// A pooled device buffer of at least `bytes`, zeroed on `stream` (for kernels that
/// accumulate into their output).
pub fn zeroed<'p>(
    pools: &'p Pools,
    stream: &Arc<CudaStream>,
    bytes: usize,
) -> Result<DeviceLease<'p>> {
    let mut device = pools.device.take(bytes)?;
    guarded("memset", || {
        drv("memset zeros", stream.memset_zeros(device.block_mut()))
    })?;
    Ok(device)
}

/// Copies the first `size_of_val(host)` bytes of `device` back into `host` through a pooled
/// pinned buffer, and waits for the stream.
pub fn download<T: Copy>(
    pools: &Pools,
    stream: &Arc<CudaStream>,
    device: &DeviceLease<'_>,
    host: &mut [T],
) -> Result<()> {
    let len = std::mem::size_of_val(host);
    let mut staging = pools.pinned.take(device.bytes())?;
    guarded("download", || {
        drv(
            "memcpy dtoh",
            stream.memcpy_dtoh(device.block(), staging.block_mut()),
        )?;
        drv("stream synchronize", stream.synchronize())?;
        let pinned = drv("pinned access", staging.block().as_slice())?;
        // SAFETY: `host` is `len` bytes of plain data and every bit pattern the kernel wrote
        // is a valid `T` (f32, u32, i32).
        unsafe {
            std::ptr::copy_nonoverlapping(pinned.as_ptr(), host.as_mut_ptr().cast::<u8>(), len);
        }
        Ok(())
    })
}

/// The first `len` elements of a pooled block as plain data of type `T` (f32, u32, i32, u64,
/// candidates: types for which any bits are a value).
pub fn typed<'a, T>(lease: &'a DeviceLease<'_>, len: usize) -> Result<CudaView<'a, T>> {
    // SAFETY: `transmute` checks the block holds `len` elements; `T` is plain data.
    unsafe { lease.block().transmute::<T>(len) }
        .ok_or_else(|| Error::device("pool", "pooled buffer smaller than requested"))
}

/// As [`typed`], writable.
pub fn typed_mut<'a, T>(lease: &'a mut DeviceLease<'_>, len: usize) -> Result<CudaViewMut<'a, T>> {
    // SAFETY: as in `typed`.
    unsafe { lease.block_mut().transmute_mut::<T>(len) }
        .ok_or_else(|| Error::device("pool", "pooled buffer smaller than requested"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small batches (one thread) and large ones (split across threads, parts not multiples
    /// of the chunk) both end up as the parts back to back.
    #[test]
    fn staging_holds_the_parts_back_to_back() {
        for sizes in [
            vec![3usize, 0, 5],
            vec![STAGING_CHUNK * 3 + 7, 11, PARALLEL_STAGING_BYTES + 1],
        ] {
            let parts: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(p, &n)| (0..n).map(|i| (i * 31 + p * 7) as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
            let mut staging = vec![0xAA; sizes.iter().sum()];
            fill_staging(&mut staging, &refs);
            assert_eq!(staging, parts.concat(), "{sizes:?}");
        }
    }
}
