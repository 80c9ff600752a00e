//! The decisions and credentials of an infergate cluster: one manager (the gateway) and worker
//! hosts that join it.
//!
//! Nothing here does I/O. The gateway owns the sockets, the store and the clock and asks this
//! crate what to do: which worker serves a request ([`routing`]), whether a worker is still
//! alive ([`liveness`]), whether a join secret is genuine ([`join`]), which certificate a worker
//! gets ([`ca`]), and whether a client's direct-mode token lets it call a model on a worker
//! ([`direct`]). Keeping these pure means every rule is tested without processes or timers.

#![forbid(unsafe_code)]

pub mod ca;
pub mod direct;
pub mod join;
pub mod liveness;
pub mod messages;
pub mod registry;
pub mod rendezvous;
pub mod routing;
