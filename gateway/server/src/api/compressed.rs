//! Compressed KServe inference bodies, as Triton's HTTP endpoint takes and gives them.
//!
//! Requests: `Content-Encoding: gzip` or `deflate` (zlib, as tritonclient's
//! `request_compression_algorithm` sends it); the binary extension's header length refers to
//! the decompressed body. The decompressed size is bounded by the same request limit as a plain
//! body while it is inflated: output beyond it stops the inflater with a 413, nothing is ever
//! sized from what the body declares (a decompression bomb costs the limit, no more).
//!
//! Answers: compressed when the request's `Accept-Encoding` prefers gzip or deflate (Triton's
//! reading of it, q-values included) and the body is worth it (at least [`WORTH_IT`] bytes).
//! Only inference answers pass here: nothing that carries a secret (a new key) is ever
//! compressed, so a compression oracle (BREACH) has nothing to find.

use super::body::read_limited;
use axum::body::{Body, Bytes};
use axum::response::Response;
use flate2::read::{GzDecoder, ZlibDecoder};
use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;
use http::{header, HeaderMap, HeaderValue};
use http_body_util::BodyExt;
use infergate_service::error::{ApiError, ApiResult};
use std::io::{Read, Write};

/// Smaller answers go out as they are: compressing them saves less than it costs.
pub const WORTH_IT: usize = 1024;

/// Above this, inflating or deflating runs on a blocking thread.
const BLOCKING_ABOVE: usize = 256 << 10;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Gzip,
    /// zlib-wrapped deflate, what `Content-Encoding: deflate` means (RFC 9110) and what
    /// Triton's clients send.
    Deflate,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
        }
    }
}

/// The request body's encoding; identity is `None`.
fn content_encoding(headers: &HeaderMap) -> ApiResult<Option<Encoding>> {
    let Some(value) = headers.get(header::CONTENT_ENCODING) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match text.as_str() {
        "" | "identity" => Ok(None),
        "gzip" | "x-gzip" => Ok(Some(Encoding::Gzip)),
        "deflate" => Ok(Some(Encoding::Deflate)),
        other => Err(ApiError::bad_request(format!(
            "Unsupported compression type '{other}': send Content-Encoding gzip or deflate, or none"
        ))),
    }
}

/// A whole request body of at most `limit` bytes after decompression.
pub async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> ApiResult<Bytes> {
    let encoding = content_encoding(headers)?;
    let raw = read_limited(headers, body, limit).await?;
    let Some(encoding) = encoding else {
        return Ok(raw);
    };
    if raw.len() > BLOCKING_ABOVE {
        tokio::task::spawn_blocking(move || inflate(encoding, &raw, limit))
            .await
            .map_err(|e| ApiError::internal(format!("decompression task failed: {e}")))?
    } else {
        inflate(encoding, &raw, limit)
    }
}

/// Inflates `compressed`, stopping with a 413 as soon as the output passes `limit`.
fn inflate(encoding: Encoding, compressed: &[u8], limit: usize) -> ApiResult<Bytes> {
    let reader: Box<dyn Read + '_> = match encoding {
        Encoding::Gzip => Box::new(GzDecoder::new(compressed)),
        Encoding::Deflate => Box::new(ZlibDecoder::new(compressed)),
    };
    // One byte past the limit tells an over-long body from one of exactly the limit.
    let mut bounded = reader.take(limit as u64 + 1);
    // Reserved from what arrived (compressed), capped: never from a size the client declares.
    let mut out = Vec::with_capacity(compressed.len().saturating_mul(4).min(limit).min(1 << 20));
    bounded.read_to_end(&mut out).map_err(|e| {
        ApiError::bad_request(format!(
            "the {} request body does not decompress: {e}",
            encoding.name()
        ))
    })?;
    if out.len() > limit {
        return Err(ApiError::too_large(format!(
            "request body exceeds the {limit}-byte limit once decompressed ({} compressed bytes)",
            compressed.len()
        )));
    }
    Ok(out.into())
}

/// The encoding `Accept-Encoding` prefers among gzip and deflate (Triton's reading: the highest
/// q-value wins, identity included; ties keep the first).
pub fn accepted(headers: &HeaderMap) -> Option<Encoding> {
    let mut best: Option<(f64, Option<Encoding>)> = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(text) = value.to_str() else {
            continue;
        };
        for item in text.split(',') {
            let mut parts = item.split(';');
            let name = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let weight = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(Some(1.0), |q| q.trim().parse::<f64>().ok());
            let Some(weight) = weight.filter(|w| *w > 0.0) else {
                continue;
            };
            let encoding = match name.as_str() {
                "gzip" | "x-gzip" => Some(Encoding::Gzip),
                "deflate" => Some(Encoding::Deflate),
                "identity" => None,
                _ => continue,
            };
            if best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, encoding));
            }
        }
    }
    best.and_then(|(_, encoding)| encoding)
}

/// `response` compressed as the request's `Accept-Encoding` asks, when it is worth it.
pub async fn respond(request_headers: &HeaderMap, response: Response) -> Response {
    let Some(encoding) = accepted(request_headers) else {
        return response;
    };
    let (mut parts, body) = response.into_parts();
    // Only a whole body known in advance (an inference answer) is compressed.
    let exact = axum::body::HttpBody::size_hint(&body)
        .exact()
        .map(|n| n as usize);
    if parts.headers.contains_key(header::CONTENT_ENCODING) || exact.is_none_or(|n| n < WORTH_IT) {
        return Response::from_parts(parts, body);
    }
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::warn!(error = %e, "reading an answer to compress it");
            return Response::from_parts(parts, Body::empty());
        }
    };
    let compressed = if bytes.len() > BLOCKING_ABOVE {
        let input = bytes.clone();
        tokio::task::spawn_blocking(move || deflate(encoding, &input))
            .await
            .ok()
            .and_then(Result::ok)
    } else {
        deflate(encoding, &bytes).ok()
    };
    let Some(compressed) = compressed.filter(|c| c.len() < bytes.len()) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.headers.insert(
        header::CONTENT_ENCODING,
        HeaderValue::from_static(encoding.name()),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .append(header::VARY, HeaderValue::from_static("accept-encoding"));
    Response::from_parts(parts, Body::from(compressed))
}

/// Compresses at a fast level: answers are compressed per request, on the serving path.
fn deflate(encoding: Encoding, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let out = Vec::with_capacity(bytes.len() / 2);
    match encoding {
        Encoding::Gzip => {
            let mut encoder = GzEncoder::new(out, Compression::fast());
            encoder.write_all(bytes)?;
            encoder.finish()
        }
        Encoding::Deflate => {
            let mut encoder = ZlibEncoder::new(out, Compression::fast());
            encoder.write_all(bytes)?;
            encoder.finish()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: header::HeaderName, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn accept_encoding_is_read_as_triton_reads_it() {
        let a = |v| accepted(&headers(header::ACCEPT_ENCODING, v));
        assert_eq!(a("gzip"), Some(Encoding::Gzip));
        assert_eq!(a("deflate"), Some(Encoding::Deflate));
        assert_eq!(a("br, deflate;q=0.5, gzip;q=0.9"), Some(Encoding::Gzip));
        assert_eq!(a("gzip;q=0.2, identity"), None);
        assert_eq!(a("gzip;q=0"), None);
        assert_eq!(a("br"), None);
        assert_eq!(accepted(&HeaderMap::new()), None);
    }

    #[test]
    fn both_encodings_round_trip_and_a_bomb_stops_at_the_limit() {
        let body = b"{\"inputs\": []}".repeat(100);
        for encoding in [Encoding::Gzip, Encoding::Deflate] {
            let packed = deflate(encoding, &body).unwrap();
            assert_eq!(
                &inflate(encoding, &packed, body.len()).unwrap()[..],
                &body[..]
            );
            let e = inflate(encoding, &packed, body.len() - 1).unwrap_err();
            assert_eq!(
                e.kind,
                infergate_service::error::Kind::TooLarge,
                "{}",
                e.message
            );
            let e = inflate(encoding, b"not compressed", 1 << 20).unwrap_err();
            assert_eq!(e.kind, infergate_service::error::Kind::Invalid);
        }
        // 64 MiB of zeros in a few hundred KiB: refused after 1 MiB + 1 of output.
        let bomb = deflate(Encoding::Gzip, &vec![0u8; 64 << 20]).unwrap();
        assert!(bomb.len() < 512 << 10, "{}", bomb.len());
        let e = inflate(Encoding::Gzip, &bomb, 1 << 20).unwrap_err();
        assert!(e.message.contains("once decompressed"), "{}", e.message);
    }

    #[test]
    fn unknown_encodings_are_the_clients_fault() {
        let e = content_encoding(&headers(header::CONTENT_ENCODING, "br")).unwrap_err();
        assert!(e.message.contains("gzip or deflate"), "{}", e.message);
        assert_eq!(
            content_encoding(&headers(header::CONTENT_ENCODING, "identity")).unwrap(),
            None
        );
    }
}
