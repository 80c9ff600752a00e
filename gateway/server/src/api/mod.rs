//! HTTP routes. Each module owns one protocol or resource; this file only wires them.

pub mod admission;
pub mod authorized;
pub mod body;
mod chat_phases;
mod completion_stream;
pub mod compressed;
pub mod dashboard;
pub mod embeddings;
pub mod events;
pub mod front;
mod generation_metrics;
pub mod guardrails;
pub mod history;
pub mod key_admin;
pub mod keys;
pub mod kserve;
pub mod limits;
pub mod metrics;
pub mod models;
pub mod openai;
mod openai_answer;
mod openai_guardrails;
pub mod openai_llm;
mod openai_llm_stream;
mod openai_llm_usage;
mod openai_tools;
pub mod openapi;
pub mod payload_log;
pub mod payload_log_sinks;
pub mod pipelines;
pub mod plugins;
pub mod shared_memory;
pub mod stream;
pub mod textgen;
pub mod trace_settings;
pub mod traffic;
pub mod triton;
pub mod unread;
pub mod worker_admin;
pub mod workers;
mod ws_frame;

use axum::routing::{delete, get, post, put};
use infergate_service::state::AppState;
use std::sync::Arc;

/// The routes behind the front door (`front`): request id, CORS (answers preflight itself),
/// metrics, per-key admission.
pub fn router(state: Arc<AppState>) -> front::Front {
    let cors = crate::cors::layer(&state.config().cors).unwrap_or_else(|e| {
        // Config::validate refused this at start; a router built without it gets no CORS.
        tracing::error!(error = %e, "CORS disabled");
        None
    });
    routes().finish(state, cors)
}

/// The template of every route (`/v2/models/{model}/infer`), in the order they are added: what
/// the OpenAPI document must describe or exclude (gateway/server/tests/handlers/openapi.rs).
pub fn route_templates() -> Vec<&'static str> {
    routes().templates()
}

fn routes() -> front::Routes {
    front::Routes::default()
        // KServe v2 / Open Inference Protocol
        .route("/v2", get(kserve::server_metadata))
        .route("/v2/health/live", get(kserve::live))
        .route("/v2/health/ready", get(kserve::ready))
        .route("/v2/models/{model}", get(kserve::model_metadata))
        .route(
            "/v2/models/{model}/versions/{version}",
            get(kserve::model_version_metadata),
        )
        .route("/v2/models/{model}/ready", get(kserve::model_ready))
        .route(
            "/v2/models/{model}/versions/{version}/ready",
            get(kserve::model_version_ready),
        )
        .route("/v2/models/{model}/infer", post(kserve::infer))
        .route(
            "/v2/models/{model}/versions/{version}/infer",
            post(kserve::infer_version),
        )
        // Triton's extensions that real clients call
        .route("/v2/models/{model}/config", get(triton::model_config))
        .route(
            "/v2/models/{model}/versions/{version}/config",
            get(triton::model_version_config),
        )
        .route("/v2/models/stats", get(triton::all_stats))
        .route("/v2/models/{model}/stats", get(triton::model_stats))
        .route(
            "/v2/models/{model}/versions/{version}/stats",
            get(triton::model_version_stats),
        )
        .route(
            "/v2/trace/setting",
            get(trace_settings::get).post(trace_settings::post),
        )
        .route(
            "/v2/models/{model}/trace/setting",
            get(trace_settings::model_get).post(trace_settings::model_post),
        )
        .route("/v2/repository/index", post(triton::repository_index))
        .route("/v2/repository/models/{model}/load", post(triton::load))
        .route("/v2/repository/models/{model}/unload", post(triton::unload))
        // Triton's shared-memory extension (system shared memory; no CUDA here)
        .route(
            "/v2/systemsharedmemory/status",
            get(shared_memory::status_all),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/status",
            get(shared_memory::status_one),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/register",
            post(shared_memory::register),
        )
        .route(
            "/v2/systemsharedmemory/unregister",
            post(shared_memory::unregister_all),
        )
        .route(
            "/v2/systemsharedmemory/region/{name}/unregister",
            post(shared_memory::unregister_one),
        )
        .route(
            "/v2/cudasharedmemory/status",
            get(shared_memory::cuda_status_all),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/status",
            get(shared_memory::cuda_status_one),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/register",
            post(shared_memory::cuda_register),
        )
        .route(
            "/v2/cudasharedmemory/unregister",
            post(shared_memory::cuda_unregister),
        )
        .route(
            "/v2/cudasharedmemory/region/{name}/unregister",
            post(shared_memory::cuda_unregister),
        )
        // Management API
        .route("/api/models", get(models::list))
        .route(
            "/api/models/{model}",
            get(models::get).delete(models::delete_all),
        )
        .route("/api/models/{model}/versions", post(models::upload))
        .route("/api/models/{model}/config", put(models::put_latest_config))
        .route(
            "/api/models/{model}/traffic",
            get(traffic::get).put(traffic::put).delete(traffic::delete),
        )
        .route(
            "/api/models/{model}/payload-log",
            get(payload_log::get)
                .put(payload_log::put)
                .delete(payload_log::delete),
        )
        .route(
            "/api/models/{model}/guardrails",
            get(guardrails::get)
                .put(guardrails::put)
                .delete(guardrails::delete),
        )
        .route(
            "/api/models/{model}/versions/{version}/config",
            put(models::put_version_config),
        )
        .route(
            "/api/models/{model}/versions/{version}",
            get(models::get_version).delete(models::delete_version),
        )
        .route("/api/plugins", get(plugins::list).post(plugins::upload))
        .route(
            "/api/plugins/{plugin}",
            get(plugins::get).delete(plugins::delete_all),
        )
        .route(
            "/api/plugins/{plugin}/versions/{version}",
            delete(plugins::delete_version),
        )
        .route(
            "/api/plugins/{plugin}/versions/{version}/limits",
            put(plugins::put_limits),
        )
        .route("/api/pipelines", get(pipelines::list))
        .route(
            "/api/pipelines/{pipeline}",
            get(pipelines::get)
                .put(pipelines::put)
                .delete(pipelines::delete),
        )
        .route("/api/pipelines/{pipeline}/run", post(pipelines::run_raw))
        .route(
            "/api/pipelines/{pipeline}/payload-log",
            get(payload_log::get_pipeline)
                .put(payload_log::put_pipeline)
                .delete(payload_log::delete_pipeline),
        )
        .route("/api/payload-log/sinks", get(payload_log_sinks::list))
        .route(
            "/api/payload-log/sinks/{name}",
            put(payload_log_sinks::put).delete(payload_log_sinks::delete),
        )
        .route("/api/keys", get(keys::list).post(keys::create))
        .route("/api/keys/{id}", delete(keys::revoke).patch(limits::update))
        .route("/api/keys/{id}/usage", get(limits::usage))
        .route(
            "/api/keys/{id}/guardrails",
            get(guardrails::get_key)
                .put(guardrails::put_key)
                .delete(guardrails::delete_key),
        )
        .route(
            "/api/keys/{id}/payload-log",
            get(payload_log::get_key)
                .put(payload_log::put_key)
                .delete(payload_log::delete_key),
        )
        .route("/metrics", get(metrics::scrape))
        .route("/api/metrics/history", get(history::history))
        .route("/api/openapi.json", get(openapi::document))
        // WebSocket streaming
        .route("/v2/stream", get(stream::upgrade))
        .route("/v2/events", get(events::upgrade))
        // OpenAI-compatible API
        .route("/v1/models", get(openai::models))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/chat/completions", post(openai::chat_completions))
        .route("/api/whoami", get(keys::whoami))
        // Workers on other hosts: their own endpoints (worker credentials) and the operators'.
        .route("/v2/models/{model}/assign", post(workers::assign))
        .route("/cluster/v1/join", post(workers::join))
        .route("/cluster/v1/heartbeat", post(workers::heartbeat))
        .route("/cluster/v1/deregister", post(workers::deregister))
        .route(
            "/cluster/v1/models/{model}/versions/{version}",
            get(workers::model_version),
        )
        .route("/cluster/v1/models/{model}", get(workers::model_latest))
        .route("/cluster/v1/blobs/{sha256}", get(workers::blob))
        .route("/api/workers", get(workers::list))
        .route("/api/workers/tokens", post(workers::create_token))
        .route("/api/workers/tokens/{id}", delete(workers::revoke_token))
        .route("/api/workers/{id}", delete(workers::remove))
        .route("/api/workers/{id}/drain", post(workers::drain))
        // Everything else: the dashboard's files (API paths keep their JSON 404).
        .fallback(dashboard::fallback)
}
