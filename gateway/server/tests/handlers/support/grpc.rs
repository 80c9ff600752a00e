//! gRPC calls in process: a protobuf message framed as gRPC (one uncompressed message) sent
//! through the gRPC service's router, and the answer read back with its status from the
//! trailers (or the headers of a trailers-only answer).

use super::App;
use axum::body::Body;
use http::Request;
use http_body_util::BodyExt;
use prost::Message;
use tower::ServiceExt;

/// A gRPC answer: its status code and message, and the response message's bytes.
pub struct GrpcReply {
    pub code: tonic::Code,
    pub message: String,
    pub body: Vec<u8>,
}

impl GrpcReply {
    /// The response message, decoded; panics, naming the status, when there is none.
    pub fn decode<M: Message + Default>(&self) -> M {
        assert_eq!(self.code, tonic::Code::Ok, "{}", self.message);
        M::decode(&self.body[..]).expect("a response message")
    }
}

/// `message` framed as one gRPC message (flag 0: not compressed).
pub fn frame(message: &impl Message) -> Vec<u8> {
    let payload = message.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + payload.len());
    framed.push(0);
    framed.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    framed.extend_from_slice(&payload);
    framed
}

impl App {
    /// Calls `/inference.GRPCInferenceService/{method}` with `message`, `metadata` (name,
    /// value pairs) and, when given, the peer the listener would have marked.
    pub async fn grpc_call(
        &self,
        method: &str,
        message: &impl Message,
        metadata: &[(&str, &str)],
        peer: Option<&str>,
    ) -> GrpcReply {
        self.grpc_raw(method, frame(message), metadata, peer).await
    }

    /// Like [`App::grpc_call`] with a request body already framed (compressed messages, or
    /// several of a stream).
    pub async fn grpc_raw(
        &self,
        method: &str,
        body: Vec<u8>,
        metadata: &[(&str, &str)],
        peer: Option<&str>,
    ) -> GrpcReply {
        let mut request = Request::builder()
            .method("POST")
            .uri(format!("/inference.GRPCInferenceService/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (name, value) in metadata {
            request = request.header(*name, *value);
        }
        let mut request = request.body(Body::from(body)).expect("request");
        if let Some(peer) = peer {
            request.extensions_mut().insert(super::peer_addr(peer));
        }
        let Ok(response) = self.grpc.clone().oneshot(request).await;
        let (parts, body) = response.into_parts();
        let collected = body.collect().await.expect("answer body");
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let bytes = collected.to_bytes();
        let status = |headers: &http::HeaderMap| {
            headers
                .get("grpc-status")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<i32>().ok())
                .map(|code| {
                    let message = headers
                        .get("grpc-message")
                        .and_then(|v| v.to_str().ok())
                        .map(percent_decode)
                        .unwrap_or_default();
                    (tonic::Code::from_i32(code), message)
                })
        };
        let (code, message) = status(&trailers)
            .or_else(|| status(&parts.headers))
            .expect("a grpc-status in the trailers or the headers");
        let body = unframe(&bytes, &parts.headers);
        GrpcReply {
            code,
            message,
            body,
        }
    }
}

/// The first message of a gRPC body (decompressed when the answer says it is gzip).
fn unframe(bytes: &[u8], headers: &http::HeaderMap) -> Vec<u8> {
    if bytes.len() < 5 {
        return Vec::new();
    }
    let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
    let payload = &bytes[5..5 + len];
    if bytes[0] == 1 {
        let encoding = headers
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert_eq!(
            encoding, "gzip",
            "a compressed message in an unknown encoding"
        );
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(payload), &mut out)
            .expect("gzip");
        return out;
    }
    payload.to_vec()
}

/// grpc-message is percent-encoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&text[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
