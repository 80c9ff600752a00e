//! infergate's wire formats for tensors, without the server around them: what the gateway's
//! transports (HTTP, gRPC, WebSocket) decode requests with, and what the fuzz targets in
//! `fuzz/` exercise.
//!
//! - [`tensor`]: datatypes, tensors and element counts (the engine re-exports them).
//! - [`limits`]: the one place where sizes a client declares are checked against the bytes it
//!   sent, before anything is allocated for them.
//! - [`json`]: KServe JSON `data` arrays, decoded straight into typed bytes.
//! - [`binary`]: Triton's binary tensor extension (fixed-size elements, BYTES framing).
//! - [`contents`]: gRPC's typed `InferTensorContents`.
//! - [`kserve`]: the KServe v2 request and response documents.
//! - [`message`]: WebSocket text messages (request, cancel, invalid).
//! - [`names`]: the names clients give models, pipelines and plugins.
//! - [`signature`]: a model's inputs and outputs (name, datatype, shape), as stored and described.

#![forbid(unsafe_code)]

pub mod binary;
pub mod contents;
pub mod json;
pub mod kserve;
pub mod limits;
pub mod message;
pub mod names;
pub mod signature;
pub mod tensor;

/// A request the client got wrong (HTTP 400, gRPC INVALID_ARGUMENT), or a tensor whose data
/// does not match its shape; the message names the tensor when one is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DecodeError {}
