//! Keys on gRPC: the `authorization` metadata (`Bearer <key>`, or `x-api-key`) is checked like
//! the HTTP headers (401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED), then the key's rate
//! limit and concurrency cap apply (429 → RESOURCE_EXHAUSTED) as the HTTP admission
//! middleware applies them.

use http::HeaderMap;
use infergate_limits::Admission;
use infergate_service::caller::Caller;
use infergate_service::error::ApiResult;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;

/// A call's key, checked for `scope` and admitted by its limits. The admission holds the
/// key's concurrency slot: keep it until the answer is ready.
pub async fn admit(
    state: &AppState,
    headers: &HeaderMap,
    scope: Scope,
) -> ApiResult<(Caller, Admission)> {
    let caller = crate::api::authorized::authorize(
        state,
        infergate_kserve::credentials::presented_key(headers),
        scope,
    )?;
    let admission = infergate_service::admission::admit(state, &caller)
        .await
        .map_err(|rejection| infergate_service::admission::rejection_error(&rejection))?;
    Ok((caller, admission))
}
