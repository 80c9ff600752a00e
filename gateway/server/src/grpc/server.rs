//! The gRPC service as a router for the gateway's own listener (`crate::server::run`), so
//! gRPC gets the HTTP server's TLS acceptor (ALPN `h2`), connection cap, HTTP/2 keep-alive
//! and graceful shutdown rather than a second stack. Paths outside the service answer
//! UNIMPLEMENTED.

use super::service::InferenceService;
use infergate_kserve::proto::grpc_inference_service_server::GrpcInferenceServiceServer;
use infergate_service::state::AppState;
use std::sync::Arc;

pub fn router(state: Arc<AppState>) -> axum::Router {
    // A request message may be as large as an HTTP inference body; answers are not capped
    // (what a model returns is bounded by the model).
    let max_request = state.config().limits.max_request_bytes;
    let service = GrpcInferenceServiceServer::new(InferenceService::new(state))
        .max_decoding_message_size(max_request)
        .max_encoding_message_size(usize::MAX);
    tonic::service::Routes::new(service)
        .into_axum_router()
        .layer(axum::middleware::map_response(
            infergate_kserve::status::oversized_as_resource_exhausted,
        ))
}
