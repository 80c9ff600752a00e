//! KServe v2 over gRPC: Triton's `inference.GRPCInferenceService`, on its own listener with
//! the HTTP server's TLS, keys, limits, metrics and shutdown.
//!
//! - [`server`]: the service as a router for the gateway's listener, message size limits.
//! - [`auth`]: API keys from the `authorization` metadata, scopes and per-key admission.
//! - [`status`]: the gateway's errors as gRPC status codes.
//! - [`convert`]: tensors and parameters between protobuf messages and the gateway's types.
//! - [`describe`]: metadata, model configuration and statistics messages.
//! - [`service`]: the unary RPCs; [`stream`]: the bidirectional `ModelStreamInfer`.

pub mod auth;
pub mod convert;
pub mod describe;
pub mod server;
pub mod service;
pub mod status;
pub mod stream;

/// The code generated from `gateway/proto/inference.proto` by `build.rs`.
pub mod proto {
    tonic::include_proto!("inference");
}

/// The `protocol` label of this transport's inference metrics.
pub const PROTOCOL_LABEL: &str = "grpc";
