//! The chat phases (`infergate_service::phases`) as the OpenAI routes drive them, for chat
//! models and the text generator alike: admission (token limits, the cache's lookup), an
//! answer replayed from the cache (whole, or as the stream of pieces it was sent as), and the
//! headers every answer carries: the token policy's `RateLimit` fields and
//! `X-Infergate-Model-Version`, the version that served (a traffic split may have chosen it).

use super::openai_answer::{Generated, Meta};
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue};
use infergate_api_types::openai::Usage;
use infergate_llm::Finish;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiResult, LimitFields};
use infergate_service::phases::{ChatAnswer, ChatExchange, ChatPassage};
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use std::convert::Infallible;
use std::sync::Arc;

/// The response header naming the version that served a request that named none.
pub const MODEL_VERSION: HeaderName = HeaderName::from_static("x-infergate-model-version");

/// What the chat phases need to know of a request, once its prompt is rendered.
pub(super) struct ChatFacts<'a> {
    /// The rendered prompt (a completion's token ids as text, marked apart).
    pub prompt: &'a str,
    pub prompt_tokens: u64,
    pub max_completion_tokens: u64,
    pub parameters: Vec<(&'static str, String)>,
    pub deterministic: bool,
    pub stream: bool,
}

/// Chat admission for `caller` on `record`: refused (429 for a token limit), or the passage.
pub(super) async fn admit(
    state: &AppState,
    caller: &Caller,
    record: &Arc<ModelRecord>,
    facts: &ChatFacts<'_>,
) -> ApiResult<ChatPassage> {
    let exchange = ChatExchange {
        caller,
        model: record,
        named_version: None,
        prompt: facts.prompt,
        prompt_tokens: facts.prompt_tokens,
        max_completion_tokens: facts.max_completion_tokens,
        parameters: &facts.parameters,
        deterministic: facts.deterministic,
        stream: facts.stream,
    };
    state.phases().admit_chat(&exchange).await
}

/// The token policy's `RateLimit` fields (`passage.limit_fields()`, read before the passage
/// went into the answer) and the serving version, on `response`.
pub(super) fn with_headers(
    mut response: Response,
    fields: Option<LimitFields>,
    record: &ModelRecord,
) -> Response {
    let headers = response.headers_mut();
    if let Some(fields) = fields {
        infergate_kserve::http_error::set_limit_fields(headers, &fields);
    }
    headers.insert(MODEL_VERSION, HeaderValue::from(record.version));
    response
}

fn finish_of(name: &str) -> Finish {
    match name {
        "length" => Finish::Length,
        _ => Finish::Stop,
    }
}

/// A cached answer, as the answer it was (the passage is finished as sent): whole, or the
/// pieces it was streamed as, each an SSE event, ending as a generated stream ends.
pub(super) fn replay(
    meta: &Meta,
    answer: &ChatAnswer,
    stream: bool,
    include_usage: bool,
) -> Response {
    let usage = Usage::new(
        u32::try_from(answer.prompt_tokens).unwrap_or(u32::MAX),
        u32::try_from(answer.completion_tokens()).unwrap_or(u32::MAX),
    );
    if !stream {
        let choices = answer
            .choices
            .iter()
            .map(|c| Generated {
                text: c.text(),
                logprobs: Vec::new(),
                tool_calls: Vec::new(),
                finish: finish_of(c.finish).into(),
            })
            .collect();
        return meta.answer(choices, usage);
    }
    let mut out = Vec::new();
    let mut event = |payload: &str| {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(payload.as_bytes());
        out.extend_from_slice(b"\n\n");
    };
    for (i, choice) in answer.choices.iter().enumerate() {
        let index = u32::try_from(i).unwrap_or(u32::MAX);
        if meta.is_chat() {
            event(&meta.role_chunk(index));
        }
        for piece in &choice.pieces {
            event(&meta.chunk(index, piece, None, None));
        }
        event(&meta.chunk(index, "", None, Some(finish_of(choice.finish).into())));
    }
    if include_usage {
        event(&meta.usage_chunk(usage));
    }
    event("[DONE]");
    let body = futures_util::stream::once(async move { Ok::<_, Infallible>(Bytes::from(out)) });
    (
        [
            (http::header::CONTENT_TYPE, "text/event-stream"),
            (http::header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
