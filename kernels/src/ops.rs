//! [`Ops`]: the entry point the engine holds. Runs each op on the GPU when
//! one was opened and falls back to the CPU fast path when the GPU fails for
//! reasons of its own; input errors are returned as they are.

use crate::device::{memory::MemoryStats, ptx::PtxCache, Gpu};
use crate::error::{Fault, Result};
use crate::nms::{Candidate, NmsSpec};
use crate::preprocess::{ImageU8, PreprocessSpec};
use crate::softmax::TopKShape;

/// Which device to use: `Auto` takes GPU 0 when the driver, a GPU and NVRTC
/// are all present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceChoice {
    Cpu,
    Auto,
    Cuda(usize),
}

pub struct Ops {
    gpu: Option<Gpu>,
}

impl Ops {
    pub fn cpu() -> Self {
        Self { gpu: None }
    }

    /// Opens the device for `choice`. Never fails: when CUDA cannot be used
    /// the reason is logged and the CPU serves every op.
    pub fn new(choice: DeviceChoice, cache: Option<&PtxCache>) -> Self {
        let ordinal = match choice {
            DeviceChoice::Cpu => {
                tracing::info!("kernels on CPU (requested)");
                return Self::cpu();
            }
            DeviceChoice::Auto => 0,
            DeviceChoice::Cuda(n) => n,
        };
        match Gpu::open(ordinal, cache) {
            Ok(gpu) => Self { gpu: Some(gpu) },
            Err(e) => {
                tracing::warn!(reason = %e, "kernels on CPU: CUDA device not usable");
                Self::cpu()
            }
        }
    }

    pub fn gpu(&self) -> Option<&Gpu> {
        self.gpu.as_ref()
    }

    /// The ops for one engine instance: the same GPU and memory pools on a stream of its own,
    /// so instances do not queue behind each other (the CPU when there is no GPU, or when no
    /// stream can be created, with the reason logged).
    pub fn for_instance(&self) -> Ops {
        let Some(gpu) = &self.gpu else {
            return Ops::cpu();
        };
        match gpu.fork() {
            Ok(gpu) => Ops { gpu: Some(gpu) },
            Err(e) => {
                tracing::warn!(reason = %e, "no CUDA stream for an instance; its ops run on the CPU");
                Ops::cpu()
            }
        }
    }

    /// The GPU memory pools' sizes, hits and misses; `None` on the CPU.
    pub fn memory_stats(&self) -> Option<MemoryStats> {
        self.gpu.as_ref().map(Gpu::memory_stats)
    }

    pub fn resize_normalize(
        &self,
        images: &[ImageU8<'_>],
        spec: &PreprocessSpec,
        out: &mut [f32],
    ) -> Result<()> {
        if let Some(gpu) = &self.gpu {
            match gpu.resize_normalize(images, spec, out) {
                Err(e) if e.fault() != Fault::Input => fell_back("resize_normalize", &e),
                done => return done,
            }
        }
        crate::preprocess::resize_normalize(images, spec, out)
    }

    pub fn softmax_topk(
        &self,
        logits: &[f32],
        shape: TopKShape,
        probs: &mut [f32],
        indices: &mut [u32],
    ) -> Result<()> {
        if let Some(gpu) = &self.gpu {
            match gpu.softmax_topk(logits, shape, probs, indices) {
                Err(e) if e.fault() != Fault::Input => fell_back("softmax_topk", &e),
                done => return done,
            }
        }
        crate::softmax::softmax_topk(logits, shape, probs, indices)
    }

    pub fn nms(
        &self,
        candidates: &[Candidate],
        boxes_per_item: usize,
        spec: &NmsSpec,
    ) -> Result<Vec<Vec<u32>>> {
        if let Some(gpu) = &self.gpu {
            match gpu.nms(candidates, boxes_per_item, spec) {
                Err(e) if e.fault() != Fault::Input => fell_back("nms", &e),
                done => return done,
            }
        }
        crate::nms::nms(candidates, boxes_per_item, spec)
    }
}

fn fell_back(op: &str, error: &crate::Error) {
    tracing::warn!(op, %error, "GPU op failed; running it on the CPU");
}
