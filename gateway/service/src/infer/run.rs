//! A request on a target: a pipeline's stages, or one model version through the backend (the
//! version a traffic split chose, `crate::traffic`), through the request phases where
//! policies attach (`crate::phases`).

use super::stages::{PipelineInput, PipelineOutput, StageTimes};
use super::target::StageModel;
use super::{backend, Request, Target};
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::metrics::Served;
use crate::phases::{Exchange, Outcome, Passage};
use crate::pipelines::Pipeline;
use crate::state::AppState;
use infergate_engine::{DataType, Tensor, TensorData};

/// The outcome of an inference on a model or pipeline, before any protocol encodes it.
pub struct Inferred {
    /// The name and version the answer reports: the model's, or the pipeline's (version 1).
    pub model: String,
    pub version: u64,
    pub outputs: Vec<Tensor>,
    /// Set for a model (not a pipeline): the version that served, for metrics labels.
    pub served: Option<Served>,
    /// A pipeline's stage times.
    pub times: Option<StageTimes>,
    /// The policies that follow the request until its answer is sent: the transport keeps this
    /// until it has written the answer, then finishes it (dropping it says the answer was not
    /// sent).
    pub passage: Passage,
}

/// Runs `request` for `caller` on `target`: the model's traffic split when the request named
/// no version (and a mirrored copy when the policy says so), admission by the attached
/// policies, then a hook's answer or the model's (or the pipeline's).
pub async fn run(
    state: &AppState,
    caller: &Caller,
    target: Target,
    named_version: Option<u64>,
    request: Request,
) -> ApiResult<Inferred> {
    let stateful = request.is_stateful();
    let (target, route) = match target {
        Target::Model(record) if named_version.is_none() && !stateful => {
            let (record, route) =
                crate::traffic::split(state, Some(caller), record, &request.headers);
            (Target::Model(record), route)
        }
        other => (other, None),
    };
    let mut passage = if state.phases().is_empty() {
        Passage::default()
    } else {
        let exchange = Exchange {
            caller,
            target: &target,
            named_version,
            inputs: &request.inputs,
            outputs: &request.outputs,
            parameters: &request.parameters,
            stateful,
        };
        state.phases().admit(&exchange).await?
    };
    if let (Some(route), Target::Model(served)) = (&route, &target) {
        if let Some(mirror) = crate::traffic::mirror_of(state, route, served) {
            crate::traffic::mirror(
                state,
                mirror,
                request.inputs.clone(),
                request.outputs.clone(),
            );
        }
    }
    let answered = passage.before_model();
    let result = match answered {
        Some(outputs) => Ok((answered_in_place(&target, outputs), Vec::new())),
        None => run_target(state, target, request).await,
    };
    match result {
        Ok((mut inferred, stages)) => {
            if !stages.is_empty() {
                passage.stages_ran(&stages);
            }
            passage.after_model(&inferred.outputs);
            inferred.passage = passage;
            Ok(inferred)
        }
        Err(e) => {
            passage.finish(Outcome::Failed(e.kind));
            Err(e)
        }
    }
}

/// The answer a policy gave in the model's place, reported as the target's.
fn answered_in_place(target: &Target, outputs: Vec<Tensor>) -> Inferred {
    let (model, version, served) = match target {
        Target::Model(record) => (
            record.name.clone(),
            record.version,
            Some(Served {
                model: record.name.clone(),
                version: record.version,
            }),
        ),
        Target::Pipeline(pipeline) => (pipeline.record.name.clone(), 1, None),
    };
    Inferred {
        model,
        version,
        outputs,
        served,
        times: None,
        passage: Passage::default(),
    }
}

/// The target's answer, with the model versions a pipeline's stages ran (none for a model).
async fn run_target(
    state: &AppState,
    target: Target,
    request: Request,
) -> ApiResult<(Inferred, Vec<StageModel>)> {
    let record = match target {
        Target::Model(record) => record,
        Target::Pipeline(pipeline) => return pipeline_tensors(state, &pipeline, request).await,
    };
    let outputs = match request.sequence {
        Some(sequence) if is_stateful(state, &record) => {
            backend::run_sequence(
                state,
                &record,
                request.inputs,
                request.outputs,
                request.options,
                sequence,
            )
            .await?
        }
        _ => {
            backend::run_model(
                state,
                &record,
                request.inputs,
                request.outputs,
                request.options,
            )
            .await?
        }
    };
    let inferred = Inferred {
        served: Some(Served {
            model: record.name.clone(),
            version: record.version,
        }),
        model: record.name.clone(),
        version: record.version,
        outputs,
        times: None,
        passage: Passage::default(),
    };
    Ok((inferred, Vec::new()))
}

/// Whether a model version serves sequences (its configuration has `sequence_batching`); a
/// version without ignores the sequence parameters, as Triton does.
pub fn is_stateful(state: &AppState, record: &infergate_store::models::ModelRecord) -> bool {
    state
        .engine()
        .model_config(&crate::catalog::model_key(record))
        .sequence_batching
        .is_some()
}

/// Tensors in, tensors out, like a model: request parameters reach every plugin as metadata,
/// and the options apply to the pipeline's model stage.
async fn pipeline_tensors(
    state: &AppState,
    pipeline: &Pipeline,
    request: Request,
) -> ApiResult<(Inferred, Vec<StageModel>)> {
    let name = &pipeline.record.name;
    let super::stages::Ran {
        output,
        times,
        models,
    } = super::stages::run(
        state,
        name,
        &pipeline.spec,
        PipelineInput::Tensors(request.inputs),
        request.parameters,
        request.options,
    )
    .await?;
    let mut outputs = as_tensors(output);
    if !request.outputs.is_empty() {
        if let Some(missing) = request
            .outputs
            .iter()
            .find(|wanted| !outputs.iter().any(|t| &t.name == *wanted))
        {
            return Err(ApiError::bad_request(format!(
                "pipeline '{name}' has no output '{missing}'"
            )));
        }
        outputs.retain(|t| request.outputs.contains(&t.name));
    }
    let inferred = Inferred {
        model: name.clone(),
        version: 1,
        outputs,
        served: None,
        times: Some(times),
        passage: Passage::default(),
    };
    Ok((inferred, models))
}

/// A post-plugin's JSON or bytes as one BYTES output, so KServe clients still get tensors.
fn as_tensors(output: PipelineOutput) -> Vec<Tensor> {
    let single = |name: &str, bytes: Vec<u8>| Tensor {
        name: name.to_string(),
        datatype: DataType::Bytes,
        shape: vec![1],
        data: TensorData::Bytes(vec![bytes]),
    };
    match output {
        PipelineOutput::Tensors(t) => t,
        PipelineOutput::Json(text) => vec![single("json", text.into_bytes())],
        PipelineOutput::Bytes(bytes) => vec![single("bytes", bytes)],
    }
}
