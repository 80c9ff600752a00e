//! The `infergate worker` process: a host that joins a manager, serves the models it
//! is sent and reports every heartbeat. The manager's side is [`infergate_service::manager`].
//!
//! - [`agent`]: the process: join, heartbeats, its mutual-TLS listener for the manager.
//! - [`link`]: a worker's calls to its manager.
//! - [`cache`]: its model files under a disk budget.
//! - [`grpc`]: its KServe gRPC listener for direct clients.
//! - [`window`]: a worker's request rate and latency percentiles between heartbeats.

pub mod agent;
pub mod cache;
pub mod grpc;
pub mod link;
pub mod window;

#[cfg(test)]
mod tests;
