//! One KServe inference over gRPC, unary or a stream's: the call's key and limits, then the
//! inference service every protocol shares, its answer as Triton's message and in the metrics.

use super::auth::{self, Presented};
use infergate_kserve::http_error::status_of;
use infergate_kserve::proto::{ModelInferRequest, ModelInferResponse};
use infergate_kserve::{convert, PROTOCOL_LABEL};
use infergate_service::error::{ApiError, ApiResult, Kind};
use infergate_service::infer;
use infergate_service::metrics::Served;
use infergate_service::phases::Outcome;
use infergate_service::shared_memory::{self, RequestRegions};
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use std::time::Instant;

/// One inference request, unary or streamed: key and limits, then the shared KServe path.
/// Recorded in the inference metrics under protocol `grpc`.
pub async fn infer(
    state: &AppState,
    presented: &Presented,
    message: ModelInferRequest,
) -> ApiResult<ModelInferResponse> {
    let started = Instant::now();
    let (name, version) = (message.model_name.clone(), message.model_version.clone());
    let result = run_infer(state, presented, message).await;
    let (model, version, code) = match &result {
        Ok((_, Some(served))) => (served.model.clone(), served.version.to_string(), 200),
        // A pipeline: labelled like the HTTP route labels it (no model).
        Ok((_, None)) => (String::new(), String::new(), 200),
        Err(e) => {
            // Only registered names become label values, so clients cannot grow the metrics.
            let known = state.catalog().resolve(&name, None).is_ok();
            let version = if known && version.parse::<u64>().is_ok() {
                version
            } else {
                String::new()
            };
            let model = if known { name } else { String::new() };
            (model, version, status_of(e.kind).as_u16())
        }
    };
    state
        .metrics()
        .inference(&model, &version, PROTOCOL_LABEL, code, started.elapsed());
    result.map(|(response, _)| response)
}

async fn run_infer(
    state: &AppState,
    presented: &Presented,
    message: ModelInferRequest,
) -> ApiResult<(ModelInferResponse, Option<Served>)> {
    let (caller, _admission) = auth::admit(state, presented, Scope::Infer).await?;
    let version = convert::version(&message.model_version)?;
    let target = infer::resolve(state, &message.model_name, version)?;
    if target.is_decoupled() {
        return Err(ApiError::new(
            Kind::Unsupported,
            "ModelInfer RPC doesn't support models with decoupled transaction policy: send the request on ModelStreamInfer",
        ));
    }
    let request = convert::request(&message);
    // Shared memory is looked up only when the request uses it.
    let mut regions = RequestRegions::new(state, &caller, presented.client);
    let inputs = convert::decode_inputs_with(&message, &mut |parameters, datatype, count| {
        regions.read_input(parameters, datatype, count)
    })?;
    // The request's raw bytes are copied into the inputs: free them before the model runs.
    drop(message);
    let shared_outputs = shared_memory::output_refs(
        request
            .outputs
            .iter()
            .map(|o| (o.name.as_str(), &o.parameters)),
    )?;
    // The metadata goes with it: a traffic split may be sticky by one of its fields.
    let request_in =
        infer::Request::kserve(&request, inputs)?.with_headers(presented.headers.clone());
    let mut inferred = infer::run(state, &caller, target, version, request_in).await?;
    regions.write_outputs(&shared_outputs, &inferred.outputs)?;
    let served = inferred.served.clone();
    let passage = std::mem::take(&mut inferred.passage);
    let id = request.id.unwrap_or_default();
    let shared: Vec<&str> = shared_outputs
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    let response = convert::response_with(inferred, id, &shared);
    // gRPC hands the message to tonic, which writes it: the answer counts as sent here.
    passage.finish(Outcome::Sent);
    Ok((response, served))
}
