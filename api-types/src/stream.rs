//! `GET /v2/stream` (WebSocket): the frames that answer a `generate` message, from the
//! character model and from a chat model alike: one [`GeneratedToken`] per piece of text, then
//! [`GenerationDone`]; and the frames every message kind shares: [`StreamError`],
//! [`Authenticated`], [`Cancelled`]. (An `infer` message's answer is a KServe inference
//! answer with its `id`, encoded by the gateway's codec.)
//!
//! They borrow their strings ([`Cow`]) for the same reason as the completion chunks
//! ([`crate::openai`]): the gateway writes one per token.

use crate::openai::Usage;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;

/// A piece of generated text.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GeneratedToken<'a> {
    /// The message's `id` (a string or a number), echoed.
    pub id: Cow<'a, Value>,
    pub token: Cow<'a, str>,
}

/// The last frame of a generation that finished.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GenerationDone<'a> {
    pub id: Cow<'a, Value>,
    /// Always `true`: what tells this frame from the others.
    pub done: bool,
    /// stop or length.
    pub finish_reason: Cow<'a, str>,
    /// The whole generated text.
    pub text: Cow<'a, str>,
    pub usage: Usage,
}

/// The answer to a message that failed: the request's status and, for an overload, when to
/// retry.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct StreamError<'a> {
    pub id: Cow<'a, Value>,
    pub error: Cow<'a, str>,
    /// The HTTP status the same request would have got.
    pub status: u16,
    /// Seconds; present on 429 and 503 answers that know when capacity returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// The answer to `{"api_key": KEY}` sent as the first message.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Authenticated {
    /// Always `true`.
    pub authenticated: bool,
}

/// The answer to `{"cancel": ID}` for a request that was still running.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Cancelled<'a> {
    pub id: Cow<'a, Value>,
    /// Always `true`.
    pub cancelled: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_frame() {
        let done = GenerationDone {
            id: Cow::Owned(Value::from(7)),
            done: true,
            finish_reason: "length".into(),
            text: "Once upon".into(),
            usage: Usage::new(4, 9),
        };
        let json = r#"{"id":7,"done":true,"finish_reason":"length","text":"Once upon","usage":{"prompt_tokens":4,"completion_tokens":9,"total_tokens":13}}"#;
        assert_eq!(serde_json::to_string(&done).unwrap(), json);
        assert_eq!(serde_json::from_str::<GenerationDone>(json).unwrap(), done);
    }
}
