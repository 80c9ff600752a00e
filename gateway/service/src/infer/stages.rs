//! Running a pipeline: the plugins and the model version are resolved once when the request
//! starts (so a plugin swapped meanwhile affects only later requests), then pre-plugins run on
//! blocking threads, the model runs in the engine, and post-plugins shape the answer.

use super::detect;
use super::target::StageModel;
use crate::error::{ApiError, ApiResult};
use crate::metrics::PluginLabels;
use crate::pipelines::convert::{from_host, to_host};
use crate::pipelines::registry::LoadedPlugin;
use crate::pipelines::spec::{PipelineSpec, PipelineSpecExt};
use crate::state::AppState;
use futures_util::future::try_join_all;
use infergate_api_types::pipelines::{DetectedRegion, DetectedRegions, RunOutput};
use infergate_engine::preprocess::Mode;
use infergate_engine::{InferOptions, Tensor};
use infergate_plugin_host::{self as host, PluginKind, PostOutput, PreInput};
use infergate_store::models::ModelRecord;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a pipeline is given.
pub enum PipelineInput {
    /// A raw body (an image, text) for the first pre-plugin, with its media type.
    Bytes {
        data: Vec<u8>,
        content_type: Option<String>,
    },
    /// KServe tensors.
    Tensors(Vec<Tensor>),
}

/// A pipeline's run: its answer, how long each stage took, and the model versions it ran.
pub struct Ran {
    pub output: PipelineOutput,
    pub times: StageTimes,
    pub models: Vec<StageModel>,
}

/// What a pipeline answers.
pub enum PipelineOutput {
    Tensors(Vec<Tensor>),
    Json(String),
    Bytes(Vec<u8>),
}

/// Wall time of each stage, for the `Server-Timing` header and the dashboard.
#[derive(Debug, Default, Clone, Copy)]
pub struct StageTimes {
    pub pre: Duration,
    pub model: Duration,
    pub post: Duration,
}

impl StageTimes {
    /// The `Server-Timing` header value (milliseconds).
    pub fn header(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        format!(
            "pre;dur={:.3}, model;dur={:.3}, post;dur={:.3}",
            ms(self.pre),
            ms(self.model),
            ms(self.post)
        )
    }
}

/// The plugins and model version one request runs, fixed when it starts.
struct Resolved {
    pre: Vec<Arc<LoadedPlugin>>,
    post: Vec<Arc<LoadedPlugin>>,
}

fn resolve(state: &AppState, spec: &PipelineSpec) -> ApiResult<Resolved> {
    let pick = |refs: Vec<crate::pipelines::spec::PluginRef>, kind: PluginKind| {
        refs.iter()
            .map(|r| {
                let p = state.plugins().resolve(r)?;
                if p.kind() != crate::pipelines::registry::kind_of(kind) {
                    return Err(ApiError::bad_request(format!(
                        "plugin {r} is a {}-plugin and cannot run in this position",
                        p.kind().as_str()
                    )));
                }
                Ok(p)
            })
            .collect::<ApiResult<Vec<_>>>()
    };
    Ok(Resolved {
        pre: pick(spec.pre_refs()?, PluginKind::Pre)?,
        post: pick(spec.post_refs()?, PluginKind::Post)?,
    })
}

/// Checks a spec against what exists now: every plugin resolves and sits in the right
/// position, the model exists. Used when a pipeline is saved.
pub fn check(state: &AppState, spec: &PipelineSpec) -> ApiResult<()> {
    resolve(state, spec)?;
    state.catalog().resolve(&spec.model, spec.model_version)?;
    for model in spec.stage_models() {
        state.catalog().resolve(model, None)?;
    }
    Ok(())
}

/// Runs one plugin call on a blocking thread and records it in the metrics.
async fn call<T: Send + 'static>(
    state: &AppState,
    plugin: &Arc<LoadedPlugin>,
    stage: &'static str,
    f: impl FnOnce(&LoadedPlugin) -> Result<T, host::PluginError> + Send + 'static,
) -> ApiResult<T> {
    let p = plugin.clone();
    let started = Instant::now();
    let span = infergate_telemetry::span!(
        "plugin",
        plugin = %plugin.record.name,
        version = %plugin.record.version,
        stage,
        outcome = tracing::field::Empty
    );
    let result = infergate_telemetry::traced!(blocking(move || f(&p)), span.clone())?;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(host::PluginError::BadInput { .. }) => "bad_input",
        Err(host::PluginError::Busy { .. }) => "busy",
        Err(host::PluginError::Fault { kind, .. }) => kind.as_str(),
        Err(_) => "internal",
    };
    span.record("outcome", outcome);
    state.metrics().plugin_call(
        PluginLabels {
            plugin: plugin.record.name.clone(),
            version: plugin.record.version.clone(),
            stage,
            outcome,
        },
        started.elapsed(),
    );
    Ok(result?)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("plugin task failed: {e}")))
}

fn to_engine(tensors: Vec<host::Tensor>, plugin: &LoadedPlugin) -> ApiResult<Vec<Tensor>> {
    tensors
        .into_iter()
        .map(from_host)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            ApiError::internal(format!(
                "plugin {}@{} returned a malformed tensor: {e}",
                plugin.record.name, plugin.record.version
            ))
        })
}

/// Runs a pipeline; `options` (priority, queue timeout) apply to its model stage.
pub async fn run(
    state: &AppState,
    name: &str,
    spec: &PipelineSpec,
    input: PipelineInput,
    request_parameters: Vec<(String, String)>,
    options: InferOptions,
) -> ApiResult<Ran> {
    let resolved = resolve(state, spec)?;
    let mut record = state.catalog().resolve(&spec.model, spec.model_version)?;
    if spec.model_version.is_none() {
        // The model's traffic split applies to its stage too (drawn: a pipeline's stage does
        // not know its caller).
        record = crate::traffic::split(state, None, record, &http::HeaderMap::new()).0;
    }
    let mut metadata: host::Metadata = vec![
        ("pipeline".into(), name.to_string()),
        ("model".into(), record.name.clone()),
        ("model-version".into(), record.version.to_string()),
    ];
    metadata.extend(spec.parameters.iter().map(|(k, v)| (k.clone(), v.clone())));
    // Request parameters may refine the pipeline's, never replace the identity entries above.
    metadata.extend(
        request_parameters
            .into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "pipeline" | "model" | "model-version")),
    );
    let mut times = StageTimes::default();

    let started = Instant::now();
    // A raw body goes to the first pre-plugin; tensors go through every pre-plugin.
    let mut remaining_pre = resolved.pre.iter();
    let mut tensors = match input {
        PipelineInput::Tensors(t) => t,
        PipelineInput::Bytes { .. } if resolved.pre.is_empty() => {
            return Err(ApiError::bad_request(format!(
                "pipeline '{name}' has no pre-plugin to read a raw body: send KServe tensors to /v2/models/{name}/infer"
            )))
        }
        PipelineInput::Bytes { data, content_type } => {
            let mut meta = metadata.clone();
            if let Some(ct) = content_type {
                meta.push(("content-type".into(), ct));
            }
            let Some(first) = remaining_pre.next() else {
                return Err(ApiError::internal("pipeline lost its first pre-plugin"));
            };
            let out = call(state, first, "pre", move |p| {
                p.pipeline()?.preprocess(PreInput::Bytes(data), &meta)
            })
            .await?;
            to_engine(out, first)?
        }
    };
    for plugin in remaining_pre {
        let meta = metadata.clone();
        let input: Vec<host::Tensor> = tensors.into_iter().map(to_host).collect();
        let out = call(state, plugin, "pre", move |p| {
            p.pipeline()?.preprocess(PreInput::Tensors(input), &meta)
        })
        .await?;
        tensors = to_engine(out, plugin)?;
    }
    let tail = Tail {
        state,
        name,
        spec,
        record: &record,
        resolved: &resolved,
        metadata: &metadata,
        options,
    };
    let Some(stage) = &spec.detect else {
        times.pre = started.elapsed();
        let (output, tail) = tail.run(tensors).await?;
        times.model = tail.model;
        times.post = tail.post;
        return Ok(Ran {
            output,
            times,
            models: vec![StageModel::of("model", &record)],
        });
    };
    // Detection counts as pre-processing; the regions then run concurrently, so the model and
    // post stages take as long as their slowest region.
    let reader_aspect = spec
        .preprocess
        .as_ref()
        .filter(|p| p.mode == Mode::Letterbox)
        .map(|p| p.width as f32 / p.height as f32);
    let detected = detect::detect(state, stage, tensors, reader_aspect, options).await?;
    times.pre = started.elapsed();
    let outputs = try_join_all(
        detected
            .regions
            .iter()
            .map(|found| tail.run(vec![found.crop.clone()])),
    )
    .await?;
    let mut regions = Vec::with_capacity(outputs.len());
    for (found, (output, tail)) in detected.regions.iter().zip(outputs) {
        times.model = times.model.max(tail.model);
        times.post = times.post.max(tail.post);
        regions.push(region_json(name, found, output)?);
    }
    let answer = DetectedRegions {
        width: detected.width as u64,
        height: detected.height as u64,
        regions,
    };
    let text = serde_json::to_string(&answer)
        .map_err(|e| ApiError::internal(format!("pipeline '{name}': encoding its answer: {e}")))?;
    let mut models = detected.models;
    models.push(StageModel::of("model", &record));
    Ok(Ran {
        output: PipelineOutput::Json(text),
        times,
        models,
    })
}

/// One region of a detecting pipeline's answer: where it is, how it was turned, and what the
/// rest of the pipeline made of it.
fn region_json(
    name: &str,
    found: &detect::FoundRegion,
    output: PipelineOutput,
) -> ApiResult<DetectedRegion> {
    let output = match output {
        PipelineOutput::Json(text) => serde_json::from_str(&text).map_err(|e| {
            ApiError::internal(format!(
                "pipeline '{name}': the last post-plugin returned invalid JSON: {e}"
            ))
        })?,
        PipelineOutput::Tensors(tensors) => serde_json::Value::Array(
            tensors
                .iter()
                .map(|t| {
                    serde_json::to_value(RunOutput {
                        name: t.name.clone(),
                        datatype: t.datatype.name().to_owned(),
                        shape: t.shape.clone(),
                        data: infergate_protocol::json::encode(t),
                    })
                    .unwrap_or_default()
                })
                .collect(),
        ),
        PipelineOutput::Bytes(_) => {
            return Err(ApiError::internal(format!(
                "pipeline '{name}' detects text regions, so its last post-plugin must return JSON or tensors, not bytes"
            )))
        }
    };
    let r = &found.region;
    // f32 as the f64 it widens to, as the answer always wrote them.
    Ok(DetectedRegion {
        bounds: [r.x1, r.y1, r.x2, r.y2].map(f64::from),
        score: f64::from(r.score),
        angle: found.angle,
        angle_confidence: found.angle_confidence.map(f64::from),
        output,
    })
}

/// What the rest of a pipeline needs after its pre-plugins (and detection): the same for
/// every region of a detecting pipeline.
struct Tail<'a> {
    state: &'a AppState,
    name: &'a str,
    spec: &'a PipelineSpec,
    record: &'a ModelRecord,
    resolved: &'a Resolved,
    metadata: &'a host::Metadata,
    options: InferOptions,
}

impl Tail<'_> {
    /// The native pre-op with the model, then the post-plugins, on the pre-plugins' tensors.
    async fn run(&self, tensors: Vec<Tensor>) -> ApiResult<(PipelineOutput, StageTimes)> {
        let Tail {
            state,
            name,
            spec,
            record,
            resolved,
            metadata,
            options,
        } = *self;
        let mut times = StageTimes::default();
        // The native op goes with the model (to its worker when it runs on one), so its time
        // counts in the model stage.
        let started = Instant::now();
        let outputs = super::backend::run_stage(
            state,
            record,
            tensors,
            spec.preprocess.as_ref(),
            spec.model_outputs.clone(),
            options,
        )
        .await?;
        times.model = started.elapsed();

        let started = Instant::now();
        let mut current = PipelineOutput::Tensors(outputs);
        for plugin in &resolved.post {
            let PipelineOutput::Tensors(tensors) = current else {
                return Err(ApiError::internal(format!(
                "pipeline '{name}': a post-plugin before {}@{} returned JSON or bytes, so it must be the last",
                plugin.record.name, plugin.record.version
            )));
            };
            let meta = metadata.clone();
            let input: Vec<host::Tensor> = tensors.into_iter().map(to_host).collect();
            let out = call(state, plugin, "post", move |p| {
                p.pipeline()?.postprocess(input, &meta)
            })
            .await?;
            current = match out {
                PostOutput::Tensors(t) => PipelineOutput::Tensors(to_engine(t, plugin)?),
                PostOutput::Json(j) => PipelineOutput::Json(j),
                PostOutput::Bytes(b) => PipelineOutput::Bytes(b),
            };
        }
        times.post = started.elapsed();
        Ok((current, times))
    }
}
