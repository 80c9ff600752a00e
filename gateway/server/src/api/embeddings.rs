//! `POST /v1/embeddings` (OpenAI-compatible, scope `infer`): `model` names
//! - a pipeline whose answer is one FP32 vector per text, such as the demo `embed` pipeline
//!   (WordPiece tokenizer plugin → MiniLM → mean-pool plugin). Each input text runs through the
//!   pipeline as a raw `text/plain` body;
//! - or a GGUF version (a chat model), embedded by llama.cpp in an embedding context of its own
//!   (`[llm.embeddings]`: pooling from there or the file's metadata, inputs batched together,
//!   vectors L2-normalised): strings or token ids, `dimensions` only the model's own, usage in
//!   the model's tokens.

use super::authorized::{Authorized, Infer};
use super::body::read_limited;
use super::openai::{admitted, openai_error};
use crate::model_trace::for_model;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::Engine as _;
use http::HeaderMap;
use infergate_api_types::openai::{
    Embedding, EmbeddingList, EmbeddingUsage, EmbeddingVector, Object,
};
use infergate_engine::{DataType, InferOptions, TensorData};
use infergate_kserve::http_error::HttpError;
use infergate_llm::EmbedInput;
use infergate_service::chat_models::{api_error, is_gguf};
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::stages::{self, PipelineInput, PipelineOutput};
use infergate_service::openai_request::{parse, EmbeddingInputs, EmbeddingRequest};
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use std::sync::Arc;
use std::time::Instant;

/// The one FP32 vector a pipeline answered for one text.
fn vector(model: &str, output: PipelineOutput) -> ApiResult<Vec<f32>> {
    let not_embedding = |what: String| {
        ApiError::bad_request(format!(
            "pipeline '{model}' does not produce embeddings ({what}); it must answer one FP32 tensor of shape [D] or [1, D]"
        ))
    };
    let PipelineOutput::Tensors(tensors) = output else {
        return Err(not_embedding("it answers JSON or bytes".into()));
    };
    let [tensor] = tensors.as_slice() else {
        return Err(not_embedding(format!("{} output tensors", tensors.len())));
    };
    let flat = matches!(tensor.shape.as_slice(), [_] | [1, _]);
    match (&tensor.data, tensor.datatype, flat) {
        (TensorData::Raw(bytes), DataType::Fp32, true) => Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()),
        _ => Err(not_embedding(format!(
            "its output is {} {:?}",
            tensor.datatype, tensor.shape
        ))),
    }
}

/// Answers and errors in OpenAI's shape, which the official clients read.
pub async fn embeddings(
    auth: Result<Authorized<Infer>, HttpError>,
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if let Err(refused) = admitted(auth) {
        return *refused;
    }
    match answer(&state, &headers, body).await {
        Ok(list) => Json(list).into_response(),
        Err(e) => openai_error(e),
    }
}

async fn answer(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: axum::body::Body,
) -> ApiResult<EmbeddingList> {
    let limit = state.config().limits.max_request_bytes;
    let body = read_limited(headers, body, limit).await?;
    let req: EmbeddingRequest = parse(&body)?;
    let model = req.model.clone();
    for_model(&model, embed(state, req)).await
}

/// The embeddings of a parsed request.
async fn embed(state: &Arc<AppState>, req: EmbeddingRequest) -> ApiResult<EmbeddingList> {
    let base64 = req.base64()?;
    let Some(pipeline) = state.pipelines().get(&req.model) else {
        return match state.catalog().resolve(&req.model, None) {
            Ok(record) if is_gguf(&record) => gguf(state, record, &req, base64).await,
            _ => Err(ApiError::not_found(format!(
                "no pipeline or GGUF model named '{}' (embeddings are served by pipelines, e.g. 'embed', and GGUF models)",
                req.model
            ))),
        };
    };
    let texts = req.texts()?;
    let mut data = Vec::new();
    let mut chars = 0usize;
    for (index, text) in texts.into_iter().enumerate() {
        chars += text.chars().count();
        let stages::Ran { output, .. } = stages::run(
            state,
            &req.model,
            &pipeline.spec,
            PipelineInput::Bytes {
                data: text.into_bytes(),
                content_type: Some("text/plain".into()),
            },
            Vec::new(),
            InferOptions::default(),
        )
        .await?;
        let embedding = vector(&req.model, output)?;
        data.push(Embedding {
            object: Object::Embedding,
            index: index as u32,
            embedding: encoded(&embedding, base64),
        });
    }
    // The pipeline does not report its token count; characters are an upper bound of the
    // WordPiece tokens (each token covers at least one character).
    let chars = chars as u64;
    Ok(EmbeddingList {
        object: Object::List,
        data,
        model: req.model,
        usage: EmbeddingUsage {
            prompt_tokens: chars,
            total_tokens: chars,
        },
    })
}

/// Embeddings from a GGUF version's embedding context, recorded in the metrics as an `openai`
/// inference of that version.
async fn gguf(
    state: &Arc<AppState>,
    record: Arc<ModelRecord>,
    req: &EmbeddingRequest,
    base64: bool,
) -> ApiResult<EmbeddingList> {
    let started = Instant::now();
    let answer = gguf_embeddings(state, &record, req, base64).await;
    let status = match &answer {
        Ok(_) => 200,
        Err(e) => infergate_kserve::http_error::status_of(e.kind).as_u16(),
    };
    let version = record.version.to_string();
    state
        .metrics()
        .inference(&record.name, &version, "openai", status, started.elapsed());
    answer
}

async fn gguf_embeddings(
    state: &Arc<AppState>,
    record: &ModelRecord,
    req: &EmbeddingRequest,
    base64: bool,
) -> ApiResult<EmbeddingList> {
    let inputs: Vec<EmbedInput> = match req.inputs()? {
        EmbeddingInputs::Texts(texts) => texts.into_iter().map(EmbedInput::Text).collect(),
        EmbeddingInputs::Tokens(lists) => lists
            .into_iter()
            .enumerate()
            .map(|(i, ids)| {
                ids.into_iter()
                    .map(|t| {
                        i32::try_from(t).map_err(|_| {
                            ApiError::bad_request(format!(
                                "input[{i}]: token id {t} is out of range"
                            ))
                        })
                    })
                    .collect::<ApiResult<Vec<i32>>>()
                    .map(EmbedInput::Tokens)
            })
            .collect::<ApiResult<_>>()?,
    };
    let embedder = state
        .llm()
        .embedder(record, state.model_file(record, false))
        .await?;
    embedder
        .check_dimensions(req.dimensions)
        .map_err(api_error)?;
    let embeddings = embedder
        .embed(&inputs)
        .map_err(api_error)?
        .wait()
        .await
        .map_err(api_error)?;
    let data = embeddings
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            object: Object::Embedding,
            index: index as u32,
            embedding: encoded(v, base64),
        })
        .collect();
    let tokens = u64::from(embeddings.prompt_tokens);
    Ok(EmbeddingList {
        object: Object::List,
        data,
        model: record.name.clone(),
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    })
}

/// A vector as the request's `encoding_format` asks: the little-endian bytes of its FP32 values
/// in base64, or numbers (each FP32 value as the FP64 it converts to, as JSON numbers are).
fn encoded(embedding: &[f32], base64: bool) -> EmbeddingVector {
    if base64 {
        let bytes: Vec<u8> = embedding.iter().flat_map(|v| v.to_le_bytes()).collect();
        EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        EmbeddingVector::Float(embedding.iter().copied().map(f64::from).collect())
    }
}
