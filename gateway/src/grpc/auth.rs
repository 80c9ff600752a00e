//! Keys on gRPC: the `authorization` metadata (`Bearer <key>`, or `x-api-key`) is checked like
//! the HTTP headers (401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED), then the key's rate
//! limit and concurrency cap apply (429 → RESOURCE_EXHAUSTED) as the HTTP admission
//! middleware applies them.

use crate::api::admission;
use crate::auth::Scope;
use crate::error::ApiResult;
use crate::ratelimit::Admission;
use crate::state::AppState;
use crate::store::keys::KeyRecord;
use http::{HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;
use tonic::metadata::MetadataMap;

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

/// A call's key, checked for `scope` and admitted by its limits. The admission holds the
/// key's concurrency slot: keep it until the answer is ready.
pub async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    scope: Scope,
) -> ApiResult<(Arc<KeyRecord>, Admission)> {
    let key = state.authorize(headers, scope)?;
    let admission = admission::admit(state, &key)
        .await
        .map_err(|rejection| admission::rejection_error(&rejection))?;
    Ok((key, admission))
}
