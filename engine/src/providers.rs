//! ONNX Runtime execution providers per session: CUDA when the engine runs on a GPU, TensorRT
//! when a model's config asks for it in Triton's words
//! (`optimization.execution_accelerators.gpu_execution_accelerator`). A provider that cannot
//! be used (a CPU-only ORT library, no GPU, missing CUDA libraries) never fails the load: the
//! session runs on the CPU and the reason is logged and kept in an [`ExecutionReport`] that the
//! gateway shows with the model.

use crate::config::{InstanceKind, ModelConfig};
use crate::error::Result;
use crate::optimization::{Accelerators, Optimization};
use ort::ep::{ExecutionProvider, TensorRT, CUDA};
use ort::session::builder::SessionBuilder;
use serde::Serialize;

/// Where one session should run: on a GPU (with TensorRT when asked), or the CPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProviderPlan {
    /// CUDA device ordinal; `None` = the CPU.
    pub device: Option<i32>,
    pub accelerators: Accelerators,
    /// Why the session stays on the CPU although accelerators were named (e.g. the engine
    /// was started with `--device cpu`).
    pub cpu_reason: Option<String>,
    /// Whether someone asked for the GPU by name (device `cuda:N`, accelerators in the
    /// config), so a fallback is worth a warning.
    pub explicit: bool,
}

/// Which providers a session ended up with, and why not the requested ones.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExecutionReport {
    /// Providers registered, in ORT's order of preference; the CPU is always last.
    pub providers: Vec<String>,
    /// Providers requested but not registered, with the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

impl ExecutionReport {
    pub fn cpu(reason: Option<String>) -> ExecutionReport {
        ExecutionReport {
            providers: vec!["CPUExecutionProvider".into()],
            fallback: reason,
        }
    }

    /// Whether the model runs on a GPU provider.
    pub fn on_gpu(&self) -> bool {
        self.providers.len() > 1
    }
}

fn register<E: ExecutionProvider>(provider: E, builder: &mut SessionBuilder) -> Result<(), String> {
    match E::is_available() {
        Ok(true) => {}
        Ok(false) => {
            return Err(format!(
            "{} is not in this ONNX Runtime build (a CPU-only library; install onnxruntime-gpu)",
            E::NAME
        ))
        }
        Err(e) => return Err(format!("{}: {}", E::NAME, e.message())),
    }
    provider
        .register(builder)
        .map_err(|e| format!("{}: {}", E::NAME, e.message()))
}

impl ProviderPlan {
    /// The plan for a model's sessions: the engine's device (`engine_device`, `None` = the CPU;
    /// `device_explicit`: the operator named it) unless the config pins its instances to the
    /// CPU (`KIND_CPU`) or to a GPU (`KIND_GPU` with `gpus`).
    pub fn new(
        engine_device: Option<i32>,
        device_explicit: bool,
        config: &ModelConfig,
    ) -> Result<ProviderPlan> {
        let accelerators = config
            .optimization
            .as_ref()
            .map(Optimization::accelerators)
            .transpose()?
            .unwrap_or_default();
        let named = accelerators.tensorrt.is_some()
            || config.optimization.as_ref().is_some_and(|o| {
                o.execution_accelerators
                    .as_ref()
                    .is_some_and(|e| !e.gpu_execution_accelerator.is_empty())
            });
        let kinds: Vec<InstanceKind> = config.instance_group.iter().map(|g| g.kind).collect();
        let pinned_gpu = config
            .instance_group
            .iter()
            .find(|g| g.kind == InstanceKind::Gpu)
            .and_then(|g| g.gpus.first())
            .map(|&g| g as i32);
        let (device, cpu_reason) =
            if !kinds.is_empty() && kinds.iter().all(|&k| k == InstanceKind::Cpu) {
                (
                    None,
                    named.then(|| "instance_group asks for KIND_CPU".to_string()),
                )
            } else if let Some(gpu) = pinned_gpu {
                (Some(gpu), None)
            } else if let Some(device) = engine_device {
                (Some(device), None)
            } else {
                let asked = named || kinds.contains(&InstanceKind::Gpu);
                (
                    None,
                    asked.then(|| "the engine runs on the CPU (--device cpu)".to_string()),
                )
            };
        Ok(ProviderPlan {
            device,
            accelerators,
            cpu_reason,
            explicit: named || pinned_gpu.is_some() || device_explicit,
        })
    }

    /// Registers the plan's providers on `builder`. Returns the report; providers that failed
    /// are named in its `fallback` (the session then runs on whatever did register, at least
    /// the CPU).
    pub fn register(&self, builder: &mut SessionBuilder) -> ExecutionReport {
        let Some(device) = self.device else {
            return ExecutionReport::cpu(self.cpu_reason.clone());
        };
        let mut providers = Vec::new();
        let mut failures = Vec::new();
        if let Some(trt) = &self.accelerators.tensorrt {
            let mut ep = TensorRT::default()
                .with_device_id(device)
                .with_fp16(trt.fp16);
            if let Some(bytes) = trt.max_workspace_size_bytes {
                ep = ep.with_max_workspace_size(bytes);
            }
            if let Some(path) = &trt.engine_cache_path {
                ep = ep.with_engine_cache(true).with_engine_cache_path(path);
            }
            match register(ep, builder) {
                Ok(()) => providers.push(TensorRT::NAME.to_string()),
                Err(e) => failures.push(e),
            }
        }
        match register(CUDA::default().with_device_id(device), builder) {
            Ok(()) => providers.push(CUDA::NAME.to_string()),
            Err(e) => failures.push(e),
        }
        providers.push("CPUExecutionProvider".into());
        ExecutionReport {
            providers,
            fallback: (!failures.is_empty()).then(|| failures.join("; ")),
        }
    }
}
