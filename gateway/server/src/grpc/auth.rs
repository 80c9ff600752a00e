//! Keys on gRPC: the `authorization` metadata (`Bearer <key>`, or `x-api-key`) is checked like
//! the HTTP headers (401 → UNAUTHENTICATED, 403 → PERMISSION_DENIED), then the key's rate
//! limit and concurrency cap apply (429 → RESOURCE_EXHAUSTED) as the HTTP admission
//! middleware applies them. A call without a key from a network granted anonymous access is
//! served as the anonymous caller of its address, as over HTTP.

use http::HeaderMap;
use infergate_limits::Admission;
use infergate_service::caller::Caller;
use infergate_service::error::ApiResult;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use std::net::IpAddr;

/// What a call presented: the metadata that can carry a key, and the client's address.
#[derive(Clone)]
pub struct Presented {
    pub headers: HeaderMap,
    pub client: Option<IpAddr>,
}

impl Presented {
    /// What `request` presents.
    pub fn of<T>(state: &AppState, request: &tonic::Request<T>) -> Presented {
        let client = crate::client_addr::of_grpc(state, request.extensions(), request.metadata());
        Presented {
            headers: infergate_kserve::credentials::key_headers(request.metadata()),
            client,
        }
    }

    /// The caller, checked for `scope`.
    pub fn authorize(&self, state: &AppState, scope: Scope) -> ApiResult<Caller> {
        crate::api::authorized::authorize(
            state,
            infergate_kserve::credentials::presented_key(&self.headers),
            self.client,
            scope,
        )
    }
}

/// A call's caller, checked for `scope` and admitted by its limits. The admission holds the
/// caller's concurrency slot: keep it until the answer is ready.
pub async fn admit(
    state: &AppState,
    presented: &Presented,
    scope: Scope,
) -> ApiResult<(Caller, Admission)> {
    let caller = presented.authorize(state, scope)?;
    let admission = infergate_service::admission::admit(state, &caller)
        .await
        .map_err(|rejection| infergate_service::admission::rejection_error(&rejection))?;
    Ok((caller, admission))
}
