//! The KServe v2 transport that the server and the worker share: Triton's gRPC messages and
//! their conversions to the service's requests and answers, the service's errors as gRPC
//! status codes, the HTTP body codec (JSON and Triton's binary tensors), and where a client
//! presents its key.
//!
//! - [`proto`]: the code generated from `proto/inference.proto` (server side only).
//! - [`convert`]: tensors and parameters between protobuf messages and the service's types.
//! - [`status`]: the service's errors as gRPC status codes.
//! - [`codec`]: KServe v2 HTTP bodies decoded and answers encoded.
//! - [`credentials`]: the key in HTTP headers or gRPC metadata.
//! - [`http_error`]: the service's errors as HTTP statuses and bodies.
//!
//! It holds no routes and no state: the server and the worker each serve their own. It must
//! not reach into either of them (both depend on it), nor decide anything the service decides
//! (what runs where, who may call).

#![forbid(unsafe_code)]

pub mod codec;
pub mod convert;
pub mod credentials;
pub mod http_error;
pub mod status;

use futures_util::Stream;
use std::pin::Pin;

/// The code generated from `proto/inference.proto` by `build.rs`.
pub mod proto {
    tonic::include_proto!("inference");
}

/// The `protocol` label of the gRPC transport's inference metrics.
pub const PROTOCOL_LABEL: &str = "grpc";

/// The server name the metadata endpoints (HTTP and gRPC) answer.
pub const SERVER_NAME: &str = "infergate";

/// Triton's extensions, then ours (clients such as the dashboard discover features here
/// instead of probing routes). Served by HTTP and gRPC server metadata alike.
pub const EXTENSIONS: &[&str] = &[
    "binary_tensor_data",
    "model_configuration",
    "model_repository",
    "statistics",
    "system_shared_memory",
    "sequence",
    "parameters",
    "trace",
    "infergate_pipelines",
    "infergate_websocket_stream",
    "infergate_events",
    "infergate_grpc",
    "openai",
];

/// The answers of a `ModelStreamInfer` call.
pub type ResponseStream = Pin<
    Box<dyn Stream<Item = Result<proto::ModelStreamInferResponse, tonic::Status>> + Send + 'static>,
>;
