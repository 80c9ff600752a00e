//! Reading request bodies under a size cap: a declared Content-Length over the cap is refused
//! before reading, and a streamed body is cut off as soon as it passes the cap.

use crate::error::{ApiError, ApiResult};
use axum::body::Body;
use futures_util::StreamExt;
use http::HeaderMap;
use std::time::Duration;

/// How much of an unread body is drained before an early error answer, and for how long.
/// HTTP/1.1 clients that are still sending when the server answers and closes see a reset
/// (Python's `ssl.SSLEOFError`) instead of the error; draining a bounded amount lets them read
/// the JSON error and keeps the connection reusable. Bigger or slower bodies are cut off.
const DRAIN_MAX_BYTES: usize = 8 << 20;
const DRAIN_DEADLINE: Duration = Duration::from_secs(5);

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!("request body exceeds the {limit}-byte limit"))
}

/// Refuses early when Content-Length already says the body is too large.
pub fn check_declared_length(headers: &HeaderMap, limit: usize) -> ApiResult<()> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    match declared {
        Some(n) if n > limit as u64 => Err(too_large(limit)),
        _ => Ok(()),
    }
}

/// Reads a whole body of at most `limit` bytes.
pub async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Vec<u8>> {
    check_declared_length(headers, limit)?;
    let mut out = Vec::new();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
        if out.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Calls `sink` with each chunk of a body of at most `limit` bytes.
pub async fn stream_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    mut sink: impl FnMut(&[u8]) -> ApiResult<()>,
) -> ApiResult<u64> {
    check_declared_length(headers, limit)?;
    let mut total = 0u64;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::bad_request(format!("reading request body: {e}")))?;
        total += chunk.len() as u64;
        if total > limit as u64 {
            return Err(too_large(limit));
        }
        sink(&chunk)?;
    }
    Ok(total)
}

/// Answers `error` for a request whose body was not read yet: drains up to a bounded amount of
/// the body first (see [`DRAIN_MAX_BYTES`]) so the client gets to read the answer.
pub async fn reject_unread(error: ApiError, headers: &HeaderMap, body: Body) -> ApiError {
    if check_declared_length(headers, DRAIN_MAX_BYTES).is_err() {
        return error;
    }
    let drain = async {
        let mut seen = 0usize;
        let mut stream = body.into_data_stream();
        while let Some(Ok(chunk)) = stream.next().await {
            seen += chunk.len();
            if seen > DRAIN_MAX_BYTES {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_DEADLINE, drain).await;
    error
}
