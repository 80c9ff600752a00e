//! Per-model configuration in Triton's field names and meanings, as the gateway stores it (JSON,
//! with each model version) and as `GET /v2/models/{m}/config` returns it.
//!
//! Parsing is strict (unknown fields are errors naming the field) because a misspelt knob that
//! is silently ignored is worse than a refused upload. Checks that need the model itself (does
//! it have a batch dimension? do the warm-up inputs exist?) live in [`ModelConfig::validate_for`].

use crate::error::{EngineError, Result};
use crate::optimization::Optimization;
use crate::postprocess::{self, PostOp};
use crate::preprocess::{ResizeNormalize, ResizeNormalizeExt};
use crate::sequence_config::SequenceBatching;
use crate::signature::{ModelSignature, TensorSpec};
use crate::tensor::DataType;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// Upper bounds that keep a typo (an extra zero) from becoming an outage.
const MAX_QUEUE_DELAY_US: u64 = 10_000_000;
const MAX_INSTANCES: u32 = 64;
const MAX_PRIORITY_LEVELS: u32 = 1_000;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Largest batch the model accepts along dimension 0; 0 = the model has no batch
    /// dimension and requests run one at a time, as given.
    pub max_batch_size: u32,
    /// The dynamic batcher and queue policy; absent = run requests in arrival order without
    /// waiting for more, with the engine's default queue bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic_batching: Option<DynamicBatching>,
    /// Triton's sequence batcher for stateful models: requests carry a correlation id and
    /// start/end flags, and the engine fills control inputs and carries implicit state.
    /// Exclusive with `dynamic_batching`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence_batching: Option<SequenceBatching>,
    /// Execution instances; empty = the engine's default count on the CPU.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub instance_group: Vec<InstanceGroup>,
    /// Which of a model's versions are served. Triton keeps it per model; the gateway reads it
    /// from the newest version's config.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_policy: Option<VersionPolicy>,
    /// Unload the version after this many seconds without requests; absent = keep loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unload_after_s: Option<u64>,
    /// Inputs run through every instance before the version reports ready.
    #[serde(alias = "warmup", skip_serializing_if = "Vec::is_empty")]
    pub model_warmup: Vec<WarmupSample>,
    /// Host memory one instance needs, in bytes, when the operator knows better than the
    /// engine's estimate (file size × factor). Checked against the engine's budget at load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_memory_bytes: Option<u64>,
    /// Execution accelerators (TensorRT, CUDA) in Triton's names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimization: Option<Optimization>,
    /// Triton's response cache: the gateway keeps this version's answers (`[cache] bytes`)
    /// and answers a repeated request from them. The engine itself ignores it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_cache: Option<ResponseCacheConfig>,
    /// infergate's additions that Triton has no name for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infergate: Option<Extensions>,
}

/// `"response_cache": {"enable": true}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResponseCacheConfig {
    pub enable: bool,
}

/// The `"infergate"` block of a model config.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Extensions {
    /// Converts raw RGB8 images sent under an input's name into that FP32 NCHW input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preprocess: Option<ResizeNormalize>,
    /// Native ops run on the model's outputs (one op or a list), adding named outputs.
    #[serde(
        deserialize_with = "postprocess::one_or_many",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub postprocess: Vec<PostOp>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicBatching {
    /// Batch sizes the scheduler forms without waiting further, when it can.
    pub preferred_batch_size: Vec<u32>,
    /// How long the oldest request may wait for a batch to fill.
    pub max_queue_delay_microseconds: u64,
    /// Number of priority levels (1 = highest); 0 = one level.
    pub priority_levels: u32,
    /// Level of requests that name none; 0 when `priority_levels` is 0.
    pub default_priority_level: u32,
    pub default_queue_policy: QueuePolicy,
    /// Accepted for compatibility with Triton configs; responses are always in request order
    /// here because each request has its own reply channel.
    pub preserve_ordering: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueuePolicy {
    /// What happens to a request that waited longer than its timeout.
    pub timeout_action: TimeoutAction,
    /// Queue timeout of requests that name none; 0 = none.
    pub default_timeout_microseconds: u64,
    /// Whether a request may set its own timeout.
    pub allow_timeout_override: bool,
    /// Requests that may wait before new ones are refused; 0 = the engine's default bound
    /// (Triton's 0 means unbounded, which an edge gateway should never be).
    pub max_queue_size: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TimeoutAction {
    /// Fail the request with a timeout error; it never executes.
    #[default]
    #[serde(rename = "REJECT")]
    Reject,
    /// Keep the request but serve it after every request still within its timeout.
    #[serde(rename = "DELAY")]
    Delay,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum InstanceKind {
    #[default]
    #[serde(rename = "KIND_AUTO")]
    Auto,
    #[serde(rename = "KIND_CPU")]
    Cpu,
    #[serde(rename = "KIND_GPU")]
    Gpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceGroup {
    /// Accepted for compatibility; the engine names instances itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub count: u32,
    pub kind: InstanceKind,
    pub gpus: Vec<u32>,
}

impl Default for InstanceGroup {
    fn default() -> Self {
        InstanceGroup {
            name: None,
            count: 1,
            kind: InstanceKind::Auto,
            gpus: Vec::new(),
        }
    }
}

/// Which versions of a model are served. Written as `"latest"`, `"latest:N"`, `"all"`, a list
/// of version numbers, or Triton's objects (`{"latest": {"num_versions": N}}`, `{"all": {}}`,
/// `{"specific": {"versions": [..]}}`); serialised as Triton's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionPolicy {
    Latest(u32),
    All,
    Specific(Vec<u64>),
}

impl Default for VersionPolicy {
    fn default() -> Self {
        VersionPolicy::Latest(1)
    }
}

/// The versions a policy serves out of the available ones, newest first, and the one a request
/// without a version goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServableVersions {
    pub versions: Vec<u64>,
    pub default: Option<u64>,
}

impl VersionPolicy {
    pub fn parse(text: &str) -> Result<VersionPolicy> {
        let text = text.trim();
        let bad = || {
            EngineError::InvalidConfig(format!(
                "version_policy '{text}': expected \"latest\", \"latest:N\" (N ≥ 1), \"all\" or a list of versions"
            ))
        };
        match text {
            "latest" => Ok(VersionPolicy::Latest(1)),
            "all" => Ok(VersionPolicy::All),
            _ => {
                let n = text.strip_prefix("latest:").ok_or_else(bad)?;
                let n: u32 = n.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                Ok(VersionPolicy::Latest(n))
            }
        }
    }

    /// Applies the policy to the versions that exist.
    pub fn servable(&self, available: &[u64]) -> ServableVersions {
        let mut sorted = available.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.dedup();
        let versions: Vec<u64> = match self {
            VersionPolicy::Latest(n) => sorted.into_iter().take(*n as usize).collect(),
            VersionPolicy::All => sorted,
            VersionPolicy::Specific(wanted) => {
                sorted.into_iter().filter(|v| wanted.contains(v)).collect()
            }
        };
        ServableVersions {
            default: versions.first().copied(),
            versions,
        }
    }

    fn to_triton_json(&self) -> Value {
        match self {
            VersionPolicy::Latest(n) => json!({"latest": {"num_versions": n}}),
            VersionPolicy::All => json!({"all": {}}),
            VersionPolicy::Specific(v) => json!({"specific": {"versions": v}}),
        }
    }
}

impl Serialize for VersionPolicy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_triton_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for VersionPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error;
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Latest {
            num_versions: u32,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct All {}
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Specific {
            versions: Vec<u64>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "lowercase")]
        enum Object {
            Latest(Latest),
            All(All),
            Specific(Specific),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            List(Vec<u64>),
            Object(Object),
        }
        let form = Form::deserialize(d).map_err(|_| {
            D::Error::custom(
                "version_policy: expected \"latest\", \"latest:N\", \"all\", a list of versions, \
                 or {\"latest\":{\"num_versions\":N}} / {\"all\":{}} / {\"specific\":{\"versions\":[..]}}",
            )
        })?;
        match form {
            Form::Text(t) => VersionPolicy::parse(&t).map_err(D::Error::custom),
            Form::List(v) => Ok(VersionPolicy::Specific(v)),
            Form::Object(Object::Latest(l)) => Ok(VersionPolicy::Latest(l.num_versions)),
            Form::Object(Object::All(_)) => Ok(VersionPolicy::All),
            Form::Object(Object::Specific(s)) => Ok(VersionPolicy::Specific(s.versions)),
        }
    }
}

/// One warm-up request, in Triton's `model_warmup` shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupSample {
    pub name: String,
    /// Samples in the request when the model batches (dims then exclude the batch dimension);
    /// ignored when `max_batch_size` is 0.
    #[serde(default = "one")]
    pub batch_size: u32,
    pub inputs: BTreeMap<String, WarmupInput>,
    /// How many times to run it.
    #[serde(default = "one")]
    pub count: u32,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WarmupInput {
    /// Triton's name, e.g. `TYPE_FP32`.
    pub data_type: String,
    pub dims: Vec<i64>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub zero_data: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub random_data: bool,
}

impl WarmupInput {
    pub fn datatype(&self) -> Result<DataType> {
        DataType::from_config_name(&self.data_type).ok_or_else(|| {
            EngineError::InvalidConfig(format!(
                "warm-up data_type '{}' is not a Triton type (TYPE_FP32, TYPE_INT64, ...)",
                self.data_type
            ))
        })
    }
}

fn invalid(message: String) -> EngineError {
    EngineError::InvalidConfig(message)
}

impl ModelConfig {
    /// Parses and validates the stored JSON. An empty object (or `null`) is the default config.
    pub fn from_json(value: &Value) -> Result<ModelConfig> {
        if value.is_null() {
            return Ok(ModelConfig::default());
        }
        // The path names the offending field even for a wrong value (`-1` for a count).
        let config: ModelConfig = serde_path_to_error::deserialize(value.clone()).map_err(|e| {
            // The variant's own prefix says "invalid model config"; the path says where.
            match e.path().to_string().as_str() {
                "." => invalid(e.inner().to_string()),
                path => invalid(format!("{path}: {}", e.inner())),
            }
        })?;
        config.validate()?;
        Ok(config)
    }

    /// Parses and validates JSON text.
    pub fn from_json_str(text: &str) -> Result<ModelConfig> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
        ModelConfig::from_json(&value)
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Checks what can be checked without the model.
    pub fn validate(&self) -> Result<()> {
        postprocess::validate(self.post_ops())?;
        if let Some(pre) = self.pre_op() {
            pre.validate()
                .map_err(|m| invalid(format!("infergate.{m}")))?;
        }
        if let Some(optimization) = &self.optimization {
            optimization.accelerators()?;
        }
        if let Some(sb) = &self.sequence_batching {
            if self.dynamic_batching.is_some() {
                return Err(invalid(
                    "dynamic_batching and sequence_batching exclude each other (Triton's scheduling choice); keep one".into(),
                ));
            }
            if !self.post_ops().is_empty() {
                return Err(invalid(
                    "infergate.postprocess is not supported with sequence_batching".into(),
                ));
            }
            sb.validate(self.max_batch_size)?;
        }
        if let Some(db) = &self.dynamic_batching {
            for &p in &db.preferred_batch_size {
                if self.max_batch_size == 0 {
                    return Err(invalid(
                        "dynamic_batching.preferred_batch_size needs max_batch_size > 0".into(),
                    ));
                }
                if p == 0 || p > self.max_batch_size {
                    return Err(invalid(format!(
                        "dynamic_batching.preferred_batch_size {p} must be between 1 and max_batch_size ({})",
                        self.max_batch_size
                    )));
                }
            }
            if db.max_queue_delay_microseconds > MAX_QUEUE_DELAY_US {
                return Err(invalid(format!(
                    "dynamic_batching.max_queue_delay_microseconds {} exceeds {MAX_QUEUE_DELAY_US}",
                    db.max_queue_delay_microseconds
                )));
            }
            if db.priority_levels > MAX_PRIORITY_LEVELS {
                return Err(invalid(format!(
                    "dynamic_batching.priority_levels {} exceeds {MAX_PRIORITY_LEVELS}",
                    db.priority_levels
                )));
            }
            let default_ok = if db.priority_levels == 0 {
                db.default_priority_level == 0
            } else {
                (1..=db.priority_levels).contains(&db.default_priority_level)
            };
            if !default_ok {
                return Err(invalid(format!(
                    "dynamic_batching.default_priority_level {} must be between 1 and priority_levels ({}), or 0 when priority_levels is 0",
                    db.default_priority_level, db.priority_levels
                )));
            }
        }
        let mut total = 0u32;
        for g in &self.instance_group {
            if g.count == 0 {
                return Err(invalid("instance_group count must be at least 1".into()));
            }
            if !g.gpus.is_empty() && g.kind != InstanceKind::Gpu {
                return Err(invalid(
                    "instance_group gpus may only be given with kind KIND_GPU".into(),
                ));
            }
            total = total.saturating_add(g.count);
        }
        if total > MAX_INSTANCES {
            return Err(invalid(format!(
                "instance_group asks for {total} instances; at most {MAX_INSTANCES}"
            )));
        }
        if let Some(VersionPolicy::Latest(0)) = &self.version_policy {
            return Err(invalid(
                "version_policy latest needs num_versions ≥ 1".into(),
            ));
        }
        if let Some(VersionPolicy::Specific(v)) = &self.version_policy {
            if v.is_empty() {
                return Err(invalid(
                    "version_policy lists no versions; nothing would be served".into(),
                ));
            }
        }
        if self.unload_after_s == Some(0) {
            return Err(invalid(
                "unload_after_s must be at least 1 (leave it out to keep the model loaded)".into(),
            ));
        }
        if self.host_memory_bytes == Some(0) {
            return Err(invalid("host_memory_bytes must be positive".into()));
        }
        for w in &self.model_warmup {
            let what = format!("model_warmup '{}'", w.name);
            if w.name.is_empty() {
                return Err(invalid("model_warmup entries need a name".into()));
            }
            if w.count == 0 {
                return Err(invalid(format!("{what}: count must be at least 1")));
            }
            if self.max_batch_size > 0 && (w.batch_size == 0 || w.batch_size > self.max_batch_size)
            {
                return Err(invalid(format!(
                    "{what}: batch_size {} must be between 1 and max_batch_size ({})",
                    w.batch_size, self.max_batch_size
                )));
            }
            if w.inputs.is_empty() {
                return Err(invalid(format!("{what}: no inputs")));
            }
            for (name, input) in &w.inputs {
                input.datatype()?;
                if input.zero_data == input.random_data {
                    return Err(invalid(format!(
                        "{what} input '{name}': set exactly one of zero_data or random_data"
                    )));
                }
                if input.dims.iter().any(|&d| d < 0) {
                    return Err(invalid(format!(
                        "{what} input '{name}': dims must be concrete (no -1)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks the config against the loaded model: batching needs a dynamic first dimension on
    /// every input and output, and warm-up inputs must match the model's inputs.
    pub fn validate_for(&self, signature: &ModelSignature) -> Result<()> {
        self.validate()?;
        postprocess::output_specs(self.post_ops(), signature)?;
        if let Some(pre) = self.pre_op() {
            pre.validate_for(signature)?;
        }
        if let Some(sb) = &self.sequence_batching {
            sb.plan(self.max_batch_size, signature)?;
        }
        if self.max_batch_size > 0 {
            for spec in signature.inputs.iter().chain(&signature.outputs) {
                if spec.shape.first().is_none_or(|&d| d >= 0) {
                    return Err(invalid(format!(
                        "max_batch_size {} needs a dynamic first (batch) dimension, but '{}' has shape {:?}; use max_batch_size 0",
                        self.max_batch_size, spec.name, spec.shape
                    )));
                }
            }
        }
        for w in &self.model_warmup {
            for spec in &signature.inputs {
                if !w.inputs.contains_key(&spec.name) {
                    return Err(invalid(format!(
                        "model_warmup '{}' lacks the model's input '{}'",
                        w.name, spec.name
                    )));
                }
            }
            for (name, input) in &w.inputs {
                let spec = signature.input(name).ok_or_else(|| {
                    invalid(format!(
                        "model_warmup '{}' names input '{name}', which the model does not have",
                        w.name
                    ))
                })?;
                if input.datatype()? != spec.datatype {
                    return Err(invalid(format!(
                        "model_warmup '{}' input '{name}' is {}, the model takes {}",
                        w.name,
                        input.data_type,
                        spec.datatype.config_name()
                    )));
                }
                let shape = self.warmup_shape(w, input);
                let fits = shape.len() == spec.shape.len()
                    && shape
                        .iter()
                        .zip(&spec.shape)
                        .all(|(&g, &m)| m < 0 || m == g);
                if !fits {
                    return Err(invalid(format!(
                        "model_warmup '{}' input '{name}' has shape {shape:?}, the model takes {:?}",
                        w.name, spec.shape
                    )));
                }
            }
        }
        Ok(())
    }

    /// The full shape of a warm-up input: the batch size goes in front when the model batches.
    pub(crate) fn warmup_shape(&self, sample: &WarmupSample, input: &WarmupInput) -> Vec<i64> {
        if self.max_batch_size > 0 {
            std::iter::once(i64::from(sample.batch_size))
                .chain(input.dims.iter().copied())
                .collect()
        } else {
            input.dims.clone()
        }
    }

    /// The pre-op that turns raw images into the model's input, if the config names one.
    pub fn pre_op(&self) -> Option<&ResizeNormalize> {
        self.infergate.as_ref().and_then(|e| e.preprocess.as_ref())
    }

    /// The post-ops run on the model's outputs, in order.
    pub fn post_ops(&self) -> &[PostOp] {
        self.infergate
            .as_ref()
            .map_or(&[], |e| e.postprocess.as_slice())
    }

    /// What a client can ask for: the model's outputs, then those the post-ops add (only the
    /// model's when the post-ops do not fit it, which `validate_for` refuses).
    pub fn served_outputs(&self, signature: &ModelSignature) -> Vec<TensorSpec> {
        let mut outputs = signature.outputs.clone();
        outputs.extend(postprocess::output_specs(self.post_ops(), signature).unwrap_or_default());
        outputs
    }

    /// The inputs a client gives: the model's, less the control and state inputs a sequence
    /// batcher fills (Triton's config lists those under `sequence_batching` only).
    pub fn client_inputs(&self, signature: &ModelSignature) -> Vec<TensorSpec> {
        let Some(sb) = &self.sequence_batching else {
            return signature.inputs.clone();
        };
        signature
            .inputs
            .iter()
            .filter(|s| {
                !sb.control_input.iter().any(|c| c.name == s.name)
                    && !sb.state.iter().any(|st| st.input_name == s.name)
            })
            .cloned()
            .collect()
    }

    /// Total execution instances, or `default` when the config names none.
    pub fn instance_count(&self, default: usize) -> usize {
        if self.instance_group.is_empty() {
            default.max(1)
        } else {
            self.instance_group.iter().map(|g| g.count as usize).sum()
        }
    }

    pub fn queue_delay(&self) -> Duration {
        Duration::from_micros(
            self.dynamic_batching
                .as_ref()
                .map_or(0, |d| d.max_queue_delay_microseconds),
        )
    }

    pub fn unload_after(&self) -> Option<Duration> {
        self.unload_after_s.map(Duration::from_secs)
    }

    /// Triton's model configuration JSON, as `GET /v2/models/{name}/config` returns it.
    /// `default_instances` is what the engine runs when the config names no instance group.
    pub fn to_triton_json(
        &self,
        name: &str,
        signature: &ModelSignature,
        default_instances: usize,
    ) -> Value {
        let batching = self.max_batch_size > 0;
        let tensors = |specs: &[TensorSpec], output: bool| -> Vec<Value> {
            specs
                .iter()
                .map(|s| {
                    let dims: &[i64] = if batching && !s.shape.is_empty() {
                        &s.shape[1..]
                    } else {
                        &s.shape
                    };
                    let mut t = json!({
                        "name": s.name,
                        "data_type": s.datatype.config_name(),
                        "dims": dims,
                        "is_shape_tensor": false,
                    });
                    if output {
                        t["label_filename"] = json!("");
                    } else {
                        t["format"] = json!("FORMAT_NONE");
                        t["allow_ragged_batch"] = json!(false);
                        t["optional"] = json!(false);
                    }
                    t
                })
                .collect()
        };
        let groups: Vec<Value> = if self.instance_group.is_empty() {
            vec![json!({
                "name": name,
                "kind": "KIND_CPU",
                "count": default_instances.max(1),
                "gpus": [],
            })]
        } else {
            self.instance_group
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    json!({
                        "name": g.name.clone().unwrap_or_else(|| format!("{name}_{i}")),
                        "kind": g.kind,
                        "count": g.count,
                        "gpus": g.gpus,
                    })
                })
                .collect()
        };
        let mut parameters = serde_json::Map::new();
        if let Some(s) = self.unload_after_s {
            parameters.insert(
                "unload_after_s".into(),
                json!({"string_value": s.to_string()}),
            );
        }
        let mut config = json!({
            "name": name,
            "platform": "onnxruntime_onnx",
            "backend": "onnxruntime",
            "version_policy": self.version_policy.clone().unwrap_or_default().to_triton_json(),
            "max_batch_size": self.max_batch_size,
            "input": tensors(&self.client_inputs(signature), false),
            "output": tensors(&self.served_outputs(signature), true),
            "instance_group": groups,
            "default_model_filename": "model.onnx",
            "parameters": parameters,
            "model_warmup": self.model_warmup,
        });
        if let Some(optimization) = &self.optimization {
            config["optimization"] = json!(optimization);
        }
        if let Some(sb) = &self.sequence_batching {
            config["sequence_batching"] = json!(sb);
        }
        if let Some(extensions) = &self.infergate {
            config["infergate"] = json!(extensions);
        }
        if let Some(cache) = &self.response_cache {
            config["response_cache"] = json!(cache);
        }
        if let Some(db) = &self.dynamic_batching {
            let p = &db.default_queue_policy;
            config["dynamic_batching"] = json!({
                "preferred_batch_size": db.preferred_batch_size,
                "max_queue_delay_microseconds": db.max_queue_delay_microseconds,
                "preserve_ordering": db.preserve_ordering,
                "priority_levels": db.priority_levels,
                "default_priority_level": db.default_priority_level,
                "default_queue_policy": {
                    "timeout_action": p.timeout_action,
                    "default_timeout_microseconds": p.default_timeout_microseconds,
                    "allow_timeout_override": p.allow_timeout_override,
                    "max_queue_size": p.max_queue_size,
                },
                "priority_queue_policy": {},
            });
        }
        config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(shape: Vec<i64>) -> ModelSignature {
        ModelSignature {
            inputs: vec![TensorSpec {
                name: "x".into(),
                datatype: DataType::Fp32,
                shape: shape.clone(),
            }],
            outputs: vec![TensorSpec {
                name: "y".into(),
                datatype: DataType::Fp32,
                shape,
            }],
            metadata: BTreeMap::new(),
        }
    }

    fn err(text: &str) -> String {
        ModelConfig::from_json_str(text)
            .expect_err(text)
            .to_string()
    }

    #[test]
    fn parses_triton_fields_and_round_trips() {
        let text = r#"{
            "max_batch_size": 8,
            "dynamic_batching": {
                "preferred_batch_size": [4, 8],
                "max_queue_delay_microseconds": 2000,
                "priority_levels": 2,
                "default_priority_level": 2,
                "default_queue_policy": {"timeout_action": "DELAY", "default_timeout_microseconds": 5000,
                                         "allow_timeout_override": true, "max_queue_size": 16}
            },
            "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
            "version_policy": "latest:2",
            "unload_after_s": 300,
            "warmup": [{"name": "w", "batch_size": 2, "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [3], "zero_data": true}}}]
        }"#;
        let c = ModelConfig::from_json_str(text).unwrap();
        assert_eq!(c.max_batch_size, 8);
        let db = c.dynamic_batching.as_ref().unwrap();
        assert_eq!(db.preferred_batch_size, vec![4, 8]);
        assert_eq!(db.default_queue_policy.timeout_action, TimeoutAction::Delay);
        assert_eq!(c.instance_count(1), 2);
        assert_eq!(c.version_policy, Some(VersionPolicy::Latest(2)));
        assert_eq!(c.model_warmup[0].count, 1);
        c.validate_for(&sig(vec![-1, 3])).unwrap();
        let again = ModelConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(again, c);
        assert_eq!(
            ModelConfig::from_json(&json!({})).unwrap(),
            ModelConfig::default()
        );
    }

    #[test]
    fn rejects_unknown_and_invalid_fields_with_the_name() {
        assert!(err(r#"{"max_batch_sise": 4}"#).contains("max_batch_sise"));
        assert!(err(r#"{"dynamic_batching": {"max_queue_delay_us": 1}}"#)
            .contains("max_queue_delay_us"));
        assert!(err(r#"{"max_batch_size": -1}"#).contains("max_batch_size"));
        assert!(
            err(r#"{"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [8]}}"#)
                .contains("preferred_batch_size 8")
        );
        assert!(
            err(r#"{"dynamic_batching": {"preferred_batch_size": [1]}}"#)
                .contains("max_batch_size > 0")
        );
        assert!(err(
            r#"{"dynamic_batching": {"priority_levels": 2, "default_priority_level": 3}}"#
        )
        .contains("default_priority_level"));
        assert!(err(
            r#"{"dynamic_batching": {"default_queue_policy": {"timeout_action": "DROP"}}}"#
        )
        .contains("DROP"));
        assert!(err(r#"{"instance_group": [{"count": 0}]}"#).contains("count"));
        assert!(err(r#"{"instance_group": [{"kind": "KIND_TPU"}]}"#).contains("KIND_TPU"));
        assert!(err(r#"{"instance_group": [{"kind": "KIND_CPU", "gpus": [0]}]}"#).contains("gpus"));
        assert!(err(r#"{"version_policy": "newest"}"#).contains("version_policy"));
        assert!(err(r#"{"version_policy": "latest:0"}"#).contains("version_policy"));
        assert!(err(r#"{"unload_after_s": 0}"#).contains("unload_after_s"));
        assert!(err(r#"{"warmup": [{"name": "w", "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [3]}}}]}"#)
            .contains("zero_data"));
        assert!(err(r#"{"warmup": [{"name": "w", "inputs": {"x": {"data_type": "FP32", "dims": [3], "zero_data": true}}}]}"#)
            .contains("TYPE_FP32"));
        assert!(err("[1, 2").contains("model config"));
    }

    #[test]
    fn checks_against_the_signature() {
        let batching = ModelConfig {
            max_batch_size: 4,
            ..ModelConfig::default()
        };
        let e = batching
            .validate_for(&sig(vec![1, 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dynamic first") && e.contains("'x'"), "{e}");
        let warm = ModelConfig::from_json_str(
            r#"{"warmup": [{"name": "w", "inputs": {"x": {"data_type": "TYPE_INT64", "dims": [2, 3], "zero_data": true}}}]}"#,
        )
        .unwrap();
        let e = warm
            .validate_for(&sig(vec![-1, 3]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("TYPE_INT64"), "{e}");
        let warm = ModelConfig::from_json_str(
            r#"{"warmup": [{"name": "w", "inputs": {"x": {"data_type": "TYPE_FP32", "dims": [2, 4], "zero_data": true}}}]}"#,
        )
        .unwrap();
        assert!(warm.validate_for(&sig(vec![-1, 3])).is_err());
    }

    #[test]
    fn infergate_and_optimization_blocks_round_trip_and_add_outputs() {
        let text = r#"{
            "max_batch_size": 4,
            "optimization": {"execution_accelerators": {"gpu_execution_accelerator": [
                {"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}]}},
            "infergate": {
                "preprocess": {"output": "x", "width": 8, "height": 8,
                               "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]},
                "postprocess": {"op": "softmax_topk", "output": "y", "k": 2}
            }
        }"#;
        let c = ModelConfig::from_json_str(text).unwrap();
        let again = ModelConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(again, c);
        let image = sig(vec![-1, 3, 8, 8]);
        c.validate_for(&image).unwrap();
        let outputs: Vec<String> = c
            .served_outputs(&image)
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(outputs, ["y", "y_topk_indices", "y_topk_scores"]);
        let triton = c.to_triton_json("m", &image, 1);
        assert_eq!(triton["output"].as_array().unwrap().len(), 3);
        assert_eq!(triton["infergate"]["postprocess"][0]["op"], "softmax_topk");
        // The pre-op must produce an image input of the model's size.
        let e = c
            .validate_for(&sig(vec![-1, 3, 9, 8]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("infergate.preprocess.output"), "{e}");
        assert!(err(
            r#"{"infergate": {"preprocess": {"output": "x", "width": 0, "height": 8,
            "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}}}"#
        )
        .contains("infergate.preprocess"));
        assert!(err(r#"{"infergate": {"postprocessing": []}}"#).contains("postprocessing"));
    }

    #[test]
    fn version_policy_picks_servable_versions() {
        let available = [1, 5, 3, 4];
        let p = VersionPolicy::parse("latest").unwrap();
        assert_eq!(p.servable(&available).versions, vec![5]);
        let p = VersionPolicy::parse("latest:2").unwrap();
        assert_eq!(
            p.servable(&available),
            ServableVersions {
                versions: vec![5, 4],
                default: Some(5)
            }
        );
        let p: VersionPolicy = serde_json::from_str("[1, 3, 9]").unwrap();
        assert_eq!(p.servable(&available).versions, vec![3, 1]);
        assert_eq!(p.servable(&available).default, Some(3));
        let p: VersionPolicy = serde_json::from_str(r#"{"all": {}}"#).unwrap();
        assert_eq!(p.servable(&available).versions, vec![5, 4, 3, 1]);
        let p: VersionPolicy = serde_json::from_str(r#"{"specific": {"versions": [7]}}"#).unwrap();
        assert_eq!(p.servable(&available).default, None);
    }

    #[test]
    fn triton_json_drops_the_batch_dim_when_batching() {
        let s = sig(vec![-1, 3]);
        let plain = ModelConfig::default().to_triton_json("m", &s, 2);
        assert_eq!(plain["max_batch_size"], 0);
        assert_eq!(plain["input"][0]["dims"], json!([-1, 3]));
        assert_eq!(plain["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(plain["instance_group"][0]["count"], 2);
        assert_eq!(
            plain["version_policy"],
            json!({"latest": {"num_versions": 1}})
        );
        assert!(plain.get("dynamic_batching").is_none());
        let batched = ModelConfig::from_json_str(
            r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 100}, "instance_group": [{"count": 3, "kind": "KIND_CPU"}]}"#,
        )
        .unwrap()
        .to_triton_json("m", &s, 1);
        assert_eq!(batched["max_batch_size"], 8);
        assert_eq!(batched["input"][0]["dims"], json!([3]));
        assert_eq!(batched["output"][0]["dims"], json!([3]));
        assert_eq!(
            batched["dynamic_batching"]["max_queue_delay_microseconds"],
            100
        );
        assert_eq!(
            batched["dynamic_batching"]["default_queue_policy"]["timeout_action"],
            "REJECT"
        );
        assert_eq!(batched["instance_group"][0]["kind"], "KIND_CPU");
        assert_eq!(batched["instance_group"][0]["count"], 3);
        assert_eq!(batched["platform"], "onnxruntime_onnx");
    }

    #[test]
    fn sequence_batching_is_exclusive_and_hides_the_inputs_it_fills() {
        let e = ModelConfig::from_json_str(
            r#"{"max_batch_size": 4, "dynamic_batching": {}, "sequence_batching": {}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("exclude each other"), "{e}");
        let e = ModelConfig::from_json_str(
            r#"{"sequence_batching": {}, "infergate": {"postprocess": {"op": "softmax_topk", "output": "y", "k": 1}}}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("postprocess"), "{e}");

        let mut s = sig(vec![-1, 1]);
        s.inputs.push(TensorSpec {
            name: "start".into(),
            datatype: DataType::Int32,
            shape: vec![-1, 1],
        });
        let config = ModelConfig::from_json_str(
            r#"{"max_batch_size": 4, "sequence_batching": {"oldest": {},
                "control_input": [{"name": "start", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]}]}}"#,
        )
        .unwrap();
        config.validate_for(&s).unwrap();
        let triton = config.to_triton_json("m", &s, 1);
        assert_eq!(triton["input"].as_array().unwrap().len(), 1);
        assert_eq!(triton["input"][0]["name"], "x");
        assert_eq!(
            triton["sequence_batching"]["control_input"][0]["control"][0]["kind"],
            "CONTROL_SEQUENCE_START"
        );
        assert!(triton.get("dynamic_batching").is_none());
    }
}
