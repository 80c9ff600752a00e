//! The OpenAPI 3.1 document of the HTTP API (`GET /api/openapi.json`): every route the server
//! serves but those [`EXCLUDED`] (WebSockets, the manager's routes for its workers), their
//! parameters, bodies and answers. The answers' schemas come from this crate's types (the ones
//! the server serializes), the request bodies the server parses itself from [`bodies`].
//!
//! Two tests keep it true: the server's route table and this document name the same routes
//! (gateway/server/tests/handlers/openapi.rs), and real answers of every documented route match their
//! schemas (tests/python/test_openapi.py, which also runs a real OpenAPI validator over it).

mod admin_paths;
pub mod bodies;
mod kserve_paths;
mod manage_paths;
mod openai_paths;

use serde_json::{json, Map, Value};
use utoipa::OpenApi;

/// A route the server serves that the document leaves out, and why.
pub struct Excluded {
    pub method: &'static str,
    pub path: &'static str,
    pub why: &'static str,
}

/// The routes the document leaves out: OpenAPI describes request and answer, not a WebSocket's
/// frames, and the manager's routes for its workers are no client's (workers authenticate with
/// their cluster certificate and join secret, and both sides ship in one binary).
pub const EXCLUDED: &[Excluded] = &[
    Excluded {
        method: "GET",
        path: "/v2/stream",
        why: "WebSocket: KServe inference and text generation over one connection",
    },
    Excluded {
        method: "GET",
        path: "/v2/events",
        why: "WebSocket: the live feed of figures and state changes (admin)",
    },
    Excluded {
        method: "POST",
        path: "/cluster/v1/join",
        why: "manager and workers: a worker joins with its join secret",
    },
    Excluded {
        method: "POST",
        path: "/cluster/v1/heartbeat",
        why: "manager and workers: a worker's periodic report",
    },
    Excluded {
        method: "POST",
        path: "/cluster/v1/deregister",
        why: "manager and workers: a drained worker leaves",
    },
    Excluded {
        method: "GET",
        path: "/cluster/v1/models/{model}",
        why: "manager and workers: the newest version's record, for a worker to load",
    },
    Excluded {
        method: "GET",
        path: "/cluster/v1/models/{model}/versions/{version}",
        why: "manager and workers: one version's record, for a worker to load",
    },
    Excluded {
        method: "GET",
        path: "/cluster/v1/blobs/{sha256}",
        why: "manager and workers: a model file, for a worker's cache",
    },
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "infergate",
        description = "The HTTP API of infergate: KServe v2 (the Open Inference Protocol) with Triton's extensions, the OpenAI-compatible routes, and the management and admin API. Every route but the health probes needs an API key with the scope its security requirement names (`admin` implies `upload`, which implies `infer`), as `Authorization: Bearer KEY` or `X-API-Key: KEY`. Errors answer `{\"error\": \"...\"}` (OpenAI's shape on the `/v1` routes that run models), the message saying whose fault it is.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        kserve_paths::live,
        kserve_paths::ready,
        kserve_paths::server_metadata,
        kserve_paths::model_metadata,
        kserve_paths::model_version_metadata,
        kserve_paths::model_ready,
        kserve_paths::model_version_ready,
        kserve_paths::infer,
        kserve_paths::infer_version,
        kserve_paths::model_config,
        kserve_paths::model_version_config,
        kserve_paths::all_stats,
        kserve_paths::model_stats,
        kserve_paths::model_version_stats,
        kserve_paths::repository_index,
        kserve_paths::load,
        kserve_paths::unload,
        kserve_paths::trace_setting,
        kserve_paths::trace_setting_update,
        kserve_paths::model_trace_setting,
        kserve_paths::model_trace_setting_update,
        kserve_paths::system_shm_status,
        kserve_paths::system_shm_region_status,
        kserve_paths::system_shm_register,
        kserve_paths::system_shm_unregister_all,
        kserve_paths::system_shm_unregister,
        kserve_paths::cuda_shm_status,
        kserve_paths::cuda_shm_region_status,
        kserve_paths::cuda_shm_register,
        kserve_paths::cuda_shm_unregister_all,
        kserve_paths::cuda_shm_unregister,
        manage_paths::list_models,
        manage_paths::get_model,
        manage_paths::delete_model,
        manage_paths::upload_model,
        manage_paths::put_traffic,
        manage_paths::get_traffic,
        manage_paths::delete_traffic,
        manage_paths::put_payload_log,
        manage_paths::get_payload_log,
        manage_paths::delete_payload_log,
        manage_paths::put_guardrails,
        manage_paths::get_guardrails,
        manage_paths::delete_guardrails,
        manage_paths::put_latest_config,
        manage_paths::put_version_config,
        manage_paths::get_version,
        manage_paths::delete_version,
        manage_paths::list_plugins,
        manage_paths::upload_plugin,
        manage_paths::get_plugin,
        manage_paths::delete_plugin,
        manage_paths::delete_plugin_version,
        manage_paths::put_plugin_limits,
        manage_paths::list_pipelines,
        manage_paths::get_pipeline,
        manage_paths::put_pipeline,
        manage_paths::delete_pipeline,
        manage_paths::run_pipeline,
        manage_paths::put_pipeline_payload_log,
        manage_paths::get_pipeline_payload_log,
        manage_paths::delete_pipeline_payload_log,
        admin_paths::list_keys,
        admin_paths::create_key,
        admin_paths::update_key,
        admin_paths::revoke_key,
        admin_paths::key_usage,
        admin_paths::put_key_guardrails,
        admin_paths::get_key_guardrails,
        admin_paths::delete_key_guardrails,
        admin_paths::put_key_payload_log,
        admin_paths::get_key_payload_log,
        admin_paths::delete_key_payload_log,
        admin_paths::list_payload_log_sinks,
        admin_paths::put_payload_log_sink,
        admin_paths::delete_payload_log_sink,
        admin_paths::whoami,
        admin_paths::metrics,
        admin_paths::history,
        admin_paths::openapi,
        admin_paths::assign,
        admin_paths::list_workers,
        admin_paths::create_join_token,
        admin_paths::revoke_join_token,
        admin_paths::remove_worker,
        admin_paths::drain_worker,
        openai_paths::models,
        openai_paths::completions,
        openai_paths::chat_completions,
        openai_paths::embeddings,
    ),
    components(schemas(crate::ErrorBody, crate::pipelines::PipelineRun)),
    tags(
        (name = "KServe v2", description = "The Open Inference Protocol: health, metadata, inference."),
        (name = "Triton extensions", description = "Triton's model configuration, statistics and repository routes that its clients call."),
        (name = "Models", description = "Model versions and their configuration."),
        (name = "Plugins", description = "WebAssembly plugins."),
        (name = "Pipelines", description = "Plugins and a model, run as one."),
        (name = "Keys", description = "API keys, their limits and usage."),
        (name = "Payload logs", description = "The sinks payload log entries go to."),
        (name = "Workers", description = "Workers on other hosts, and direct mode."),
        (name = "Metrics", description = "Prometheus metrics, the history the dashboard charts, and this document."),
        (name = "OpenAI", description = "The OpenAI-compatible API."),
    ),
)]
struct Api;

/// The document, as the server serves it.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(Api::openapi()).expect("an OpenAPI document serializes");
    doc["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
    doc["components"]["securitySchemes"] = json!({
        "bearer": {"type": "http", "scheme": "bearer",
            "description": "An API key as `Authorization: Bearer KEY`."},
        "api_key": {"type": "apiKey", "in": "header", "name": "X-API-Key",
            "description": "An API key as `X-API-Key: KEY`."},
    });
    doc["components"]["schemas"]["AnyError"] = json!({
        "description": "An error answer of a `/v1` route: OpenAI's shape from the routes that run a model, `{\"error\": \"...\"}` from the key check and the limits before them.",
        "oneOf": [{"$ref": "#/components/schemas/ErrorBody"}, {"$ref": "#/components/schemas/OpenAiError"}],
    });
    if let Some(paths) = doc["paths"].as_object_mut() {
        for (path, item) in paths.iter_mut() {
            let Some(item) = item.as_object_mut() else {
                continue;
            };
            for operation in item.values_mut().filter_map(Value::as_object_mut) {
                add_common_answers(path, operation);
            }
        }
    }
    doc
}

/// The answers any route may give, added to every operation rather than written at each: the
/// key check's (401, 403) and the limits' (429) where a key is needed, and any other error.
fn add_common_answers(path: &str, operation: &mut Map<String, Value>) {
    let error = if path.starts_with("/v1/") {
        "#/components/schemas/AnyError"
    } else {
        "#/components/schemas/ErrorBody"
    };
    let answer = |description: &str| {
        json!({"description": description,
            "content": {"application/json": {"schema": {"$ref": error}}}})
    };
    let needs_key = operation
        .get("security")
        .and_then(Value::as_array)
        .is_some_and(|s| {
            s.iter()
                .any(|r| r.as_object().is_some_and(|r| !r.is_empty()))
        });
    let Some(responses) = operation
        .entry("responses")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    else {
        return;
    };
    let mut add = |status: &str, description: &str| {
        responses
            .entry(status)
            .or_insert_with(|| answer(description));
    };
    if needs_key {
        add("401", "No key, or a key that is unknown or revoked.");
        add("403", "The key lacks the scope this route needs.");
        add(
            "429",
            "The key's rate limit or concurrency cap (`Retry-After`, `RateLimit`, `RateLimit-Policy`).",
        );
    }
    add(
        "default",
        "Any other error, with the status the book's \"Errors and status codes\" lists.",
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
        let mut all = Vec::new();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, operation) in item.as_object().expect("a path item") {
                all.push((method.to_uppercase(), path.clone(), operation));
            }
        }
        all
    }

    #[test]
    fn every_operation_has_a_tag_a_summary_and_answers() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let all = operations(&doc);
        assert!(all.len() > 50, "{}", all.len());
        for (method, path, operation) in all {
            assert!(operation["tags"][0].is_string(), "{method} {path}: no tag");
            assert!(
                operation["summary"].is_string(),
                "{method} {path}: no summary"
            );
            let responses = operation["responses"].as_object().expect("responses");
            assert!(
                responses.keys().any(|s| s.starts_with('2')),
                "{method} {path}: no success answer"
            );
            assert!(responses.contains_key("default"), "{method} {path}");
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = document();
        let text = doc.to_string();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = &reference[..reference.find('"').expect("a string")];
            let name = target
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("a reference outside the schemas: {target}"));
            assert!(schemas.contains_key(name), "{target} does not resolve");
        }
    }

    #[test]
    fn excluded_routes_are_not_documented() {
        let doc = document();
        for e in EXCLUDED {
            let method = e.method.to_lowercase();
            assert!(
                doc["paths"][e.path][&method].is_null(),
                "{} {}",
                e.method,
                e.path
            );
        }
    }

    #[test]
    fn the_binary_inference_body_is_described() {
        let doc = document();
        let infer = &doc["paths"]["/v2/models/{model}/infer"]["post"];
        assert!(infer["requestBody"]["content"]["application/octet-stream"].is_object());
        assert!(infer["requestBody"]["content"]["application/json"].is_object());
        let header = infer["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .find(|p| p["name"] == "Inference-Header-Content-Length")
            .expect("the header length parameter");
        assert_eq!(header["in"], "header");
        assert!(
            infer["responses"]["200"]["headers"]["Inference-Header-Content-Length"].is_object()
        );
    }
}
