//! The management API: model versions and their configuration, WebAssembly plugins, pipelines.

#![allow(dead_code)]

use crate::models::{ModelDeleted, ModelList, ModelVersion, ModelVersions, VersionDeleted};
use crate::openapi::bodies::{
    GuardrailsBody, GuardrailsView, ModelConfig, PayloadLogSetting, PayloadLogView, TrafficPolicy,
    TrafficView,
};
use crate::pipelines::{PipelineDeleted, PipelineList, PipelineSpec, PipelineView};
use crate::plugins::{PluginDeleted, PluginLimits, PluginList, PluginVersions, PluginView};
use crate::ErrorBody;

/// Every registered model version, with its state.
#[utoipa::path(get, path = "/api/models", tag = "Models",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Every version.", body = ModelList)))]
pub fn list_models() {}

/// One model's versions.
#[utoipa::path(get, path = "/api/models/{model}", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Its versions, oldest first.", body = ModelVersions)))]
pub fn get_model() {}

/// Deletes every version of a model (refused while a pipeline uses it).
#[utoipa::path(delete, path = "/api/models/{model}", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The versions deleted.", body = ModelDeleted),
        (status = 409, description = "A pipeline uses it.", body = ErrorBody),
    ))]
pub fn delete_model() {}

/// Uploads the next version of a model: the file as the raw body, or `multipart/form-data`
/// with a `file` part and an optional `config` part (JSON). ONNX Runtime loads an ONNX file, a
/// GGUF file's header, tensors and vocabulary are checked; only then is it recorded.
#[utoipa::path(post, path = "/api/models/{model}/versions", tag = "Models",
    params(("model" = String, Path, description = "A model name (letters, digits, `-`, `_`, `.`).")),
    request_body(description = "The model file (`.onnx` or `.gguf`).", content(
        ("application/octet-stream"),
        ("multipart/form-data"),
    )),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 201, description = "The new version.", body = ModelVersion),
        (status = 409, description = "The name is a pipeline's.", body = ErrorBody),
        (status = 422, description = "The file is no model ONNX Runtime or llama.cpp can load.", body = ErrorBody),
    ))]
pub fn upload_model() {}

/// Sets a model's traffic policy: a weighted split between its versions, sticky by key or
/// header, and a mirror. Checked against the model's versions; nothing is stored when refused.
#[utoipa::path(put, path = "/api/models/{model}/traffic", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = TrafficPolicy, description = "The policy."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The policy now in force.", body = TrafficView),
        (status = 400, description = "The policy does not fit the model (the field is named).", body = ErrorBody),
        (status = 404, description = "No such model.", body = ErrorBody),
    ))]
pub fn put_traffic() {}

/// A model's traffic policy.
#[utoipa::path(get, path = "/api/models/{model}/traffic", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The policy (`null`: none).", body = TrafficView)))]
pub fn get_traffic() {}

/// Removes a model's traffic policy: its version policy chooses again.
#[utoipa::path(delete, path = "/api/models/{model}/traffic", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "No policy any more.", body = TrafficView)))]
pub fn delete_traffic() {}

/// Logs a model's requests and answers (a share of them) to a sink the server defines.
#[utoipa::path(put, path = "/api/models/{model}/payload-log", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = PayloadLogSetting, description = "What to log, how often, where."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The setting now in force.", body = PayloadLogView),
        (status = 400, description = "A bad setting, or a sink the server does not define (the field is named).", body = ErrorBody),
        (status = 404, description = "No such model.", body = ErrorBody),
    ))]
pub fn put_payload_log() {}

/// Whether a model's requests are logged, and the sinks the server defines.
#[utoipa::path(get, path = "/api/models/{model}/payload-log", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The setting (`null`: not logged).", body = PayloadLogView),
        (status = 404, description = "No such model.", body = ErrorBody),
    ))]
pub fn get_payload_log() {}

/// Stops logging a model's requests.
#[utoipa::path(delete, path = "/api/models/{model}/payload-log", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Not logged any more.", body = PayloadLogView),
        (status = 404, description = "No such model.", body = ErrorBody),
    ))]
pub fn delete_payload_log() {}

/// Logs a pipeline's requests (its inputs and final outputs) to a sink the server defines.
#[utoipa::path(put, path = "/api/pipelines/{pipeline}/payload-log", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    request_body(content = PayloadLogSetting, description = "What to log, how often, where."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The setting now in force.", body = PayloadLogView),
        (status = 400, description = "A bad setting, or a sink the server does not define (the field is named).", body = ErrorBody),
        (status = 404, description = "No such pipeline.", body = ErrorBody),
    ))]
pub fn put_pipeline_payload_log() {}

/// Whether a pipeline's requests are logged, and the sinks the server defines.
#[utoipa::path(get, path = "/api/pipelines/{pipeline}/payload-log", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The setting (`null`: not logged).", body = PayloadLogView),
        (status = 404, description = "No such pipeline.", body = ErrorBody),
    ))]
pub fn get_pipeline_payload_log() {}

/// Stops logging a pipeline's requests.
#[utoipa::path(delete, path = "/api/pipelines/{pipeline}/payload-log", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Not logged any more.", body = PayloadLogView),
        (status = 404, description = "No such pipeline.", body = ErrorBody),
    ))]
pub fn delete_pipeline_payload_log() {}

/// Attaches chat guardrails to a chat model: uploaded plugins of the guardrail world, run in
/// this order after the server's `[guardrails]` and the caller's key's on its prompts and
/// answers. Each must be an uploaded guardrail now; nothing is stored when one is not.
#[utoipa::path(put, path = "/api/models/{model}/guardrails", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = GuardrailsBody, description = "The guardrails, in order."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "The guardrails now attached.", body = GuardrailsView),
        (status = 400, description = "Not a list of attachments, or one names no uploaded guardrail.", body = ErrorBody),
        (status = 404, description = "No such model.", body = ErrorBody),
    ))]
pub fn put_guardrails() {}

/// A model's own chat guardrails.
#[utoipa::path(get, path = "/api/models/{model}/guardrails", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The guardrails (empty: none).", body = GuardrailsView)))]
pub fn get_guardrails() {}

/// Detaches a model's own chat guardrails (the server's still run).
#[utoipa::path(delete, path = "/api/models/{model}/guardrails", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "No guardrails of its own any more.", body = GuardrailsView)))]
pub fn delete_guardrails() {}

/// Sets the configuration of a model's newest version (it reloads with it).
#[utoipa::path(put, path = "/api/models/{model}/config", tag = "Models",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = ModelConfig, description = "The model configuration."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "The version with its new configuration.", body = ModelVersion)))]
pub fn put_latest_config() {}

/// Sets the configuration of one version.
#[utoipa::path(put, path = "/api/models/{model}/versions/{version}/config", tag = "Models",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    request_body(content = ModelConfig, description = "The model configuration."),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "The version with its new configuration.", body = ModelVersion)))]
pub fn put_version_config() {}

/// One version.
#[utoipa::path(get, path = "/api/models/{model}/versions/{version}", tag = "Models",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The version.", body = ModelVersion)))]
pub fn get_version() {}

/// Deletes one version (refused while a pipeline pins it).
#[utoipa::path(delete, path = "/api/models/{model}/versions/{version}", tag = "Models",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Deleted.", body = VersionDeleted),
        (status = 409, description = "A pipeline uses it.", body = ErrorBody),
    ))]
pub fn delete_version() {}

/// Every plugin version.
#[utoipa::path(get, path = "/api/plugins", tag = "Plugins",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Every version, by name then upload order.", body = PluginList)))]
pub fn list_plugins() {}

/// Uploads a WebAssembly component (the raw body): it is compiled, checked against the plugin
/// world and registered under the name and version it describes. The same bytes again answer
/// 200.
#[utoipa::path(post, path = "/api/plugins", tag = "Plugins",
    request_body(description = "The `.wasm` component.", content(("application/wasm"), ("application/octet-stream"))),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 201, description = "Registered.", body = PluginView),
        (status = 200, description = "This exact version was registered already.", body = PluginView),
        (status = 409, description = "This name and version exist with other bytes.", body = ErrorBody),
        (status = 422, description = "No valid plugin component.", body = ErrorBody),
        (status = 503, description = "No compile slot came free in time (`Retry-After`).", body = ErrorBody),
    ))]
pub fn upload_plugin() {}

/// One plugin's versions.
#[utoipa::path(get, path = "/api/plugins/{plugin}", tag = "Plugins",
    params(("plugin" = String, Path, description = "A plugin name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Its versions in upload order.", body = PluginVersions)))]
pub fn get_plugin() {}

/// Deletes every version of a plugin (refused while a pipeline uses it).
#[utoipa::path(delete, path = "/api/plugins/{plugin}", tag = "Plugins",
    params(("plugin" = String, Path, description = "A plugin name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Deleted.", body = PluginDeleted),
        (status = 409, description = "A pipeline uses it.", body = ErrorBody),
    ))]
pub fn delete_plugin() {}

/// Deletes one plugin version.
#[utoipa::path(delete, path = "/api/plugins/{plugin}/versions/{version}", tag = "Plugins",
    params(
        ("plugin" = String, Path, description = "A plugin name."),
        ("version" = String, Path, description = "The version the plugin describes (`0.1.0`)."),
    ),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Deleted.", body = PluginDeleted),
        (status = 409, description = "A pipeline uses it.", body = ErrorBody),
    ))]
pub fn delete_plugin_version() {}

/// Sets one plugin version's own per-call limits (absent fields: the server's defaults; the
/// host caps every value).
#[utoipa::path(put, path = "/api/plugins/{plugin}/versions/{version}/limits", tag = "Plugins",
    params(
        ("plugin" = String, Path, description = "A plugin name."),
        ("version" = String, Path, description = "The version the plugin describes."),
    ),
    request_body = PluginLimits,
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "The version with its limits.", body = PluginView)))]
pub fn put_plugin_limits() {}

/// Every pipeline.
#[utoipa::path(get, path = "/api/pipelines", tag = "Pipelines",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Every pipeline.", body = PipelineList)))]
pub fn list_pipelines() {}

/// One pipeline.
#[utoipa::path(get, path = "/api/pipelines/{pipeline}", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The pipeline.", body = PipelineView)))]
pub fn get_pipeline() {}

/// Creates or replaces a pipeline: its plugins must exist in the right position (pre or
/// post), and its model must exist.
#[utoipa::path(put, path = "/api/pipelines/{pipeline}", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name (not a model's).")),
    request_body = PipelineSpec,
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 201, description = "Created.", body = PipelineView),
        (status = 200, description = "Replaced.", body = PipelineView),
        (status = 409, description = "The name is a model's.", body = ErrorBody),
    ))]
pub fn put_pipeline() {}

/// Deletes a pipeline.
#[utoipa::path(delete, path = "/api/pipelines/{pipeline}", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "Deleted.", body = PipelineDeleted)))]
pub fn delete_pipeline() {}

/// Runs a pipeline on raw bytes (an image, a text): the body goes to the first pre-plugin
/// with its `Content-Type`, query parameters reach every plugin as metadata. The answer is the
/// last post-plugin's JSON or bytes, or the output tensors.
#[utoipa::path(post, path = "/api/pipelines/{pipeline}/run", tag = "Pipelines",
    params(("pipeline" = String, Path, description = "A pipeline name.")),
    request_body(description = "The input, with its media type.", content(("application/octet-stream"), ("image/png"), ("text/plain"))),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The last post-plugin's JSON or bytes; without post-plugins, the output tensors (a `PipelineRun`).",
            headers(("Server-Timing" = String, description = "Time spent in each stage.")),
            content(
                (serde_json::Value = "application/json"),
                ("application/octet-stream"),
            )),
        (status = 422, description = "A plugin refused the input.", body = ErrorBody),
    ))]
pub fn run_pipeline() {}
