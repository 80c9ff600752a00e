//! The KServe v2 metadata answers: `GET /v2` (server) and `GET /v2/models/{model}[/versions/{v}]`
//! (a model or pipeline). Inference answers stay in the gateway's codec: their `data` is a
//! tensor of any datatype, read by the dashboard's tensor views.

use crate::models::TensorSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `GET /v2`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerMetadata {
    pub name: String,
    pub version: String,
    /// Triton's extensions, then infergate's (`infergate_pipelines`, `openai`, ...): what a
    /// client may use without probing routes.
    pub extensions: Vec<String>,
    /// Where the native ops run.
    pub device: ServerDevice,
}

impl ServerMetadata {
    pub fn has_extension(&self, name: &str) -> bool {
        self.extensions.iter().any(|e| e == name)
    }
}

/// Where the native ops (resize/normalize, softmax, NMS) run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServerDevice {
    Cuda {
        name: String,
        /// The compute capability the kernels were compiled for (`sm_90`).
        arch: String,
    },
    Cpu {
        /// The `[engine] device` setting (`auto`, `cpu` or `cuda:N`): a `cuda` request that
        /// ended on the CPU says why in the server's log.
        requested: String,
    },
}

/// `GET /v2/models/{model}`: a model version or a pipeline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelMetadata {
    pub name: String,
    pub versions: Vec<String>,
    pub platform: String,
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    /// Models only, once loaded: the ONNX Runtime execution providers and why not the
    /// requested ones (absent for a pipeline or a chat model; `null` until it loads).
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub execution: Option<Value>,
}

/// One entry of `POST /v2/repository/index` (Triton's model repository extension).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RepositoryEntry {
    pub name: String,
    pub version: String,
    /// READY, LOADING or UNAVAILABLE, as Triton names them.
    pub state: String,
    /// Why it is unavailable (`""` otherwise).
    pub reason: String,
}

/// `GET|POST /v2[/models/{model}]/trace/setting` (Triton's trace extension): the trace
/// settings that apply, every value a string as Triton writes them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TraceSettings {
    /// `["OFF"]`, or `"TIMESTAMPS"` and/or `"TENSORS"` (both record the same spans).
    pub trace_level: Vec<String>,
    /// One trace in this many is recorded (`"0"`: none but those a trusted caller asks for).
    pub trace_rate: String,
    /// Traces still to be recorded before recording stops; `"-1"`: no end.
    pub trace_count: String,
    /// `"opentelemetry"`.
    pub trace_mode: String,
}

/// One system shared-memory region in `GET /v2/systemsharedmemory[/region/{name}]/status`
/// (Triton's fields).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SharedMemoryRegion {
    pub name: String,
    /// The POSIX shared-memory object (`shm_open`'s name).
    pub key: String,
    pub offset: u64,
    pub byte_size: u64,
}

/// `POST /v2/systemsharedmemory/region/{name}/register`: the part of a POSIX shared-memory
/// object a region names.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SharedMemoryRegister {
    pub key: String,
    #[serde(default)]
    pub offset: u64,
    pub byte_size: u64,
}
