//! A model's inputs and outputs as ONNX Runtime reports them after loading the file, and the
//! checks a request must pass before it reaches a session.

use crate::error::{EngineError, Result};
use crate::tensor::{DataType, Tensor};
pub use infergate_protocol::signature::{ModelSignature, TensorSpec};
use ort::value::{TensorElementType, ValueType};

pub(crate) fn datatype_of(ty: &TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

pub(crate) fn element_type_of(dt: DataType) -> TensorElementType {
    match dt {
        DataType::Bool => TensorElementType::Bool,
        DataType::Uint8 => TensorElementType::Uint8,
        DataType::Uint16 => TensorElementType::Uint16,
        DataType::Uint32 => TensorElementType::Uint32,
        DataType::Uint64 => TensorElementType::Uint64,
        DataType::Int8 => TensorElementType::Int8,
        DataType::Int16 => TensorElementType::Int16,
        DataType::Int32 => TensorElementType::Int32,
        DataType::Int64 => TensorElementType::Int64,
        DataType::Fp16 => TensorElementType::Float16,
        DataType::Fp32 => TensorElementType::Float32,
        DataType::Fp64 => TensorElementType::Float64,
        DataType::Bytes => TensorElementType::String,
    }
}

pub(crate) fn spec_of(name: &str, ty: &ValueType) -> Result<TensorSpec> {
    match ty {
        ValueType::Tensor { ty, shape, .. } => {
            let datatype = datatype_of(ty).ok_or_else(|| {
                EngineError::InvalidModel(format!(
                    "'{name}' has element type {ty:?}, which the inference protocol cannot carry"
                ))
            })?;
            Ok(TensorSpec {
                name: name.to_string(),
                datatype,
                shape: shape.iter().copied().collect(),
            })
        }
        other => Err(EngineError::InvalidModel(format!(
            "'{name}' is a {other:?}; only tensor inputs and outputs are served"
        ))),
    }
}

/// Checks a request's tensors against a model's signature: every input known, present once,
/// with the right datatype and a shape compatible with the model's (same rank, fixed
/// dimensions equal).
pub fn check_inputs(signature: &ModelSignature, inputs: &[Tensor]) -> Result<()> {
    for (i, tensor) in inputs.iter().enumerate() {
        let spec = signature.input(&tensor.name).ok_or_else(|| {
            EngineError::InvalidInput(format!(
                "unknown input '{}'; the model takes {}",
                tensor.name,
                names(&signature.inputs)
            ))
        })?;
        if inputs[..i].iter().any(|t| t.name == tensor.name) {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' given more than once",
                tensor.name
            )));
        }
        if tensor.datatype != spec.datatype {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' has datatype {}, the model expects {}",
                tensor.name, tensor.datatype, spec.datatype
            )));
        }
        if !shape_matches(&spec.shape, &tensor.shape) {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' has shape {:?}, the model expects {:?} (-1 = any)",
                tensor.name, tensor.shape, spec.shape
            )));
        }
        tensor.check()?;
    }
    if let Some(missing) = signature
        .inputs
        .iter()
        .find(|s| !inputs.iter().any(|t| t.name == s.name))
    {
        return Err(EngineError::InvalidInput(format!(
            "missing input '{}' ({} {:?})",
            missing.name, missing.datatype, missing.shape
        )));
    }
    Ok(())
}

/// Checks requested output names against a model's signature.
pub fn check_outputs(signature: &ModelSignature, requested: &[String]) -> Result<()> {
    for name in requested {
        if signature.output(name).is_none() {
            return Err(EngineError::InvalidInput(format!(
                "unknown output '{name}'; the model produces {}",
                names(&signature.outputs)
            )));
        }
    }
    Ok(())
}

fn shape_matches(model: &[i64], given: &[i64]) -> bool {
    model.len() == given.len()
        && model
            .iter()
            .zip(given)
            .all(|(&m, &g)| g >= 0 && (m < 0 || m == g))
}

fn names(specs: &[TensorSpec]) -> String {
    specs
        .iter()
        .map(|s| format!("'{}'", s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn sig() -> ModelSignature {
        ModelSignature {
            inputs: vec![TensorSpec {
                name: "x".into(),
                datatype: DataType::Fp32,
                shape: vec![-1, 3],
            }],
            outputs: vec![TensorSpec {
                name: "y".into(),
                datatype: DataType::Fp32,
                shape: vec![-1, 3],
            }],
            metadata: BTreeMap::new(),
        }
    }

    #[test]
    fn accepts_matching_and_names_the_tensor_on_mismatch() {
        let s = sig();
        let ok = Tensor::from_f32("x", vec![2, 3], &[0.0; 6]).unwrap();
        check_inputs(&s, std::slice::from_ref(&ok)).unwrap();

        let wrong_shape = Tensor::from_f32("x", vec![2, 4], &[0.0; 8]).unwrap();
        let e = check_inputs(&s, &[wrong_shape]).unwrap_err().to_string();
        assert!(e.contains("'x'") && e.contains("shape"), "{e}");

        let wrong_type = Tensor::from_i64("x", vec![1, 3], &[0; 3]).unwrap();
        let e = check_inputs(&s, &[wrong_type]).unwrap_err().to_string();
        assert!(e.contains("INT64") && e.contains("FP32"), "{e}");

        let unknown = Tensor::from_f32("z", vec![1, 3], &[0.0; 3]).unwrap();
        assert!(check_inputs(&s, &[unknown])
            .unwrap_err()
            .to_string()
            .contains("'z'"));
        assert!(check_inputs(&s, &[])
            .unwrap_err()
            .to_string()
            .contains("missing input 'x'"));
        assert!(check_inputs(&s, &[ok.clone(), ok]).is_err());
        assert!(check_outputs(&s, &["nope".into()]).is_err());
    }
}
