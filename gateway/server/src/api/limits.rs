//! Per-key limits (admin scope): change a key's limits, read its current usage.

use super::authorized::{Admin, Authorized};
use super::body::read_limited;
use super::key_admin::KeyAdmin;
use axum::extract::{Path, State};
use axum::Json;
use http::HeaderMap;
use infergate_api_types::keys::{self as api, KeyUsageReport};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::ApiError;
use serde_json::{Map, Value};

/// `PATCH /api/keys/{id}`: `{"rate_limit": {...} | null, "max_concurrent": N | null,
/// "tokens_per_minute": N | null, "token_budget": {"tokens": N, "period": "day" | "month"} |
/// null}`; absent fields keep their value, `null` returns to the server's default.
pub async fn update(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<api::KeyUpdated>> {
    let limit = super::body::MAX_JSON_API_BYTES;
    let body = read_limited(&headers, body, limit).await?;
    let body: Map<String, Value> = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "expected {{\"rate_limit\": {{\"rps\": N, \"burst\": N}} | null, \"max_concurrent\": N | null, \"tokens_per_minute\": N | null, \"token_budget\": {{\"tokens\": N, \"period\": \"day\" | \"month\"}} | null}}: {e}"
        ))
    })?;
    let fields = infergate_service::key_limits::LIMIT_FIELDS;
    if let Some(extra) = body.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "unknown field '{extra}': only {} can change",
            fields.join(", ")
        ))
        .into());
    }
    let key = keys.find(&id)?;
    let limits = infergate_service::key_limits::parse_limits(&body, key.limits())?;
    let updated = keys
        .store()
        .set_key_limits(&key.id.to_string(), &limits)?
        .ok_or_else(|| ApiError::not_found(format!("no API key '{id}'")))?;
    tracing::info!(key_id = updated.id, rate_limit = ?updated.rate_limit, max_concurrent = ?updated.max_concurrent, tokens = ?updated.tokens, "API key limits changed");
    Ok(Json(api::KeyUpdated {
        key: updated.info(),
    }))
}

/// `GET /api/keys/{id}/usage`: the key's effective limits and where they come from, requests
/// in flight, the rate quota left now, counters since the server started (`activity`:
/// requests admitted and refused whatever the limits, and the last use in Unix ms), and its
/// tokens (`tokens`: the token limits' state, and what it used per model today and in the
/// budget's period, from the store's accounting).
pub async fn usage(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyUsageReport>> {
    let key = keys.find(&id)?;
    // The accounting is read from the database: off the runtime's workers.
    let report = tokio::task::spawn_blocking(move || keys.usage_report(&key))
        .await
        .map_err(|e| ApiError::internal(format!("usage task failed: {e}")))??;
    Ok(Json(report))
}
