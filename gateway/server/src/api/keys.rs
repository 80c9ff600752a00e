//! API key management (admin scope), and `whoami` for any valid key.

use super::authorized::{Admin, AnyScope, Authorized};
use super::body::read_limited;
use super::key_admin::KeyAdmin;
use axum::extract::{Path, State};
use axum::Json;
use http::{HeaderMap, StatusCode};
use infergate_api_types::keys::{Identity, KeyCreated, KeyList, KeyRevoked};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::ApiError;
use infergate_store::auth::Scopes;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    pub name: Option<String>,
    pub scopes: Vec<String>,
    /// `{"rps": N, "burst": N}`; absent = the server default.
    #[serde(default)]
    pub rate_limit: Option<Value>,
    /// Concurrent requests; absent = the server default.
    #[serde(default)]
    pub max_concurrent: Option<Value>,
    /// Tokens per minute (LLM requests); absent = the server default.
    #[serde(default)]
    pub tokens_per_minute: Option<Value>,
    /// `{"tokens": N, "period": "day" | "month"}`; absent = the server default.
    #[serde(default)]
    pub token_budget: Option<Value>,
}

pub async fn create(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<(StatusCode, Json<KeyCreated>)> {
    let limit = super::body::MAX_JSON_API_BYTES;
    let body = read_limited(&headers, body, limit).await?;
    let req: CreateKey = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "expected {{\"name\": ..., \"scopes\": [...]}}: {e}"
        ))
    })?;
    let scopes = Scopes::parse_list(&req.scopes.join(",")).map_err(ApiError::bad_request)?;
    let name = req.name.unwrap_or_else(|| "unnamed".into());
    if name.len() > 128 || name.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "key name: at most 128 characters, no control characters",
        )
        .into());
    }
    let mut limit_fields = serde_json::Map::new();
    if let Some(v) = req.rate_limit {
        limit_fields.insert("rate_limit".into(), v);
    }
    if let Some(v) = req.max_concurrent {
        limit_fields.insert("max_concurrent".into(), v);
    }
    if let Some(v) = req.tokens_per_minute {
        limit_fields.insert("tokens_per_minute".into(), v);
    }
    if let Some(v) = req.token_budget {
        limit_fields.insert("token_budget".into(), v);
    }
    let limits = infergate_service::key_limits::parse_limits(&limit_fields, Default::default())?;
    let (record, secret) = keys
        .store()
        .create_key_with_limits(&name, &scopes, &limits)?;
    tracing::info!(key_id = record.id, public_id = %record.public_id, scopes = %scopes.to_list(), "API key created");
    let created = KeyCreated {
        key: record.info(),
        secret,
    };
    Ok((StatusCode::CREATED, Json(created)))
}

/// Every key with its effective limits (its own, else the server's defaults) and its usage
/// since the server started, as `GET /api/keys/{id}/usage` gives them one at a time.
pub async fn list(_: Authorized<Admin>, State(keys): State<KeyAdmin>) -> HttpResult<Json<KeyList>> {
    let listed = keys
        .store()
        .list_keys()?
        .iter()
        .map(|k| keys.listed(k))
        .collect();
    Ok(Json(KeyList { keys: listed }))
}

pub async fn revoke(
    _: Authorized<Admin>,
    State(keys): State<KeyAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<KeyRevoked>> {
    let record = keys
        .store()
        .revoke_key(&id)?
        .ok_or_else(|| ApiError::not_found(format!("no API key '{id}'")))?;
    keys.forget(record.id);
    tracing::info!(key_id = record.id, public_id = %record.public_id, "API key revoked");
    Ok(Json(KeyRevoked {
        revoked: record.info(),
    }))
}

/// The calling key's identity and scopes (the dashboard uses it to show what is allowed). Any
/// valid key may ask, whatever its scopes.
pub async fn whoami(auth: Authorized<AnyScope>) -> HttpResult<Json<Identity>> {
    let key = auth.key()?;
    Ok(Json(Identity {
        id: key.id,
        public_id: key.public_id.clone(),
        name: key.name.clone(),
        scopes: key.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
    }))
}
