//! Triton's `optimization` block of a model config: which execution accelerators (TensorRT,
//! CUDA) a model asks for, in Triton's names and parameters, checked before anything loads.
//! [`crate::providers`] turns the checked [`Accelerators`] into a session's providers.

use crate::error::{EngineError, Result};
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
