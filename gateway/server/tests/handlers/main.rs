//! In-process handler tests, one binary (one link instead of one per file): the real service behind
//! the real routes, driven without a process or a port (`support::App`).

mod support;

mod anonymous;
mod api_types;
mod guardrails;
mod hostile_tensors;
mod keys_and_headers;
mod kserve_http;
mod kserve_infer;
mod limits;
mod model_traces;
mod model_uploads;
mod openai_chat;
mod openapi;
mod payload_log;
mod postops;
mod response_cache;
mod tokens;
mod trace_settings;
mod traffic;
mod triton_dropin;
mod triton_errors;
mod worker_loss;
