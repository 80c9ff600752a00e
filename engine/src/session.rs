//! One ONNX Runtime session and the conversion between engine tensors and ORT values.

use crate::error::{EngineError, Result};
use crate::providers::{ExecutionReport, ProviderPlan};
use crate::signature::{element_type_of, spec_of, ModelSignature};
use crate::strings;
use crate::tensor::{element_count, DataType, Tensor, TensorData};
use ort::error::ErrorCode;
use ort::memory::Allocator;
use ort::session::builder::SessionBuilder;
use ort::session::{Session, SessionInputValue};
use ort::value::DynValue;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// Where a run spent its time: converting inputs, inside ORT, converting outputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StageTimes {
    pub input: Duration,
    pub infer: Duration,
    pub output: Duration,
}

/// Options that shape how a session runs.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Threads ONNX Runtime uses inside one operator (0 = ORT's default).
    pub intra_threads: usize,
    /// Whether ORT's intra-op threads spin for more work after each operator (ORT's default)
    /// instead of sleeping at once: lower latency between operators, but CPU burnt after every
    /// run, which a server with idle gaps between batches pays for nothing.
    pub intra_spinning: bool,
    /// The engine's GPU for sessions (`--device cuda:N`, or 0 for `auto`); `None` = the CPU.
    pub device: Option<i32>,
    /// Whether the operator named the device (`cuda:N`), so falling back deserves a warning;
    /// with `auto` it is expected on a machine without a GPU.
    pub device_explicit: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            intra_threads: 1,
            intra_spinning: true,
            device: None,
            device_explicit: false,
        }
    }
}

pub struct OrtSession {
    label: String,
    session: Session,
    signature: ModelSignature,
    execution: ExecutionReport,
}

/// Whether an ORT run error means host or device memory ran out (the batch may succeed later,
/// or smaller) rather than that the model is broken. Matches the allocators' own wording: the
/// arena's "Failed to allocate memory for requested buffer", its "Available memory of N is
/// smaller than requested bytes" under a memory limit, CUDA's "out of memory" and
/// cuBLAS/cuDNN's ALLOC_FAILED, and `std::bad_alloc`.
pub fn is_out_of_memory(message: &str) -> bool {
    const SIGNS: [&str; 6] = [
        "failed to allocate memory",
        "out of memory",
        "bad_alloc",
        "is smaller than requested bytes",
        "status_alloc_failed",
        "cudaerrormemoryallocation",
    ];
    let lower = message.to_ascii_lowercase();
    SIGNS.iter().any(|sign| lower.contains(sign))
}

/// The engine error for a failed run, by whose fault it is:
/// - out of memory: temporary (503: this batch fails, the model stays loaded and serves the
///   next);
/// - ORT's `INVALID_ARGUMENT`: ORT checked the input against the model and refused it (a
///   dimension the model fixes, an index outside a table): the client's;
/// - any other failure inside a node, when the request set a dimension that the model leaves
///   open other than the batch dimension (`chosen` describes it; e.g. an image size whose
///   feature maps cannot be added back together, a sequence longer than the position table):
///   the client asked for a size the network cannot compute; its reason is the model's own;
/// - anything else is the model's failure (500): it failed on a shape it declares, or on the
///   batch dimension, which the batcher may have chosen.
pub fn run_error(model: &str, code: ErrorCode, message: &str, chosen: Option<&str>) -> EngineError {
    if is_out_of_memory(message) {
        return EngineError::Unavailable(format!(
            "model '{model}' ran out of memory running this batch; the model stays loaded, retry later or send smaller batches ({message})"
        ));
    }
    let reason = model_reason(message);
    match (code, chosen) {
        (ErrorCode::InvalidArgument, None) => {
            EngineError::InvalidInput(format!("model '{model}' rejected the input: {reason}"))
        }
        (ErrorCode::InvalidArgument, Some(chosen)) => EngineError::InvalidInput(format!(
            "model '{model}' rejected the input ({chosen}): {reason}"
        )),
        (_, Some(chosen)) if message.starts_with(NODE_FAILED) => EngineError::InvalidInput(
            format!("model '{model}' cannot run this input ({chosen}): {reason}"),
        ),
        _ => EngineError::ModelFailed {
            model: model.to_string(),
            reason: message.to_string(),
        },
    }
}

/// How ORT starts the message of a failure inside one node.
const NODE_FAILED: &str = "Non-zero status code returned while running ";

/// ORT's message in the model's terms, without ORT's source locations: "Add node 'p2o.Add.248':
/// Attempting to broadcast an axis by a dimension other than 1. 3 by 4" instead of the node
/// preamble, the path of ORT's source file and the C++ condition that failed.
pub fn model_reason(message: &str) -> String {
    let Some(rest) = message.strip_prefix(NODE_FAILED) else {
        return strip_paths(message);
    };
    let (node, status) = rest.split_once(" Status Message: ").unwrap_or((rest, ""));
    let node = node.replacen(". Name:", " ", 1);
    // An ORT_ENFORCE reads "<file>:<line> <C++ signature> <condition> was false. <why>".
    let status = status
        .split_once(" was false. ")
        .map_or(status, |(_, why)| why);
    format!("{node}: {}", strip_paths(status.trim()))
}

/// Keeps only the file name of every absolute path in `text` (ORT names its own source files).
fn strip_paths(text: &str) -> String {
    text.split(' ')
        .map(|word| match word.strip_prefix('/') {
            Some(path) => path.rsplit('/').next().unwrap_or(path),
            None => word,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn builder(
    env: &ort::environment::Environment,
    options: &SessionOptions,
) -> Result<SessionBuilder> {
    let mut builder = Session::builder(env).map_err(|e| EngineError::Runtime(e.to_string()))?;
    if options.intra_threads > 0 {
        builder = builder
            .with_intra_threads(options.intra_threads)
            .map_err(|e| EngineError::Runtime(e.to_string()))?;
    }
    if !options.intra_spinning {
        builder = builder
            .with_intra_op_spinning(false)
            .map_err(|e| EngineError::Runtime(e.to_string()))?;
    }
    Ok(builder)
}

impl OrtSession {
    /// Loads a model file. A file ORT rejects is the uploader's fault: `InvalidModel` with
    /// ORT's own reason.
    ///
    /// The session gets `plan`'s execution providers; when they cannot be registered, or the
    /// session cannot start on them, it runs on the CPU and [`OrtSession::execution`] says why.
    pub fn load(
        env: &ort::environment::Environment,
        path: &Path,
        label: &str,
        options: &SessionOptions,
        plan: &ProviderPlan,
    ) -> Result<OrtSession> {
        let invalid = |e: ort::Error| EngineError::InvalidModel(e.message().to_string());
        let mut gpu_builder = builder(env, options)?;
        let mut execution = plan.register(&mut gpu_builder);
        let session = match gpu_builder.commit_from_file(path) {
            Ok(session) => session,
            // A GPU provider registered but could not take the session (no device, missing
            // CUDA libraries, out of device memory): the CPU can still serve it.
            Err(e) if execution.on_gpu() => {
                let reason = format!(
                    "{} could not start the session: {}",
                    execution.providers[0],
                    e.message()
                );
                let session = builder(env, options)?
                    .commit_from_file(path)
                    .map_err(invalid)?;
                execution = ExecutionReport::cpu(Some(reason));
                session
            }
            Err(e) => return Err(invalid(e)),
        };
        if let Some(reason) = &execution.fallback {
            if plan.explicit {
                tracing::warn!(model = label, providers = ?execution.providers, %reason, "execution provider unavailable; running on what registered");
            } else {
                tracing::info!(model = label, providers = ?execution.providers, %reason, "no GPU execution provider; running on the CPU");
            }
        }
        let signature = read_signature(&session)?;
        Ok(OrtSession {
            label: label.to_string(),
            session,
            signature,
            execution,
        })
    }

    pub fn signature(&self) -> &ModelSignature {
        &self.signature
    }

    /// The providers this session runs on, and why not the requested ones.
    pub fn execution(&self) -> &ExecutionReport {
        &self.execution
    }

    /// Runs the session. `outputs` empty means every output, in the model's order.
    pub fn run(
        &mut self,
        inputs: &[Tensor],
        outputs: &[String],
    ) -> Result<(Vec<Tensor>, StageTimes)> {
        let started = Instant::now();
        let mut values: Vec<(Cow<'_, str>, SessionInputValue<'_>)> =
            Vec::with_capacity(inputs.len());
        for tensor in inputs {
            values.push((Cow::Borrowed(tensor.name.as_str()), input_value(tensor)?));
        }
        let wanted: Vec<String> = if outputs.is_empty() {
            self.signature
                .outputs
                .iter()
                .map(|s| s.name.clone())
                .collect()
        } else {
            outputs.to_vec()
        };
        let label = self.label.clone();
        let converted = Instant::now();
        let results = match self.session.run(values) {
            Ok(results) => results,
            Err(e) => {
                let chosen = chosen_dimensions(&self.signature, inputs);
                return Err(run_error(&label, e.code(), e.message(), chosen.as_deref()));
            }
        };
        let ran = Instant::now();
        let tensors = wanted
            .iter()
            .map(|name| {
                let value = results.get(name).ok_or_else(|| EngineError::ModelFailed {
                    model: label.clone(),
                    reason: format!("output '{name}' missing from the session's results"),
                })?;
                from_value(name, value)
            })
            .collect::<Result<Vec<_>>>()?;
        let times = StageTimes {
            input: converted - started,
            infer: ran - converted,
            output: ran.elapsed(),
        };
        Ok((tensors, times))
    }
}

/// The inputs whose shape sets a dimension the model leaves open, other than the batch
/// dimension: "input 'x' has shape [1, 3, 33, 45]"; `None` when the request chose none.
fn chosen_dimensions(signature: &ModelSignature, inputs: &[Tensor]) -> Option<String> {
    let chosen: Vec<String> = inputs
        .iter()
        .filter(|t| {
            signature
                .inputs
                .iter()
                .find(|spec| spec.name == t.name)
                .is_some_and(|spec| spec.shape.iter().skip(1).any(|&d| d < 0))
        })
        .map(|t| format!("input '{}' has shape {:?}", t.name, t.shape))
        .collect();
    (!chosen.is_empty()).then(|| chosen.join(", "))
}

fn read_signature(session: &Session) -> Result<ModelSignature> {
    let inputs = session
        .inputs()
        .iter()
        .map(|o| spec_of(o.name(), o.dtype()))
        .collect::<Result<Vec<_>>>()?;
    let outputs = session
        .outputs()
        .iter()
        .map(|o| spec_of(o.name(), o.dtype()))
        .collect::<Result<Vec<_>>>()?;
    let mut metadata = BTreeMap::new();
    if let Ok(meta) = session.metadata() {
        for key in meta.custom_keys().unwrap_or_default() {
            if let Some(value) = meta.custom(&key) {
                metadata.insert(key, value);
            }
        }
    }
    Ok(ModelSignature {
        inputs,
        outputs,
        metadata,
    })
}

/// `tensor` as a session input: a view ORT reads in place where its bytes are a non-empty
/// array of plain numbers aligned for their type (a batch of 16 MLP rows is 64 KiB that
/// would otherwise be zero-filled and copied once more), else a copy ([`to_value`]).
fn input_value(tensor: &Tensor) -> Result<SessionInputValue<'_>> {
    let TensorData::Raw(bytes) = &tensor.data else {
        return Ok(to_value(tensor)?.into());
    };
    let view = match tensor.datatype {
        DataType::Fp32 => view::<f32>(&tensor.shape, bytes),
        DataType::Fp64 => view::<f64>(&tensor.shape, bytes),
        DataType::Int8 => view::<i8>(&tensor.shape, bytes),
        DataType::Int16 => view::<i16>(&tensor.shape, bytes),
        DataType::Int32 => view::<i32>(&tensor.shape, bytes),
        DataType::Int64 => view::<i64>(&tensor.shape, bytes),
        DataType::Uint8 => view::<u8>(&tensor.shape, bytes),
        DataType::Uint16 => view::<u16>(&tensor.shape, bytes),
        DataType::Uint32 => view::<u32>(&tensor.shape, bytes),
        DataType::Uint64 => view::<u64>(&tensor.shape, bytes),
        // Not every byte is a bool, and f16 tensors need ort's `half` feature: copied.
        DataType::Bool | DataType::Fp16 | DataType::Bytes => None,
    };
    match view {
        Some(value) => value.map_err(|e| {
            EngineError::Internal(format!("viewing input '{}': {}", tensor.name, e.message()))
        }),
        None => Ok(to_value(tensor)?.into()),
    }
}

/// A tensor of `shape` over `bytes` read as `T`s, or `None` when they are empty or not aligned
/// for `T` (then the caller copies).
fn view<'a, T>(shape: &[i64], bytes: &'a [u8]) -> Option<ort::Result<SessionInputValue<'a>>>
where
    T: ort::value::PrimitiveTensorElementType + std::fmt::Debug + Clone + 'static,
{
    if bytes.is_empty() {
        return None;
    }
    // SAFETY: every `T` this is called with is a plain integer or float, for which every bit
    // pattern is a value; `align_to` hands back only the part aligned for `T`, and a view is
    // made only when that part is all of `bytes`.
    let (head, items, tail) = unsafe { bytes.align_to::<T>() };
    if !head.is_empty() || !tail.is_empty() {
        return None;
    }
    Some(ort::value::TensorRef::from_array_view((shape.to_vec(), items)).map(Into::into))
}

fn to_value(tensor: &Tensor) -> Result<DynValue> {
    let invalid =
        |reason: String| EngineError::InvalidInput(format!("input '{}': {reason}", tensor.name));
    match &tensor.data {
        TensorData::Bytes(items) => strings::to_value(&tensor.shape, items).map_err(invalid),
        TensorData::Raw(bytes) => {
            let mut value = ort::value::DynTensor::new(
                &Allocator::default(),
                element_type_of(tensor.datatype),
                tensor.shape.clone(),
            )
            .map_err(|e| {
                EngineError::Internal(format!("allocating '{}': {}", tensor.name, e.message()))
            })?;
            if !bytes.is_empty() {
                // SAFETY: ORT allocated exactly element_count * element_size bytes on the CPU for
                // this shape and datatype; `Tensor::check` proved `bytes` has that length.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        value.data_ptr_mut().cast::<u8>(),
                        bytes.len(),
                    );
                }
            }
            Ok(value.into_dyn())
        }
    }
}

fn from_value(name: &str, value: &DynValue) -> Result<Tensor> {
    let spec = spec_of(name, value.dtype())?;
    let internal =
        |reason: String| EngineError::Internal(format!("reading output '{name}': {reason}"));
    if spec.datatype == DataType::Bytes {
        let data = TensorData::Bytes(strings::from_value(value).map_err(internal)?);
        return Ok(Tensor::new(name, spec.datatype, spec.shape, data)?);
    }
    let count =
        element_count(&spec.shape).ok_or_else(|| internal(format!("shape {:?}", spec.shape)))?;
    let len = count * spec.datatype.size().unwrap_or(0);
    let bytes = if len > 0 {
        let view = value
            .view()
            .downcast::<ort::value::DynTensorValueType>()
            .map_err(|e| internal(e.message().to_string()))?;
        // SAFETY: a CPU output tensor of this shape and datatype holds exactly `len` bytes,
        // alive while `view` is. Copied straight out: a zero-filled buffer first would write
        // every byte twice.
        unsafe { std::slice::from_raw_parts(view.data_ptr().cast::<u8>(), len) }.to_vec()
    } else {
        Vec::new()
    };
    Ok(Tensor::new(
        name,
        spec.datatype,
        spec.shape,
        TensorData::Raw(bytes),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Fault;

    /// ORT 1.31's messages for ocr-det given a 33×45 image, and for MiniLM given a token id
    /// outside its vocabulary.
    const BROADCAST: &str = "Non-zero status code returned while running Add node. Name:'p2o.Add.248' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/math/element_wise_ops.h:563 void onnxruntime::BroadcastIterator::Init(ptrdiff_t, ptrdiff_t) axis == 1 || axis == largest was false. Attempting to broadcast an axis by a dimension other than 1. 3 by 4";
    const GATHER: &str = "Non-zero status code returned while running Gather node. Name:'node_embedding' Status Message: indices element out of data bounds, idx=1000000 must be within the inclusive range [-30522,30521]";

    /// Bytes not aligned for their type, or none, are copied instead of viewed (the view would
    /// read misaligned numbers). No ORT call is made on these paths.
    #[test]
    fn misaligned_or_empty_inputs_are_not_viewed() {
        let buf: Vec<u64> = vec![0; 3];
        // SAFETY: reading initialised u64s as bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), 24) };
        assert!(view::<f32>(&[2], &bytes[1..9]).is_none());
        assert!(view::<i64>(&[2], &bytes[4..20]).is_none());
        assert!(view::<f32>(&[0], &bytes[..0]).is_none());
    }

    #[test]
    fn reasons_are_the_models_without_ort_source_paths() {
        assert_eq!(
            model_reason(BROADCAST),
            "Add node 'p2o.Add.248': Attempting to broadcast an axis by a dimension other than 1. 3 by 4"
        );
        assert_eq!(
            model_reason(GATHER),
            "Gather node 'node_embedding': indices element out of data bounds, idx=1000000 must be within the inclusive range [-30522,30521]"
        );
        assert_eq!(
            model_reason("/build/ort/src/graph.cc:12 something failed"),
            "graph.cc:12 something failed"
        );
    }

    #[test]
    fn a_node_failing_on_a_size_the_client_chose_is_the_clients_fault() {
        let chosen = Some("input 'x' has shape [1, 3, 33, 45]");
        let e = run_error("det:1", ErrorCode::GenericFailure, BROADCAST, chosen);
        assert_eq!(e.fault(), Fault::Client);
        let text = e.to_string();
        assert!(
            text.contains("det:1") && text.contains("[1, 3, 33, 45]"),
            "{text}"
        );
        assert!(
            text.contains("broadcast") && !text.contains("/onnxruntime_src"),
            "{text}"
        );
        // The same failure on shapes the model fixes is the model's.
        let e = run_error("det:1", ErrorCode::GenericFailure, BROADCAST, None);
        assert_eq!(e.fault(), Fault::Model);
        // ORT's own argument checks are the client's whatever the shapes.
        let e = run_error("minilm:1", ErrorCode::InvalidArgument, GATHER, None);
        assert_eq!(e.fault(), Fault::Client);
        assert!(e.to_string().contains("out of data bounds"));
        // A failure outside any node (the runtime itself) stays the model's.
        let e = run_error("m:1", ErrorCode::RuntimeException, "session broke", chosen);
        assert_eq!(e.fault(), Fault::Model);
        let e = run_error(
            "m:1",
            ErrorCode::GenericFailure,
            "Failed to allocate memory",
            chosen,
        );
        assert_eq!(e.fault(), Fault::Unavailable);
    }
}
