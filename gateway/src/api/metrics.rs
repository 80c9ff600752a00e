//! `GET /metrics`: Prometheus/OpenMetrics text. On the main listener it needs an admin-scoped
//! key (Prometheus sends it with `authorization: {credentials_file: ...}`); the optional
//! `[metrics] listen` listener serves it without a key.

use super::authorized::{Admin, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue};
use std::sync::Arc;

fn exposition(state: &AppState) -> ApiResult<Response> {
    let text = state
        .metrics
        .render(state)
        .map_err(|e| ApiError::internal(format!("encoding metrics: {e}")))?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    Ok(response)
}

pub async fn scrape(
    _: Authorized<Admin>,
    State(state): State<Arc<AppState>>,
) -> ApiResult<Response> {
    exposition(&state)
}

/// The same, without a key: only routed on the separate metrics listener.
pub async fn scrape_open(State(state): State<Arc<AppState>>) -> ApiResult<Response> {
    exposition(&state)
}

/// The router of the separate metrics listener.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(scrape_open))
        .with_state(state)
}
