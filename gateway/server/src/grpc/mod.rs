//! KServe v2 over gRPC: Triton's `inference.GRPCInferenceService`, on its own listener with
//! the HTTP server's TLS, keys, limits, metrics and shutdown. The messages, their conversions
//! and the status codes are `infergate_kserve`'s, shared with the worker.
//!
//! - [`server`]: the service as a router for the gateway's listener, message size limits.
//! - [`auth`]: API keys from the `authorization` metadata, scopes and per-key admission.
//! - [`describe`]: metadata, model configuration and statistics messages.
//! - [`control`]: the model repository and shared-memory RPCs.
//! - [`decoupled`]: decoupled models (chat models, decoupled pipelines) on the stream: several
//!   responses per request and Triton's final flag.
//! - [`infer`]: one inference, unary or a stream's; [`service`]: the unary RPCs; [`stream`]:
//!   the bidirectional `ModelStreamInfer`.

pub mod auth;
pub mod control;
pub mod decoupled;
pub mod describe;
pub mod infer;
pub mod server;
pub mod service;
pub mod stream;
