//! infergate: a TLS edge gateway for machine-learning inference.
//!
//! - [`cli`]: the `infergate` command and its subcommands.
//! - [`cli_pipelines`]: its offline `plugins` and `pipelines` subcommands.
//! - [`config`]: configuration from file, environment and flags.
//! - [`app`]: start-up (store, admin key, engine, TLS, listener).
//! - [`server`]: connections, TLS handshake, HTTP/1.1 + HTTP/2, graceful shutdown.
//! - [`tls`]: certificates (operator's or self-signed) and mutual TLS.
//! - [`auth`]: API keys and scopes.
//! - [`state`]: what handlers share, the model catalog, authorisation.
//! - [`api`]: HTTP routes (KServe v2, Triton extensions, management API).
//! - [`registry`]: validating and storing model files.
//! - [`pipeline`]: WebAssembly plugins and pipelines (pre-plugins → model → post-plugins).
//! - [`store`]: SQLite and content-addressed files.
//! - [`error`]: the one error type and its status mapping.

pub mod api;
pub mod app;
pub mod auth;
pub mod cli;
pub mod cli_pipelines;
pub mod config;
pub mod error;
pub mod pipeline;
pub mod registry;
pub mod server;
pub mod state;
pub mod store;
pub mod tls;
