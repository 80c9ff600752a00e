//! The character-level text generator behind the OpenAI routes and WebSocket `generate`: the
//! model a request names with its vocabulary, and a generation whose model runs through the
//! inference service.

use futures_util::future::BoxFuture;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::state::AppState;
use infergate_service::textgen::{Generation, RunModel, Sampling, Vocab};
use std::sync::Arc;

/// The vocabulary and the registered model the request names.
pub(crate) fn generator(
    state: &AppState,
    model: &str,
) -> ApiResult<(Arc<Vocab>, Arc<infergate_store::models::ModelRecord>)> {
    let configured = &state.config().openai.textgen_model;
    if model != configured {
        return Err(ApiError::not_found(format!(
            "model '{model}' does not exist or does not generate text; GET /v1/models lists the models"
        )));
    }
    let vocab = state.textgen_vocab().cloned().ok_or_else(|| {
        ApiError::unavailable(
            "text generation is not configured: set [openai] vocab (or --openai-vocab) to the model's vocabulary",
        )
    })?;
    let record = state.catalog().resolve(model, None)?;
    Ok((vocab, record))
}

/// A generation whose model runs through the inference service.
pub fn start_generation(
    state: &Arc<AppState>,
    vocab: Arc<Vocab>,
    record: Arc<infergate_store::models::ModelRecord>,
    prompt: &str,
    sampling: Sampling,
) -> ApiResult<Generation> {
    let (state, model) = (state.clone(), record.clone());
    let run: RunModel = Box::new(move |inputs, outputs| -> BoxFuture<'static, _> {
        let (state, model) = (state.clone(), model.clone());
        Box::pin(async move {
            let options = infergate_engine::InferOptions::default();
            infergate_service::infer::backend::run_model(&state, &model, inputs, outputs, options)
                .await
        })
    });
    Generation::new(run, vocab, record, prompt, sampling)
}
