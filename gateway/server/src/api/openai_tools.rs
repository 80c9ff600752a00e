//! Tool calling on a chat model's `/v1/chat/completions`: the request's `tools`, `tool_choice`
//! and `parallel_tool_calls` checked into the model's [`Tools`] (shape here, through
//! `openai_request`; names, schemas and the choice by `infergate-llm`, every error naming the
//! tool), its messages with calls and results, and each choice's answer read for calls: whole
//! (`tool_calls` in the message) or as it streams (`tool_calls` deltas: a call's id and name,
//! then its arguments in pieces).

use infergate_api_types::openai::{FunctionDelta, ToolCallDelta};
use infergate_llm::{Message, StreamEvent, ToolCall, ToolChoice, ToolDef, ToolStream, Tools};
use infergate_service::chat_models::api_error;
use infergate_service::error::ApiResult;
use infergate_service::openai_request::{self, MessageSpec, ToolChoiceSpec};
use serde_json::Value;

/// The request's tools, checked; None when it offers none and forces nothing.
pub(super) fn tools(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> ApiResult<Option<Tools>> {
    let defs = openai_request::tools(tools)?;
    let choice = match openai_request::tool_choice(choice, !defs.is_empty())? {
        ToolChoiceSpec::None => ToolChoice::None,
        ToolChoiceSpec::Auto => ToolChoice::Auto,
        ToolChoiceSpec::Required => ToolChoice::Required,
        ToolChoiceSpec::Function(name) => ToolChoice::Function(name),
    };
    if defs.is_empty() {
        return Ok(None);
    }
    let defs = defs
        .into_iter()
        .map(|d| ToolDef {
            name: d.name,
            description: d.description,
            parameters: d.parameters,
        })
        .collect();
    Tools::new(defs, choice, parallel.unwrap_or(true))
        .map(Some)
        .map_err(api_error)
}

/// The messages as the model's prompt takes them.
pub(super) fn messages(messages: &[Value]) -> ApiResult<Vec<Message>> {
    Ok(openai_request::messages(messages)?
        .into_iter()
        .map(|m: MessageSpec| Message {
            role: m.role,
            content: m.content,
            tool_calls: m
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
            tool_call_id: m.tool_call_id,
        })
        .collect())
}

/// What a piece of a choice's answer adds once read for tool calls.
#[derive(Default)]
pub(super) struct Pieces {
    /// Text for `delta.content`.
    pub(super) content: String,
    /// Parts of calls for `delta.tool_calls`, in order.
    pub(super) calls: Vec<ToolCallDelta<'static>>,
}

/// One choice's answer read for tool calls as it streams; without tools its text passes as
/// it comes.
pub(super) struct ChoiceCalls {
    parser: Option<ToolStream>,
    /// Whether a call was handed out (the choice then finishes with `tool_calls`).
    pub(super) called: bool,
}

impl ChoiceCalls {
    pub(super) fn new(tools: Option<&Tools>) -> ChoiceCalls {
        ChoiceCalls {
            parser: tools.filter(|t| t.offered()).map(Tools::stream),
            called: false,
        }
    }

    /// The next text of the answer.
    pub(super) fn push(&mut self, text: &str) -> Pieces {
        match &mut self.parser {
            None => Pieces {
                content: text.to_string(),
                calls: vec![],
            },
            Some(parser) => {
                let events = parser.push(text);
                self.pieces(events)
            }
        }
    }

    /// What the parser held back, at the answer's end.
    pub(super) fn finish(&mut self) -> Pieces {
        match &mut self.parser {
            None => Pieces::default(),
            Some(parser) => {
                let events = parser.finish();
                self.pieces(events)
            }
        }
    }

    fn pieces(&mut self, events: Vec<StreamEvent>) -> Pieces {
        let mut out = Pieces::default();
        for e in events {
            match e {
                StreamEvent::Content(t) => out.content.push_str(&t),
                StreamEvent::CallStart { index, id, name } => {
                    self.called = true;
                    out.calls.push(ToolCallDelta {
                        index: index as u32,
                        id: Some(id.into()),
                        kind: Some("function".into()),
                        function: FunctionDelta {
                            name: Some(name.into()),
                            arguments: Some("".into()),
                        },
                    });
                }
                StreamEvent::Arguments { index, fragment } => {
                    // Fragments of the same call in one piece go out as one.
                    match out.calls.last_mut() {
                        Some(last) if last.index == index as u32 => {
                            let args = last.function.arguments.get_or_insert_default();
                            args.to_mut().push_str(&fragment);
                        }
                        _ => out.calls.push(ToolCallDelta {
                            index: index as u32,
                            id: None,
                            kind: None,
                            function: FunctionDelta {
                                name: None,
                                arguments: Some(fragment.into()),
                            },
                        }),
                    }
                }
            }
        }
        out
    }
}
