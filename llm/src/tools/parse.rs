//! Recognising tool calls in the model's text, as it streams: text is handed out at once except
//! what may still become a call (a possible `<tool_call>` tag, whitespace before one, an answer
//! that starts as JSON); a call is handed out once its block closes and it is valid (`auto`),
//! or, when a grammar forces it, its name as soon as it is written and its arguments as they
//! are. The events of any split of a text add up to the same answer ([`Parsed`]).

use super::checked::Tools;
use super::defs::{call_id, ToolCall};
use super::json_scan;
use crate::output::longest_suffix_prefix;
use serde_json::Value;

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
/// Starts of an answer that may be a bare JSON call (or list of calls).
const BARE_STARTS: [&str; 3] = ["{", "[", "```json"];

impl Tools {
    /// The calls in a whole answer, and its text outside them; what [`ToolStream`] hands out
    /// for the same text in any pieces.
    pub fn parse(&self, text: &str) -> Parsed {
        let mut stream = self.stream();
        let mut events = stream.push(text);
        events.extend(stream.finish());
        Parsed::from_events(events)
    }

    /// A parser for an answer that arrives in pieces.
    pub fn stream(&self) -> ToolStream {
        ToolStream::new(self)
    }
}

/// What the parser hands out, in order (OpenAI's streamed `content` and `tool_calls` deltas).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// Text for the answer's content.
    Content(String),
    /// Call `index` (0, 1, ...) begins: its id and function name.
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// More of call `index`'s arguments (JSON text).
    Arguments { index: usize, fragment: String },
}

/// A whole answer: its text outside calls and its calls.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

impl Parsed {
    /// The answer the events add up to.
    pub fn from_events(events: impl IntoIterator<Item = StreamEvent>) -> Parsed {
        let mut out = Parsed::default();
        for e in events {
            match e {
                StreamEvent::Content(t) => out.content.push_str(&t),
                StreamEvent::CallStart { id, name, .. } => out.calls.push(ToolCall {
                    id,
                    name,
                    arguments: String::new(),
                }),
                StreamEvent::Arguments { index, fragment } => {
                    if let Some(c) = out.calls.get_mut(index) {
                        c.arguments.push_str(&fragment);
                    }
                }
            }
        }
        out
    }
}

#[derive(Debug)]
enum State {
    Text,
    /// Inside a `<tool_call>` block (its text is the buffer); when the call is forced, how
    /// much of it was handed out.
    Block {
        name_sent: bool,
        args_sent: usize,
    },
    /// The answer so far may be one bare JSON call or a list: held to the end.
    Bare,
}

/// A parser fed the answer in pieces ([`Tools::stream`]).
#[derive(Debug)]
pub struct ToolStream {
    tools: Tools,
    /// Text not handed out yet.
    buf: String,
    state: State,
    /// Calls handed out (the next one's index).
    calls: usize,
    /// Whether anything but whitespace was handed out (a bare JSON answer is then ruled out).
    started: bool,
    /// Whitespace right after a call's block is dropped.
    skip_ws: bool,
}

impl ToolStream {
    pub(super) fn new(tools: &Tools) -> ToolStream {
        ToolStream {
            tools: tools.clone(),
            buf: String::new(),
            state: State::Text,
            calls: 0,
            started: false,
            skip_ws: false,
        }
    }

    /// The events `piece` (the answer's next text) makes certain.
    pub fn push(&mut self, piece: &str) -> Vec<StreamEvent> {
        if !self.tools.offered() {
            return if piece.is_empty() {
                vec![]
            } else {
                vec![StreamEvent::Content(piece.to_string())]
            };
        }
        self.buf.push_str(piece);
        let mut out = Vec::new();
        self.advance(false, &mut out);
        out
    }

    /// The last events, at the answer's end.
    pub fn finish(&mut self) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        self.advance(true, &mut out);
        out
    }

    fn content(&mut self, text: String, out: &mut Vec<StreamEvent>) {
        if text.is_empty() {
            return;
        }
        if !text.trim().is_empty() {
            self.started = true;
        }
        out.push(StreamEvent::Content(text));
    }

    fn advance(&mut self, at_end: bool, out: &mut Vec<StreamEvent>) {
        loop {
            match self.state {
                State::Text => {
                    if self.skip_ws {
                        let kept = self.buf.trim_start().len();
                        self.buf.drain(..self.buf.len() - kept);
                        if self.buf.is_empty() {
                            return;
                        }
                        self.skip_ws = false;
                    }
                    if !self.started && self.calls == 0 {
                        let t = self.buf.trim_start();
                        if BARE_STARTS.iter().any(|s| t.starts_with(s)) {
                            self.state = State::Bare;
                            continue;
                        }
                        let undecided = t.is_empty()
                            || BARE_STARTS
                                .iter()
                                .any(|s| s.starts_with(t) && s.len() > t.len());
                        if undecided && !at_end {
                            return;
                        }
                    }
                    if let Some(p) = self.buf.find(OPEN) {
                        // Whitespace between text and a call is not content.
                        let before = self.buf[..p].trim_end().to_string();
                        self.content(before, out);
                        self.buf.drain(..p + OPEN.len());
                        self.state = State::Block {
                            name_sent: false,
                            args_sent: 0,
                        };
                        continue;
                    }
                    let cut = if at_end {
                        self.buf.len()
                    } else {
                        // Held: what may begin a tag, and whitespace that may precede one.
                        let tag = longest_suffix_prefix(&self.buf, OPEN);
                        let kept = self.buf[..self.buf.len() - tag].trim_end().len();
                        kept
                    };
                    let text: String = self.buf.drain(..cut).collect();
                    self.content(text, out);
                    return;
                }
                State::Block { .. } => {
                    let close = self.buf.find(CLOSE);
                    if self.tools.forced() {
                        self.stream_forced(close.unwrap_or(self.buf.len()), out);
                    }
                    let end = match close {
                        Some(p) => p,
                        None if at_end => self.buf.len(),
                        None => return,
                    };
                    let block: String = self.buf.drain(..end).collect();
                    if close.is_some() {
                        self.buf.drain(..CLOSE.len());
                    }
                    self.end_block(&block, close.is_some(), out);
                    self.state = State::Text;
                    self.skip_ws = true;
                }
                State::Bare => {
                    if at_end {
                        let text = std::mem::take(&mut self.buf);
                        match self.bare_calls(&text) {
                            Some(calls) => {
                                for (name, arguments) in calls {
                                    self.call(name, arguments, out);
                                }
                            }
                            None => self.content(text, out),
                        }
                    }
                    return;
                }
            }
        }
    }

    /// A block has ended (`closed`: by its tag, else by the answer's end).
    fn end_block(&mut self, block: &str, closed: bool, out: &mut Vec<StreamEvent>) {
        let State::Block {
            name_sent,
            args_sent,
        } = self.state
        else {
            return;
        };
        if name_sent {
            // Forced and handed out as written: the rest of its arguments.
            if let Some((_, span)) = call_parts(block) {
                let whole = &block[span];
                if whole.len() > args_sent {
                    out.push(StreamEvent::Arguments {
                        index: self.calls,
                        fragment: whole[args_sent..].to_string(),
                    });
                }
            }
            self.calls += 1;
            return;
        }
        match self.valid_call(block) {
            Some((name, arguments)) => self.call(name, arguments, out),
            None => {
                let mut text = format!("{OPEN}{block}");
                if closed {
                    text.push_str(CLOSE);
                }
                self.content(text, out);
            }
        }
    }

    /// Hands out a call (the first only, when calls are not parallel).
    fn call(&mut self, name: String, arguments: String, out: &mut Vec<StreamEvent>) {
        if self.calls > 0 && !self.tools.parallel() {
            return;
        }
        let index = self.calls;
        out.push(StreamEvent::CallStart {
            index,
            id: call_id(),
            name,
        });
        out.push(StreamEvent::Arguments {
            index,
            fragment: arguments,
        });
        self.calls += 1;
    }

    /// A forced call streams: its name once written, its arguments as far as written (the
    /// block's text up to `end`).
    fn stream_forced(&mut self, end: usize, out: &mut Vec<StreamEvent>) {
        let State::Block {
            mut name_sent,
            mut args_sent,
        } = self.state
        else {
            return;
        };
        let text = &self.buf[..end];
        let Some((members, _)) = json_scan::members(text) else {
            return;
        };
        if !name_sent {
            let name = members
                .iter()
                .find(|m| m.key == "name" && m.complete)
                .and_then(|m| serde_json::from_str::<String>(&text[m.value.clone()]).ok());
            if let Some(name) = name {
                out.push(StreamEvent::CallStart {
                    index: self.calls,
                    id: call_id(),
                    name,
                });
                name_sent = true;
            }
        }
        if name_sent {
            if let Some(m) = members.iter().find(|m| m.key == "arguments") {
                let written = &text[m.value.clone()];
                if written.len() > args_sent {
                    out.push(StreamEvent::Arguments {
                        index: self.calls,
                        fragment: written[args_sent..].to_string(),
                    });
                    args_sent = written.len();
                }
            }
        }
        self.state = State::Block {
            name_sent,
            args_sent,
        };
    }

    /// The call a block holds, if it names an offered tool with valid arguments: its name and
    /// arguments as written.
    fn valid_call(&self, block: &str) -> Option<(String, String)> {
        let (name, span) = call_parts(block)?;
        let raw = &block[span];
        let value: Value = serde_json::from_str(raw).ok()?;
        // Arguments sent as a JSON string holding the object are taken as that object.
        let (arguments, text) = match value {
            Value::String(s) => (serde_json::from_str(&s).ok()?, s),
            v => (v, raw.to_string()),
        };
        self.tools
            .invalid_call(&name, &arguments)
            .is_none()
            .then_some((name, text))
    }

    /// The calls a whole answer is, when it is one JSON call object or a list of them (in a
    /// code fence or not), all valid.
    fn bare_calls(&self, text: &str) -> Option<Vec<(String, String)>> {
        let t = text.trim();
        let t = match t.strip_prefix("```json") {
            Some(inner) => inner.strip_suffix("```")?.trim(),
            None => t,
        };
        let value: Value = serde_json::from_str(t).ok()?;
        let items = match value {
            Value::Array(items) if !items.is_empty() => items,
            object @ Value::Object(_) => vec![object],
            _ => return None,
        };
        items
            .into_iter()
            .map(|item| {
                let Value::Object(mut map) = item else {
                    return None;
                };
                let name = match map.remove("name")? {
                    Value::String(s) => s,
                    _ => return None,
                };
                let arguments = match map
                    .remove("arguments")
                    .or_else(|| map.remove("parameters"))?
                {
                    Value::String(s) => serde_json::from_str(&s).ok()?,
                    v => v,
                };
                if !map.is_empty() {
                    return None;
                }
                self.tools
                    .invalid_call(&name, &arguments)
                    .is_none()
                    .then(|| {
                        let text = serde_json::to_string(&arguments).unwrap_or_default();
                        (name, text)
                    })
            })
            .collect()
    }
}

/// A block's function name and where its arguments lie (`arguments`, or `parameters` as some
/// models write), when it is one JSON object with just these.
fn call_parts(block: &str) -> Option<(String, std::ops::Range<usize>)> {
    let (members, closed) = json_scan::members(block)?;
    if !block[closed?..].trim().is_empty() || members.len() != 2 {
        return None;
    }
    let name = members
        .iter()
        .find(|m| m.key == "name")
        .and_then(|m| serde_json::from_str::<String>(&block[m.value.clone()]).ok())?;
    let args = members
        .iter()
        .find(|m| m.key == "arguments" || m.key == "parameters")?;
    Some((name, args.value.clone()))
}
