//! The gateway's server: listeners, TLS, connections and the routes of every protocol in front
//! of the inference service (`infergate_service`).
//!
//! - [`app`]: start-up of `infergate serve` (store, admin key, engine, TLS, listeners).
//! - [`server`]: connections, TLS handshake, HTTP/1.1 + HTTP/2, graceful shutdown;
//!   [`connection`]: one connection's limits (caps, write deadline, request and body limits);
//!   [`peers`]: the per-address cap on unauthenticated connections; [`client_addr`]: the
//!   address a request comes from (its peer, or the client a trusted proxy names); [`read_ahead`]: one socket
//!   read per request under TLS; [`read_deadline`]: the read deadline on request bodies;
//!   [`hold_body`]: response bodies that keep a slot until sent; [`tls`]: certificates.
//! - [`api`]: HTTP routes (KServe v2, Triton extensions, OpenAI, WebSocket, management API,
//!   `/metrics`), per-key admission and the key check as an extractor; [`request_id`]:
//!   `X-Request-Id` and the per-request span; [`model_trace`]: the trace of a request naming
//!   its model in its body, decided by its handler; [`cors`]: cross-origin rules; [`coalesce`]:
//!   streamed tokens written in bursts; [`sequence_order`]: a sequence's requests on one
//!   stream run in order.
//! - [`grpc`]: KServe v2 over gRPC (Triton's `GRPCInferenceService`), on its own listener.
//!
//! It owns no model, key or pipeline logic: a route decodes, asks the service, encodes.

#![forbid(unsafe_code)]

pub mod api;
pub mod app;
pub mod client_addr;
pub mod coalesce;
pub mod connection;
pub mod cors;
pub mod grpc;
pub mod hold_body;
pub mod model_trace;
pub mod peers;
pub mod read_ahead;
pub mod read_deadline;
pub mod request_id;
pub mod sequence_order;
pub mod server;
pub mod tls;
