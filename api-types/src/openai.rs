//! The OpenAI-compatible routes' answers: `GET /v1/models`, `POST /v1/completions` and
//! `POST /v1/chat/completions` (whole, and the chunks of their streams), `POST /v1/embeddings`,
//! and the error body all of them answer with.
//!
//! The completion types borrow their strings ([`Cow`]): the gateway writes a chunk per generated
//! token from the request's id and model and the token's text without copying them, and the
//! dashboard reads them owned. Log probabilities are `f64` as JSON numbers are, though the model
//! computes them in `f32`.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// OpenAI's `object` field: what a JSON object of an answer is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Object {
    List,
    Model,
    Embedding,
    /// A `/v1/completions` answer or chunk.
    TextCompletion,
    #[serde(rename = "chat.completion")]
    ChatCompletion,
    #[serde(rename = "chat.completion.chunk")]
    ChatCompletionChunk,
}

/// `Object`'s own schema for the fields named `object`: utoipa takes a type named `Object` for
/// any JSON object.
#[cfg(feature = "openapi")]
fn object_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    <Object as utoipa::PartialSchema>::schema()
}

/// `GET /v1/models`: the models the OpenAI routes serve, the default completions model first.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelCardList {
    /// `list`.
    #[cfg_attr(feature = "openapi", schema(schema_with = object_schema))]
    pub object: Object,
    pub data: Vec<ModelCard>,
}

/// One model of `GET /v1/models`: a chat model, the character model or an embedding pipeline.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelCard {
    pub id: String,
    /// `model`.
    #[cfg_attr(feature = "openapi", schema(schema_with = object_schema))]
    pub object: Object,
    /// Unix seconds: when its first version was registered.
    pub created: i64,
    pub owned_by: String,
    /// A chat model's context per sequence, in tokens (vLLM's field); absent for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u32>,
}

/// The envelope of every completion answer: a whole answer of `/v1/completions`
/// ([`TextCompletion`]) or `/v1/chat/completions` ([`ChatCompletion`]), or one chunk of their
/// streams ([`TextCompletion`], [`ChatCompletionChunk`]). The last chunk of a stream asked for
/// usage (`stream_options.include_usage`) has no choices and the usage.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Completion<'a, C> {
    pub id: Cow<'a, str>,
    #[cfg_attr(feature = "openapi", schema(schema_with = object_schema))]
    pub object: Object,
    /// Unix seconds.
    pub created: u64,
    pub model: Cow<'a, str>,
    /// `null` from a chat model; absent from the character model.
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub system_fingerprint: Option<Option<String>>,
    pub choices: Vec<C>,
    /// In a whole answer and the usage chunk; absent from the other chunks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// What a `data:` event of a completion stream carries (but the last, `[DONE]`): a chunk, or
/// the error that ends a stream whose generation failed after it started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum StreamEvent<'a, C> {
    Chunk(Completion<'a, C>),
    Error(ErrorBody),
}

/// A `/v1/completions` answer, or one chunk of its stream.
pub type TextCompletion<'a> = Completion<'a, TextChoice<'a>>;
/// A whole `/v1/chat/completions` answer.
pub type ChatCompletion<'a> = Completion<'a, ChatChoice<'a>>;
/// One chunk of a `/v1/chat/completions` stream.
pub type ChatCompletionChunk<'a> = Completion<'a, ChatChunkChoice<'a>>;

/// A `/v1/completions` choice, whole or one chunk's part of it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextChoice<'a> {
    pub index: u32,
    /// In a chunk: the text it adds (empty in the chunk that only finishes the choice).
    pub text: Cow<'a, str>,
    /// `null` unless `logprobs` was asked for.
    pub logprobs: Option<TextLogprobs>,
    /// stop or length; `null` in a chunk that does not finish the choice.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// A whole `/v1/chat/completions` choice.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatChoice<'a> {
    pub index: u32,
    pub message: AssistantMessage<'a>,
    /// `null` unless `logprobs` was asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// stop or length.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// The message a chat choice answers.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AssistantMessage<'a> {
    /// `assistant`.
    pub role: Cow<'a, str>,
    /// `null` when the answer is only tool calls.
    pub content: Option<Cow<'a, str>>,
    /// The functions the model called (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A call the model made of a function the request offered (`tools`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCall {
    /// `call_` and 24 letters and digits; a `tool` message answering it names it.
    pub id: String,
    /// `function`.
    #[serde(rename = "type")]
    pub kind: String,
    pub function: FunctionCall,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionCall {
    pub name: String,
    /// The arguments object as JSON text, as the model wrote it.
    pub arguments: String,
}

/// A chunk's part of a tool call: the first of a call has its `id`, `type` and
/// `function.name` (arguments empty), the next ones more of `function.arguments`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallDelta<'a> {
    /// Which call of the choice (0, 1, ...).
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    /// `function`, in a call's first chunk.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Cow<'a, str>>,
    pub function: FunctionDelta<'a>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FunctionDelta<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Cow<'a, str>>,
}

/// A chunk's part of a `/v1/chat/completions` choice.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    /// `null` unless `logprobs` was asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// stop or length; `null` in a chunk that does not finish the choice.
    pub finish_reason: Option<Cow<'a, str>>,
}

/// What a chunk adds to a chat choice: the role in a choice's first chunk, then text or parts
/// of tool calls; `{}` in a chunk that adds nothing (the one that finishes the choice).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delta<'a> {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

/// A chat choice's log probabilities: one entry per generated token.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatLogprobs {
    pub content: Vec<TokenLogprob>,
}

/// One generated token of a chat choice, with the likeliest tokens at its place
/// (`top_logprobs` of them, likeliest first).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    /// The token's bytes: a token can hold part of a UTF-8 character, which `token` cannot show.
    pub bytes: Vec<u8>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// One of the likeliest tokens at a place of a chat choice.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f64,
    pub bytes: Vec<u8>,
}

/// A `/v1/completions` choice's log probabilities, in that endpoint's (older) form: lists with
/// one entry per generated token.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f64>,
    /// The likeliest tokens at each place, by their text.
    pub top_logprobs: Vec<BTreeMap<String, f64>>,
    /// Where each token's text starts in the choice's text, in bytes.
    pub text_offset: Vec<usize>,
}

/// The tokens a completion counted, in the model's tokens (the character model's are characters).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    /// From a chat model; absent from the character model, which caches no prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// From a chat model; absent from the character model, which drafts no tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

impl Usage {
    /// The counts of a prompt and its completion, and their total.
    pub fn new(prompt_tokens: u32, completion_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: None,
            completion_tokens_details: None,
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: u32,
}

/// Speculative decoding's drafted tokens (from the request's `prediction` or from n-grams of
/// the prompt and answer): those the model produced, and those it did not (OpenAI's Predicted
/// Outputs count the rejected ones as completion tokens too; here a rejected draft costs
/// compute but is not in `completion_tokens`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CompletionTokensDetails {
    pub accepted_prediction_tokens: u32,
    pub rejected_prediction_tokens: u32,
}

/// `POST /v1/embeddings`: one vector per input text, in the order of the inputs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EmbeddingList {
    /// `list`.
    #[cfg_attr(feature = "openapi", schema(schema_with = object_schema))]
    pub object: Object,
    pub data: Vec<Embedding>,
    /// The pipeline or chat model that computed them.
    pub model: String,
    pub usage: EmbeddingUsage,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Embedding {
    /// `embedding`.
    #[cfg_attr(feature = "openapi", schema(schema_with = object_schema))]
    pub object: Object,
    pub index: u32,
    pub embedding: EmbeddingVector,
}

/// A vector as `encoding_format` asked: numbers (`float`, the default), or `base64`, the
/// little-endian bytes of its FP32 values.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum EmbeddingVector {
    Float(Vec<f64>),
    Base64(String),
}

/// An embedding request's size: a GGUF model's tokens; a pipeline does not report its token
/// count, so for a pipeline both are the inputs' characters, an upper bound of the WordPiece
/// tokens (each covers at least one).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EmbeddingUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

/// An error in OpenAI's shape, the body of every error answer of these routes (the official
/// clients read their exception's message from it), and the event that ends a stream that
/// failed after it started.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OpenAiError))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OpenAiErrorDetail))]
pub struct ErrorDetail {
    pub message: String,
    /// invalid_request_error, authentication_error, permission_error, rate_limit_error or
    /// server_error.
    #[serde(rename = "type")]
    pub kind: String,
    /// `null` in an error answer; absent from a stream's error event.
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub param: Option<Option<String>>,
    /// In an error answer, `null` or OpenAI's reason (`rate_limit_exceeded` for a rate,
    /// `insufficient_quota` for a spent budget); the HTTP status of the failure in a stream's
    /// error event.
    #[serde(
        default,
        deserialize_with = "crate::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub code: Option<Option<ErrorCode>>,
}

/// An error's `code`: a reason's name, or (in a stream's error event) an HTTP status.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum ErrorCode {
    Status(u16),
    Name(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::de::DeserializeOwned;

    /// `value` written is `json`, and `json` read gives `value` back. `json` is what the route
    /// answered before these types, its keys in OpenAI's order (`json!` had sorted them).
    fn same_text<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: &T,
        json: &str,
    ) {
        assert_eq!(serde_json::to_string(value).unwrap(), json);
        assert_eq!(&serde_json::from_str::<T>(json).unwrap(), value);
    }

    #[test]
    fn a_chat_answer_with_logprobs() {
        let logprob = |token: &str, logprob: f32| TopLogprob {
            token: token.into(),
            logprob: f64::from(logprob),
            bytes: token.as_bytes().to_vec(),
        };
        let answer = ChatCompletion {
            id: "chatcmpl-1".into(),
            object: Object::ChatCompletion,
            created: 1700000000,
            model: "smollm2".into(),
            system_fingerprint: Some(None),
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: Some("Hi".into()),
                    tool_calls: vec![],
                },
                logprobs: Some(ChatLogprobs {
                    content: vec![TokenLogprob {
                        token: "Hi".into(),
                        logprob: f64::from(-0.1f32),
                        bytes: b"Hi".to_vec(),
                        top_logprobs: vec![logprob("Hi", -0.1), logprob("Hello", -2.5)],
                    }],
                }),
                finish_reason: Some("length".into()),
            }],
            usage: Some(Usage {
                prompt_tokens_details: Some(PromptTokensDetails { cached_tokens: 3 }),
                ..Usage::new(7, 1)
            }),
        };
        // An f32 log probability written as the f64 it converts to, as `json!` wrote it.
        same_text(
            &answer,
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"smollm2","system_fingerprint":null,"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-0.10000000149011612,"bytes":[72,105],"top_logprobs":[{"token":"Hi","logprob":-0.10000000149011612,"bytes":[72,105]},{"token":"Hello","logprob":-2.5,"bytes":[72,101,108,108,111]}]}]},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":3}}}"#,
        );
    }

    #[test]
    fn chat_stream_chunks() {
        let chunk = |delta: Delta<'static>, finish: Option<&'static str>| ChatCompletionChunk {
            id: "chatcmpl-1".into(),
            object: Object::ChatCompletionChunk,
            created: 5,
            model: "textgen".into(),
            system_fingerprint: None,
            choices: vec![ChatChunkChoice {
                index: 0,
                delta,
                logprobs: None,
                finish_reason: finish.map(Cow::Borrowed),
            }],
            usage: None,
        };
        let first = Delta {
            role: Some("assistant".into()),
            content: Some("".into()),
            tool_calls: None,
        };
        same_text(
            &chunk(first, None),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"textgen","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
        );
        same_text(
            &chunk(Delta::default(), Some("stop")),
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"textgen","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}"#,
        );
        let usage = ChatCompletionChunk {
            choices: vec![],
            usage: Some(Usage::new(2, 3)),
            ..chunk(Delta::default(), None)
        };
        same_text(
            &usage,
            r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":5,"model":"textgen","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}"#,
        );
    }

    #[test]
    fn tool_calls_whole_and_streamed() {
        let answer = ChatCompletion {
            id: "chatcmpl-1".into(),
            object: Object::ChatCompletion,
            created: 5,
            model: "smollm2".into(),
            system_fingerprint: Some(None),
            choices: vec![ChatChoice {
                index: 0,
                message: AssistantMessage {
                    role: "assistant".into(),
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "call_1".into(),
                        kind: "function".into(),
                        function: FunctionCall {
                            name: "get_weather".into(),
                            arguments: r#"{"city": "Paris"}"#.into(),
                        },
                    }],
                },
                logprobs: None,
                finish_reason: Some("tool_calls".into()),
            }],
            usage: Some(Usage {
                completion_tokens_details: Some(CompletionTokensDetails {
                    accepted_prediction_tokens: 4,
                    rejected_prediction_tokens: 1,
                }),
                ..Usage::new(20, 9)
            }),
        };
        same_text(
            &answer,
            r#"{"id":"chatcmpl-1","object":"chat.completion","created":5,"model":"smollm2","system_fingerprint":null,"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29,"completion_tokens_details":{"accepted_prediction_tokens":4,"rejected_prediction_tokens":1}}}"#,
        );
        let start = Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: Some("call_1".into()),
                kind: Some("function".into()),
                function: FunctionDelta {
                    name: Some("get_weather".into()),
                    arguments: Some("".into()),
                },
            }]),
            ..Delta::default()
        };
        same_text(
            &start,
            r#"{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
        );
        let more = Delta {
            tool_calls: Some(vec![ToolCallDelta {
                index: 0,
                id: None,
                kind: None,
                function: FunctionDelta {
                    name: None,
                    arguments: Some("{\"city\"".into()),
                },
            }]),
            ..Delta::default()
        };
        same_text(
            &more,
            r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]}"#,
        );
    }

    #[test]
    fn a_completion_chunk_with_logprobs() {
        let chunk = TextCompletion {
            id: "cmpl-1".into(),
            object: Object::TextCompletion,
            created: 5,
            model: "smollm2".into(),
            system_fingerprint: Some(None),
            choices: vec![TextChoice {
                index: 1,
                text: " Paris".into(),
                logprobs: Some(TextLogprobs {
                    tokens: vec![" Paris".into()],
                    token_logprobs: vec![-0.5],
                    top_logprobs: vec![BTreeMap::from([
                        (" Paris".into(), -0.5),
                        (" Lyon".into(), -3.0),
                    ])],
                    text_offset: vec![12],
                }),
                finish_reason: None,
            }],
            usage: None,
        };
        same_text(
            &chunk,
            r#"{"id":"cmpl-1","object":"text_completion","created":5,"model":"smollm2","system_fingerprint":null,"choices":[{"index":1,"text":" Paris","logprobs":{"tokens":[" Paris"],"token_logprobs":[-0.5],"top_logprobs":[{" Lyon":-3.0," Paris":-0.5}],"text_offset":[12]},"finish_reason":null}]}"#,
        );
    }

    #[test]
    fn the_models_list() {
        let card = |id: &str, max_model_len| ModelCard {
            id: id.into(),
            object: Object::Model,
            created: 1700000000,
            owned_by: "infergate".into(),
            max_model_len,
        };
        let list = ModelCardList {
            object: Object::List,
            data: vec![card("smollm2", Some(2048)), card("embed", None)],
        };
        same_text(
            &list,
            r#"{"object":"list","data":[{"id":"smollm2","object":"model","created":1700000000,"owned_by":"infergate","max_model_len":2048},{"id":"embed","object":"model","created":1700000000,"owned_by":"infergate"}]}"#,
        );
    }

    #[test]
    fn error_bodies() {
        let error = |param, code| ErrorBody {
            error: ErrorDetail {
                message: "model 'x' does not exist".into(),
                kind: "invalid_request_error".into(),
                param,
                code,
            },
        };
        same_text(
            &error(Some(None), Some(None)),
            r#"{"error":{"message":"model 'x' does not exist","type":"invalid_request_error","param":null,"code":null}}"#,
        );
        same_text(
            &error(
                Some(None),
                Some(Some(ErrorCode::Name("insufficient_quota".into()))),
            ),
            r#"{"error":{"message":"model 'x' does not exist","type":"invalid_request_error","param":null,"code":"insufficient_quota"}}"#,
        );
        same_text(
            &error(None, Some(Some(ErrorCode::Status(500)))),
            r#"{"error":{"message":"model 'x' does not exist","type":"invalid_request_error","code":500}}"#,
        );
        // In a stream, an error event is told from a chunk by its shape.
        let event = r#"{"error":{"message":"the model stopped","type":"server_error","code":500}}"#;
        let read: StreamEvent<TextChoice> = serde_json::from_str(event).unwrap();
        assert!(
            matches!(read, StreamEvent::Error(e) if e.error.code == Some(Some(ErrorCode::Status(500))))
        );
    }

    #[test]
    fn embeddings_as_numbers_or_base64() {
        let list = EmbeddingList {
            object: Object::List,
            data: vec![
                Embedding {
                    object: Object::Embedding,
                    index: 0,
                    embedding: EmbeddingVector::Float(vec![f64::from(0.1f32), -1.0]),
                },
                Embedding {
                    object: Object::Embedding,
                    index: 1,
                    embedding: EmbeddingVector::Base64("AACAPw==".into()),
                },
            ],
            model: "embed".into(),
            usage: EmbeddingUsage {
                prompt_tokens: 9,
                total_tokens: 9,
            },
        };
        same_text(
            &list,
            r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.10000000149011612,-1.0]},{"object":"embedding","index":1,"embedding":"AACAPw=="}],"model":"embed","usage":{"prompt_tokens":9,"total_tokens":9}}"#,
        );
    }
}
