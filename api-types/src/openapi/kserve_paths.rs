//! The KServe v2 (Open Inference Protocol) routes and Triton's extensions. Models and pipelines
//! answer the same routes.

#![allow(dead_code)]

use crate::kserve::{
    ModelMetadata, RepositoryEntry, ServerMetadata, SharedMemoryRegion, SharedMemoryRegister,
    TraceSettings,
};
use crate::openapi::bodies::{
    InferenceRequest, InferenceResponse, ModelConfig, RepositoryIndexRequest, TraceSettingsRequest,
};
use crate::stats::StatsList;
use crate::ErrorBody;

/// Liveness: 200 while the process runs (no key; for orchestrators' probes).
#[utoipa::path(get, path = "/v2/health/live", tag = "KServe v2", security(()),
    responses((status = 200, description = "The server runs.")))]
pub fn live() {}

/// Readiness: 200 while the server accepts requests, 503 once it drains on shutdown (no key).
#[utoipa::path(get, path = "/v2/health/ready", tag = "KServe v2", security(()),
    responses(
        (status = 200, description = "Ready."),
        (status = 503, description = "Draining on shutdown."),
    ))]
pub fn ready() {}

/// Server metadata: name, version, the extensions a client may use, and where native ops run.
#[utoipa::path(get, path = "/v2", tag = "KServe v2", security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The server's metadata.", body = ServerMetadata)))]
pub fn server_metadata() {}

/// A model's or pipeline's metadata: its versions, inputs and outputs (-1: a dynamic
/// dimension).
#[utoipa::path(get, path = "/v2/models/{model}", tag = "KServe v2",
    params(("model" = String, Path, description = "A model or pipeline name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The newest version's metadata.", body = ModelMetadata)))]
pub fn model_metadata() {}

/// One version's metadata.
#[utoipa::path(get, path = "/v2/models/{model}/versions/{version}", tag = "KServe v2",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The version's metadata.", body = ModelMetadata)))]
pub fn model_version_metadata() {}

/// Whether a model or pipeline can serve: 200 unless its version failed to load (models load
/// on their first request).
#[utoipa::path(get, path = "/v2/models/{model}/ready", tag = "KServe v2",
    params(("model" = String, Path, description = "A model or pipeline name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "It can serve."),
        (status = 503, description = "It cannot (failed to load, or no worker has it).", body = ErrorBody),
    ))]
pub fn model_ready() {}

/// Whether one version can serve.
#[utoipa::path(get, path = "/v2/models/{model}/versions/{version}/ready", tag = "KServe v2",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "It can serve."),
        (status = 503, description = "It cannot.", body = ErrorBody),
    ))]
pub fn model_version_ready() {}

/// Inference on the newest version (a pipeline: its whole chain). The body is JSON, or
/// Triton's binary form: a JSON header of `Inference-Header-Content-Length` bytes followed by
/// the raw tensors, each input naming its `binary_data_size`. Outputs come back binary when
/// asked for (`binary_data` per output, `binary_data_output` for all), with the header's length
/// in the answer's `Inference-Header-Content-Length`.
#[utoipa::path(post, path = "/v2/models/{model}/infer", tag = "KServe v2",
    params(
        ("model" = String, Path, description = "A model or pipeline name."),
        ("Inference-Header-Content-Length" = Option<u64>, Header,
            description = "Binary form: the length of the JSON header at the start of the body."),
    ),
    request_body(description = "The request: JSON, or a JSON header and binary tensors.", content(
        (InferenceRequest = "application/json"),
        ("application/octet-stream"),
    )),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The outputs.",
            headers(("Inference-Header-Content-Length" = u64,
                description = "Binary answers: the length of the JSON header before the tensors.")),
            content(
                (InferenceResponse = "application/json"),
                ("application/octet-stream"),
            )),
        (status = 503, description = "The model's queue is full, or it cannot load (with `Retry-After` when waiting helps).", body = ErrorBody),
        (status = 504, description = "The request's `timeout` passed before it ran.", body = ErrorBody),
    ))]
pub fn infer() {}

/// Inference on one version.
#[utoipa::path(post, path = "/v2/models/{model}/versions/{version}/infer", tag = "KServe v2",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
        ("Inference-Header-Content-Length" = Option<u64>, Header,
            description = "Binary form: the length of the JSON header at the start of the body."),
    ),
    request_body(description = "The request: JSON, or a JSON header and binary tensors.", content(
        (InferenceRequest = "application/json"),
        ("application/octet-stream"),
    )),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The outputs.",
            headers(("Inference-Header-Content-Length" = u64,
                description = "Binary answers: the length of the JSON header before the tensors.")),
            content(
                (InferenceResponse = "application/json"),
                ("application/octet-stream"),
            )),
        (status = 503, description = "The model's queue is full, or it cannot load.", body = ErrorBody),
        (status = 504, description = "The request's `timeout` passed before it ran.", body = ErrorBody),
    ))]
pub fn infer_version() {}

/// Triton's model configuration of the newest version.
#[utoipa::path(get, path = "/v2/models/{model}/config", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Triton's `ModelConfig` as JSON.", body = ModelConfig)))]
pub fn model_config() {}

/// Triton's model configuration of one version.
#[utoipa::path(get, path = "/v2/models/{model}/versions/{version}/config", tag = "Triton extensions",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Triton's `ModelConfig` as JSON.", body = ModelConfig)))]
pub fn model_version_config() {}

/// Triton's statistics of every loaded version.
#[utoipa::path(get, path = "/v2/models/stats", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Counts and nanoseconds per phase.", body = StatsList)))]
pub fn all_stats() {}

/// Triton's statistics of a model's versions.
#[utoipa::path(get, path = "/v2/models/{model}/stats", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Counts and nanoseconds per phase.", body = StatsList)))]
pub fn model_stats() {}

/// Triton's statistics of one version.
#[utoipa::path(get, path = "/v2/models/{model}/versions/{version}/stats", tag = "Triton extensions",
    params(
        ("model" = String, Path, description = "A model name."),
        ("version" = String, Path, description = "A version number."),
    ),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Counts and nanoseconds per phase.", body = StatsList)))]
pub fn model_version_stats() {}

/// Triton's repository index: every version and its state.
#[utoipa::path(post, path = "/v2/repository/index", tag = "Triton extensions",
    request_body(content = Option<RepositoryIndexRequest>, description = "Optional; an empty body lists every version."),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The versions.", body = Vec<RepositoryEntry>)))]
pub fn repository_index() {}

/// Loads a model's newest version now (rather than on its first request).
#[utoipa::path(post, path = "/v2/repository/models/{model}/load", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses(
        (status = 200, description = "Loaded."),
        (status = 503, description = "It could not load.", body = ErrorBody),
    ))]
pub fn load() {}

/// Unloads every version of a model (the next request loads it again).
#[utoipa::path(post, path = "/v2/repository/models/{model}/unload", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["upload"]), ("api_key" = ["upload"])),
    responses((status = 200, description = "Unloaded.")))]
pub fn unload() {}

/// Triton's trace settings that apply server-wide (kept in the store and shared by every
/// gateway replica; a worker follows its manager's decision).
#[utoipa::path(get, path = "/v2/trace/setting", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The settings.", body = TraceSettings)))]
pub fn trace_setting() {}

/// Changes the server-wide trace settings at once, on every replica and for the next start;
/// `null` returns a setting to the configuration's value.
#[utoipa::path(post, path = "/v2/trace/setting", tag = "Triton extensions",
    request_body(content = Option<TraceSettingsRequest>, description = "The settings to change; an empty body changes none."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The settings now.", body = TraceSettings),
        (status = 400, description = "A setting that does not parse, or that cannot change (trace_file, trace_mode).", body = ErrorBody),
    ))]
pub fn trace_setting_update() {}

/// The trace settings that apply to a model's requests: its own, field by field, else the
/// server-wide ones.
#[utoipa::path(get, path = "/v2/models/{model}/trace/setting", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The settings.", body = TraceSettings),
        (status = 400, description = "No such model.", body = ErrorBody),
    ))]
pub fn model_trace_setting() {}

/// Changes a model's own trace settings, on every replica and for the next start; `null`
/// clears one (the server-wide value applies).
#[utoipa::path(post, path = "/v2/models/{model}/trace/setting", tag = "Triton extensions",
    params(("model" = String, Path, description = "A model name.")),
    request_body(content = Option<TraceSettingsRequest>, description = "The settings to change; an empty body changes none."),
    security(("bearer" = ["admin"]), ("api_key" = ["admin"])),
    responses(
        (status = 200, description = "The settings that apply now.", body = TraceSettings),
        (status = 400, description = "No such model, or a setting that does not parse or cannot change.", body = ErrorBody),
    ))]
pub fn model_trace_setting_update() {}

/// The caller's system shared-memory regions (Triton's shared-memory extension; loopback
/// callers only, each caller seeing its own).
#[utoipa::path(get, path = "/v2/systemsharedmemory/status", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The regions.", body = Vec<SharedMemoryRegion>),
        (status = 400, description = "The caller is not on this host.", body = ErrorBody),
    ))]
pub fn system_shm_status() {}

/// One of the caller's system shared-memory regions.
#[utoipa::path(get, path = "/v2/systemsharedmemory/region/{name}/status", tag = "Triton extensions",
    params(("name" = String, Path, description = "A region's name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The region, in a list of one.", body = Vec<SharedMemoryRegion>),
        (status = 404, description = "The caller has no region of that name.", body = ErrorBody),
    ))]
pub fn system_shm_region_status() {}

/// Registers part of a POSIX shared-memory object (whose key starts with `[shared_memory]
/// key_prefix`) as a region that requests name in their `shared_memory_region` parameters.
#[utoipa::path(post, path = "/v2/systemsharedmemory/region/{name}/register", tag = "Triton extensions",
    params(("name" = String, Path, description = "The region's name.")),
    request_body = SharedMemoryRegister,
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "Registered."),
        (status = 400, description = "A bad key, range or name, or a name already registered.", body = ErrorBody),
    ))]
pub fn system_shm_register() {}

/// Unregisters every region of the caller.
#[utoipa::path(post, path = "/v2/systemsharedmemory/unregister", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Unregistered.")))]
pub fn system_shm_unregister_all() {}

/// Unregisters one region of the caller (nothing when it has none of that name).
#[utoipa::path(post, path = "/v2/systemsharedmemory/region/{name}/unregister", tag = "Triton extensions",
    params(("name" = String, Path, description = "A region's name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Unregistered.")))]
pub fn system_shm_unregister() {}

/// CUDA shared-memory regions: none (answered as Triton does on a host without GPUs).
#[utoipa::path(get, path = "/v2/cudasharedmemory/status", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "An empty list.", body = Vec<SharedMemoryRegion>)))]
pub fn cuda_shm_status() {}

/// One CUDA shared-memory region: never found.
#[utoipa::path(get, path = "/v2/cudasharedmemory/region/{name}/status", tag = "Triton extensions",
    params(("name" = String, Path, description = "A region's name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "Never: no CUDA region can exist.", body = Vec<SharedMemoryRegion>),
        (status = 404, description = "No such region.", body = ErrorBody),
    ))]
pub fn cuda_shm_region_status() {}

/// Registering CUDA shared memory is refused: register the bytes as system shared memory.
#[utoipa::path(post, path = "/v2/cudasharedmemory/region/{name}/register", tag = "Triton extensions",
    params(("name" = String, Path, description = "A region's name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "Never: CUDA shared memory is not served."),
        (status = 400, description = "GPUs not supported.", body = ErrorBody),
    ))]
pub fn cuda_shm_register() {}

/// Unregistering CUDA shared memory does nothing (no region can exist).
#[utoipa::path(post, path = "/v2/cudasharedmemory/unregister", tag = "Triton extensions",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Nothing to do.")))]
pub fn cuda_shm_unregister_all() {}

/// Unregistering one CUDA shared-memory region does nothing (no region can exist).
#[utoipa::path(post, path = "/v2/cudasharedmemory/region/{name}/unregister", tag = "Triton extensions",
    params(("name" = String, Path, description = "A region's name.")),
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "Nothing to do.")))]
pub fn cuda_shm_unregister() {}
