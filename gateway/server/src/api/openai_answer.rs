//! The answers of `/v1/completions` and `/v1/chat/completions` as their shared types
//! (`infergate_api_types::openai`, which the dashboard reads them with), built in one place for
//! both kinds of model: the character model (`openai.rs`, `completion_stream.rs`) and chat
//! models (`openai_llm.rs`). Whole answers, stream chunks and a stream's error event.

use axum::response::{IntoResponse, Response};
use axum::Json;
use infergate_api_types::openai::{
    AssistantMessage, ChatChoice, ChatChunkChoice, ChatLogprobs, Completion, Delta, ErrorBody,
    ErrorCode, ErrorDetail, FunctionCall, Object, TextChoice, TextLogprobs, ToolCall,
    ToolCallDelta, TopLogprob, Usage,
};
use infergate_llm::{Finish, TokenLogprob};
use serde::Serialize;
use std::borrow::Cow;

/// Which endpoint a request came to: what differs between their answers.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Completion,
    Chat,
}

/// What every answer and chunk of one request shares.
pub(super) struct Meta {
    pub(super) kind: Kind,
    pub(super) id: String,
    /// Unix seconds.
    pub(super) created: u64,
    pub(super) model: String,
    /// A chat model's answers carry `system_fingerprint: null` (as vLLM's do); the character
    /// model's leave it out.
    pub(super) chat_model: bool,
}

/// Why a choice ended (OpenAI's `finish_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FinishReason {
    /// The model ended its answer or a stop sequence appeared.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The answer is tool calls.
    ToolCalls,
    /// A guardrail refused the rest of a streamed answer.
    ContentFilter,
}

impl FinishReason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

impl From<Finish> for FinishReason {
    fn from(f: Finish) -> FinishReason {
        match f {
            Finish::Stop => FinishReason::Stop,
            Finish::Length => FinishReason::Length,
        }
    }
}

/// One choice's whole result.
pub(super) struct Generated {
    pub(super) text: String,
    /// One per generated token when log probabilities were asked for; empty otherwise.
    pub(super) logprobs: Vec<TokenLogprob>,
    /// Tool calls the model made (chat with `tools`); the text is then what it wrote besides.
    pub(super) tool_calls: Vec<infergate_llm::ToolCall>,
    pub(super) finish: FinishReason,
}

impl Meta {
    pub(super) fn is_chat(&self) -> bool {
        self.kind == Kind::Chat
    }

    fn object(&self, chunk: bool) -> Object {
        match (self.kind, chunk) {
            (Kind::Completion, _) => Object::TextCompletion,
            (Kind::Chat, false) => Object::ChatCompletion,
            (Kind::Chat, true) => Object::ChatCompletionChunk,
        }
    }

    /// An answer (`chunk` false) or a chunk with these choices and no usage.
    fn envelope<C>(&self, chunk: bool, choices: Vec<C>) -> Completion<'_, C> {
        Completion {
            id: Cow::Borrowed(&self.id),
            object: self.object(chunk),
            created: self.created,
            model: Cow::Borrowed(&self.model),
            system_fingerprint: self.chat_model.then_some(None),
            choices,
            usage: None,
        }
    }

    /// The whole answer: the choices in order, and the usage.
    pub(super) fn answer(&self, choices: Vec<Generated>, usage: Usage) -> Response {
        let choices = choices.into_iter().zip(0..);
        match self.kind {
            Kind::Completion => {
                let choices = choices
                    .map(|(c, index)| TextChoice {
                        index,
                        logprobs: asked(c.logprobs).map(|l| text_logprobs(l, 0)),
                        text: c.text.into(),
                        finish_reason: Some(c.finish.as_str().into()),
                    })
                    .collect();
                self.whole(choices, usage)
            }
            Kind::Chat => {
                let choices = choices
                    .map(|(c, index)| ChatChoice {
                        index,
                        message: AssistantMessage {
                            role: "assistant".into(),
                            // Only calls: no content, as OpenAI answers.
                            content: (!c.text.is_empty() || c.tool_calls.is_empty())
                                .then_some(c.text.into()),
                            tool_calls: c.tool_calls.into_iter().map(tool_call).collect(),
                        },
                        logprobs: asked(c.logprobs).map(chat_logprobs),
                        finish_reason: Some(c.finish.as_str().into()),
                    })
                    .collect();
                self.whole(choices, usage)
            }
        }
    }

    fn whole<C: Serialize>(&self, choices: Vec<C>, usage: Usage) -> Response {
        Json(Completion {
            usage: Some(usage),
            ..self.envelope(false, choices)
        })
        .into_response()
    }

    /// A chunk with this one choice.
    fn chunk_of<C: Serialize>(&self, choice: C) -> String {
        json_text(&self.envelope(true, vec![choice]))
    }

    /// The first chunk of a chat choice: its role, no text yet. Completions have none.
    pub(super) fn role_chunk(&self, index: u32) -> String {
        let delta = Delta {
            role: Some("assistant".into()),
            content: Some("".into()),
            tool_calls: None,
        };
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs: None,
            finish_reason: None,
        };
        self.chunk_of(choice)
    }

    /// A chunk of one choice: the text it adds (may be empty), the log probability of the
    /// token that gave it with where that text starts in the choice's text (bytes), and, in the
    /// choice's last chunk, why it finished. Called once per token, so it borrows its strings.
    pub(super) fn chunk(
        &self,
        index: u32,
        text: &str,
        logprob: Option<(TokenLogprob, usize)>,
        finish: Option<FinishReason>,
    ) -> String {
        let finish_reason = finish.map(|f| Cow::Borrowed(f.as_str()));
        match self.kind {
            Kind::Completion => {
                let choice = TextChoice {
                    index,
                    text: text.into(),
                    logprobs: logprob.map(|(lp, offset)| text_logprobs(vec![lp], offset)),
                    finish_reason,
                };
                self.chunk_of(choice)
            }
            Kind::Chat => {
                let delta = Delta {
                    role: None,
                    content: (!text.is_empty()).then_some(text.into()),
                    tool_calls: None,
                };
                let choice = ChatChunkChoice {
                    index,
                    delta,
                    logprobs: logprob.map(|(lp, _)| chat_logprobs(vec![lp])),
                    finish_reason,
                };
                self.chunk_of(choice)
            }
        }
    }

    /// A chat chunk of one choice adding parts of its tool calls.
    pub(super) fn tool_chunk(&self, index: u32, calls: Vec<ToolCallDelta<'_>>) -> String {
        let choice = ChatChunkChoice {
            index,
            delta: Delta {
                tool_calls: Some(calls),
                ..Delta::default()
            },
            logprobs: None,
            finish_reason: None,
        };
        self.chunk_of(choice)
    }

    /// The last chunk when `stream_options.include_usage` is set: no choices, the counts.
    pub(super) fn usage_chunk(&self, usage: Usage) -> String {
        // No choices: their type does not show.
        let none: Vec<TextChoice> = Vec::new();
        json_text(&Completion {
            usage: Some(usage),
            ..self.envelope(true, none)
        })
    }
}

/// The event that ends a stream whose generation failed after the stream started: OpenAI's
/// error with the failure's HTTP status as its code.
pub(super) fn stream_error(message: String, status: u16) -> String {
    json_text(&ErrorBody {
        error: ErrorDetail {
            message,
            kind: "server_error".into(),
            param: None,
            code: Some(Some(ErrorCode::Status(status))),
        },
    })
}

/// A chunk or event as JSON text. The OpenAI types hold strings, numbers and string-keyed maps
/// only, which always serialize; were one not to, the client reads why in its place.
fn json_text(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|e| {
        let failed = ErrorBody {
            error: ErrorDetail {
                message: format!("encoding a chunk: {e}"),
                kind: "server_error".into(),
                param: None,
                code: None,
            },
        };
        // Strings only: this one serializes.
        serde_json::to_string(&failed).unwrap_or_default()
    })
}

fn tool_call(c: infergate_llm::ToolCall) -> ToolCall {
    ToolCall {
        id: c.id,
        kind: "function".into(),
        function: FunctionCall {
            name: c.name,
            arguments: c.arguments,
        },
    }
}

/// A choice's log probabilities if they were asked for (`null` in the answer otherwise).
fn asked(logprobs: Vec<TokenLogprob>) -> Option<Vec<TokenLogprob>> {
    (!logprobs.is_empty()).then_some(logprobs)
}

/// Log probabilities in the chat endpoint's form.
fn chat_logprobs(tokens: Vec<TokenLogprob>) -> ChatLogprobs {
    let content = tokens
        .into_iter()
        .map(|t| infergate_api_types::openai::TokenLogprob {
            token: t.token,
            logprob: f64::from(t.logprob),
            bytes: t.bytes,
            top_logprobs: t
                .top
                .into_iter()
                .map(|a| TopLogprob {
                    token: a.token,
                    logprob: f64::from(a.logprob),
                    bytes: a.bytes,
                })
                .collect(),
        })
        .collect();
    ChatLogprobs { content }
}

/// Log probabilities in the completions endpoint's form; `offset`: the bytes of the choice's
/// text before these tokens.
fn text_logprobs(tokens: Vec<TokenLogprob>, offset: usize) -> TextLogprobs {
    let mut logprobs = TextLogprobs::default();
    let mut at = offset;
    for t in tokens {
        logprobs.text_offset.push(at);
        at += t.token.len();
        logprobs.token_logprobs.push(f64::from(t.logprob));
        let top = t.top.into_iter().map(|a| (a.token, f64::from(a.logprob)));
        logprobs.top_logprobs.push(top.collect());
        logprobs.tokens.push(t.token);
    }
    logprobs
}
