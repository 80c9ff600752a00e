//! Chat guardrails (`infergate_service::guardrails`) on the OpenAI routes' chat models, before
//! the model: the guardrails attached to the server, the caller's key and the model read the
//! request's messages (a
//! completion's prompt as one `user` message), and their rewrites replace the messages'
//! contents in the request itself, before the chat template renders it, so that the model, the
//! cache's key and the token count all see the text as the guardrails let it through.

use infergate_plugin_host::ChatText;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::guardrails::{self, Guards};
use infergate_service::openai_request;
use infergate_service::state::AppState;
use serde_json::Value;

/// The guardrails of `caller`'s requests to `model`, with `messages` (a chat) or `prompt` (a
/// completion) checked and rewritten in place; None when there are none. A refusal is the
/// request's answer (400, code `content_filter`).
pub(super) async fn check_request(
    state: &AppState,
    caller: &Caller,
    model: &str,
    messages: Option<&mut [Value]>,
    prompt: Option<&mut Value>,
) -> ApiResult<Option<Guards>> {
    let sources = guardrails::Sources {
        plugins: state.plugins(),
        server: &state.config().guardrails,
        settings: state.model_settings(),
        metrics: &state.metrics().guardrails,
    };
    let Some(guards) = guardrails::resolve(&sources, caller.key().map(|k| &**k), model)? else {
        return Ok(None);
    };
    if let Some(messages) = messages {
        let parsed = openai_request::messages(messages)?;
        let texts = parsed
            .iter()
            .map(|m| ChatText {
                role: m.role.clone(),
                content: m.content.clone(),
            })
            .collect();
        if let Some(contents) = guards.check_prompt(texts).await? {
            for ((value, before), content) in messages.iter_mut().zip(&parsed).zip(contents) {
                if before.content != content {
                    if let Some(message) = value.as_object_mut() {
                        message.insert("content".into(), Value::String(content));
                    }
                }
            }
        }
    } else if let Some(prompt) = prompt {
        let text = match prompt {
            Value::Array(items) if items.len() == 1 && items[0].is_string() => &mut items[0],
            other => other,
        };
        let Value::String(content) = text else {
            return Err(ApiError::bad_request(
                "prompt: this model's guardrails read text; send the prompt as a string, not \
                 token ids",
            ));
        };
        let message = ChatText {
            role: "user".into(),
            content: std::mem::take(content),
        };
        let original = message.content.clone();
        *content = match guards.check_prompt(vec![message]).await? {
            Some(mut contents) if !contents.is_empty() => contents.swap_remove(0),
            _ => original,
        };
    }
    Ok(Some(guards))
}
