//! Where a client presents its key: the HTTP headers `Authorization: Bearer <key>` or
//! `X-API-Key`, and the same names in gRPC metadata. Keys are checked by the service; this only
//! finds them.

use http::{HeaderMap, HeaderName, HeaderValue};
use tonic::metadata::MetadataMap;

/// Extracts a key from `Authorization: Bearer` or `X-API-Key`.
pub fn presented_key(headers: &http::HeaderMap) -> Option<&str> {
    if let Some(v) = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    {
        let v = v.trim();
        if let Some(token) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
        {
            return Some(token.trim());
        }
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The metadata that can carry a key, as HTTP headers for the shared key check (a stream
/// keeps them to check each of its requests).
pub fn key_headers(metadata: &MetadataMap) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in [
        http::header::AUTHORIZATION,
        HeaderName::from_static("x-api-key"),
    ] {
        if let Some(value) = metadata
            .get(name.as_str())
            .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            headers.insert(name, value);
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_found_in_either_header_and_bearer_wins() {
        let mut headers = HeaderMap::new();
        assert_eq!(presented_key(&headers), None);
        headers.insert("x-api-key", HeaderValue::from_static(" ig_key "));
        assert_eq!(presented_key(&headers), Some("ig_key"));
        headers.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer ig_bearer"),
        );
        assert_eq!(presented_key(&headers), Some("ig_bearer"));
    }

    #[test]
    fn metadata_keys_become_headers() {
        let mut metadata = MetadataMap::new();
        metadata.insert("authorization", "Bearer ig_grpc".parse().unwrap());
        metadata.insert("other", "x".parse().unwrap());
        let headers = key_headers(&metadata);
        assert_eq!(headers.len(), 1);
        assert_eq!(presented_key(&headers), Some("ig_grpc"));
    }
}
