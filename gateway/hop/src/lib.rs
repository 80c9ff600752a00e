//! The hop from the manager to a worker, and the contract both ends of it keep: KServe v2 with
//! Triton's binary tensors over HTTP/1.1 and mutual TLS.
//!
//! - [`tls`]: certificates and verifiers between manager and workers (pinned CA, mutual TLS).
//! - [`link`]: the hop's deadline on a silent connection (keepalive, `TCP_USER_TIMEOUT`) and
//!   its connect timeout, on both ends.
//! - [`pool`]: the manager's keep-alive connections to workers, driven by the requests that
//!   hold them.
//! - [`remote`]: one inference on a worker: the request encoded once, sent, its answer decoded;
//!   the headers and paths both ends agree on.
//!
//! It owns no catalog, key or engine: the manager (`infergate_service::manager`) decides where
//! a request runs, the worker (`infergate_worker`) runs it. It must not depend on either.

#![forbid(unsafe_code)]

pub mod link;
pub mod pool;
pub mod remote;
pub mod tls;

use std::time::Duration;

/// Time for a TLS handshake on a worker's listener, and for a request's headers after it (hyper
/// runs this timer while a kept-alive connection waits for its next request too: the manager's
/// pool reuses a connection for half of it).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
