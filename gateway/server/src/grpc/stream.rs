//! `ModelStreamInfer`: a bidirectional stream of inference requests. Each request is checked
//! like a unary call (the key may have been revoked since the stream opened; the key's rate
//! limit and concurrency cap count every request), runs concurrently with the others up to
//! `[websocket] max_in_flight` (further requests wait unread: backpressure), and its answer
//! goes out when ready; a failed request answers `error_message` and the stream goes on, as
//! Triton does. A client that goes away takes its requests still waiting for the model with it.
//! A request message that cannot be read (one over the size limit: RESOURCE_EXHAUSTED) ends
//! the stream with that status, after the answers to the requests before it.
//! On shutdown a stream reads no further requests, finishes those in flight, and ends; the
//! server waits for it like for a WebSocket stream.

use super::infer::infer;
use http::HeaderMap;
use infergate_kserve::proto::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use infergate_kserve::status::read_failure;
use infergate_kserve::ResponseStream;
use infergate_service::state::AppState;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use tonic::{Status, Streaming};

pub fn open(
    state: Arc<AppState>,
    headers: HeaderMap,
    requests: Streaming<ModelInferRequest>,
) -> ResponseStream {
    let in_flight = state.config().websocket.max_in_flight.get();
    let (tx, rx) = mpsc::channel(in_flight);
    tokio::spawn(read(state, headers, requests, tx, in_flight));
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|answer| (answer, rx))
    }))
}

async fn read(
    state: Arc<AppState>,
    headers: HeaderMap,
    mut requests: Streaming<ModelInferRequest>,
    tx: mpsc::Sender<Result<ModelStreamInferResponse, Status>>,
    in_flight: usize,
) {
    let _open = state.drain().stream_opened();
    let slots = Arc::new(Semaphore::new(in_flight));
    let draining = state.drain().signal();
    tokio::pin!(draining);
    let mut failure = None;
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
        let (state, headers, tx) = (state.clone(), headers.clone(), tx.clone());
        tokio::spawn(async move {
            let (id, model_name, model_version) = (
                message.id.clone(),
                message.model_name.clone(),
                message.model_version.clone(),
            );
            let result = tokio::select! {
                biased;
                // The client is gone (the response stream was dropped): dropping `infer` takes
                // the request out of the model's queue if it has not run yet.
                _ = tx.closed() => return,
                result = infer(&state, &headers, message) => result,
            };
            let answer = match result {
                Ok(response) => ModelStreamInferResponse {
                    error_message: String::new(),
                    infer_response: Some(response),
                },
                // The request's id and model go back with the error so the client can match it.
                Err(e) => ModelStreamInferResponse {
                    error_message: e.message,
                    infer_response: Some(ModelInferResponse {
                        model_name,
                        model_version,
                        id,
                        ..Default::default()
                    }),
                },
            };
            // A failed send means the client is gone: nobody is left to tell.
            let _ = tx.send(Ok(answer)).await;
            drop(slot);
        });
    }
    // Answers still running hold slots: wait for them before this stream counts as closed.
    let _ = slots.acquire_many(in_flight as u32).await;
    if let Some(status) = failure {
        let _ = tx.send(Err(status)).await;
    }
}
