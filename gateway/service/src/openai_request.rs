//! The OpenAI request bodies the gateway serves itself (completions and chat with the
//! character-level model, embeddings) as parsed and checked before any work: what a body must
//! hold and what the generator cannot honour (refused rather than ignored); and the parts of a
//! chat model's request that have a structure of their own (tools, `tool_choice`, messages
//! with tool calls and results, `prediction`), checked for their shape here and for their
//! meaning by the model. Every error is the client's (400) and names the field.
//!
//! Self-contained (no `crate::` paths): the fuzz target `openai_request` (fuzz/) builds this
//! file without the gateway.

use infergate_protocol::DecodeError;
use serde::Deserialize;
use serde_json::Value;

pub const MAX_STOP_SEQUENCES: usize = 4;
/// Texts one embeddings request may embed.
pub const MAX_EMBEDDING_INPUTS: usize = 256;

fn bad(message: impl Into<String>) -> DecodeError {
    DecodeError(message.into())
}

/// Parses a request body.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, DecodeError> {
    serde_json::from_slice(body).map_err(|e| bad(format!("invalid request: {e}")))
}

/// `stop` is a string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// The fields both endpoints share; unknown fields are ignored as OpenAI clients send many.
#[derive(Debug, Deserialize)]
pub struct Common {
    pub model: String,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Option<Stop>,
    #[serde(default)]
    n: Option<u32>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    presence_penalty: Option<f64>,
    #[serde(default)]
    frequency_penalty: Option<f64>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    echo: Option<bool>,
    #[serde(default)]
    best_of: Option<u32>,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    #[serde(flatten)]
    pub common: Common,
    prompt: Value,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: Common,
    messages: Vec<ChatMessage>,
}

/// Sampling parameters, validated.
#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f64,
    pub top_p: f64,
    pub seed: Option<u64>,
    pub max_tokens: u32,
    pub stop: Vec<String>,
}

impl Sampling {
    pub fn validate(&self) -> Result<(), DecodeError> {
        if !(0.0..=2.0).contains(&self.temperature) {
            return Err(bad("temperature must be between 0 and 2"));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(bad("top_p must be in (0, 1]"));
        }
        if self.max_tokens == 0 {
            return Err(bad("max_tokens must be at least 1"));
        }
        if self.stop.len() > MAX_STOP_SEQUENCES || self.stop.iter().any(String::is_empty) {
            return Err(bad(format!(
                "stop: at most {MAX_STOP_SEQUENCES} non-empty sequences"
            )));
        }
        Ok(())
    }
}

impl Common {
    /// Refuses what the generator cannot honour rather than ignoring it.
    pub fn sampling(&self, default_tokens: u32, limit: u32) -> Result<Sampling, DecodeError> {
        if self.n.is_some_and(|n| n != 1) || self.best_of.is_some_and(|n| n != 1) {
            return Err(bad("only n = 1 is supported"));
        }
        if [self.presence_penalty, self.frequency_penalty]
            .iter()
            .any(|p| p.is_some_and(|p| p != 0.0))
        {
            return Err(bad(
                "presence_penalty and frequency_penalty are not supported",
            ));
        }
        if self
            .logprobs
            .as_ref()
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
        {
            return Err(bad("logprobs are not supported"));
        }
        if self.echo == Some(true) {
            return Err(bad("echo is not supported"));
        }
        let max_tokens = self
            .max_completion_tokens
            .or(self.max_tokens)
            .unwrap_or(default_tokens.min(limit));
        if max_tokens > limit {
            return Err(bad(format!("max_tokens is at most {limit} on this server")));
        }
        Ok(Sampling {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            seed: self.seed,
            max_tokens,
            stop: match &self.stop {
                None => vec![],
                Some(Stop::One(s)) => vec![s.clone()],
                Some(Stop::Many(v)) => v.clone(),
            },
        })
    }
}

impl CompletionRequest {
    /// The one prompt: a string, or a list holding one string.
    pub fn prompt(&self) -> Result<String, DecodeError> {
        match &self.prompt {
            Value::String(s) => Ok(s.clone()),
            Value::Array(items) if items.len() == 1 && items[0].is_string() => {
                Ok(items[0].as_str().unwrap_or_default().to_string())
            }
            _ => Err(bad("prompt must be a string (one prompt per request)")),
        }
    }
}

impl ChatRequest {
    /// The messages' text contents joined by newlines (the character model continues text;
    /// roles mean nothing to it).
    pub fn prompt(&self) -> Result<String, DecodeError> {
        if self.messages.is_empty() {
            return Err(bad("messages must not be empty"));
        }
        let mut parts = Vec::with_capacity(self.messages.len());
        for m in &self.messages {
            match &m.content {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) => parts.push(s.clone()),
                Some(Value::Array(items)) => {
                    for item in items {
                        match (item["type"].as_str(), item["text"].as_str()) {
                            (Some("text"), Some(t)) => parts.push(t.to_string()),
                            _ => return Err(bad("message content parts must be of type 'text'")),
                        }
                    }
                }
                Some(_) => {
                    return Err(bad(
                        "message content must be a string or a list of text parts",
                    ))
                }
            }
        }
        Ok(parts.join("\n"))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingRequest {
    pub model: String,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    /// OpenAI's end-user tag for abuse monitoring; accepted so clients that send it work.
    #[serde(default, rename = "user")]
    _user: Option<String>,
    #[serde(default)]
    pub dimensions: Option<u32>,
}

/// What an embeddings request embeds: texts, or token ids (one list per input).
#[derive(Debug, Clone, PartialEq)]
pub enum EmbeddingInputs {
    Texts(Vec<String>),
    Tokens(Vec<Vec<i64>>),
}

impl EmbeddingInputs {
    pub fn len(&self) -> usize {
        match self {
            EmbeddingInputs::Texts(t) => t.len(),
            EmbeddingInputs::Tokens(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl EmbeddingRequest {
    /// Whether the vectors go back as base64 (little-endian f32) rather than numbers. The
    /// official client asks for base64 unless told otherwise.
    pub fn base64(&self) -> Result<bool, DecodeError> {
        match self.encoding_format.as_deref() {
            None | Some("float") => Ok(false),
            Some("base64") => Ok(true),
            Some(other) => Err(bad(format!(
                "encoding_format '{other}' is not supported; use \"float\" or \"base64\""
            ))),
        }
    }

    /// The inputs: one string, a list of 1 to [`MAX_EMBEDDING_INPUTS`] strings, one list of
    /// token ids, or a list of such lists; none empty.
    pub fn inputs(&self) -> Result<EmbeddingInputs, DecodeError> {
        let shape = "input must be a string, a list of strings, a list of token ids or a list of lists of token ids";
        let token = |v: &Value| v.as_i64().ok_or_else(|| bad(shape));
        let inputs = match &self.input {
            Value::String(s) => EmbeddingInputs::Texts(vec![s.clone()]),
            Value::Array(items) => match items.first() {
                None => EmbeddingInputs::Texts(vec![]),
                Some(Value::String(_)) => EmbeddingInputs::Texts(
                    items
                        .iter()
                        .map(|i| i.as_str().map(str::to_string).ok_or_else(|| bad(shape)))
                        .collect::<Result<_, _>>()?,
                ),
                Some(Value::Number(_)) => EmbeddingInputs::Tokens(vec![items
                    .iter()
                    .map(token)
                    .collect::<Result<_, _>>(
                )?]),
                Some(Value::Array(_)) => EmbeddingInputs::Tokens(
                    items
                        .iter()
                        .map(|i| match i {
                            Value::Array(ids) => ids.iter().map(token).collect(),
                            _ => Err(bad(shape)),
                        })
                        .collect::<Result<_, _>>()?,
                ),
                Some(_) => return Err(bad(shape)),
            },
            _ => return Err(bad(shape)),
        };
        if inputs.is_empty() || inputs.len() > MAX_EMBEDDING_INPUTS {
            return Err(bad(format!(
                "input must hold 1 to {MAX_EMBEDDING_INPUTS} inputs, got {}",
                inputs.len()
            )));
        }
        let empty = match &inputs {
            EmbeddingInputs::Texts(t) => t.iter().position(String::is_empty),
            EmbeddingInputs::Tokens(t) => t.iter().position(Vec::is_empty),
        };
        if let Some(i) = empty {
            return Err(bad(format!("input[{i}] must not be empty")));
        }
        Ok(inputs)
    }

    /// The texts to embed through a pipeline, which takes neither token ids nor `dimensions`.
    pub fn texts(&self) -> Result<Vec<String>, DecodeError> {
        if self.dimensions.is_some() {
            return Err(bad(
                "dimensions is not supported: the pipeline decides the vector size",
            ));
        }
        match self.inputs()? {
            EmbeddingInputs::Texts(texts) => Ok(texts),
            EmbeddingInputs::Tokens(_) => Err(bad(
                "input: a pipeline embeds strings (token ids are for GGUF models)",
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A chat model's tools, messages and prediction.

/// One function a request offers (`tools[i].function`), its shape checked; the model checks
/// its name and parameters schema.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDef {
    pub name: String,
    pub description: Option<String>,
    /// A JSON Schema object; None: no parameters.
    pub parameters: Option<Value>,
}

/// OpenAI's `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoiceSpec {
    None,
    Auto,
    Required,
    Function(String),
}

/// A call an assistant message carries (`tool_calls[j]`).
#[derive(Debug, Clone, PartialEq)]
pub struct CallSpec {
    pub id: String,
    pub name: String,
    /// JSON text (an object sent instead of a string is written as JSON text).
    pub arguments: String,
}

/// One chat message, its content as text.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageSpec {
    /// `system` (for `developer` too), `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
    pub tool_calls: Vec<CallSpec>,
    pub tool_call_id: Option<String>,
}

/// Most messages one request may hold.
pub const MAX_MESSAGES: usize = 4096;

/// `tools`: a list of `{"type": "function", "function": {"name", "description",
/// "parameters", "strict"}}`; each error names the tool.
pub fn tools(tools: Option<&Value>) -> Result<Vec<FunctionDef>, DecodeError> {
    let items = match tools {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(bad("tools: must be a list of tools")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, tool)| {
            let name = tool["function"]["name"].as_str();
            let who = match name {
                Some(n) => format!("tools[{i}] ('{n}')"),
                None => format!("tools[{i}]"),
            };
            if !tool.is_object() {
                return Err(bad(format!("{who}: must be an object")));
            }
            match tool.get("type").and_then(Value::as_str) {
                Some("function") => {}
                Some(other) => {
                    return Err(bad(format!(
                        "{who}: type '{other}' is not supported (only 'function')"
                    )))
                }
                None => return Err(bad(format!("{who}: type must be 'function'"))),
            }
            let function = &tool["function"];
            if !function.is_object() {
                return Err(bad(format!("{who}: function must be an object")));
            }
            let Some(name) = name else {
                return Err(bad(format!("{who}: function.name must be a string")));
            };
            let description = match &function["description"] {
                Value::Null => None,
                Value::String(d) => Some(d.clone()),
                _ => return Err(bad(format!("{who}: function.description must be a string"))),
            };
            let parameters = match &function["parameters"] {
                Value::Null => None,
                p @ Value::Object(_) => Some(p.clone()),
                _ => {
                    return Err(bad(format!(
                        "{who}: function.parameters must be a JSON Schema object"
                    )))
                }
            };
            if !matches!(&function["strict"], Value::Null | Value::Bool(_)) {
                return Err(bad(format!("{who}: function.strict must be a boolean")));
            }
            Ok(FunctionDef {
                name: name.to_string(),
                description,
                parameters,
            })
        })
        .collect()
}

/// `tool_choice`: `none`, `auto`, `required` or `{"type": "function", "function": {"name"}}`;
/// by default `auto` when there are tools, else `none`. Forcing a call needs tools.
pub fn tool_choice(choice: Option<&Value>, has_tools: bool) -> Result<ToolChoiceSpec, DecodeError> {
    let spec = match choice {
        None | Some(Value::Null) if has_tools => ToolChoiceSpec::Auto,
        None | Some(Value::Null) => ToolChoiceSpec::None,
        Some(Value::String(s)) => match s.as_str() {
            "none" => ToolChoiceSpec::None,
            "auto" => ToolChoiceSpec::Auto,
            "required" => ToolChoiceSpec::Required,
            other => {
                return Err(bad(format!(
                    "tool_choice: '{other}' is not one of none, auto, required or a function"
                )))
            }
        },
        Some(v @ Value::Object(_)) => match (v["type"].as_str(), v["function"]["name"].as_str()) {
            (Some("function"), Some(name)) => ToolChoiceSpec::Function(name.to_string()),
            _ => {
                return Err(bad(
                    "tool_choice: an object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        },
        Some(_) => return Err(bad("tool_choice: must be a string or an object")),
    };
    if !has_tools && matches!(spec, ToolChoiceSpec::Required | ToolChoiceSpec::Function(_)) {
        return Err(bad("tool_choice: forcing a call needs tools"));
    }
    Ok(spec)
}

/// A content that is a string, `null` or a list of text parts, as text (parts joined).
fn text_content(content: Option<&Value>, field: &str) -> Result<String, DecodeError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (k, p) in parts.iter().enumerate() {
                match (p["type"].as_str(), p["text"].as_str()) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    (Some(other), _) if other != "text" => {
                        return Err(bad(format!(
                            "{field}[{k}]: parts of type '{other}' are not supported (only 'text')"
                        )))
                    }
                    _ => return Err(bad(format!("{field}[{k}]: a text part needs its text"))),
                }
            }
            Ok(text)
        }
        Some(_) => Err(bad(format!(
            "{field}: must be a string or a list of text parts"
        ))),
    }
}

/// `messages`: roles `system`/`developer`, `user`, `assistant` (content, `tool_calls`) and
/// `tool` (content, `tool_call_id`). Whether each result answers an earlier call is the
/// model's check, with the prompt.
pub fn messages(messages: &[Value]) -> Result<Vec<MessageSpec>, DecodeError> {
    if messages.is_empty() {
        return Err(bad("messages: must not be empty"));
    }
    if messages.len() > MAX_MESSAGES {
        return Err(bad(format!("messages: at most {MAX_MESSAGES}")));
    }
    messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let at = format!("messages[{i}]");
            if !m.is_object() {
                return Err(bad(format!("{at}: must be an object")));
            }
            let role = match m["role"].as_str() {
                Some("system" | "developer") => "system",
                Some(r @ ("user" | "assistant" | "tool")) => r,
                Some(other) => {
                    return Err(bad(format!(
                        "{at}.role: '{other}' is not supported (system, developer, user, assistant, tool)"
                    )))
                }
                None => return Err(bad(format!("{at}.role: is required"))),
            };
            let content = text_content(m.get("content"), &format!("{at}.content"))?;
            let tool_calls = match (role, m.get("tool_calls")) {
                (_, None | Some(Value::Null)) => vec![],
                ("assistant", Some(Value::Array(calls))) => calls
                    .iter()
                    .enumerate()
                    .map(|(j, c)| call(c, &format!("{at}.tool_calls[{j}]")))
                    .collect::<Result<_, _>>()?,
                ("assistant", Some(_)) => {
                    return Err(bad(format!("{at}.tool_calls: must be a list of calls")))
                }
                (_, Some(_)) => {
                    return Err(bad(format!(
                        "{at}.tool_calls: only assistant messages carry tool calls"
                    )))
                }
            };
            let tool_call_id = match (role, m.get("tool_call_id")) {
                ("tool", Some(Value::String(id))) => Some(id.clone()),
                ("tool", _) => {
                    return Err(bad(format!(
                        "{at}.tool_call_id: a tool message needs the id of the call it answers"
                    )))
                }
                _ => None,
            };
            Ok(MessageSpec {
                role: role.to_string(),
                content,
                tool_calls,
                tool_call_id,
            })
        })
        .collect()
}

fn call(c: &Value, at: &str) -> Result<CallSpec, DecodeError> {
    if !matches!(c["type"].as_str(), None | Some("function")) {
        return Err(bad(format!("{at}.type: must be 'function'")));
    }
    let Some(id) = c["id"].as_str() else {
        return Err(bad(format!("{at}.id: must be a string")));
    };
    let Some(name) = c["function"]["name"].as_str() else {
        return Err(bad(format!("{at}.function.name: must be a string")));
    };
    let arguments = match &c["function"]["arguments"] {
        Value::String(s) => s.clone(),
        v @ Value::Object(_) => v.to_string(),
        _ => {
            return Err(bad(format!(
                "{at}.function.arguments: must be a string of JSON"
            )))
        }
    };
    Ok(CallSpec {
        id: id.to_string(),
        name: name.to_string(),
        arguments,
    })
}

/// `prediction` (Predicted Outputs): `{"type": "content", "content": a string or text parts}`;
/// its text, or None when absent.
pub fn prediction(prediction: Option<&Value>) -> Result<Option<String>, DecodeError> {
    match prediction {
        None | Some(Value::Null) => Ok(None),
        Some(p @ Value::Object(_)) => {
            if p["type"].as_str() != Some("content") {
                return Err(bad("prediction.type: must be 'content'"));
            }
            match p.get("content") {
                Some(Value::String(_) | Value::Array(_)) => {
                    text_content(p.get("content"), "prediction.content").map(Some)
                }
                _ => Err(bad(
                    "prediction.content: must be a string or a list of text parts",
                )),
            }
        }
        Some(_) => Err(bad("prediction: must be an object")),
    }
}
