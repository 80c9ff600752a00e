//! One KServe inference over gRPC, unary or a stream's: the call's key and limits, then the
//! inference service every protocol shares, its answer as Triton's message and in the metrics.

use super::auth;
use http::HeaderMap;
use infergate_kserve::http_error::status_of;
use infergate_kserve::proto::{ModelInferRequest, ModelInferResponse};
use infergate_kserve::{convert, PROTOCOL_LABEL};
use infergate_service::error::ApiResult;
use infergate_service::infer;
use infergate_service::metrics::Served;
use infergate_service::phases::Outcome;
use infergate_service::state::AppState;
use infergate_store::auth::Scope;
use std::time::Instant;

/// One inference request, unary or streamed: key and limits, then the shared KServe path.
/// Recorded in the inference metrics under protocol `grpc`.
pub async fn infer(
    state: &AppState,
    headers: &HeaderMap,
    message: ModelInferRequest,
) -> ApiResult<ModelInferResponse> {
    let started = Instant::now();
    let (name, version) = (message.model_name.clone(), message.model_version.clone());
    let result = run_infer(state, headers, message).await;
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
    headers: &HeaderMap,
    message: ModelInferRequest,
) -> ApiResult<(ModelInferResponse, Option<Served>)> {
    let (caller, _admission) = auth::admit(state, headers, Scope::Infer).await?;
    let version = convert::version(&message.model_version)?;
    let target = infer::resolve(state, &message.model_name, version)?;
    let request = convert::request(&message);
    let inputs = convert::decode_inputs(&message)?;
    // The request's raw bytes are copied into the inputs: free them before the model runs.
    drop(message);
    // The metadata goes with it: a traffic split may be sticky by one of its fields.
    let request_in = infer::Request::kserve(&request, inputs)?.with_headers(headers.clone());
    let mut inferred = infer::run(state, &caller, target, version, request_in).await?;
    let served = inferred.served.clone();
    let passage = std::mem::take(&mut inferred.passage);
    let id = request.id.unwrap_or_default();
    let response = convert::response(inferred, id);
    // gRPC hands the message to tonic, which writes it: the answer counts as sent here.
    passage.finish(Outcome::Sent);
    Ok((response, served))
}
