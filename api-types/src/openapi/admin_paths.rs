//! API keys and their limits, workers and their join secrets, metrics, history, the caller's
//! identity and this document.

#![allow(dead_code)]

use crate::history::History;
use crate::keys::{
    Identity, KeyCreated, KeyGuardrails, KeyList, KeyPayloadLog, KeyRevoked, KeyUpdated,
    KeyUsageReport,
};
use crate::openapi::bodies::{
    GuardrailsBody, KeyLimitsRequest, KeyRequest, PayloadLogSetting, PayloadLogSink,
    PayloadLogSinkBody, PayloadLogSinkDeleted, PayloadLogSinks, TtlRequest,
};
use crate::workers::{
    Assignment, JoinTokenCreated, TokenRevoked, WorkerDraining, WorkerList, WorkerRemoved,
};
use crate::ErrorBody;

/// Every API key (never a secret), with its effective limits, usage and activity.
#[utoipa::path(get, path = "/api/keys", tag = "Keys",
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "Every key.", body = KeyList)))]
pub fn list_keys() {}

/// Creates a key; the answer holds its secret, shown this once.
#[utoipa::path(post, path = "/api/keys", tag = "Keys",
    request_body = KeyRequest,
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 201, description = "The key and its secret.", body = KeyCreated)))]
pub fn create_key() {}

/// Changes a key's own rate limit and concurrency cap (fields not given stay).
#[utoipa::path(patch, path = "/api/keys/{id}", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    request_body = KeyLimitsRequest,
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The key with its new limits.", body = KeyUpdated)))]
pub fn update_key() {}

/// Revokes a key: its next request is refused.
#[utoipa::path(delete, path = "/api/keys/{id}", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The revoked key.", body = KeyRevoked)))]
pub fn revoke_key() {}

/// A key's limits, where each comes from, and its usage since the server started.
#[utoipa::path(get, path = "/api/keys/{id}/usage", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The key's usage.", body = KeyUsageReport)))]
pub fn key_usage() {}

/// Attaches chat guardrails to a key: uploaded plugins of the guardrail world, run in this
/// order on the key's chat requests, after the server's `[guardrails]` and before the model's.
/// Each must be an uploaded guardrail now; nothing is stored when one is not.
#[utoipa::path(put, path = "/api/keys/{id}/guardrails", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    request_body(content = GuardrailsBody, description = "The guardrails, in order."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The guardrails now attached.", body = KeyGuardrails),
        (status = 400, description = "Not a list of attachments, or one names no uploaded guardrail.", body = ErrorBody),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn put_key_guardrails() {}

/// A key's own chat guardrails.
#[utoipa::path(get, path = "/api/keys/{id}/guardrails", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The guardrails (empty: none).", body = KeyGuardrails),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn get_key_guardrails() {}

/// Detaches a key's own chat guardrails (the server's and the model's still run).
#[utoipa::path(delete, path = "/api/keys/{id}/guardrails", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "No guardrails of its own any more.", body = KeyGuardrails),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn delete_key_guardrails() {}

/// Logs every request of a key (a share of them) to a sink the server defines, beside any
/// model's or pipeline's setting: each draws its own sample; two draws naming one sink make
/// one entry with the wider mode.
#[utoipa::path(put, path = "/api/keys/{id}/payload-log", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    request_body(content = PayloadLogSetting, description = "What to log, how often, where."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The setting now in force.", body = KeyPayloadLog),
        (status = 400, description = "A bad setting, or a sink the server does not define (the field is named).", body = ErrorBody),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn put_key_payload_log() {}

/// A key's own payload log setting, and the sinks the server defines.
#[utoipa::path(get, path = "/api/keys/{id}/payload-log", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The setting (`null`: none of its own).", body = KeyPayloadLog),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn get_key_payload_log() {}

/// Removes a key's own payload log setting (models' and pipelines' still apply).
#[utoipa::path(delete, path = "/api/keys/{id}/payload-log", tag = "Keys",
    params(("id" = String, Path, description = "The numeric id or the 12-character public id.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "None of its own any more.", body = KeyPayloadLog),
        (status = 404, description = "No such key.", body = ErrorBody),
    ))]
pub fn delete_key_payload_log() {}

/// The payload log sinks: those of the configuration file and those defined at run time, with
/// their counts.
#[utoipa::path(get, path = "/api/payload-log/sinks", tag = "Payload logs",
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The sinks.", body = PayloadLogSinks)))]
pub fn list_payload_log_sinks() {}

/// Defines or replaces a payload log sink, kept in the store: it outlives a restart, wins over
/// the configuration file's sink of that name, and reaches every replica. A replaced sink
/// keeps its counts, and its old writer writes what it had queued.
#[utoipa::path(put, path = "/api/payload-log/sinks/{name}", tag = "Payload logs",
    params(("name" = String, Path, description = "Letters, digits, '-', '_' and '.'.")),
    request_body(content = PayloadLogSinkBody, description = "A file or an HTTP endpoint, as `[payload_log.sinks.NAME]` takes it."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The sink now defined.", body = PayloadLogSink),
        (status = 400, description = "A bad field (named), or a file that cannot be opened.", body = ErrorBody),
        (status = 409, description = "Another sink writes to that file.", body = ErrorBody),
    ))]
pub fn put_payload_log_sink() {}

/// Removes a payload log sink that no setting names, on every replica and for the next start
/// (a configuration file's sink of that name too); its writer still writes what it had queued.
#[utoipa::path(delete, path = "/api/payload-log/sinks/{name}", tag = "Payload logs",
    params(("name" = String, Path, description = "A sink's name.")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "Removed.", body = PayloadLogSinkDeleted),
        (status = 404, description = "No such sink.", body = ErrorBody),
        (status = 409, description = "A model's, pipeline's or key's setting names it (one is named).", body = ErrorBody),
    ))]
pub fn delete_payload_log_sink() {}

/// The calling key's identity and scopes (any scope).
#[utoipa::path(get, path = "/api/whoami", tag = "Keys",
    security(("bearer" = []), ("api_key" = [])),
    responses((status = 200, description = "Who is calling.", body = Identity)))]
pub fn whoami() {}

/// Prometheus metrics in the OpenMetrics text format (see the book's "Metrics"). Also served
/// without a key on `metrics.listen` when set.
#[utoipa::path(get, path = "/metrics", tag = "Metrics",
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The metrics.", content_type = "application/openmetrics-text", body = String)))]
pub fn metrics() {}

/// The per-second history of every model and pipeline (and, for an admin caller, of every
/// key) the dashboard charts.
#[utoipa::path(get, path = "/api/metrics/history", tag = "Metrics",
    params(
        ("seconds" = Option<u64>, Query, description = "How far back, 1 to 3600 (default 3600)."),
        ("after_ms" = Option<u64>, Query, description = "Only samples after this server time (`now_ms` of the last answer)."),
        ("model" = Option<String>, Query, description = "One model or pipeline."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The history.", body = History)))]
pub fn history() {}

/// This document.
#[utoipa::path(get, path = "/api/openapi.json", tag = "Metrics",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The OpenAPI 3.1 document of the HTTP API.", body = serde_json::Value)))]
pub fn openapi() {}

/// Direct mode: a worker that holds (or will load) the model, and a short-lived token for it;
/// the client then calls the worker's KServe routes itself with `Authorization: Bearer TOKEN`.
#[utoipa::path(post, path = "/v2/models/{model}/assign", tag = "Workers",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = Option<TtlRequest>, description = "Optional; an empty body asks for the default lifetime."),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The worker and its token.", body = Assignment),
        (status = 503, description = "No worker can take the model now.", body = ErrorBody),
    ))]
pub fn assign() {}

/// Every worker the manager knows, the local engine (`local`) first.
#[utoipa::path(get, path = "/api/workers", tag = "Workers",
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "The workers.", body = WorkerList)))]
pub fn list_workers() {}

/// Creates a join secret for `infergate worker --join-token`, shown this once.
#[utoipa::path(post, path = "/api/workers/tokens", tag = "Workers",
    request_body(content = Option<TtlRequest>, description = "Optional; an empty body makes a secret valid until revoked."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 201, description = "The secret.", body = JoinTokenCreated)))]
pub fn create_join_token() {}

/// Revokes a join secret: it admits nobody from now on (workers that joined with it stay).
#[utoipa::path(delete, path = "/api/workers/tokens/{id}", tag = "Workers",
    params(("id" = String, Path, description = "The secret's id (after `igj_`, before the first dot).")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "Revoked.", body = TokenRevoked)))]
pub fn revoke_join_token() {}

/// Removes a worker: out of routing at once, and it cannot rejoin under its id.
#[utoipa::path(delete, path = "/api/workers/{id}", tag = "Workers",
    params(("id" = String, Path, description = "A worker id (`w-...`).")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "Removed.", body = WorkerRemoved)))]
pub fn remove_worker() {}

/// Drains a worker: no new requests go to it, running ones finish.
#[utoipa::path(post, path = "/api/workers/{id}/drain", tag = "Workers",
    params(("id" = String, Path, description = "A worker id (`w-...`).")),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses((status = 200, description = "Draining.", body = WorkerDraining)))]
pub fn drain_worker() {}
