//! infergate: a TLS edge gateway for machine-learning inference.
//!
//! The modules, top to bottom: a module uses only modules listed below it, so there is no
//! import cycle (`python3 scripts/module_cycles.py --check` checks both). The shared state is
//! built from its parts and handed to the protocols; the parts never reach back into it.
//!
//! Processes and listeners:
//! - [`cli`]: the `infergate` command, one module per subcommand.
//! - [`worker`]: the `infergate worker` process on another host (join, heartbeats, its
//!   listeners).
//! - [`app`]: start-up (store, admin key, engine, TLS, listener).
//! - [`server`]: connections, TLS handshake, HTTP/1.1 + HTTP/2, graceful shutdown.
//!
//! Protocols:
//! - [`grpc`]: KServe v2 over gRPC (Triton's `GRPCInferenceService`), on its own listener.
//! - [`api`]: HTTP routes (KServe v2, Triton extensions, OpenAI, WebSocket, management API,
//!   `/metrics`), per-key admission and the key check as an extractor.
//! - [`request_id`]: `X-Request-Id` and the per-request tracing span.
//!
//! Services the protocols share:
//! - [`infer`]: the one inference service every protocol calls (resolve, readiness, describe,
//!   run, a pipeline's stages), and the seam where a model version runs.
//! - [`replica_sync`]: replicas on PostgreSQL follow each other's models, plugins, pipelines.
//!
//! What handlers share, and its parts:
//! - [`state`]: the shared state (built from the parts below) and the key check.
//! - [`model_repository`]: model versions' life cycle (upload, configuration, delete), for the
//!   API and the CLI alike.
//! - [`history`]: the last hour per model and pipeline, sampled each second, for the dashboard.
//! - [`metrics`]: Prometheus metrics; [`latency`]: per-model latency histograms for the live
//!   dashboard; [`key_activity`]: what each API key did.
//! - [`catalog`]: the model versions in memory and their version policies.
//! - [`pipeline`]: WebAssembly plugins and pipelines (pre-plugins → model → post-plugins).
//! - [`llm`]: chat models (GGUF, llama.cpp): lazy load, idle unload, upload validation.
//! - [`textgen`]: character-level text generation (sampling, stop sequences) for the OpenAI API;
//!   [`openai_request`]: the OpenAI request bodies, parsed and checked (self-contained, fuzzed);
//!   [`coalesce`]: streamed tokens written in bursts; [`own_thread`]: a generation loop on its
//!   own thread.
//! - [`workers`]: workers on other hosts, the manager's side: join, heartbeats, routing to them.
//! - [`shared_limits`]: the rate limits shared by replicas through Redis.
//! - [`connection`]: one client connection's limits (caps, write deadline, request and body
//!   limits); [`peers`]: the per-address cap on unauthenticated connections;
//!   [`read_deadline`]: the read deadline on request bodies; [`hold_body`]: response bodies
//!   that keep a slot or an in-flight count until sent.
//! - [`drain`]: shutdown of WebSocket streams.
//!
//! Foundations:
//! - [`tls`]: certificates (operator's or self-signed) and mutual TLS.
//! - [`config`]: configuration from file, environment and flags; [`cors`]: cross-origin rules
//!   for browser clients.
//! - [`names`]: names and versions as requests carry them.
//! - [`error`]: the one error type and its status mapping.
//! - [`store`]: SQLite or PostgreSQL, and content-addressed files.
//! - [`ratelimit`]: per-key GCRA rate limits and concurrency caps.
//! - [`auth`]: API keys and scopes.

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod auth;
pub mod catalog;
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
pub mod names;
pub mod openai_request;
pub mod own_thread;
pub mod peers;
pub mod pipeline;
pub mod ratelimit;
pub mod read_ahead;
pub mod read_deadline;
pub mod replica_sync;
pub mod request_id;
pub mod server;
pub mod shared_limits;
pub mod state;
pub mod store;
pub mod textgen;
pub mod tls;
pub mod worker;
pub mod workers;
