//! Native ops for infergate, each twice: CUDA C (`kernels/cuda/*.cu`,
//! compiled by NVRTC at start) and Rust on the CPU (a fast path plus a scalar
//! reference that spells out the formula the other two follow).
//!
//! | op | CPU fast path | reference | GPU |
//! | --- | --- | --- | --- |
//! | resize + normalize + HWC u8 → NCHW f32 | [`preprocess::resize_normalize`] | [`preprocess::resize_normalize_reference`] | [`device::Gpu::resize_normalize`] |
//! | softmax + top-k | [`softmax::softmax_topk`] | [`softmax::softmax_topk_reference`] | [`device::Gpu::softmax_topk`] |
//! | class-aware NMS | [`nms::nms`] | [`nms::nms_reference`] | [`device::Gpu::nms`] |
//!
//! The engine holds an [`Ops`] (GPU when usable, CPU otherwise, falling back
//! per call) and calls the same three methods whatever the device:
//!
//! ```
//! use infergate_kernels::{Ops, preprocess::{ImageU8, PreprocessSpec, ResizeMode}};
//! let ops = Ops::cpu();
//! let pixels = vec![128u8; 64 * 48 * 3];
//! let image = ImageU8::new(&pixels, 64, 48)?;
//! let spec = PreprocessSpec {
//!     width: 32, height: 32,
//!     mean: [127.0; 3], std: [128.0; 3],
//!     mode: ResizeMode::Letterbox { pad: 114 },
//! };
//! let mut nchw = vec![0.0f32; spec.output_len_per_image()];
//! ops.resize_normalize(&[image], &spec, &mut nchw)?;
//! # Ok::<(), infergate_kernels::Error>(())
//! ```
//!
//! On the GPU, buffers come from size-classed pools of device and pinned host
//! memory ([`device::pool`]), so warm calls do not allocate; each engine
//! instance gets its own stream ([`Ops::for_instance`]).
//!
//! Each module's docs state its formula, ordering and tie-breaking; errors
//! carry a [`Fault`] saying whether the caller or the device is to blame.
//! CUDA needs `libcuda.so.1` (driver) and `libnvrtc.so.12` on the loader path;
//! neither is needed to build or to run on the CPU.

pub mod device;
mod error;
pub mod nms;
mod ops;
pub mod preprocess;
pub mod softmax;

pub use error::{Error, Fault, Result};
pub use ops::{DeviceChoice, Ops};
