//! The gRPC service as a router for the gateway's own listener (`crate::server::run`), so
//! gRPC gets the HTTP server's TLS acceptor (ALPN `h2`), connection cap, HTTP/2 keep-alive
//! and graceful shutdown rather than a second stack. Paths outside the service answer
//! UNIMPLEMENTED.
//!
//! Message compression: requests compressed with gzip or deflate (what tritonclient's
//! `compression_algorithm` sends) are inflated under the request size limit (tonic stops at the
//! limit with RESOURCE_EXHAUSTED, a decompression bomb included); answers are compressed with
//! the request's own algorithm when the request was compressed, and sent as they are otherwise
//! (every gRPC client accepts gzip, but most tensors do not compress enough to pay for it).

use super::service::InferenceService;
use axum::extract::Request;
use http::HeaderValue;
use infergate_kserve::proto::grpc_inference_service_server::GrpcInferenceServiceServer;
use infergate_service::state::AppState;
use std::sync::Arc;
use tonic::codec::CompressionEncoding;

pub fn router(state: Arc<AppState>) -> axum::Router {
    // A request message may be as large as an HTTP inference body; answers are not capped
    // (what a model returns is bounded by the model).
    let max_request = state.config().limits.max_request_bytes;
    let service = GrpcInferenceServiceServer::new(InferenceService::new(state))
        .max_decoding_message_size(max_request)
        .max_encoding_message_size(usize::MAX)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
        .send_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Deflate);
    tonic::service::Routes::new(service)
        .into_axum_router()
        .layer(axum::middleware::map_request(answer_as_asked))
        .layer(axum::middleware::map_response(
            infergate_kserve::status::oversized_as_resource_exhausted,
        ))
}

const GRPC_ENCODING: &str = "grpc-encoding";
const GRPC_ACCEPT_ENCODING: &str = "grpc-accept-encoding";

/// tonic compresses an answer with the first algorithm the client accepts; the client is made
/// to accept only the algorithm its own request used (none for an uncompressed request).
async fn answer_as_asked(mut request: Request) -> Request {
    let used = request
        .headers()
        .get(GRPC_ENCODING)
        .and_then(|v| v.to_str().ok())
        .filter(|v| matches!(*v, "gzip" | "deflate"))
        .map(|v| HeaderValue::from_static(if v == "gzip" { "gzip" } else { "deflate" }));
    let headers = request.headers_mut();
    match used {
        Some(encoding) => {
            headers.insert(GRPC_ACCEPT_ENCODING, encoding);
        }
        None => {
            headers.remove(GRPC_ACCEPT_ENCODING);
        }
    }
    request
}
