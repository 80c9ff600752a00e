//! `GET /v2/stream` (WebSocket): the frames that answer a `generate` message, from the
//! character model and from a chat model alike: one [`GeneratedToken`] per piece of text, then
//! [`GenerationDone`].
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
