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

/// Checks a request's tensors against model `model`'s signature: every input known, present
/// once, with the right datatype and a shape compatible with the model's (same rank, fixed
/// dimensions equal). The errors start as Triton's do (its clients and tests match them), and
/// add what the model takes.
pub fn check_inputs(model: &str, signature: &ModelSignature, inputs: &[Tensor]) -> Result<()> {
    for (i, tensor) in inputs.iter().enumerate() {
        if signature.input(&tensor.name).is_none() {
            return Err(EngineError::InvalidInput(format!(
                "unexpected inference input '{}' for model '{model}': the model takes {}",
                tensor.name,
                names(&signature.inputs)
            )));
        }
        if inputs[..i].iter().any(|t| t.name == tensor.name) {
            return Err(EngineError::InvalidInput(format!(
                "input '{}' already exists in request",
                tensor.name
            )));
        }
    }
    let missing: Vec<&TensorSpec> = signature
        .inputs
        .iter()
        .filter(|s| !inputs.iter().any(|t| t.name == s.name))
        .collect();
    if let Some(first) = missing.first() {
        let quoted = |names: Vec<&str>| {
            let list: Vec<String> = names.iter().map(|n| format!("'{n}'")).collect();
            format!("[{}]", list.join(","))
        };
        return Err(EngineError::InvalidInput(format!(
            "expected {} inputs but got {} inputs for model '{model}'. Got input(s) {}, but missing required input(s) {}. Please provide all required input(s). ('{}' is {} {:?})",
            signature.inputs.len(),
            inputs.len(),
            quoted(inputs.iter().map(|t| t.name.as_str()).collect()),
            quoted(missing.iter().map(|s| s.name.as_str()).collect()),
            first.name,
            first.datatype,
            first.shape
        )));
    }
    for tensor in inputs {
        let Some(spec) = signature.input(&tensor.name) else {
            continue;
        };
        if tensor.datatype != spec.datatype {
            return Err(EngineError::InvalidInput(format!(
                "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
                tensor.name, tensor.datatype, spec.datatype
            )));
        }
        if !shape_matches(&spec.shape, &tensor.shape) {
            return Err(EngineError::InvalidInput(format!(
                "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}. (-1 = any size)",
                tensor.name,
                dims(&spec.shape),
                dims(&tensor.shape)
            )));
        }
        tensor.check()?;
    }
    Ok(())
}

/// Dimensions as Triton writes them: `[-1,16]`.
fn dims(shape: &[i64]) -> String {
    let list: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", list.join(","))
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
        check_inputs("m", &s, std::slice::from_ref(&ok)).unwrap();

        // Triton's wording first (its clients match it), the model's view after.
        let wrong_shape = Tensor::from_f32("x", vec![2, 4], &[0.0; 8]).unwrap();
        let e = check_inputs("m", &s, &[wrong_shape])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unexpected shape for input 'x' for model 'm'. Expected [-1,3], got [2,4]."),
            "{e}"
        );

        let wrong_type = Tensor::from_i64("x", vec![1, 3], &[0; 3]).unwrap();
        let e = check_inputs("m", &s, &[wrong_type])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("inference input 'x' data-type is 'INT64', but model 'm' expects 'FP32'"),
            "{e}"
        );

        let unknown = Tensor::from_f32("z", vec![1, 3], &[0.0; 3]).unwrap();
        let e = check_inputs("m", &s, &[unknown]).unwrap_err().to_string();
        assert!(
            e.contains("unexpected inference input 'z' for model 'm'"),
            "{e}"
        );
        let e = check_inputs("m", &s, &[]).unwrap_err().to_string();
        assert!(
            e.contains("expected 1 inputs but got 0 inputs for model 'm'. Got input(s) [], but missing required input(s) ['x']"),
            "{e}"
        );
        assert!(check_inputs("m", &s, &[ok.clone(), ok]).is_err());
        assert!(check_outputs(&s, &["nope".into()]).is_err());
    }
}
