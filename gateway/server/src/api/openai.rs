//! The OpenAI-compatible API (scope `infer`): `GET /v1/models`, `POST /v1/completions` and
//! `POST /v1/chat/completions`.
//!
//! A request naming a chat model (a registered GGUF version; `[openai] completions_model` when
//! it names none) is served by `openai_llm.rs`. A request naming `[openai] textgen_model`, the
//! character-level LSTM, is served here when its vocabulary `[openai] vocab` is configured:
//! `stream: true` answers Server-Sent Events in OpenAI's chunk format ending with
//! `data: [DONE]`; generation is driven by the stream, so a client that disconnects stops it at
//! the next character. Its chat prompt is the messages' contents joined by newlines: that model
//! continues text, it does not follow instructions.
//!
//! `/v1/embeddings` is served by pipelines (see `embeddings.rs`). The bodies this module and
//! `embeddings.rs` take are parsed and checked in `infergate_service::openai_request`.

use super::authorized::{Authorized, Infer};
use super::body::read_limited;
use super::chat_phases::{self, ChatFacts};
use super::openai_answer::{Generated, Kind, Meta};
use super::openai_llm;
use crate::model_trace::for_model;
use crate::request_id::RequestId;
use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use http::HeaderMap;
use infergate_api_types::openai::{
    ErrorBody, ErrorCode, ErrorDetail, ModelCard, ModelCardList, Object, Usage,
};
use infergate_kserve::http_error::{HttpError, HttpResult};
use infergate_service::caller::Caller;
use infergate_service::error::{self, ApiError, ApiResult};
use infergate_service::openai_request::{parse, ChatRequest, Common, CompletionRequest, Sampling};
use infergate_service::phases::{ChatAnswer, ChatChoice, ChatPassage, Outcome};
use infergate_service::state::AppState;
use infergate_service::textgen::{Generation, Step};
use std::collections::BTreeMap;
use std::sync::Arc;

type S = State<Arc<AppState>>;

use super::generation_metrics::Tracked;
use super::textgen::{generator, start_generation};
const DEFAULT_COMPLETION_TOKENS: u32 = 16;
const DEFAULT_CHAT_TOKENS: u32 = 256;

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub async fn models(_: Authorized<Infer>, State(state): S) -> HttpResult<Json<ModelCardList>> {
    // Only what the OpenAI endpoints can run: chat models (GGUF), the character LSTM when its
    // vocabulary is configured, and pipelines (/v1/embeddings); other models are served through
    // KServe v2, where clients find them in /v2/models.
    let mut first_seen: BTreeMap<String, (i64, Option<u32>)> = BTreeMap::new();
    for record in state.catalog().all() {
        let chat = infergate_service::chat_models::is_gguf(&record);
        let textgen =
            state.textgen_vocab().is_some() && record.name == state.config().openai.textgen_model;
        if chat || textgen {
            let context = record
                .signature
                .metadata
                .get("context_length")
                .and_then(|n| n.parse::<u32>().ok())
                .map(|n| n.min(state.config().llm.context_per_sequence));
            let entry = first_seen
                .entry(record.name.clone())
                .or_insert((record.created_at, context));
            entry.0 = entry.0.min(record.created_at);
        }
    }
    let mut data: Vec<ModelCard> = first_seen
        .into_iter()
        .map(|(id, (created, context))| model_card(id, created, context))
        .collect();
    for pipeline in state.pipelines().all() {
        let record = &pipeline.record;
        data.push(model_card(record.name.clone(), record.created_at, None));
    }
    // The default model first, as clients that take the first entry expect.
    let default = &state.config().openai.completions_model;
    data.sort_by_key(|m| m.id != *default);
    Ok(Json(ModelCardList {
        object: Object::List,
        data,
    }))
}

/// One model of `GET /v1/models`; `max_model_len` is a chat model's context per sequence.
fn model_card(id: String, created: i64, max_model_len: Option<u32>) -> ModelCard {
    ModelCard {
        id,
        object: Object::Model,
        created,
        owned_by: "infergate".into(),
        max_model_len,
    }
}

/// An error in OpenAI's shape (`{"error": {"message", "type", "param", "code"}}`), which the
/// official clients read their exception's message from; `code` names a token limit's
/// refusal (`rate_limit_exceeded`, `insufficient_quota`).
pub(super) fn openai_error(e: ApiError) -> Response {
    let kind = match e.kind {
        error::Kind::Invalid
        | error::Kind::NotFound
        | error::Kind::TooLarge
        | error::Kind::Unprocessable => "invalid_request_error",
        error::Kind::Unauthenticated => "authentication_error",
        error::Kind::Forbidden => "permission_error",
        error::Kind::RateLimited => "rate_limit_error",
        _ => "server_error",
    };
    let body = ErrorBody {
        error: ErrorDetail {
            message: e.message.clone(),
            kind: kind.into(),
            param: Some(None),
            code: Some(e.code.map(|c| ErrorCode::Name(c.to_owned()))),
        },
    };
    infergate_kserve::http_error::respond_with(e, body)
}

/// The caller an OpenAI route serves, or its refusal in OpenAI's error shape (still drained by
/// the middleware: `before_body`).
pub(super) fn admitted(
    auth: Result<Authorized<Infer>, HttpError>,
) -> Result<Authorized<Infer>, Box<Response>> {
    auth.map_err(|refused| Box::new(openai_error(refused.0)))
}

pub async fn completions(
    auth: Result<Authorized<Infer>, HttpError>,
    state: S,
    request_id: Extension<RequestId>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let auth = match admitted(auth) {
        Ok(auth) => auth,
        Err(refused) => return *refused,
    };
    completion(state, &auth.caller, request_id, headers, body)
        .await
        .unwrap_or_else(openai_error)
}

pub async fn chat_completions(
    auth: Result<Authorized<Infer>, HttpError>,
    state: S,
    request_id: Extension<RequestId>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    let auth = match admitted(auth) {
        Ok(auth) => auth,
        Err(refused) => return *refused,
    };
    chat_completion(state, &auth.caller, request_id, headers, body)
        .await
        .unwrap_or_else(openai_error)
}

async fn completion(
    State(state): S,
    caller: &Caller,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let limit = state.config().limits.max_request_bytes;
    let body = read_limited(&headers, body, limit).await?;
    let id = format!("cmpl-{}", request_id.as_str());
    if let Some(record) = openai_llm::chat_model(&state, caller, &headers, &body)? {
        let name = record.name.clone();
        let respond = openai_llm::respond(
            state,
            caller,
            record,
            Kind::Completion,
            id,
            unix_now(),
            &body,
        );
        return for_model(&name, respond).await;
    }
    let req: CompletionRequest = parse(&body)?;
    let prompt = req.prompt()?;
    let limit = state.config().openai.max_tokens_limit;
    let sampling = req.common.sampling(DEFAULT_COMPLETION_TOKENS, limit)?;
    let meta = Meta {
        kind: Kind::Completion,
        id,
        created: unix_now(),
        model: req.common.model.clone(),
        chat_model: false,
    };
    let model = req.common.model.clone();
    for_model(
        &model,
        run(state, caller, meta, &req.common, &prompt, sampling),
    )
    .await
}

async fn chat_completion(
    State(state): S,
    caller: &Caller,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> ApiResult<Response> {
    let limit = state.config().limits.max_request_bytes;
    let body = read_limited(&headers, body, limit).await?;
    let id = format!("chatcmpl-{}", request_id.as_str());
    if let Some(record) = openai_llm::chat_model(&state, caller, &headers, &body)? {
        let name = record.name.clone();
        let respond = openai_llm::respond(state, caller, record, Kind::Chat, id, unix_now(), &body);
        return for_model(&name, respond).await;
    }
    let req: ChatRequest = parse(&body)?;
    let prompt = req.prompt()?;
    let limit = state.config().openai.max_tokens_limit;
    let sampling = req.common.sampling(DEFAULT_CHAT_TOKENS, limit)?;
    let meta = Meta {
        kind: Kind::Chat,
        id,
        created: unix_now(),
        model: req.common.model.clone(),
        chat_model: false,
    };
    let model = req.common.model.clone();
    for_model(
        &model,
        run(state, caller, meta, &req.common, &prompt, sampling),
    )
    .await
}

/// The text generator's answer, through the chat phases (token limits, the cache).
async fn run(
    state: Arc<AppState>,
    caller: &Caller,
    meta: Meta,
    common: &Common,
    prompt: &str,
    sampling: Sampling,
) -> ApiResult<Response> {
    let (vocab, record) = generator(&state, &common.model)?;
    let facts_of = |prompt_tokens: u32| ChatFacts {
        prompt,
        prompt_tokens: u64::from(prompt_tokens),
        max_completion_tokens: u64::from(sampling.max_tokens),
        parameters: vec![
            ("endpoint", meta.is_chat().to_string()),
            ("sampling", format!("{sampling:?}")),
        ],
        deterministic: sampling.temperature == 0.0 || sampling.seed.is_some(),
        stream: common.stream,
    };
    let generation = start_generation(&state, vocab, record.clone(), prompt, sampling.clone())?;
    let mut passage =
        chat_phases::admit(&state, caller, &record, &facts_of(generation.prompt_tokens)).await?;
    let fields = passage.limit_fields();
    let include_usage = common
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    if let Some(answer) = passage.before_generation() {
        let mut tracked = Tracked::new(&state, &generation);
        tracked.end(200);
        passage.after_generation(&answer);
        passage.finish(Outcome::Sent);
        let response = chat_phases::replay(&meta, &answer, common.stream, include_usage);
        return Ok(chat_phases::with_headers(response, fields, &record));
    }
    let response = if common.stream {
        super::completion_stream::response(state, meta, generation, include_usage, passage)
    } else {
        // On its own thread; dropping this future (client gone) stops the generation.
        infergate_service::own_thread::run(complete(state, meta, generation, passage)).await?
    };
    Ok(chat_phases::with_headers(response, fields, &record))
}

async fn complete(
    state: Arc<AppState>,
    meta: Meta,
    mut g: Generation,
    mut passage: ChatPassage,
) -> ApiResult<Response> {
    let mut tracked = Tracked::new(&state, &g);
    let mut pieces = Vec::new();
    let failed = |e: ApiError, tracked: &mut Tracked, passage: ChatPassage| {
        tracked.end(infergate_kserve::http_error::status(&e).as_u16());
        passage.finish(Outcome::Failed(e.kind));
        Err(e)
    };
    loop {
        match g.next().await {
            Ok(Some(Step { text: t, finish })) => {
                if finish.is_none() || !t.is_empty() {
                    tracked.token();
                }
                passage.set_generated(u64::from(g.completion_tokens));
                match passage.text(0, t) {
                    Ok(t) if !t.is_empty() => pieces.push(t),
                    Ok(_) => {}
                    Err(e) => return failed(e, &mut tracked, passage),
                }
                if let Some(finish) = finish {
                    match passage.end_of_text(0) {
                        Ok(t) if !t.is_empty() => pieces.push(t),
                        Ok(_) => {}
                        Err(e) => return failed(e, &mut tracked, passage),
                    }
                    tracked.end(200);
                    let answer = ChatAnswer {
                        choices: vec![ChatChoice {
                            pieces,
                            finish: finish.as_str(),
                            completion_tokens: u64::from(g.completion_tokens),
                        }],
                        prompt_tokens: u64::from(g.prompt_tokens),
                    };
                    passage.after_generation(&answer);
                    passage.finish(Outcome::Sent);
                    let whole = Generated {
                        text: answer.choices[0].text(),
                        logprobs: Vec::new(),
                        tool_calls: Vec::new(),
                        finish: finish.into(),
                    };
                    let usage = Usage::new(g.prompt_tokens, g.completion_tokens);
                    return Ok(meta.answer(vec![whole], usage));
                }
            }
            Ok(None) => {
                let e = ApiError::internal("generation ended without a finish reason");
                return failed(e, &mut tracked, passage);
            }
            Err(e) => return failed(e, &mut tracked, passage),
        }
    }
}
