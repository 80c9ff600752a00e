//! A model's inputs and outputs: what the engine reports after loading a model, what the store
//! keeps with each version and what the metadata endpoints describe.

use crate::tensor::DataType;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One input or output: name, datatype and shape (`-1` for a dynamic dimension).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorSpec {
    pub name: String,
    pub datatype: DataType,
    pub shape: Vec<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelSignature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// The model's custom metadata (e.g. an OCR model's character set).
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl ModelSignature {
    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|s| s.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|s| s.name == name)
    }
}
