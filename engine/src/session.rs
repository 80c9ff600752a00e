//! One ONNX Runtime session and the conversion between engine tensors and ORT values.

use crate::error::{EngineError, Result};
use crate::providers::{ExecutionReport, ProviderPlan};
use crate::signature::{element_type_of, spec_of, ModelSignature};
use crate::tensor::{element_count, DataType, Tensor, TensorData};
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

/// The engine error for a failed run: out of memory is temporary (503: this batch fails, the
/// model stays loaded and serves the next), anything else is the model's failure.
pub fn run_error(model: &str, message: &str) -> EngineError {
    if is_out_of_memory(message) {
        EngineError::Unavailable(format!(
            "model '{model}' ran out of memory running this batch; the model stays loaded, retry later or send smaller batches ({message})"
        ))
    } else {
        EngineError::ModelFailed {
            model: model.to_string(),
            reason: message.to_string(),
        }
    }
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
            values.push((
                Cow::Borrowed(tensor.name.as_str()),
                to_value(tensor)?.into(),
            ));
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
        let results = self
            .session
            .run(values)
            .map_err(|e| run_error(&label, e.message()))?;
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

fn to_value(tensor: &Tensor) -> Result<DynValue> {
    let invalid =
        |reason: String| EngineError::InvalidInput(format!("input '{}': {reason}", tensor.name));
    match &tensor.data {
        TensorData::Bytes(items) => {
            let strings = items
                .iter()
                .map(|b| String::from_utf8(b.clone()))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|_| invalid("BYTES elements must be UTF-8 for this model".into()))?;
            let value =
                ort::value::Tensor::from_string_array((tensor.shape.clone(), strings.as_slice()))
                    .map_err(|e| invalid(e.message().to_string()))?;
            Ok(value.into_dyn())
        }
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
        let (_, strings) = value
            .try_extract_strings()
            .map_err(|e| internal(e.message().to_string()))?;
        let data = TensorData::Bytes(strings.into_iter().map(String::into_bytes).collect());
        return Ok(Tensor::new(name, spec.datatype, spec.shape, data)?);
    }
    let count =
        element_count(&spec.shape).ok_or_else(|| internal(format!("shape {:?}", spec.shape)))?;
    let len = count * spec.datatype.size().unwrap_or(0);
    let mut bytes = vec![0u8; len];
    if len > 0 {
        let view = value
            .view()
            .downcast::<ort::value::DynTensorValueType>()
            .map_err(|e| internal(e.message().to_string()))?;
        // SAFETY: a CPU output tensor of this shape and datatype holds exactly `len` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(view.data_ptr().cast::<u8>(), bytes.as_mut_ptr(), len);
        }
    }
    Ok(Tensor::new(
        name,
        spec.datatype,
        spec.shape,
        TensorData::Raw(bytes),
    )?)
}
