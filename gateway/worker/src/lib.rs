//! The `infergate worker` process: a host that joins a manager, serves the models it is sent
//! and reports every heartbeat. The manager's side is `infergate_service::manager`; the hop
//! between them is `infergate_hop`; the KServe transport is `infergate_kserve`. It never reaches
//! into the server's modules.
//!
//! - [`agent`]: the process: start-up, listeners, shutdown; [`args`]: its command line.
//! - [`heartbeat`]: the first join and the heartbeats; [`link`]: a worker's calls to its
//!   manager.
//! - [`node`]: what handlers and heartbeats share, and admitting and running a request.
//! - [`routes`]: its HTTP routes; [`listener`]: its mutual-TLS listener; [`grpc`]: its KServe
//!   gRPC listener for direct clients.
//! - [`cache`]: its model files under a disk budget; [`window`]: its request rate and latency
//!   percentiles between heartbeats.

#![forbid(unsafe_code)]

pub mod agent;
pub mod args;
pub mod cache;
pub mod grpc;
pub mod heartbeat;
pub mod link;
pub mod listener;
pub mod node;
pub mod routes;
pub mod window;

#[cfg(test)]
mod tests;
