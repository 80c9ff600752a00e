//! The OpenAI-compatible routes. Their errors are OpenAI's shape (`OpenAiError`), which the
//! official clients read their exception's message from.

#![allow(dead_code)]

use crate::openai::ErrorBody as OpenAiErrorBody;
use crate::openai::{ChatChoice, Completion, EmbeddingList, ModelCardList, TextChoice};
use crate::openapi::bodies::{ChatRequest, CompletionRequest, EmbeddingRequest};

/// The models the OpenAI routes serve: chat models, the character model and embedding
/// pipelines, the default completions model first.
#[utoipa::path(get, path = "/v1/models", tag = "OpenAI",
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses((status = 200, description = "The models.", body = ModelCardList)))]
pub fn models() {}

/// A text completion of a prompt, whole or streamed as server-sent events (`stream: true`:
/// one chunk of the same shape per `data:` line, then `data: [DONE]`).
#[utoipa::path(post, path = "/v1/completions", tag = "OpenAI",
    request_body = CompletionRequest,
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The completion, or its stream.", content(
            (Completion<TextChoice> = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "A parameter the model cannot honour, or a malformed request.", body = OpenAiErrorBody),
        (status = 404, description = "No such model.", body = OpenAiErrorBody),
        (status = 503, description = "The model's queue is full (`Retry-After`).", body = OpenAiErrorBody),
    ))]
pub fn completions() {}

/// A chat completion, whole or streamed as server-sent events (`stream: true`: one
/// `chat.completion.chunk` per `data:` line, then `data: [DONE]`).
#[utoipa::path(post, path = "/v1/chat/completions", tag = "OpenAI",
    request_body = ChatRequest,
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "The answer, or its stream of chunks (`Completion<ChatChunkChoice>`).", content(
            (Completion<ChatChoice> = "application/json"),
            (String = "text/event-stream"),
        )),
        (status = 400, description = "A parameter the model cannot honour, or a malformed request.", body = OpenAiErrorBody),
        (status = 404, description = "No such model.", body = OpenAiErrorBody),
        (status = 503, description = "The model's queue is full (`Retry-After`).", body = OpenAiErrorBody),
    ))]
pub fn chat_completions() {}

/// Vectors of texts from an embedding pipeline or a GGUF model, in the order of the inputs.
#[utoipa::path(post, path = "/v1/embeddings", tag = "OpenAI",
    request_body = EmbeddingRequest,
    security(("bearer" = ["infer"]), ("api_key" = ["infer"])),
    responses(
        (status = 200, description = "One vector per input.", body = EmbeddingList),
        (status = 400, description = "A malformed request, an input too long, or `dimensions` other than the model's own.", body = OpenAiErrorBody),
        (status = 404, description = "No such pipeline or GGUF model.", body = OpenAiErrorBody),
    ))]
pub fn embeddings() {}
