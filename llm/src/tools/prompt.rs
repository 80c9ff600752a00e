//! The prompt of a chat with tools: messages carrying `tool_calls` (assistant) and results
//! (`tool` role), and the tools offered. A template that uses `tools` gets them and the
//! messages as Hugging Face's `apply_chat_template` passes them (calls' arguments as objects);
//! any other (SmolLM2's, ChatML) gets the generic form: the tools described in the system
//! message with the call format to use, calls written into the assistant's text as
//! `<tool_call>` blocks, results as a user turn of `<tool_response>` blocks (Hermes/Qwen's
//! form, which the parser reads back).

use super::checked::Tools;
use super::defs::{ToolCall, ToolChoice};
use crate::error::LlmError;
use crate::template::{ChatMessage, ChatTemplate};
use serde_json::{json, Value};

/// A chat message as OpenAI sends it (roles `system`/`developer`, `user`, `assistant`,
/// `tool`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Message {
    pub role: String,
    pub content: String,
    /// An assistant's calls.
    pub tool_calls: Vec<ToolCall>,
    /// A tool result's call.
    pub tool_call_id: Option<String>,
}

impl From<ChatMessage> for Message {
    fn from(m: ChatMessage) -> Message {
        Message {
            role: m.role,
            content: m.content,
            ..Message::default()
        }
    }
}

/// What checking the messages found, per message: its calls' arguments parsed, and the
/// function a tool result answers.
struct Checked {
    arguments: Vec<Vec<Value>>,
    answers: Vec<Option<String>>,
}

/// Checks the messages: known roles, tool results answering an earlier call (by id), calls'
/// arguments JSON objects.
fn check(messages: &[Message]) -> Result<Checked, LlmError> {
    let bad = |m: String| Err(LlmError::InvalidMessages(m));
    let mut calls: Vec<(String, String)> = Vec::new();
    let mut arguments = Vec::with_capacity(messages.len());
    let mut answers = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let mut parsed = Vec::new();
        let mut answer = None;
        match m.role.as_str() {
            "system" | "developer" | "user" => {}
            "assistant" => {
                for (j, c) in m.tool_calls.iter().enumerate() {
                    match serde_json::from_str::<Value>(&c.arguments) {
                        Ok(v @ Value::Object(_)) => parsed.push(v),
                        _ => {
                            return bad(format!(
                                "messages[{i}].tool_calls[{j}].function.arguments: must be a JSON object"
                            ))
                        }
                    }
                    calls.push((c.id.clone(), c.name.clone()));
                }
            }
            "tool" => {
                let Some(id) = &m.tool_call_id else {
                    return bad(format!("messages[{i}]: a tool message needs tool_call_id"));
                };
                let Some((_, name)) = calls.iter().find(|(c, _)| c == id) else {
                    return bad(format!(
                        "messages[{i}]: tool_call_id '{id}' answers no earlier assistant tool call"
                    ));
                };
                answer = Some(name.clone());
            }
            other => {
                return bad(format!(
                    "messages[{i}].role: '{other}' is not supported (system, user, assistant, tool)"
                ))
            }
        }
        if !m.tool_calls.is_empty() && m.role != "assistant" {
            return bad(format!(
                "messages[{i}]: only assistant messages carry tool_calls"
            ));
        }
        arguments.push(parsed);
        answers.push(answer);
    }
    Ok(Checked { arguments, answers })
}

/// The prompt for `messages`, the tools offered when `tools` offers them, the assistant's turn
/// opened.
pub(crate) fn render(
    template: &ChatTemplate,
    messages: &[Message],
    tools: Option<&Tools>,
) -> Result<String, LlmError> {
    if messages.is_empty() {
        return Err(LlmError::InvalidMessages(
            "messages: must not be empty".into(),
        ));
    }
    let Checked { arguments, answers } = check(messages)?;
    let offered = tools.filter(|t| t.offered());
    if template.supports_tools() {
        render_native(template, messages, &arguments, &answers, offered)
    } else {
        let generic = generic_messages(messages, &arguments, offered);
        template.render(&generic, true)
    }
    .map_err(LlmError::InvalidMessages)
}

/// Tools in OpenAI's form: `{"type": "function", "function": {...}}`.
fn tool_values(tools: &Tools) -> Vec<Value> {
    tools
        .defs()
        .iter()
        .map(|d| json!({"type": "function", "function": d}))
        .collect()
}

fn role(m: &Message) -> &str {
    if m.role == "developer" {
        "system"
    } else {
        &m.role
    }
}

fn render_native(
    template: &ChatTemplate,
    messages: &[Message],
    arguments: &[Vec<Value>],
    answers: &[Option<String>],
    tools: Option<&Tools>,
) -> Result<String, String> {
    let values: Vec<Value> = messages
        .iter()
        .zip(arguments)
        .zip(answers)
        .map(|((m, args), answer)| {
            let mut v = json!({"role": role(m), "content": m.content});
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .zip(args)
                    .map(|(c, a)| {
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": a}})
                    })
                    .collect();
            }
            if let Some(id) = &m.tool_call_id {
                v["tool_call_id"] = json!(id);
                v["name"] = json!(answer);
            }
            v
        })
        .collect();
    template.render_values(
        &Value::Array(values),
        tools.map(|t| Value::Array(tool_values(t))).as_ref(),
        true,
    )
}

/// What the system message says when tools are offered (generic form).
fn instructions(tools: &Tools) -> String {
    let listed: Vec<String> = tool_values(tools)
        .iter()
        .map(|t| serde_json::to_string(t).unwrap_or_default())
        .collect();
    let mut text = format!(
        "You can call functions to help with the user's request. They are described by the JSON \
         objects between <tools> and </tools>:\n<tools>\n{}\n</tools>\n\nTo call a function, \
         answer with a JSON object holding its name and its arguments between <tool_call> and \
         </tool_call>, one block per call:\n<tool_call>\n{{\"name\": \"the function's name\", \
         \"arguments\": {{\"an argument\": \"its value\"}}}}\n</tool_call>",
        listed.join("\n")
    );
    match tools.choice() {
        ToolChoice::Function(name) => text.push_str(&format!("\n\nCall the function {name}.")),
        ToolChoice::Required => text.push_str("\n\nCall at least one function."),
        _ => {}
    }
    text
}

/// A call written as the generic form asks for it ("name" first, as the instructions show).
fn call_block(name: &str, arguments: &Value) -> String {
    format!(
        "<tool_call>\n{{\"name\": {}, \"arguments\": {}}}\n</tool_call>",
        serde_json::to_string(name).unwrap_or_default(),
        serde_json::to_string(arguments).unwrap_or_default()
    )
}

fn generic_messages(
    messages: &[Message],
    arguments: &[Vec<Value>],
    tools: Option<&Tools>,
) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let msg = |role: &str, content: String| ChatMessage {
        role: role.into(),
        content,
    };
    if let Some(t) = tools {
        out.push(msg("system", instructions(t)));
    }
    for (i, (m, args)) in messages.iter().zip(arguments).enumerate() {
        match role(m) {
            "system" if i == 0 && tools.is_some() => {
                // The client's system message first, then the tools.
                if let Some(first) = out.first_mut() {
                    first.content = format!("{}\n\n{}", m.content, first.content);
                }
            }
            "assistant" if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                for (c, a) in m.tool_calls.iter().zip(args) {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&call_block(&c.name, a));
                }
                out.push(msg("assistant", text));
            }
            "tool" => {
                let response = format!("<tool_response>\n{}\n</tool_response>", m.content);
                // Results of one turn's calls go in one user message.
                let follows_tool = i > 0 && messages[i - 1].role == "tool";
                match out.last_mut() {
                    Some(last) if follows_tool => {
                        last.content.push('\n');
                        last.content.push_str(&response);
                    }
                    _ => out.push(msg("user", response)),
                }
            }
            r => out.push(msg(r, m.content.clone())),
        }
    }
    out
}
