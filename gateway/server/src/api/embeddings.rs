//! `POST /v1/embeddings` (OpenAI-compatible, scope `infer`): `model` names a pipeline whose
//! answer is one FP32 vector per text, such as the demo `embed` pipeline (WordPiece tokenizer
//! plugin → MiniLM → mean-pool plugin). Each input text runs through the pipeline as a raw
//! `text/plain` body.

use super::authorized::{Authorized, Infer};
use super::body::read_limited;
use axum::extract::State;
use axum::Json;
use base64::Engine as _;
use http::HeaderMap;
use infergate_api_types::openai::{
    Embedding, EmbeddingList, EmbeddingUsage, EmbeddingVector, Object,
};
use infergate_engine::{DataType, InferOptions, TensorData};
use infergate_kserve::http_error::HttpResult;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::stages::{self, PipelineInput, PipelineOutput};
use infergate_service::openai_request::{parse, EmbeddingRequest};
use infergate_service::state::AppState;
use std::sync::Arc;

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

pub async fn embeddings(
    _: Authorized<Infer>,
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> HttpResult<Json<EmbeddingList>> {
    let limit = state.config().limits.max_request_bytes;
    let body = read_limited(&headers, body, limit).await?;
    let req: EmbeddingRequest = parse(&body)?;
    let base64 = req.base64()?;
    let texts = req.texts()?;
    let pipeline = state.pipelines().get(&req.model).ok_or_else(|| {
        ApiError::not_found(format!(
            "no pipeline named '{}' (embeddings are served by pipelines, e.g. 'embed')",
            req.model
        ))
    })?;
    let mut data = Vec::new();
    let mut chars = 0usize;
    for (index, text) in texts.into_iter().enumerate() {
        chars += text.chars().count();
        let (output, _) = stages::run(
            &state,
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
    Ok(Json(EmbeddingList {
        object: Object::List,
        data,
        model: req.model,
        usage: EmbeddingUsage {
            prompt_tokens: chars,
            total_tokens: chars,
        },
    }))
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
