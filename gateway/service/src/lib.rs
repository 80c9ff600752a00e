//! What every transport of the gateway shares, without any transport's types: the inference
//! service every protocol calls, and the parts it is built from.
//!
//! - [`state`]: the shared state, built from its parts, and the key check; [`caller`]: who is
//!   calling, as every transport hands it to the service, with its limits; [`anonymous`]:
//!   callers without a key from the networks the operator grants, and trusted proxies.
//! - [`infer`]: the one inference path (resolve, readiness, describe, run, a pipeline's
//!   stages) and the seam where a model version runs: the local engine or a worker;
//!   [`phases`]: the named phases of a request where policies attach.
//! - [`admission`]: per-key limits, in this process or shared by replicas ([`shared_limits`]);
//!   [`key_limits`]: a key's limits as the API and the CLI write them.
//! - [`shared_memory`]: Triton's system shared-memory extension: a caller's regions, inputs
//!   read from and outputs written to them (loopback callers only).
//! - [`catalog`]: the model versions in memory and their version policies.
//! - [`model_repository`]: model versions' life cycle (upload, configuration, delete);
//!   [`model_control`]: Triton's model repository extension (index, load, unload).
//! - [`pipelines`]: WebAssembly plugins and pipelines (pre-plugins → model → post-plugins);
//!   [`guardrails`]: chat guardrails (plugins of the guardrail world) on chat models' prompts
//!   and answers, attached as [`guardrail_attachment`] says.
//! - [`chat_models`]: chat models (GGUF, llama.cpp): lazy load, idle unload, upload checks.
//! - [`textgen`]: character-level text generation for the OpenAI API; [`openai_request`]: the
//!   OpenAI request bodies, parsed and checked; [`own_thread`]: a generation loop on its own
//!   thread.
//! - [`manager`]: workers on other hosts, the manager's side: join, heartbeats, routing;
//!   [`host`]: a host's devices, CPU and memory for reports.
//! - [`replica_sync`]: replicas on PostgreSQL follow each other's models, plugins, pipelines
//!   and models' settings.
//! - [`model_settings`]: a model's own settings (they survive new versions), in memory;
//!   [`traffic`]: its traffic policy on the request path (weighted, sticky and mirrored
//!   traffic between versions); [`response_cache`]: the response cache as a policy;
//!   [`token_limits`]: token limits per key as a policy on chat generations, and
//!   [`token_accounting`]: tokens per key, model and hour on their way to the store;
//!   [`mirror_queue`]: mirrored copies waiting to run; [`traffic_metrics`]: their metrics;
//!   [`payload_log`]: requests and answers written to the operator's sinks, as a policy.
//! - [`metrics`], [`latency`], [`key_activity`], [`history`]: what `/metrics`, the live
//!   dashboard and the last hour show.
//! - [`trace_settings`]: Triton's trace extension over the process's trace settings.
//! - [`config`] and [`cors`]: the configuration, checked; [`startup`]: what a process does once
//!   at start; [`drain`]: shutdown of long streams.
//! - [`error`]: the domain error, whose kind says whose fault it is; [`names`]: names and
//!   versions as requests carry them.
//!
//! It must not name a transport's types (axum, hyper's server, tonic): the HTTP and gRPC
//! mappings live with their transports (`infergate_server`, `infergate_kserve`), so that every
//! transport calls the same service. It may use the store, the engine, the plugin host, the
//! chat-model engine and the hop to workers.

#![forbid(unsafe_code)]

pub mod admission;
pub mod anonymous;
pub mod caller;
pub mod catalog;
pub mod chat_models;
pub mod config;
pub mod cors;
pub mod drain;
pub mod error;
pub mod guardrail_attachment;
pub mod guardrails;
pub mod history;
pub mod host;
pub mod infer;
pub mod key_activity;
pub mod key_limits;
pub mod latency;
pub mod manager;
pub mod metrics;
pub mod mirror_queue;
pub mod model_control;
pub mod model_repository;
pub mod model_settings;
pub mod names;
pub mod openai_request;
pub mod own_thread;
pub mod payload_log;
pub mod phases;
pub mod pipelines;
pub mod replica_sync;
pub mod response_cache;
pub mod shared_limits;
pub mod shared_memory;
pub mod shared_settings;
pub mod startup;
pub mod state;
pub mod textgen;
pub mod token_accounting;
pub mod token_limits;
pub mod trace_settings;
pub mod traffic;
pub mod traffic_metrics;
