//! The manager's HTTP endpoints for workers (`/cluster/v1/...`, each authenticated by the
//! worker's join secret or its own credential, never by an API key) and for operators
//! (`/api/workers...`, admin scope).

use crate::api::authorized::{Admin, Authorized, Infer};
use crate::api::worker_admin::WorkerAdmin;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, StatusCode};
use infergate_api_types::workers::{
    Assignment, JoinTokenCreated, TokenRevoked, WorkerDraining, WorkerList, WorkerRemoved,
};
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::{JoinRequest, JoinResponse, LoadedModel, Report};
use infergate_cluster::registry::{WorkerInfo, WorkerView};
use infergate_engine::ModelState;
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::manager::LOCAL;
use infergate_service::names::parse_version;
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use infergate_store::workers::WorkerRecord;
use infergate_store::{BlobKind, StoreError};
use serde::Deserialize;

use std::sync::Arc;
use tokio::io::AsyncReadExt;

type S = State<Arc<AppState>>;

fn bearer(headers: &HeaderMap) -> ApiResult<&str> {
    infergate_kserve::credentials::presented_key(headers).ok_or_else(|| {
        ApiError::unauthorized("missing credential: send 'Authorization: Bearer <credential>'")
    })
}

/// The worker whose credential the request carries.
fn worker(state: &AppState, headers: &HeaderMap) -> ApiResult<WorkerRecord> {
    let record = state
        .workers()
        .authenticate(state.store(), bearer(headers)?)?;
    crate::connection::authenticated();
    Ok(record)
}

/// Join and heartbeat documents are small; anything larger is refused before it is held.
const MAX_MESSAGE_BYTES: usize = 64 << 10;

/// A worker's JSON message, read under [`MAX_MESSAGE_BYTES`].
async fn message<T: serde::de::DeserializeOwned>(headers: &HeaderMap, body: Body) -> ApiResult<T> {
    let bytes = crate::api::body::read_limited(headers, body, MAX_MESSAGE_BYTES).await?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid worker message: {e}")))
}

/// An optional JSON body (any content type; empty means the defaults).
async fn options<T: serde::de::DeserializeOwned + Default>(
    headers: &HeaderMap,
    body: Body,
) -> ApiResult<T> {
    let bytes = crate::api::body::read_limited(headers, body, MAX_MESSAGE_BYTES).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// `POST /cluster/v1/join` with the join secret as the bearer.
pub async fn join(
    State(state): S,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Json<JoinResponse>> {
    let secret = bearer(&headers)?;
    let request: JoinRequest = message(&headers, body).await?;
    let answer = state.workers().join(state.store(), secret, request)?;
    crate::connection::authenticated();
    Ok(Json(answer))
}

/// `POST /cluster/v1/heartbeat`.
pub async fn heartbeat(State(state): S, headers: HeaderMap, body: Body) -> HttpResult<StatusCode> {
    // Before the credential check: a removal after it must keep this report out of routing.
    let seen = state.workers().removals();
    let record = worker(&state, &headers)?;
    let report: Report = message(&headers, body).await?;
    state.workers().report(state.store(), &record, report, seen);
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /cluster/v1/deregister`: a drained worker leaves; it may join again later.
pub async fn deregister(State(state): S, headers: HeaderMap) -> HttpResult<StatusCode> {
    let record = worker(&state, &headers)?;
    // The store first: a refresh from it must not find the worker again after it is gone here.
    state.store().forget_worker(&record.id)?;
    state.workers().forget(&record.id);
    tracing::info!(worker = %record.id, "worker deregistered");
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /cluster/v1/models/{model}/versions/{version}`: what a worker needs to serve a version.
pub async fn model_version(
    State(state): S,
    Path((model, version)): Path<(String, String)>,
    headers: HeaderMap,
) -> HttpResult<Json<ModelRecord>> {
    worker(&state, &headers)?;
    let record = state
        .catalog()
        .resolve(&model, Some(parse_version(&version)?))?;
    Ok(Json(ModelRecord::clone(&record)))
}

/// `GET /cluster/v1/models/{model}`: the version the manager serves by default, for a direct
/// client that names no version.
pub async fn model_latest(
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Json<ModelRecord>> {
    worker(&state, &headers)?;
    let record = state.catalog().resolve(&model, None)?;
    Ok(Json(ModelRecord::clone(&record)))
}

/// `GET /cluster/v1/blobs/{sha256}`: a registered model file, streamed.
pub async fn blob(
    State(state): S,
    Path(sha256): Path<String>,
    headers: HeaderMap,
) -> HttpResult<Response> {
    worker(&state, &headers)?;
    // Only files the catalog references; the name is checked before it becomes a path.
    let known = sha256.len() == 64
        && sha256.bytes().all(|b| b.is_ascii_hexdigit())
        && state.catalog().all().iter().any(|r| r.sha256 == sha256);
    if !known {
        return Err(
            ApiError::not_found(format!("no registered model file with sha256 {sha256}")).into(),
        );
    }
    // Checked against its sha256 first; with PostgreSQL fetched from the database when this
    // replica never received the upload.
    let store = state.store().clone();
    let checked = sha256.clone();
    let path = tokio::task::spawn_blocking(move || store.local_blob(BlobKind::Model, &checked))
        .await
        .map_err(|e| ApiError::internal(format!("model file task failed: {e}")))?
        .map_err(|e| {
            tracing::error!(sha256, error = %e, "registered model file unusable");
            match e {
                StoreError::Unavailable(_) => ApiError::from(e),
                _ => ApiError::internal(format!(
                    "model file {sha256} is missing on the manager or does not match its sha256 \
                     there (refused)"
                )),
            }
        })?;
    let file = tokio::fs::File::open(&path).await.map_err(|e| {
        tracing::error!(path = %path.display(), error = %e, "registered model file unreadable");
        ApiError::internal("the model file is missing on the manager")
    })?;
    let len = file.metadata().await.map(|m| m.len()).ok();
    let chunks = futures_util::stream::unfold(file, |mut file| async move {
        let mut buf = vec![0u8; 256 << 10];
        match file.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok::<_, std::io::Error>(bytes::Bytes::from(buf)), file))
            }
            Err(e) => Some((Err(e), file)),
        }
    });
    let mut response = Body::from_stream(chunks).into_response();
    if let Some(len) = len {
        response
            .headers_mut()
            .insert(http::header::CONTENT_LENGTH, len.into());
    }
    Ok(response)
}

/// `GET /api/workers`: every live worker, and the local engine as one more.
pub async fn list(_: Authorized<Admin>, State(state): S) -> HttpResult<Json<WorkerList>> {
    Ok(Json(WorkerList {
        workers: listing(&state),
    }))
}

/// Every worker the manager knows, the local engine first when this server runs one (the list
/// `/api/workers` and the `/v2/events` ticks show).
pub fn listing(state: &AppState) -> Vec<WorkerView> {
    let mut workers = state.workers().view();
    if state.workers().config.local_engine {
        workers.insert(0, local_view(state));
    }
    workers
}

/// The local engine shown as a worker: always ready, heard from now. Its request rate,
/// percentiles and CPU are measured over a window by `/v2/events`, not here.
fn local_view(state: &AppState) -> WorkerView {
    let mut models = Vec::new();
    let mut queued = 0;
    for record in state.catalog().all() {
        let key = infergate_service::catalog::model_key(&record);
        if state.engine().state(&key) == ModelState::Ready {
            models.push(LoadedModel {
                name: record.name.clone(),
                version: u32::try_from(record.version).unwrap_or(u32::MAX),
            });
        }
        queued += state.engine().queued(&key);
    }
    WorkerView {
        info: WorkerInfo {
            id: LOCAL.to_owned(),
            advertise: state.workers().local_address(state.config().listen),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            devices: infergate_service::host::devices(),
        },
        state: WorkerState::Ready,
        last_seen_ms: 0,
        report: Report {
            models,
            in_flight: state.workers().local_outstanding(),
            queued: u32::try_from(queued).unwrap_or(u32::MAX),
            rss_bytes: infergate_service::host::rss_bytes(),
            ..Report::default()
        },
        outstanding: state.workers().local_outstanding(),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// Seconds the secret admits workers; absent: until revoked.
    #[serde(default)]
    ttl_s: Option<u64>,
}

/// `POST /api/workers/tokens`: a new join secret, shown once.
pub async fn create_token(
    _: Authorized<Admin>,
    State(admin): State<WorkerAdmin>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<(StatusCode, Json<JoinTokenCreated>)> {
    let ttl = options::<TokenRequest>(&headers, body).await?.ttl_s;
    Ok((StatusCode::CREATED, Json(admin.create_token(ttl)?)))
}

/// `DELETE /api/workers/{id}`: out of routing at once; it cannot rejoin under this id.
pub async fn remove(
    _: Authorized<Admin>,
    State(admin): State<WorkerAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<WorkerRemoved>> {
    Ok(Json(admin.remove(id)?))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AssignRequest {
    /// Seconds the token is valid [default: 300, at most 3600].
    #[serde(default)]
    ttl_s: Option<u64>,
}

const DEFAULT_DIRECT_TTL_S: u64 = 300;
const MAX_DIRECT_TTL_S: u64 = 3600;

/// `POST /v2/models/{model}/assign` (scope `infer`): direct mode. The client gets a worker for
/// the model's served version and a token the worker checks offline, then talks KServe v2 to
/// the worker itself (trusting the cluster CA in `ca_pem`).
pub async fn assign(
    auth: Authorized<Infer>,
    State(state): S,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> HttpResult<Json<Assignment>> {
    let key = auth.key()?;
    let ttl = options::<AssignRequest>(&headers, body)
        .await?
        .ttl_s
        .unwrap_or(DEFAULT_DIRECT_TTL_S);
    if ttl == 0 || ttl > MAX_DIRECT_TTL_S {
        return Err(ApiError::bad_request(format!(
            "ttl_s must be between 1 and {MAX_DIRECT_TTL_S}"
        ))
        .into());
    }
    // A worker enforces a key's request rate, not its token limits: a key held to a token
    // limit talks to models through the gateway, so that no budget is bypassed.
    if !auth.caller.token_limits().is_unlimited() {
        return Err(ApiError::forbidden(
            "this key has token limits (tokens_per_minute or token_budget), which only the gateway enforces: it gets no direct-mode token; send its requests to the gateway",
        )
        .into());
    }
    let record = state.catalog().resolve(&model, None)?;
    // The model's traffic split chooses the version the token is for.
    let (record, _) =
        infergate_service::traffic::split(&state, Some(&auth.caller), record, &headers);
    let loaded = LoadedModel {
        name: record.name.clone(),
        version: u32::try_from(record.version).unwrap_or(u32::MAX),
    };
    let (worker, advertise, grpc) = state.workers().choose_worker(&loaded)?;
    let now = infergate_store::now_secs().max(0) as u64;
    let claims = infergate_cluster::direct::DirectClaims {
        sub: key.public_id.clone(),
        scopes: key.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        model: record.name.clone(),
        aud: worker.clone(),
        iat: now,
        exp: now + ttl,
        rate: infergate_service::caller::effective_limits(key, state.default_limits())
            .rate
            .map(|r| infergate_cluster::direct::RateGrant {
                per_second: r.rps,
                burst: r.burst,
            }),
    };
    let token = state
        .workers()
        .material()
        .signer
        .sign(&claims)
        .map_err(|e| ApiError::internal(e.to_string()))?;
    infergate_service::manager::metrics::RoutingCounters::count(
        &state.workers().counters().direct_tokens,
    );
    tracing::info!(key_id = key.id, model = %record.name, worker = %worker, "direct token issued");
    Ok(Json(Assignment {
        worker: format!("https://{advertise}"),
        grpc,
        worker_id: worker,
        model: record.name.clone(),
        version: record.version,
        token,
        expires_at: claims.exp,
        ca_pem: state.workers().material().ca.cert_pem().to_string(),
    }))
}

/// `POST /api/workers/{id}/drain`: no new requests go to the worker; those running finish. It
/// stays listed as draining until it joins again (a restart) or is removed.
pub async fn drain(
    _: Authorized<Admin>,
    State(admin): State<WorkerAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<WorkerDraining>> {
    Ok(Json(admin.drain(id)?))
}

/// `DELETE /api/workers/tokens/{id}`: the join secret admits nobody from now on.
pub async fn revoke_token(
    _: Authorized<Admin>,
    State(admin): State<WorkerAdmin>,
    Path(id): Path<String>,
) -> HttpResult<Json<TokenRevoked>> {
    Ok(Json(admin.revoke_token(id)?))
}
