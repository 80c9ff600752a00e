//! infergate: a TLS edge gateway for machine-learning inference.
//!
//! - [`cli`]: the `infergate` command, one module per subcommand.
//! - [`config`]: configuration from file, environment and flags.
//! - [`app`]: start-up (store, admin key, engine, TLS, listener).
//! - [`server`]: connections, TLS handshake, HTTP/1.1 + HTTP/2, graceful shutdown.
//! - [`tls`]: certificates (operator's or self-signed) and mutual TLS.
//! - [`auth`]: API keys and scopes.
//! - [`state`]: what handlers share, the model catalog, authorisation.
//! - [`api`]: HTTP routes (KServe v2, Triton extensions, management API).
//! - [`infer`]: the one inference service every protocol calls (resolve, readiness, describe,
//!   run), and the seam where a model version runs.
//! - [`grpc`]: KServe v2 over gRPC (Triton's `GRPCInferenceService`), on its own listener.
//! - [`model_repository`]: model versions' life cycle (upload, configuration, delete), for the
//!   API and the CLI alike.
//! - [`pipeline`]: WebAssembly plugins and pipelines (pre-plugins → model → post-plugins).
//! - [`store`]: SQLite and content-addressed files.
//! - [`replica_sync`]: replicas on PostgreSQL follow each other's models, plugins, pipelines.
//! - [`error`]: the one error type and its status mapping.
//! - [`ratelimit`]: per-key GCRA rate limits and concurrency caps; [`admission`] authenticates
//!   keys (for `api::authorized`) and applies the limits
//!   to HTTP requests; [`shared_limits`]: the rate limits shared by replicas through Redis.
//! - [`metrics`]: Prometheus metrics; [`latency`]: per-model latency histograms for the live
//!   dashboard.
//! - [`request_id`]: `X-Request-Id` and the per-request tracing span.
//! - [`cors`]: cross-origin rules for browser clients.
//! - [`drain`]: shutdown of WebSocket streams.
//! - [`history`]: the last hour per model and pipeline, sampled each second, for the dashboard.
//! - [`connection`]: one client connection's limits (caps, write deadline, request and body
//!   limits); [`peers`]: the per-address cap on unauthenticated connections.
//! - [`hold_body`]: response bodies that keep a slot or an in-flight count until sent.
//! - [`textgen`]: character-level text generation (sampling, stop sequences) for the OpenAI API.
//! - [`llm`]: chat models (GGUF, llama.cpp): lazy load, idle unload, upload validation.
//! - [`workers`]: workers on other hosts: join, heartbeats, routing to them, the worker process.

#![forbid(unsafe_code)]

pub mod admission;
pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod coalesce;
pub mod config;
pub mod connection;
pub mod cors;
pub mod drain;
pub mod error;
pub mod grpc;
pub mod history;
pub mod hold_body;
pub mod infer;
pub mod key_activity;
pub mod latency;
pub mod llm;
pub mod metrics;
pub mod model_repository;
pub mod own_thread;
pub mod peers;
pub mod pipeline;
pub mod ratelimit;
pub mod replica_sync;
pub mod request_id;
pub mod server;
pub mod shared_limits;
pub mod state;
pub mod store;
pub mod textgen;
pub mod tls;
pub mod workers;
