//! Reading request metadata and raw input.

use crate::{PluginError, PreInput};

/// The value of the first metadata entry named `key`.
pub fn metadata_get<'a>(metadata: &'a [(String, String)], key: &str) -> Option<&'a str> {
    metadata
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The raw bytes of a pre-processing input: the request body, or the first
/// element of a single `bytes` tensor (how KServe clients send a file).
pub fn input_bytes(input: &PreInput) -> Result<&[u8], PluginError> {
    match input {
        PreInput::Bytes(bytes) => Ok(bytes),
        PreInput::Tensors(tensors) => match tensors.as_slice() {
            [tensor] => tensor.byte_elements()?.next().ok_or_else(|| {
                PluginError::bad_input(format!("tensor `{}` has no elements", tensor.name))
            }),
            _ => Err(PluginError::bad_input(format!(
                "expected one bytes tensor, got {} tensors",
                tensors.len()
            ))),
        },
    }
}
