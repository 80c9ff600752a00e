//! Authentication as middleware and an extractor.
//!
//! The admission middleware authenticates a request's key once (it needs the record to apply
//! the key's limits) and leaves it in the request's extensions as [`Authenticated`]. A handler
//! states the scope it needs in its signature, `Authorized<Infer>`, and either gets the key's
//! record or never runs: 401 without a valid key, 403 with a key that lacks the scope. The
//! record comes from the in-memory key cache (`store::key_cache`), so no request waits on the
//! database; a revocation is seen by the next request because the cache checks the database's
//! version first.
//!
//! A refused request may still be sending its body, and an extractor sees only the request's
//! head. The refusal is marked ([`ApiError::before_body`]) and the middleware, which kept a
//! handle on the body ([`crate::api::unread::Unread`]), drains it (bounded) before answering, so that the
//! client reads the 401 instead of a reset connection.

use axum::extract::FromRequestParts;
use http::request::Parts;
use infergate_kserve::http_error::HttpError;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use infergate_store::keys::KeyRecord;
use std::marker::PhantomData;
use std::sync::Arc;

/// The caller the admission middleware authenticated for this request.
#[derive(Clone)]
pub struct Authenticated(pub Caller);

/// The scopes a route accepts: a key passes with any one of them (`admin` implies all).
pub trait Required: Send + Sync + 'static {
    const SCOPES: &'static [Scope];
}

/// Runs models and pipelines, reads their metadata.
pub struct Infer;
/// Uploads and configures models, plugins and pipelines.
pub struct Upload;
/// Manages keys, limits, workers and metrics.
pub struct Admin;
/// Any valid key (e.g. a key asking who it is).
pub struct AnyScope;

impl Required for Infer {
    const SCOPES: &'static [Scope] = &[Scope::Infer];
}
impl Required for Upload {
    const SCOPES: &'static [Scope] = &[Scope::Upload];
}
impl Required for Admin {
    const SCOPES: &'static [Scope] = &[Scope::Admin];
}
impl Required for AnyScope {
    const SCOPES: &'static [Scope] = &[Scope::Infer, Scope::Upload, Scope::Admin];
}

/// A request whose caller holds one of `S::SCOPES`.
pub struct Authorized<S> {
    pub caller: Caller,
    scope: PhantomData<S>,
}

impl<S> Authorized<S> {
    /// The caller's key; 403 for an anonymous caller (a route about the caller's own key).
    pub fn key(&self) -> ApiResult<&Arc<KeyRecord>> {
        self.caller
            .key()
            .ok_or_else(|| ApiError::forbidden("this route needs an API key"))
    }
}

impl<S: Required> FromRequestParts<Arc<AppState>> for Authorized<S> {
    /// Marked [`ApiError::before_body`]: the middleware drains the body (bounded) so that the
    /// client can read the refusal.
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        // Taken, not cloned: one extractor per handler uses it.
        let caller = match parts.extensions.remove::<Authenticated>() {
            Some(Authenticated(caller)) => caller,
            // The middleware found no valid key (or could not ask the store): authenticating
            // again gives the precise 401 (or the store's 503).
            None => state
                .authenticate_from(
                    infergate_kserve::credentials::presented_key(&parts.headers),
                    crate::client_addr::of(state, &parts.extensions, &parts.headers),
                )
                .map_err(ApiError::before_body)?,
        };
        caller
            .check_scopes(S::SCOPES)
            .map_err(ApiError::before_body)?;
        crate::connection::authenticated();
        Ok(Authorized {
            caller,
            scope: PhantomData,
        })
    }
}

/// Authenticates the key a gRPC call or WebSocket stream presents and checks it has `scope`
/// (401 without a valid key, 403 with one lacking the scope), marking the connection
/// authenticated as the HTTP extractor does. Without a key, a caller at `client` that anonymous
/// access covers is served as anonymous.
pub fn authorize(
    state: &AppState,
    presented: Option<&str>,
    client: Option<std::net::IpAddr>,
    scope: Scope,
) -> ApiResult<Caller> {
    let caller = state.authorize_from(presented, client, scope)?;
    crate::connection::authenticated();
    Ok(caller)
}
