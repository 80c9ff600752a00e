//! The worker's HTTP routes: readiness, loads from the manager, KServe v2 inference (and a
//! pipeline's model stage with its native op, from the manager).

use crate::node::{Node, Peer};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Extension;
use axum::Router;
use http::{HeaderMap, StatusCode};
use infergate_kserve::codec;
use infergate_kserve::http_error::HttpError;
use infergate_service::catalog::model_key;
use infergate_service::error::ApiError;
use infergate_service::infer::Request;
use infergate_service::names::parse_version;
use std::sync::Arc;
use std::time::Instant;

pub(crate) fn router(node: Arc<Node>, max_request_bytes: usize) -> Router {
    Router::new()
        .route("/v2/health/live", get(|| async { StatusCode::OK }))
        .route("/v2/health/ready", get(ready))
        .route("/v2/models/{model}/infer", post(infer_newest))
        .route("/v2/models/{model}/versions/{version}/infer", post(infer))
        .route(infergate_hop::remote::STAGE_PATH, post(infer))
        .route(
            "/v2/repository/models/{model}/versions/{version}/load",
            post(load),
        )
        .layer(DefaultBodyLimit::max(max_request_bytes))
        .with_state(node)
}

pub(crate) async fn ready(State(node): State<Arc<Node>>) -> StatusCode {
    if node.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

/// `POST /v2/repository/models/{m}/versions/{v}/load`, from the manager only: load a version
/// ahead of its traffic (the manager's scale-out).
pub(crate) async fn load(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path((model, version)): Path<(String, String)>,
) -> Response {
    let loaded = async {
        if !peer.cluster {
            return Err(ApiError::forbidden(
                "only the manager loads models on a worker",
            ));
        }
        let record = node.record(&model, Some(parse_version(&version)?)).await?;
        node.engine
            .load(&model_key(&record), &node.data.model_file(&record.sha256))
            .await?;
        Ok::<_, ApiError>(StatusCode::OK)
    };
    loaded.await.map_err(HttpError).into_response()
}

pub(crate) async fn infer_newest(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path(model): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    run_infer(node, peer, model, None, headers, body, false).await
}

/// `POST /v2/models/{m}/versions/{v}/infer`, and on [`infergate_hop::remote::STAGE_PATH`] a pipeline's
/// model stage from the manager: its native op, then the model.
pub(crate) async fn infer(
    State(node): State<Arc<Node>>,
    Extension(peer): Extension<Peer>,
    Path((model, version)): Path<(String, String)>,
    uri: http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let stage = uri.path().starts_with("/cluster/");
    if stage && !peer.cluster {
        return HttpError(ApiError::forbidden(
            "only the manager sends pipeline stages to a worker",
        ))
        .into_response();
    }
    match parse_version(&version) {
        Ok(v) => run_infer(node, peer, model, Some(v), headers, body, stage).await,
        Err(e) => HttpError(e).into_response(),
    }
}

pub(crate) async fn run_infer(
    node: Arc<Node>,
    peer: Peer,
    model: String,
    version: Option<u64>,
    headers: HeaderMap,
    body: Bytes,
    stage: bool,
) -> Response {
    let _counted = node.begin();
    let started = Instant::now();
    // A request from the manager continues the manager's trace and follows its sampling
    // decision; a direct client's flag does not decide.
    // In the log too while traces are exported: the worker's lines of a request name its trace.
    let span = infergate_telemetry::logged_span!(
        "worker request",
        model = %model,
        version = version.unwrap_or(0) as i64,
        stage,
        direct = !peer.cluster,
        request_bytes = body.len() as i64
    );
    infergate_telemetry::w3c::continue_in(&span, &headers, peer.cluster, None);
    let trace = infergate_telemetry::w3c::record_ids(&span);
    let answer = async {
        let record = node.admit(peer, &headers, &model, version).await?;
        let (document, inputs) =
            infergate_telemetry::span!("decode").in_scope(|| codec::decode(&headers, &body))?;
        let mut request = Request::kserve(&document, inputs)?;
        if stage {
            let op = infergate_hop::remote::stage_ops(&document).map_err(ApiError::bad_request)?;
            request.inputs = infergate_telemetry::traced!(
                infergate_service::infer::backend::preprocess(
                    node.engine.ops().clone(),
                    op,
                    request.inputs,
                ),
                infergate_telemetry::span!("native pre-op")
            )?;
        }
        let inferred = infergate_telemetry::traced!(
            node.execute(&record, request),
            infergate_telemetry::model_run_span!()
        )?;
        infergate_telemetry::span!("encode").in_scope(|| codec::respond(&document, inferred))
    };
    let mut response = match infergate_telemetry::traced!(answer, span) {
        Ok(response) => {
            node.answered(started.elapsed());
            response
        }
        Err(e) => HttpError(e).into_response(),
    };
    if let Some(trace) = trace {
        response
            .headers_mut()
            .insert(infergate_telemetry::w3c::TRACE_ID, trace);
    }
    response
}
