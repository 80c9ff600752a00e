//! `/v1/completions` and `/v1/chat/completions` on a chat model (a registered GGUF version, run
//! by `infergate-llm`): the parameters vLLM and TGI accept (`max_tokens` /
//! `max_completion_tokens`, `temperature`, `top_p`, `top_k`, `min_p`, `seed`, `stop`,
//! `presence_penalty`, `frequency_penalty`, `logprobs` + `top_logprobs`, `n`, `response_format`
//! with `json_object` / `json_schema`, `stream` + `stream_options.include_usage`), usage in the
//! model's tokens, `finish_reason` `stop` / `length` / `tool_calls`.
//!
//! Chat requests may offer `tools` (`tool_choice` `auto`, `none`, `required` or a named
//! function; `parallel_tool_calls`) and carry assistant `tool_calls` and `tool` results in their
//! messages (`openai_tools.rs`). A forced choice samples through a grammar built from the
//! tools' parameter schemas; `auto` reads the calls from the model's answer.
//!
//! Speculative decoding drafts tokens from n-grams of the prompt and answer and from the
//! request's `prediction` (OpenAI's Predicted Outputs), as the model's `[llm.speculation]`
//! (or `[llm.models.NAME.speculation]`) says, a request's own `speculation` object (`enabled`,
//! `max_draft`) overriding it; usage reports the drafted tokens accepted and rejected in
//! `completion_tokens_details`.
//!
//! Chat guardrails attached to the model (`openai_guardrails.rs`) read the messages (or the
//! prompt) before the template renders them, and the answer before anything else does: whole,
//! or piece by piece when streamed; a refusal is a 400 with the code `content_filter`, or a
//! stream's `content_filter` finish.
//!
//! Each of the `n` choices is its own sequence in the model's continuous batch; the prompt is
//! computed once and its KV copied to all. `priority` (vLLM's: lower first, default 0) orders
//! admission to the batch. Streaming (`openai_llm_stream.rs`) sends OpenAI's chunks as
//! Server-Sent Events.

use super::chat_phases::{self, ChatFacts};
use super::openai_answer::{FinishReason, Generated, Kind, Meta};
use super::openai_guardrails;
use super::openai_llm_usage::{merged, usage, Tracked};
use super::openai_tools;
use super::ws_frame::encoded;
use axum::response::Response;
use futures_util::stream::StreamExt;
use infergate_api_types::stream::{GeneratedToken, GenerationDone};
use infergate_llm::{
    Constraint, Done, Event, Generation, LlmModel, SamplingParams, SpeculationParams, TokenLogprob,
    Tools,
};
use infergate_service::caller::Caller;
use infergate_service::chat_models::api_error;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::guardrails::Guards;
use infergate_service::openai_request::{self, Stop, StreamOptions};
use infergate_service::phases::{ChatAnswer, ChatChoice, ChatPassage, Outcome};
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use serde::Deserialize;
use serde_json::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// OpenAI's default for `/v1/completions`; chat completions default to the rest of the context
/// (as vLLM does), bounded by `[openai] max_tokens_limit`.
const DEFAULT_COMPLETION_TOKENS: u32 = 16;
const MAX_CHOICES: u32 = 16;
/// Completions' `logprobs` is at most 5 (OpenAI's limit).
const MAX_COMPLETION_LOGPROBS: u32 = 5;

#[derive(Debug, Deserialize)]
struct JsonSchemaFormat {
    #[serde(default)]
    schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema { json_schema: JsonSchemaFormat },
}

/// infergate's `speculation` field: speculative decoding for this request.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpeculationField {
    enabled: Option<bool>,
    max_draft: Option<u32>,
}

/// Both endpoints' requests; unknown fields are ignored as OpenAI clients send many.
#[derive(Debug, Deserialize)]
struct Request {
    #[serde(default)]
    messages: Option<Vec<Value>>,
    #[serde(default)]
    prompt: Option<Value>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<i32>,
    min_p: Option<f32>,
    seed: Option<u64>,
    stop: Option<Stop>,
    n: Option<u32>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    presence_penalty: Option<f32>,
    frequency_penalty: Option<f32>,
    logprobs: Option<Value>,
    top_logprobs: Option<u32>,
    response_format: Option<ResponseFormat>,
    echo: Option<bool>,
    best_of: Option<u32>,
    logit_bias: Option<serde_json::Map<String, Value>>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    parallel_tool_calls: Option<bool>,
    prediction: Option<Value>,
    speculation: Option<SpeculationField>,
    priority: Option<i32>,
}

fn bad(field: &str, rule: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("{field}: {rule}"))
}

/// The registered GGUF version a request names (its `model`, or `[openai] completions_model`
/// when it names none), the version its traffic split chooses for `caller`; None when it names
/// something else (the character LSTM).
pub(super) fn chat_model(
    state: &AppState,
    caller: &Caller,
    headers: &http::HeaderMap,
    body: &[u8],
) -> ApiResult<Option<Arc<ModelRecord>>> {
    #[derive(Deserialize)]
    struct ModelOnly {
        model: Option<Value>,
    }
    let named: ModelOnly = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))?;
    let name = match named.model {
        None | Some(Value::Null) => state.config().openai.completions_model.clone(),
        Some(Value::String(s)) => s,
        Some(_) => return Err(bad("model", "must be a string")),
    };
    match state.catalog().resolve(&name, None) {
        Ok(record) if infergate_service::chat_models::is_gguf(&record) => {
            let (record, _) =
                infergate_service::traffic::split(state, Some(caller), record, headers);
            Ok(Some(record).filter(|r| infergate_service::chat_models::is_gguf(r)))
        }
        _ => Ok(None),
    }
}

/// One request, checked: the prompt text or tokens, the parameters of each choice.
struct Plan {
    prompt: Vec<i32>,
    /// The prompt as the model continues it (after the chat template), for the cache's key; a
    /// completion's token ids as text, marked apart from any text.
    rendered: String,
    params: SamplingParams,
    grammar: Option<String>,
    /// The tools a chat request offers (or whose calls it forces).
    tools: Option<Tools>,
    speculation: SpeculationParams,
    n: u32,
    stream: bool,
    include_usage: bool,
}

impl Request {
    /// The guardrails of `caller`'s requests to `model` (None when there are none), the
    /// messages or the prompt already checked and rewritten by them.
    async fn guard(
        &mut self,
        state: &AppState,
        caller: &Caller,
        model: &str,
        kind: Kind,
    ) -> ApiResult<Option<Guards>> {
        let (messages, prompt) = match kind {
            Kind::Chat => (self.messages.as_deref_mut(), None),
            Kind::Completion => (None, self.prompt.as_mut()),
        };
        openai_guardrails::check_request(state, caller, model, messages, prompt).await
    }

    fn plan(self, kind: Kind, model: &LlmModel, limit: u32) -> ApiResult<Plan> {
        if self.echo == Some(true) {
            return Err(bad("echo", "is not supported"));
        }
        if self.best_of.is_some_and(|b| b > 1) {
            return Err(bad("best_of", "only 1 is supported"));
        }
        if self.logit_bias.as_ref().is_some_and(|b| !b.is_empty()) {
            return Err(bad("logit_bias", "is not supported"));
        }
        let n = self.n.unwrap_or(1);
        if !(1..=MAX_CHOICES).contains(&n) {
            return Err(bad("n", format!("must be between 1 and {MAX_CHOICES}")));
        }
        let tools = match kind {
            Kind::Chat => openai_tools::tools(
                self.tools.as_ref(),
                self.tool_choice.as_ref(),
                self.parallel_tool_calls,
            )?,
            Kind::Completion if self.tools.is_some() || self.tool_choice.is_some() => {
                return Err(bad("tools", "are for /v1/chat/completions"))
            }
            Kind::Completion => None,
        };
        let (prompt, rendered) = match kind {
            Kind::Chat => {
                let messages = self
                    .messages
                    .as_deref()
                    .ok_or_else(|| bad("messages", "is required"))?;
                let messages = openai_tools::messages(messages)?;
                let text = model
                    .render_chat_with_tools(&messages, tools.as_ref())
                    .map_err(api_error)?;
                (model.tokenize(&text), text)
            }
            Kind::Completion => {
                let tokens = prompt_tokens(model, self.prompt.as_ref())?;
                let rendered = match self.prompt.as_ref() {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(items)) if items.len() == 1 && items[0].is_string() => {
                        items[0].as_str().unwrap_or_default().to_owned()
                    }
                    _ => format!("\u{0}token ids: {tokens:?}"),
                };
                (tokens, rendered)
            }
        };
        let speculation = SpeculationParams {
            enabled: self.speculation.as_ref().and_then(|s| s.enabled),
            max_draft: self.speculation.as_ref().and_then(|s| s.max_draft),
            prediction: openai_request::prediction(self.prediction.as_ref())?,
        };
        let logprobs = match (kind, &self.logprobs) {
            (_, None | Some(Value::Null) | Some(Value::Bool(false))) => None,
            (Kind::Chat, Some(Value::Bool(true))) => Some(self.top_logprobs.unwrap_or(0)),
            (Kind::Completion, Some(Value::Number(k))) => {
                let k = k
                    .as_u64()
                    .filter(|&k| k <= u64::from(MAX_COMPLETION_LOGPROBS))
                    .ok_or_else(|| {
                        bad(
                            "logprobs",
                            format!("must be between 0 and {MAX_COMPLETION_LOGPROBS}"),
                        )
                    })?;
                Some(k as u32)
            }
            (Kind::Chat, _) => return Err(bad("logprobs", "must be a boolean")),
            (Kind::Completion, _) => return Err(bad("logprobs", "must be an integer")),
        };
        if logprobs.is_none() && self.top_logprobs.is_some_and(|k| k > 0) {
            return Err(bad("top_logprobs", "needs logprobs: true"));
        }
        let requested = self.max_completion_tokens.or(self.max_tokens);
        let field = if self.max_completion_tokens.is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        if let Some(max) = requested {
            if max == 0 || max > limit {
                return Err(bad(
                    field,
                    format!("must be between 1 and {limit} on this server"),
                ));
            }
        }
        let default = match kind {
            Kind::Completion => DEFAULT_COMPLETION_TOKENS,
            Kind::Chat => limit,
        };
        let max_tokens = model
            .completion_budget(prompt.len() as u32, requested, default)
            .map_err(api_error)?;
        let constraint = match self.response_format {
            None | Some(ResponseFormat::Text) => Constraint::None,
            Some(ResponseFormat::JsonObject) => Constraint::JsonObject,
            Some(ResponseFormat::JsonSchema { json_schema }) => match json_schema.schema {
                Some(schema @ Value::Object(_)) => Constraint::JsonSchema(schema),
                _ => {
                    return Err(bad(
                        "response_format.json_schema.schema",
                        "a JSON Schema object is required",
                    ))
                }
            },
        };
        let params = SamplingParams {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(0),
            min_p: self.min_p.unwrap_or(0.0),
            seed: self.seed,
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            max_tokens,
            stop: match self.stop {
                None => vec![],
                Some(Stop::One(s)) => vec![s],
                Some(Stop::Many(v)) => v,
            },
            logprobs,
            constraint,
            priority: self.priority.unwrap_or(0),
        };
        params.validate().map_err(api_error)?;
        let grammar = match tools.as_ref().filter(|t| t.forced()) {
            Some(_) if !matches!(params.constraint, Constraint::None) => {
                return Err(bad(
                    "response_format",
                    "cannot be combined with a tool_choice that forces a call",
                ))
            }
            Some(forced) => forced.grammar().map_err(api_error)?,
            None => params.grammar().map_err(api_error)?,
        };
        Ok(Plan {
            prompt,
            rendered,
            params,
            grammar,
            tools,
            speculation,
            n,
            stream: self.stream,
            include_usage: self.stream_options.is_some_and(|o| o.include_usage),
        })
    }
}

/// A completion's prompt: a string, or a list of token ids (one prompt per request).
fn prompt_tokens(model: &LlmModel, prompt: Option<&Value>) -> ApiResult<Vec<i32>> {
    let one_prompt = "one prompt per request: a string or a list of token ids";
    match prompt {
        Some(Value::String(s)) => Ok(model.tokenize(s)),
        Some(Value::Array(items)) => match items.as_slice() {
            [Value::String(s)] => Ok(model.tokenize(s)),
            [Value::Array(tokens)] => token_ids(model, tokens),
            tokens if tokens.iter().all(Value::is_number) => token_ids(model, tokens),
            _ => Err(bad("prompt", one_prompt)),
        },
        None => Err(bad("prompt", "is required")),
        Some(_) => Err(bad("prompt", one_prompt)),
    }
}

fn token_ids(model: &LlmModel, tokens: &[Value]) -> ApiResult<Vec<i32>> {
    let vocab = model.vocab_size();
    tokens
        .iter()
        .map(|t| {
            t.as_i64()
                .filter(|&t| (0..i64::from(vocab)).contains(&t))
                .map(|t| t as i32)
                .ok_or_else(|| {
                    bad(
                        "prompt",
                        format!("token ids must be between 0 and {}", vocab - 1),
                    )
                })
        })
        .collect()
}

impl Plan {
    /// What the chat phases see of the request: its rendered prompt, the most tokens its
    /// answer may take, the parameters a cached answer depends on, and whether it is
    /// deterministic (temperature 0 or a seed, one choice, no log probabilities: a cached
    /// answer keeps only text).
    fn facts(&self, kind: Kind) -> ChatFacts<'_> {
        let p = &self.params;
        ChatFacts {
            prompt: &self.rendered,
            prompt_tokens: self.prompt.len() as u64,
            max_completion_tokens: u64::from(p.max_tokens) * u64::from(self.n),
            parameters: vec![
                ("endpoint", (kind == Kind::Chat).to_string()),
                ("sampling", format!("{p:?}")),
                ("grammar", format!("{:?}", self.grammar)),
                ("n", self.n.to_string()),
            ],
            // A cached answer replays text: an answer read for tool calls is not kept.
            deterministic: (p.temperature == 0.0 || p.seed.is_some())
                && self.n == 1
                && p.logprobs.is_none()
                && self.tools.is_none(),
            stream: self.stream,
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn respond(
    state: Arc<AppState>,
    caller: &Caller,
    record: Arc<ModelRecord>,
    kind: Kind,
    id: String,
    created: u64,
    body: &[u8],
) -> ApiResult<Response> {
    let started = Instant::now();
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut request: Request = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        ApiError::bad_request(format!("invalid request: {path}: {}", e.into_inner()))
    })?;
    let guards = request.guard(&state, caller, &record.name, kind).await?;
    let model = state
        .llm()
        .get(&record, state.model_file(&record, false))
        .await?;
    let plan = request.plan(kind, &model, state.config().openai.max_tokens_limit)?;
    let mut facts = plan.facts(kind);
    if let Some(guards) = &guards {
        facts.parameters.push(("guardrails", guards.signature()));
    }
    let mut passage = chat_phases::admit(&state, caller, &record, &facts).await?;
    if let Some(guards) = &guards {
        passage.guard_first(guards.hooks(plan.stream));
    }
    let fields = passage.limit_fields();
    let meta = Meta {
        kind,
        id,
        created,
        model: record.name.clone(),
        chat_model: true,
    };
    if let Some(answer) = passage.before_generation() {
        let mut tracked = Tracked::new(&state, &record, answer.choices.len(), started);
        tracked.end(200);
        passage.after_generation(&answer);
        passage.finish(Outcome::Sent);
        let response = chat_phases::replay(&meta, &answer, plan.stream, plan.include_usage);
        return Ok(chat_phases::with_headers(response, fields, &record));
    }
    let generations = model
        .generate_n_with(
            &plan.prompt,
            &plan.params,
            plan.grammar.as_deref(),
            plan.n as usize,
            &plan.speculation,
        )
        .map_err(api_error)?;
    let mut tracked = Tracked::new(&state, &record, generations.len(), started);
    let prompt_tokens = plan.prompt.len() as u32;
    tracked.trace(prompt_tokens);
    let response = if plan.stream {
        super::openai_llm_stream::response(
            meta,
            generations,
            plan.tools.as_ref(),
            tracked,
            prompt_tokens,
            plan.include_usage,
            passage,
        )
    } else {
        complete(
            meta,
            generations,
            plan.tools.as_ref(),
            tracked,
            prompt_tokens,
            passage,
        )
        .await?
    };
    Ok(chat_phases::with_headers(response, fields, &record))
}

#[derive(Default)]
struct Choice {
    text: String,
    /// The text as sent, piece by piece (what a cache keeps).
    pieces: Vec<String>,
    logprobs: Vec<TokenLogprob>,
    done: Option<Done>,
}

async fn complete(
    meta: Meta,
    generations: Vec<Generation>,
    tools: Option<&Tools>,
    mut tracked: Tracked,
    prompt_tokens: u32,
    mut passage: ChatPassage,
) -> ApiResult<Response> {
    let mut choices: Vec<Choice> = (0..generations.len()).map(|_| Choice::default()).collect();
    let mut events = merged(generations);
    while let Some((i, event)) = events.next().await {
        match event {
            Event::Text { text, logprob } => {
                tracked.token(i);
                passage.generated(1);
                let text = match passage.text(i, text) {
                    Ok(text) => text,
                    Err(e) => {
                        tracked.end(infergate_kserve::http_error::status(&e).as_u16());
                        passage.finish(Outcome::Failed(e.kind));
                        return Err(e);
                    }
                };
                choices[i].text.push_str(&text);
                if !text.is_empty() {
                    choices[i].pieces.push(text);
                }
                choices[i].logprobs.extend(logprob);
            }
            Event::Done(done) => {
                let tail = passage.end_of_text(i);
                match tail {
                    Ok(tail) if !tail.is_empty() => {
                        choices[i].text.push_str(&tail);
                        choices[i].pieces.push(tail);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracked.end(infergate_kserve::http_error::status(&e).as_u16());
                        passage.finish(Outcome::Failed(e.kind));
                        return Err(e);
                    }
                }
                tracked.done(&done);
                choices[i].done = Some(done);
            }
            Event::Error(message) => {
                tracked.end(500);
                let e = ApiError::internal(message);
                passage.finish(Outcome::Failed(e.kind));
                return Err(e);
            }
        }
    }
    let done: Vec<Option<Done>> = choices.iter().map(|c| c.done).collect();
    passage.set_generated(
        done.iter()
            .flatten()
            .map(|d| u64::from(d.completion_tokens))
            .sum(),
    );
    let answer = ChatAnswer {
        choices: choices
            .iter()
            .filter_map(|c| {
                c.done.map(|d| ChatChoice {
                    pieces: c.pieces.clone(),
                    finish: d.finish.as_str(),
                    completion_tokens: u64::from(d.completion_tokens),
                })
            })
            .collect(),
        prompt_tokens: u64::from(prompt_tokens),
    };
    let Some(finished) = choices
        .into_iter()
        .map(|c| {
            c.done.map(|d| {
                let (text, tool_calls) = match tools.filter(|t| t.offered()) {
                    Some(tools) => {
                        let parsed = tools.parse(&c.text);
                        (parsed.content, parsed.calls)
                    }
                    None => (c.text, Vec::new()),
                };
                let finish = match d.finish.into() {
                    FinishReason::Stop if !tool_calls.is_empty() => FinishReason::ToolCalls,
                    other => other,
                };
                Generated {
                    text,
                    logprobs: c.logprobs,
                    tool_calls,
                    finish,
                }
            })
        })
        .collect::<Option<Vec<_>>>()
    else {
        tracked.end(500);
        let e = ApiError::internal("a generation ended without finishing");
        passage.finish(Outcome::Failed(e.kind));
        return Err(e);
    };
    tracked.end(200);
    passage.after_generation(&answer);
    passage.finish(Outcome::Sent);
    Ok(meta.answer(finished, usage(prompt_tokens, &done)))
}

/// One generation (one choice, no logprobs) on a chat model from an OpenAI-style document,
/// admitted by the chat phases (token limits; never answered from the response cache):
/// `prompt` is continued as is, `messages` go through the chat template, the other fields are
/// the OpenAI endpoints'. The WebSocket and the KServe gRPC stream (decoupled) use it.
pub(crate) async fn start(
    state: &AppState,
    caller: &Caller,
    record: &Arc<ModelRecord>,
    generate: Value,
) -> ApiResult<(Generation, ChatPassage)> {
    let mut request: Request = serde_json::from_value(generate).map_err(|e| bad("generate", e))?;
    let kind = if request.messages.is_some() {
        Kind::Chat
    } else {
        Kind::Completion
    };
    let guards = request.guard(state, caller, &record.name, kind).await?;
    let model = state
        .llm()
        .get(record, state.model_file(record, false))
        .await?;
    let plan = request.plan(kind, &model, state.config().openai.max_tokens_limit)?;
    if plan.n != 1 || plan.params.logprobs.is_some() || plan.tools.is_some() {
        return Err(bad(
            "generate",
            "n, logprobs and tools are not supported here",
        ));
    }
    let facts = ChatFacts {
        deterministic: false,
        ..plan.facts(kind)
    };
    let mut passage = chat_phases::admit(state, caller, record, &facts).await?;
    if let Some(guards) = &guards {
        passage.guard_first(guards.hooks(true));
    }
    let generation = model
        .generate_n_with(
            &plan.prompt,
            &plan.params,
            plan.grammar.as_deref(),
            1,
            &plan.speculation,
        )
        .map_err(api_error)?
        .remove(0);
    Ok((generation, passage))
}

/// `generate` over WebSocket (`/v2/stream`) on a chat model, in the frames the character model
/// uses: `{"id", "token"}` per piece of text, then `{"id", "done": true, "finish_reason",
/// "text", "usage"}`. `prompt` is continued as is; `messages` instead goes through the chat
/// template. The other fields are the OpenAI endpoints' (one choice, no logprobs).
pub(crate) async fn websocket_generate(
    state: &Arc<AppState>,
    caller: &Caller,
    record: Arc<ModelRecord>,
    generate: Value,
    id: &Value,
    out: &tokio::sync::mpsc::Sender<axum::extract::ws::Message>,
) -> ApiResult<()> {
    let (mut generation, mut passage) = start(state, caller, &record, generate).await?;
    let tokens = state.metrics().token_counter(&record.name, "websocket");
    let _in_progress = state.metrics().generation_started();
    let mut text = String::new();
    while let Some(event) = generation.events.recv().await {
        match event {
            Event::Text { text: piece, .. } => {
                tokens.inc();
                passage.generated(1);
                let piece = passage.text(0, piece)?;
                if piece.is_empty() {
                    continue;
                }
                text.push_str(&piece);
                let token = GeneratedToken {
                    id: Cow::Borrowed(id),
                    token: piece.into(),
                };
                if out.send(encoded(&token)?).await.is_err() {
                    return Ok(());
                }
            }
            Event::Done(done) => {
                let tail = passage.end_of_text(0)?;
                if !tail.is_empty() {
                    text.push_str(&tail);
                    let token = GeneratedToken {
                        id: Cow::Borrowed(id),
                        token: tail.into(),
                    };
                    let _ = out.send(encoded(&token)?).await;
                }
                passage.set_generated(u64::from(done.completion_tokens));
                passage.finish(Outcome::Sent);
                let last = GenerationDone {
                    id: Cow::Borrowed(id),
                    done: true,
                    finish_reason: done.finish.as_str().into(),
                    text: text.into(),
                    usage: usage(generation.prompt_tokens, &[Some(done)]),
                };
                let _ = out.send(encoded(&last)?).await;
                return Ok(());
            }
            Event::Error(message) => {
                let e = ApiError::internal(message);
                passage.finish(Outcome::Failed(e.kind));
                return Err(e);
            }
        }
    }
    Err(ApiError::internal("the generation ended without finishing"))
}
