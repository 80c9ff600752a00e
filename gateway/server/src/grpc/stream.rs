//! `ModelStreamInfer`: a bidirectional stream of inference requests. Each request is checked
//! like a unary call (the key may have been revoked since the stream opened; the key's rate
//! limit and concurrency cap count every request), runs concurrently with the others up to
//! `[websocket] max_in_flight` (further requests wait unread: backpressure), and its answer
//! goes out when ready; a failed request answers `error_message` and the stream goes on, as
//! Triton does. A client that goes away takes its requests still waiting for the model with it.
//! The requests of one sequence (`sequence_id`) run one after another, in the order they came
//! (`crate::sequence_order`).
//! A request message that cannot be read (one over the size limit: RESOURCE_EXHAUSTED) ends
//! the stream with that status, after the answers to the requests before it.
//! On shutdown a stream reads no further requests, finishes those in flight, and ends; the
//! server waits for it like for a WebSocket stream.

use super::auth::Presented;
use super::infer::infer;
use infergate_kserve::proto::{ModelInferRequest, ModelStreamInferResponse};
use infergate_kserve::status::read_failure;
use infergate_kserve::ResponseStream;
use infergate_service::state::AppState;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tonic::{Status, Streaming};
use tracing::Instrument;

use crate::sequence_order::{self, SequenceOrder};
use infergate_kserve::proto::infer_parameter::ParameterChoice;

/// One request of the stream, answered on `tx`: a decoupled model's (a chat model, a decoupled
/// pipeline) with zero or more responses then the final flag (`super::decoupled`), any other's
/// with one response carrying the final flag, as Triton's stream answers every request.
async fn serve(
    state: &AppState,
    presented: &Presented,
    message: ModelInferRequest,
    tx: &mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
) {
    let decoupled = infergate_kserve::convert::version(&message.model_version)
        .and_then(|version| infergate_service::infer::resolve(state, &message.model_name, version))
        .is_ok_and(|target| target.is_decoupled());
    if decoupled {
        return super::decoupled::serve(state, presented, message, tx).await;
    }
    let (id, model_name, model_version) = (
        message.id.clone(),
        message.model_name.clone(),
        message.model_version.clone(),
    );
    let answer = match infer(state, presented, message).await {
        Ok(mut response) => {
            super::decoupled::mark_final(&mut response, true);
            ModelStreamInferResponse {
                error_message: String::new(),
                infer_response: Some(response),
            }
        }
        // The request's id and model go back with the error so the client can match it.
        Err(e) => super::decoupled::failed(e, id, model_name, model_version),
    };
    // A failed send means the client is gone: nobody is left to tell.
    let _ = tx.send(Ok(answer)).await;
}

/// The sequence a request belongs to, if any (its `sequence_id` parameter).
fn sequence_key(message: &ModelInferRequest) -> Option<String> {
    match message
        .parameters
        .get(infergate_service::infer::request::SEQUENCE_ID)?
        .parameter_choice
        .as_ref()?
    {
        ParameterChoice::Int64Param(n) => {
            u64::try_from(*n).ok().and_then(sequence_order::key_of_int)
        }
        ParameterChoice::Uint64Param(n) => sequence_order::key_of_int(*n),
        ParameterChoice::StringParam(s) => sequence_order::key_of_str(s),
        _ => None,
    }
}

pub fn open(
    state: Arc<AppState>,
    presented: Presented,
    requests: Streaming<ModelInferRequest>,
    call: tracing::Span,
) -> ResponseStream {
    let in_flight = state.config().websocket.max_in_flight.get();
    let (tx, rx) = mpsc::channel(in_flight);
    tokio::spawn(read(state, presented, requests, tx, in_flight, call));
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|answer| (answer, rx))
    }))
}

async fn read(
    state: Arc<AppState>,
    presented: Presented,
    mut requests: Streaming<ModelInferRequest>,
    tx: mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
    in_flight: usize,
    // The call's span (none while its trace is not recorded): it ends with the stream.
    call: tracing::Span,
) {
    let _open = state.drain().stream_opened();
    let slots = Arc::new(Semaphore::new(in_flight));
    let draining = state.drain().signal();
    tokio::pin!(draining);
    let mut failure = None;
    let mut order = SequenceOrder::default();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let message = tokio::select! {
            _ = &mut draining => break,
            next = requests.message() => match next {
                Ok(Some(message)) => message,
                // The client finished sending, or went away.
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "gRPC stream ended with an error");
                    failure = Some(read_failure(e));
                    break;
                }
            },
        };
        let (state, presented, tx) = (state.clone(), presented.clone(), tx.clone());
        let turn = order.turn(sequence_key(&message));
        let span = if call.is_none() {
            tracing::Span::none()
        } else {
            tracing::info_span!(
                target: infergate_telemetry::TARGET,
                parent: &call,
                "grpc stream request",
                model = %message.model_name,
                id = %message.id
            )
        };
        tokio::spawn(
            async move {
                // A sequence's requests run in the order they came.
                let _done = turn.wait().await;
                tokio::select! {
                    biased;
                    // The client is gone (the response stream was dropped): dropping the request
                    // takes it out of the model's queue if it has not run yet, and stops a
                    // generation before its next token.
                    _ = tx.closed() => {}
                    () = serve(&state, &presented, message, &tx) => {}
                }
                drop(slot);
            }
            .instrument(span),
        );
    }
    // Answers still running hold slots: wait for them before this stream counts as closed.
    let _ = slots.acquire_many(in_flight as u32).await;
    if let Some(status) = failure {
        let _ = tx.send(Err(status)).await;
    }
}
