//! The CUDA side: driver detection, NVRTC/PTX ([`ptx`]), the memory pools
//! ([`pool`], [`memory`]) and [`Gpu`], which owns a context, a stream and the
//! pools, and launches the three ops.
//!
//! Nothing here panics when CUDA is missing: cudarc panics on a missing
//! `libcuda`/`libnvrtc`, so presence is probed first and every other cudarc
//! call runs under [`ptx::guarded`]. Launchers validate inputs with the same
//! checks as the CPU ops, so a bad input is [`Error::InvalidInput`] on both.

mod driver;
pub mod inventory;
pub mod memory;
pub mod nvml;
pub mod pool;
pub mod ptx;

use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DeviceRepr,
    LaunchConfig, PushKernelArg, ValidAsZeroBits,
};

use crate::error::{Error, Result};
use crate::nms::{Candidate, NmsSpec};
use crate::preprocess::{check_batch, Geometry, ImageU8, PreprocessSpec, CHANNELS};
use crate::softmax::TopKShape;
pub use driver::driver_present;
use driver::drv;
use memory::{MemoryStats, Pools};
use ptx::{guarded, CudaSource, PtxCache};

/// Device memory the pool may keep (free and lent); beyond it buffers are freed on return.
const DEVICE_POOL_BYTES: usize = 512 << 20;
/// Pinned host memory the staging pool may keep.
const PINNED_POOL_BYTES: usize = 128 << 20;

/// Mirror of `ImageDesc` in `cuda/preprocess.cu`; field order and types
/// must match it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ImageDesc {
    src_offset: u64,
    src_w: i32,
    src_h: i32,
    x_start: i32,
    x_len: i32,
    y_start: i32,
    y_len: i32,
    x_ratio: f32,
    x_offset: f32,
    y_ratio: f32,
    y_offset: f32,
}

/// Mirror of `Norm` in `cuda/preprocess.cu`, passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct Norm {
    mean: [f32; CHANNELS],
    inv_std: [f32; CHANNELS],
    pad: [f32; CHANNELS],
}

// SAFETY: plain `#[repr(C)]` data laid out like the CUDA structs.
unsafe impl DeviceRepr for ImageDesc {}
// SAFETY: as above, `#[repr(C)]` floats mirroring `Norm` in the kernel source.
unsafe impl DeviceRepr for Norm {}
// SAFETY: as above, `#[repr(C)]` mirroring the NMS kernel's candidate struct.
unsafe impl DeviceRepr for Candidate {}
// SAFETY: every field is a number, for which all-zero bits are a valid value.
unsafe impl ValidAsZeroBits for Candidate {}

/// A batch of images already on the device (one buffer, packed back to back).
pub struct DeviceImages {
    data: CudaSlice<u8>,
    sizes: Vec<(usize, usize, u64)>,
}

impl DeviceImages {
    pub fn len(&self) -> usize {
        self.sizes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }
}

/// One GPU with the crate's kernels loaded. [`Gpu::fork`] gives each engine instance its own
/// stream over the same context, kernels and memory pools.
pub struct Gpu {
    stream: Arc<CudaStream>,
    pools: Arc<Pools>,
    name: String,
    compute_capability: (i32, i32),
    arch: String,
    resize: CudaFunction,
    softmax: CudaFunction,
    nms_rank: CudaFunction,
    nms_mask: CudaFunction,
    nms_select: CudaFunction,
}

impl Gpu {
    /// Opens device `ordinal`, compiles (or loads from `cache`) every kernel
    /// for its compute capability and loads them.
    pub fn open(ordinal: usize, cache: Option<&PtxCache>) -> Result<Self> {
        driver_present()?;
        ptx::nvrtc_version()?;
        guarded("CUDA init", || Self::open_unguarded(ordinal, cache))
    }

    fn open_unguarded(ordinal: usize, cache: Option<&PtxCache>) -> Result<Self> {
        let count = drv("cuDeviceGetCount", CudaContext::device_count())?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::DeviceUnavailable(format!(
                "cuda:{ordinal} requested, {count} device(s) visible"
            )));
        }
        let ctx = drv("context creation", CudaContext::new(ordinal))?;
        let name = drv("cuDeviceGetName", ctx.name())?;
        let compute_capability = drv("compute capability", ctx.compute_capability())?;
        let arch = ptx::arch_for_device(compute_capability.0, compute_capability.1)?;
        let load = |source: &CudaSource| -> Result<Vec<CudaFunction>> {
            let ptx = match cache {
                Some(cache) => cache.get_or_compile(source, &arch)?,
                None => ptx::compile(source, &arch)?,
            };
            let module = match ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)) {
                Ok(module) => module,
                Err(e) => {
                    // A damaged cache file is the likely cause: drop it and
                    // retry once from source.
                    let Some(cache) = cache else {
                        return Err(Error::device("cuModuleLoadData", e));
                    };
                    cache.evict(source, &arch);
                    let ptx = ptx::compile(source, &arch)?;
                    drv(
                        "cuModuleLoadData",
                        ctx.load_module(cudarc::nvrtc::Ptx::from_src(ptx)),
                    )?
                }
            };
            source
                .functions
                .iter()
                .map(|f| drv("cuModuleGetFunction", module.load_function(f)))
                .collect()
        };
        let mut pre = load(&ptx::PREPROCESS)?;
        let mut soft = load(&ptx::SOFTMAX_TOPK)?;
        let mut nms = load(&ptx::NMS)?;
        let nms_select = nms.pop();
        let nms_mask = nms.pop();
        let nms_rank = nms.pop();
        let (Some(resize), Some(softmax), Some(nms_rank), Some(nms_mask), Some(nms_select)) =
            (pre.pop(), soft.pop(), nms_rank, nms_mask, nms_select)
        else {
            return Err(Error::device("module load", "kernel missing from module"));
        };
        let stream = drv("stream creation", ctx.new_stream())?;
        let pools = Arc::new(Pools::new(
            ctx.clone(),
            stream.clone(),
            DEVICE_POOL_BYTES,
            PINNED_POOL_BYTES,
        ));
        tracing::info!(%name, ordinal, ?compute_capability, %arch, "CUDA kernels loaded");
        Ok(Self {
            stream,
            pools,
            name,
            compute_capability,
            arch,
            resize,
            softmax,
            nms_rank,
            nms_mask,
            nms_select,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same GPU, kernels and pools on a new stream, so work from different engine
    /// instances overlaps instead of queueing on one stream.
    pub fn fork(&self) -> Result<Self> {
        let stream = guarded("stream creation", || {
            drv("stream creation", self.stream.context().new_stream())
        })?;
        Ok(Self {
            stream,
            pools: self.pools.clone(),
            name: self.name.clone(),
            compute_capability: self.compute_capability,
            arch: self.arch.clone(),
            resize: self.resize.clone(),
            softmax: self.softmax.clone(),
            nms_rank: self.nms_rank.clone(),
            nms_mask: self.nms_mask.clone(),
            nms_select: self.nms_select.clone(),
        })
    }

    /// Sizes, hits and misses of the device and pinned pools.
    pub fn memory_stats(&self) -> MemoryStats {
        self.pools.stats()
    }

    pub fn compute_capability(&self) -> (i32, i32) {
        self.compute_capability
    }

    /// The NVRTC target the kernels were compiled for.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn synchronize(&self) -> Result<()> {
        drv("stream synchronize", self.stream.synchronize())
    }

    /// Copies a batch of images to the device.
    pub fn upload(&self, images: &[ImageU8<'_>]) -> Result<DeviceImages> {
        guarded("upload", || {
            let total: usize = images.iter().map(|i| i.data.len()).sum();
            let mut data = drv("alloc", self.stream.alloc_zeros::<u8>(total.max(1)))?;
            let mut sizes = Vec::with_capacity(images.len());
            let mut offset = 0usize;
            for image in images {
                let len = image.data.len();
                let mut view = data.slice_mut(offset..offset + len);
                drv(
                    "memcpy htod",
                    self.stream.memcpy_htod(image.data, &mut view),
                )?;
                sizes.push((image.width, image.height, offset as u64));
                offset += len;
            }
            Ok(DeviceImages { data, sizes })
        })
    }

    /// Allocates a zeroed device buffer (outputs for the `*_on_device` calls).
    pub fn alloc<T: DeviceRepr + ValidAsZeroBits>(&self, len: usize) -> Result<CudaSlice<T>> {
        guarded("alloc", || {
            drv("alloc", self.stream.alloc_zeros::<T>(len.max(1)))
        })
    }

    /// Copies a device buffer back.
    pub fn download<T: DeviceRepr + Default + Clone>(
        &self,
        src: &CudaSlice<T>,
        dst: &mut [T],
    ) -> Result<()> {
        guarded("download", || {
            drv(
                "memcpy dtoh",
                self.stream.memcpy_dtoh(&src.slice(..dst.len()), dst),
            )?;
            self.synchronize()
        })
    }

    /// [`crate::preprocess::resize_normalize`] on device-resident images into
    /// a device-resident NCHW buffer. Enqueued on the stream; call
    /// [`Gpu::synchronize`] or [`Gpu::download`] before reading `out`.
    pub fn resize_normalize_on_device(
        &self,
        images: &DeviceImages,
        spec: &PreprocessSpec,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        self.launch_resize(
            &images.data.as_view(),
            &images.sizes,
            spec,
            &mut out.as_view_mut(),
        )
    }

    /// Enqueues the resize kernel: `sizes` are (width, height, byte offset in `src`) of each
    /// image packed in `src`.
    fn launch_resize(
        &self,
        src: &CudaView<'_, u8>,
        sizes: &[(usize, usize, u64)],
        spec: &PreprocessSpec,
        out: &mut CudaViewMut<'_, f32>,
    ) -> Result<()> {
        let needed = sizes.len() * spec.output_len_per_image();
        if out.len() < needed {
            return Err(Error::input(format!(
                "device output holds {}, {needed} needed",
                out.len()
            )));
        }
        if sizes.is_empty() {
            return Ok(());
        }
        let descs: Vec<ImageDesc> = sizes
            .iter()
            .map(|&(width, height, src_offset)| {
                let stub = ImageU8 {
                    data: &[],
                    width,
                    height,
                };
                let geo = Geometry::new(&stub, spec);
                ImageDesc {
                    src_offset,
                    src_w: width as i32,
                    src_h: height as i32,
                    x_start: geo.x.dst_start as i32,
                    x_len: geo.x.dst_len as i32,
                    y_start: geo.y.dst_start as i32,
                    y_len: geo.y.dst_len as i32,
                    x_ratio: geo.x.ratio,
                    x_offset: geo.x.offset,
                    y_ratio: geo.y.ratio,
                    y_offset: geo.y.offset,
                }
            })
            .collect();
        let norm = Norm {
            mean: spec.mean,
            inv_std: spec.inv_std(),
            pad: spec.pad_normalized(),
        };
        let (out_w, out_h) = (spec.width as i32, spec.height as i32);
        let batch = u32::try_from(sizes.len())
            .ok()
            .filter(|&n| n <= 65_535)
            .ok_or_else(|| Error::input("GPU preprocessing takes at most 65535 images a call"))?;
        guarded("resize_normalize launch", || {
            let descs = memory::upload(&self.pools, &self.stream, &descs)?;
            let descs = memory::typed::<ImageDesc>(&descs, sizes.len())?;
            let cfg = LaunchConfig {
                grid_dim: (
                    spec.width.div_ceil(16) as u32,
                    spec.height.div_ceil(16) as u32,
                    batch,
                ),
                block_dim: (16, 16, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = self.stream.launch_builder(&self.resize);
            launch
                .arg(src)
                .arg(&descs)
                .arg(out)
                .arg(&out_w)
                .arg(&out_h)
                .arg(&norm);
            // SAFETY: argument list matches the kernel signature; the kernel
            // bounds-checks x/y and `out` holds batch·3·H·W floats.
            drv("launch resize_normalize_nchw", unsafe {
                launch.launch(cfg)
            })?;
            Ok(())
        })
    }

    /// Host-to-host preprocessing on the GPU (copy in, kernel, copy out), through the pools.
    pub fn resize_normalize(
        &self,
        images: &[ImageU8<'_>],
        spec: &PreprocessSpec,
        out: &mut [f32],
    ) -> Result<()> {
        check_batch(images, spec, out)?;
        if images.is_empty() {
            return Ok(());
        }
        let (pools, s) = (&*self.pools, &self.stream);
        let parts: Vec<&[u8]> = images.iter().map(|i| i.data).collect();
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let mut sizes = Vec::with_capacity(images.len());
        let mut offset = 0u64;
        for image in images {
            sizes.push((image.width, image.height, offset));
            offset += image.data.len() as u64;
        }
        let src = memory::upload_parts(pools, s, &parts)?;
        let mut d_out = pools.device.take(std::mem::size_of_val(out))?;
        self.launch_resize(
            &memory::typed::<u8>(&src, total)?,
            &sizes,
            spec,
            &mut memory::typed_mut::<f32>(&mut d_out, out.len())?,
        )?;
        memory::download(pools, s, &d_out, out)
    }

    /// [`crate::softmax::softmax_topk`] on the GPU.
    pub fn softmax_topk(
        &self,
        logits: &[f32],
        shape: TopKShape,
        probs: &mut [f32],
        indices: &mut [u32],
    ) -> Result<()> {
        shape.check(logits, probs, indices)?;
        if let Some(col) = logits.iter().position(|x| !x.is_finite()) {
            return Err(Error::input(format!(
                "logit {col} is {}: logits must be finite",
                logits[col]
            )));
        }
        if shape.rows == 0 {
            return Ok(());
        }
        let rows = u32::try_from(shape.rows).map_err(|_| Error::input("too many rows"))?;
        let (pools, s) = (&*self.pools, &self.stream);
        let d_logits = memory::upload(pools, s, logits)?;
        let mut d_probs = pools.device.take(std::mem::size_of_val(probs))?;
        let mut d_indices = pools.device.take(std::mem::size_of_val(indices))?;
        guarded("softmax_topk", || {
            let logits_v = memory::typed::<f32>(&d_logits, logits.len())?;
            let mut probs_v = memory::typed_mut::<f32>(&mut d_probs, probs.len())?;
            let mut indices_v = memory::typed_mut::<u32>(&mut d_indices, indices.len())?;
            // Power of two for the tree reductions; wide rows get more threads.
            let threads = shape.cols.next_power_of_two().clamp(32, 256) as u32;
            let (cols, k) = (shape.cols as i32, shape.k as i32);
            let mut launch = s.launch_builder(&self.softmax);
            launch
                .arg(&logits_v)
                .arg(&mut probs_v)
                .arg(&mut indices_v)
                .arg(&cols)
                .arg(&k);
            let cfg = LaunchConfig {
                grid_dim: (rows, 1, 1),
                block_dim: (threads, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: arguments match the kernel; buffers hold rows·cols and rows·k.
            drv("launch softmax_topk", unsafe { launch.launch(cfg) })?;
            Ok(())
        })?;
        memory::download(pools, s, &d_probs, probs)?;
        memory::download(pools, s, &d_indices, indices)
    }

    /// [`crate::nms::nms`] on the GPU; keeps exactly the same indices.
    pub fn nms(
        &self,
        candidates: &[Candidate],
        boxes_per_item: usize,
        spec: &NmsSpec,
    ) -> Result<Vec<Vec<u32>>> {
        spec.check(candidates, boxes_per_item)?;
        let items = candidates.len() / boxes_per_item;
        let max_det = spec.max_detections.min(boxes_per_item);
        if items == 0 || max_det == 0 {
            return Ok(vec![Vec::new(); items]);
        }
        let words = boxes_per_item.div_ceil(64);
        let mask_bytes = items * boxes_per_item * words * 8;
        // The select kernel keeps `removed` in 48 KiB of shared memory.
        if words * 8 > 48 * 1024 || mask_bytes > (1 << 30) {
            return Err(Error::device(
                "nms",
                format!("{items}x{boxes_per_item} boxes exceed the GPU kernel's limits"),
            ));
        }
        let grid_items = u32::try_from(items)
            .ok()
            .filter(|&n| n <= 65_535)
            .ok_or_else(|| Error::device("nms", "more than 65535 items"))?;
        let (pools, s) = (&*self.pools, &self.stream);
        let n_sorted = items * boxes_per_item;
        // Zeroed as the kernels expect (they count with atomics and fill only some slots).
        let d_cands = memory::upload(pools, s, candidates)?;
        let mut sorted = memory::zeroed(pools, s, n_sorted * 4)?;
        let mut count = memory::zeroed(pools, s, items * 4)?;
        let mut mask = memory::zeroed(pools, s, mask_bytes)?;
        let mut keep = memory::zeroed(pools, s, items * max_det * 4)?;
        let mut kept = memory::zeroed(pools, s, items * 4)?;
        let (boxes, words_i, max_det_i) = (boxes_per_item as i32, words as i32, max_det as i32);
        let box_blocks = boxes_per_item.div_ceil(64) as u32;
        guarded("nms", || {
            {
                let cands_v = memory::typed::<Candidate>(&d_cands, candidates.len())?;
                let mut sorted_v = memory::typed_mut::<i32>(&mut sorted, n_sorted)?;
                let mut count_v = memory::typed_mut::<i32>(&mut count, items)?;
                let mut rank = s.launch_builder(&self.nms_rank);
                rank.arg(&cands_v)
                    .arg(&boxes)
                    .arg(&spec.score_threshold)
                    .arg(&mut sorted_v)
                    .arg(&mut count_v);
                let cfg = LaunchConfig {
                    grid_dim: (boxes_per_item.div_ceil(256) as u32, grid_items, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: arguments match `nms_rank`; buffers sized items·boxes and items.
                drv("launch nms_rank", unsafe { rank.launch(cfg) })?;
            }
            let cands_v = memory::typed::<Candidate>(&d_cands, candidates.len())?;
            let sorted_v = memory::typed::<i32>(&sorted, n_sorted)?;
            let count_v = memory::typed::<i32>(&count, items)?;
            {
                let mut mask_v = memory::typed_mut::<u64>(&mut mask, n_sorted * words)?;
                let mut build = s.launch_builder(&self.nms_mask);
                build
                    .arg(&cands_v)
                    .arg(&boxes)
                    .arg(&words_i)
                    .arg(&sorted_v)
                    .arg(&count_v)
                    .arg(&spec.iou_threshold)
                    .arg(&mut mask_v);
                let cfg = LaunchConfig {
                    grid_dim: (words as u32, box_blocks, grid_items),
                    block_dim: (64, 1, 1),
                    shared_mem_bytes: 0,
                };
                // SAFETY: arguments match `nms_mask`; mask is items·boxes·words.
                drv("launch nms_mask", unsafe { build.launch(cfg) })?;
            }
            let mask_v = memory::typed::<u64>(&mask, n_sorted * words)?;
            let mut keep_v = memory::typed_mut::<i32>(&mut keep, items * max_det)?;
            let mut kept_v = memory::typed_mut::<i32>(&mut kept, items)?;
            let mut select = s.launch_builder(&self.nms_select);
            select
                .arg(&sorted_v)
                .arg(&count_v)
                .arg(&mask_v)
                .arg(&boxes)
                .arg(&words_i)
                .arg(&max_det_i)
                .arg(&mut keep_v)
                .arg(&mut kept_v);
            let cfg = LaunchConfig {
                grid_dim: (grid_items, 1, 1),
                block_dim: (32, 1, 1),
                shared_mem_bytes: (words * 8) as u32,
            };
            // SAFETY: arguments match `nms_select`; shared memory holds `words` u64.
            drv("launch nms_select", unsafe { select.launch(cfg) })?;
            Ok(())
        })?;
        let mut keep_host = vec![0i32; items * max_det];
        let mut kept_host = vec![0i32; items];
        memory::download(pools, s, &keep, &mut keep_host)?;
        memory::download(pools, s, &kept, &mut kept_host)?;
        Ok(kept_host
            .iter()
            .enumerate()
            .map(|(n, &k)| {
                keep_host[n * max_det..n * max_det + k.clamp(0, max_det as i32) as usize]
                    .iter()
                    .map(|&i| i as u32)
                    .collect()
            })
            .collect())
    }
}
