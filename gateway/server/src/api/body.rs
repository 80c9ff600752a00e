//! Reading request bodies under a size cap and a deadline: a declared Content-Length over the
//! cap is refused before reading, a streamed body is cut off as soon as it passes the cap, and a
//! body that arrives too slowly (see [`crate::read_deadline`]) is answered 408.

use crate::read_deadline::BodyTimeout;
use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use http::HeaderMap;
use infergate_service::error::{ApiError, ApiResult, Kind};

/// 408 when reading failed because the client sent too slowly, else 400.
fn read_error(e: axum::Error) -> ApiError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(error) = source {
        if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
            return ApiError::new(Kind::ClientTimeout, timeout.to_string());
        }
        source = error.source();
    }
    ApiError::bad_request(format!("reading request body: {e}"))
}

fn too_large(limit: usize) -> ApiError {
    ApiError::too_large(format!("request body exceeds the {limit}-byte limit"))
}

/// The most [`read_limited`] reserves before the bytes arrive.
const PREALLOCATE_MAX: u64 = 1 << 20;

/// The body's length as its Content-Length declares it, if it does.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Whether a `declared` length is already over `limit`.
pub fn declared_over(declared: Option<u64>, limit: usize) -> bool {
    declared.is_some_and(|n| n > limit as u64)
}

/// Refuses early when Content-Length already says the body is too large.
pub fn check_declared_length(headers: &HeaderMap, limit: usize) -> ApiResult<()> {
    if declared_over(declared_length(headers), limit) {
        return Err(too_large(limit));
    }
    Ok(())
}

/// Reads a whole body of at most `limit` bytes. A body that arrived in one piece (a request
/// read whole from the socket) is handed back as that piece, without a copy.
pub async fn read_limited(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Bytes> {
    let declared = declared_length(headers);
    if declared_over(declared, limit) {
        return Err(too_large(limit));
    }
    let mut stream = body.into_data_stream();
    let first = match stream.next().await {
        Some(chunk) => chunk.map_err(read_error)?,
        None => return Ok(Bytes::new()),
    };
    if first.len() > limit {
        return Err(too_large(limit));
    }
    let Some(second) = stream.next().await else {
        return Ok(first);
    };
    let second = second.map_err(read_error)?;
    // Sized from the declared length, so a typical body is copied once instead of into a
    // growing buffer; at most 1 MiB up front, so that a client declaring much and sending
    // little cannot make the server reserve memory it never fills.
    let mut out = Vec::with_capacity(declared.map_or(0, |n| n.min(PREALLOCATE_MAX) as usize));
    out.extend_from_slice(&first);
    let mut chunk = second;
    loop {
        if out.len() + chunk.len() > limit {
            return Err(too_large(limit));
        }
        out.extend_from_slice(&chunk);
        chunk = match stream.next().await {
            Some(chunk) => chunk.map_err(read_error)?,
            None => return Ok(out.into()),
        };
    }
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
        let chunk = chunk.map_err(read_error)?;
        total += chunk.len() as u64;
        if total > limit as u64 {
            return Err(too_large(limit));
        }
        sink(&chunk)?;
    }
    Ok(total)
}

/// The largest JSON body of a management call (keys, limits, repository index): these are a
/// few hundred bytes in practice.
pub const MAX_JSON_API_BYTES: usize = 1 << 20;

/// The status of a create-or-replace: 201 when it created, 200 when it replaced or found the
/// same thing already there.
pub(crate) fn saved_status(created: bool) -> http::StatusCode {
    if created {
        http::StatusCode::CREATED
    } else {
        http::StatusCode::OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(chunks: &[&'static [u8]]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            chunks.iter().map(|c| Ok(Bytes::from_static(c))).collect();
        Body::from_stream(futures_util::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_in_one_piece_comes_back_as_it_is_and_pieces_are_joined() {
        let headers = HeaderMap::new();
        let one = read_limited(&headers, chunked(&[b"whole"]), 16)
            .await
            .unwrap();
        assert_eq!(&one[..], b"whole");
        let joined = read_limited(&headers, chunked(&[b"ab", b"cd", b"e"]), 16)
            .await
            .unwrap();
        assert_eq!(&joined[..], b"abcde");
        let empty = read_limited(&headers, chunked(&[]), 16).await.unwrap();
        assert!(empty.is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_in_its_first_piece_or_a_later_one() {
        let headers = HeaderMap::new();
        for chunks in [&[b"0123456789" as &[u8]][..], &[b"01234", b"56789"]] {
            let e = read_limited(&headers, chunked(chunks), 9)
                .await
                .unwrap_err();
            assert_eq!(
                infergate_kserve::http_error::status(&e),
                http::StatusCode::PAYLOAD_TOO_LARGE,
                "{chunks:?}"
            );
        }
        let exact = read_limited(&headers, chunked(&[b"01234", b"5678"]), 9)
            .await
            .unwrap();
        assert_eq!(exact.len(), 9);
    }
}
