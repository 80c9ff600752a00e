//! ONNX Runtime execution providers per session: CUDA when the engine runs on a GPU, TensorRT
//! when a model's config asks for it in Triton's words
//! (`optimization.execution_accelerators.gpu_execution_accelerator`). A provider that cannot
//! be used (a CPU-only ORT library, no GPU, missing CUDA libraries) never fails the load: the
//! session runs on the CPU and the reason is logged and kept in an [`ExecutionReport`] that the
//! gateway shows with the model.

use crate::config::{InstanceKind, ModelConfig};
use crate::error::{EngineError, Result};
use crate::session::SessionOptions;
use ort::ep::{ExecutionProvider, TensorRT, CUDA};
use ort::session::builder::SessionBuilder;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Triton's `optimization` block; only the execution accelerators are taken.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Optimization {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution_accelerators: Option<ExecutionAccelerators>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutionAccelerators {
    /// In order of preference: `tensorrt` (TensorRT, with CUDA behind it for what TensorRT
    /// cannot run) or `cuda`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_execution_accelerator: Vec<Accelerator>,
}

/// One accelerator, as Triton names it: a name and string parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accelerator {
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

/// TensorRT's options, from Triton's parameter names.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TensorRtOptions {
    pub fp16: bool,
    pub max_workspace_size_bytes: Option<usize>,
    pub engine_cache_path: Option<String>,
}

/// What a model's config asks of the GPU, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Accelerators {
    pub tensorrt: Option<TensorRtOptions>,
}

fn invalid(field: String, message: String) -> EngineError {
    EngineError::InvalidConfig(format!(
        "optimization.execution_accelerators.{field}: {message}"
    ))
}

impl Optimization {
    /// Checks the accelerators (names and parameters; errors name the field).
    pub fn accelerators(&self) -> Result<Accelerators> {
        let mut out = Accelerators::default();
        let Some(ea) = &self.execution_accelerators else {
            return Ok(out);
        };
        for (i, a) in ea.gpu_execution_accelerator.iter().enumerate() {
            let field = |rest: &str| format!("gpu_execution_accelerator[{i}]{rest}");
            match a.name.as_str() {
                "tensorrt" => {
                    let mut trt = TensorRtOptions::default();
                    for (key, value) in &a.parameters {
                        let at = || field(&format!(".parameters.{key}"));
                        match key.as_str() {
                            "precision_mode" => {
                                trt.fp16 = match value.as_str() {
                                    "FP32" => false,
                                    "FP16" => true,
                                    other => {
                                        return Err(invalid(
                                            at(),
                                            format!("'{other}': FP32 or FP16 (INT8 needs a calibration table, not supported)"),
                                        ))
                                    }
                                }
                            }
                            "max_workspace_size_bytes" => {
                                trt.max_workspace_size_bytes =
                                    Some(value.parse().map_err(|_| {
                                        invalid(at(), format!("'{value}' is not a byte count"))
                                    })?)
                            }
                            "trt_engine_cache_path" => {
                                trt.engine_cache_path = Some(value.clone())
                            }
                            _ => return Err(invalid(
                                at(),
                                "unknown parameter; tensorrt takes precision_mode, max_workspace_size_bytes, trt_engine_cache_path".into(),
                            )),
                        }
                    }
                    out.tensorrt = Some(trt);
                }
                "cuda" => {
                    if let Some(key) = a.parameters.keys().next() {
                        return Err(invalid(
                            field(&format!(".parameters.{key}")),
                            "the cuda accelerator takes no parameters".into(),
                        ));
                    }
                }
                other => {
                    return Err(invalid(
                        field(".name"),
                        format!("'{other}' is not an accelerator here; use tensorrt or cuda"),
                    ))
                }
            }
        }
        Ok(out)
    }
}

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
    /// The plan for a model's sessions: the engine's device unless the config pins its
    /// instances to the CPU (`KIND_CPU`) or to a GPU (`KIND_GPU` with `gpus`).
    pub fn new(options: &SessionOptions, config: &ModelConfig) -> Result<ProviderPlan> {
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
            } else if let Some(device) = options.device {
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
            explicit: named || pinned_gpu.is_some() || options.device_explicit,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: serde_json::Value) -> std::result::Result<Accelerators, String> {
        let o: Optimization = serde_json::from_value(json).map_err(|e| e.to_string())?;
        o.accelerators().map_err(|e| e.to_string())
    }

    #[test]
    fn reads_tritons_accelerator_names_and_parameters() {
        let a = parse(serde_json::json!({"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"precision_mode": "FP16", "max_workspace_size_bytes": "1073741824"}},
            {"name": "cuda"}
        ]}}))
        .unwrap();
        let trt = a.tensorrt.unwrap();
        assert!(trt.fp16);
        assert_eq!(trt.max_workspace_size_bytes, Some(1 << 30));
        assert_eq!(
            parse(serde_json::json!({})).unwrap(),
            Accelerators::default()
        );

        let e = parse(
            serde_json::json!({"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "tensorrt", "parameters": {"precision_mode": "INT8"}}]}}),
        )
        .unwrap_err();
        assert!(
            e.contains("gpu_execution_accelerator[0].parameters.precision_mode"),
            "{e}"
        );
        let e = parse(
            serde_json::json!({"execution_accelerators": {"gpu_execution_accelerator": [
            {"name": "cuda"}, {"name": "openvino"}]}}),
        )
        .unwrap_err();
        assert!(
            e.contains("gpu_execution_accelerator[1].name") && e.contains("openvino"),
            "{e}"
        );
        let e =
            parse(serde_json::json!({"execution_accelerators": {"cpu_execution_accelerator": []}}))
                .unwrap_err();
        assert!(e.contains("cpu_execution_accelerator"), "{e}");
        let e = parse(serde_json::json!({"graph": {"level": 1}})).unwrap_err();
        assert!(e.contains("graph"), "{e}");
    }
}
