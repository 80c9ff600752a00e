//! Tool calling without HTTP (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`): the
//! tools checked once ([`Tools::new`]), the prompt that offers them ([`prompt`]), the grammar
//! that forces a call (`required` or a named function, [`Tools::grammar`]), and the calls
//! recognised in what the model wrote, whole ([`Tools::parse`]) or as it streams
//! ([`ToolStream`]).
//!
//! The form of a call is Hermes/Qwen's, which templates without tools are also taught:
//! `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one block per call; a whole
//! answer that is such a JSON object (or a list of them, in a code fence or not) counts too.
//! A call counts when it names an offered tool and its arguments are valid against that tool's
//! JSON Schema; anything else is text.

mod checked;
mod defs;
mod grammar;
mod json_scan;
mod parse;
pub mod prompt;

pub use checked::Tools;
pub use defs::{ToolCall, ToolChoice, ToolDef, MAX_SCHEMA_BYTES, MAX_TOOLS};
pub use parse::{Parsed, StreamEvent, ToolStream};
pub use prompt::Message;

#[cfg(test)]
mod tests;
