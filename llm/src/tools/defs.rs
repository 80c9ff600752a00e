//! What a request says about tools (OpenAI's `tools[i].function` and `tool_choice`) and what
//! the model's calls become.

use serde_json::Value;

/// Tools one request may offer.
pub const MAX_TOOLS: usize = 128;
/// A tool's parameters schema, as JSON text, at most.
pub const MAX_SCHEMA_BYTES: usize = 16 * 1024;

/// One function the model may call (OpenAI's `tools[i].function`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A JSON Schema of the arguments object; None: no arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// No call: the tools are not offered.
    None,
    /// The model decides; its answer is parsed for calls.
    Auto,
    /// At least one call, forced by a grammar.
    Required,
    /// A call of this function, forced by a grammar.
    Function(String),
}

/// A call the model made.
#[derive(Debug, Clone, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct ToolCall {
    /// `call_` and 24 random letters and digits.
    pub id: String,
    pub name: String,
    /// The arguments object as JSON text, as the model wrote it (OpenAI's
    /// `function.arguments` string).
    pub arguments: String,
}

/// The schema of a tool without parameters.
pub(super) fn no_parameters() -> Value {
    serde_json::json!({"type": "object", "properties": {}})
}

/// A new call id: `call_` and 24 random letters and digits, as OpenAI's look.
pub(crate) fn call_id() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let tail: String = (0..24)
        .map(|_| CHARS[rng.random_range(0..CHARS.len())] as char)
        .collect();
    format!("call_{tail}")
}
