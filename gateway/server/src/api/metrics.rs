//! `GET /metrics`: Prometheus/OpenMetrics text. On the main listener it needs an admin-scoped
//! key (Prometheus sends it with `authorization: {credentials_file: ...}`); the optional
//! `[metrics] listen` listener serves it without a key. And the middleware that counts every HTTP
//! request ([`middleware`]).

use super::authorized::{Admin, Authorized};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::state::AppState;
use std::sync::Arc;

fn exposition(state: &AppState) -> ApiResult<Response> {
    let text = state
        .metrics()
        .render(
            state.catalog(),
            state.engine(),
            state.llm(),
            state.workers(),
        )
        .map_err(|e| ApiError::internal(format!("encoding metrics: {e}")))?;
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(infergate_service::metrics::CONTENT_TYPE),
    );
    Ok(response)
}

pub async fn scrape(
    _: Authorized<Admin>,
    State(state): State<Arc<AppState>>,
) -> HttpResult<Response> {
    Ok(exposition(&state)?)
}

/// The same, without a key: only routed on the separate metrics listener.
pub async fn scrape_open(State(state): State<Arc<AppState>>) -> HttpResult<Response> {
    Ok(exposition(&state)?)
}

/// The router of the separate metrics listener.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route("/metrics", axum::routing::get(scrape_open))
        .with_state(state)
}

/// Runs `next` and counts the request by its route `template` (`api::front`), and KServe v2
/// inference requests by model.
pub async fn counted<F, Fut>(
    state: &AppState,
    template: &'static str,
    request: axum::extract::Request,
    next: F,
) -> Response
where
    F: FnOnce(axum::extract::Request) -> Fut,
    Fut: std::future::Future<Output = Response>,
{
    // A standard method is a constant; the URI's bytes are reference counted.
    let method = request.method().clone();
    let uri = request.uri().clone();
    let path = uri.path();
    let started = std::time::Instant::now();
    let response = next(request).await;
    let status = response.status().as_u16();
    state
        .metrics()
        .http_request(method_label(&method), template, status);
    if template == "/api/pipelines/{pipeline}/run" {
        // Raw-body pipeline runs count under the pipeline's name (registered names only).
        let name = path.split('/').nth(3).unwrap_or_default();
        if state.pipelines().get(name).is_some() {
            state
                .metrics()
                .inference(name, "", "pipeline", status, started.elapsed());
        }
    } else if template.starts_with("/v2/models/{model}") && template.ends_with("/infer") {
        let (model, version) = match response
            .extensions()
            .get::<infergate_service::metrics::Served>()
        {
            Some(served) => (served.model.clone(), served.version.to_string()),
            None => kserve_labels(state, path),
        };
        state
            .metrics()
            .inference(&model, &version, "kserve_http", status, started.elapsed());
    }
    response
}

/// Labels for a KServe inference request that failed before a version was resolved: only
/// registered names become label values, so random paths cannot grow the metrics. A request
/// without a version counts against the version it would have gone to, and one to a pipeline
/// under the pipeline's name, so that its errors show where people look for them.
fn kserve_labels(state: &AppState, path: &str) -> (String, String) {
    let segments: Vec<&str> = path.split('/').collect();
    // ["", "v2", "models", MODEL, ("versions", VERSION,)? "infer"]
    let Some(&name) = segments.get(3) else {
        return (String::new(), String::new());
    };
    if state.pipelines().get(name).is_some() {
        return (name.to_string(), String::new());
    }
    let Ok(default) = state.catalog().resolve(name, None) else {
        return (String::new(), String::new());
    };
    let version = match (segments.get(4), segments.get(5)) {
        (Some(&"versions"), Some(v)) => match v.parse::<u64>() {
            Ok(v) => v.to_string(),
            Err(_) => String::new(),
        },
        _ => default.version.to_string(),
    };
    (name.to_string(), version)
}

/// The method's name for the label: the standard methods by name, any other as `OTHER` (a
/// client's made-up method must not add label values).
fn method_label(method: &http::Method) -> &'static str {
    use http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "OTHER",
    }
}
