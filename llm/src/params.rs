//! Per-sequence generation parameters, checked once, and the llama.cpp sampler chain they make.

use crate::error::LlmError;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;

pub const MAX_STOP_SEQUENCES: usize = 4;
pub const MAX_TOP_LOGPROBS: u32 = 20;
/// Penalties look at this many of the last generated tokens (llama.cpp's default window).
const PENALTY_WINDOW: i32 = 64;

/// How the output is constrained.
#[derive(Debug, Clone, PartialEq)]
pub enum Constraint {
    None,
    /// Any JSON object (OpenAI's `json_object`).
    JsonObject,
    /// JSON valid against this schema (OpenAI's `json_schema`).
    JsonSchema(serde_json::Value),
}

#[derive(Debug, Clone)]
pub struct SamplingParams {
    /// 0 = greedy.
    pub temperature: f32,
    pub top_p: f32,
    /// 0 = off.
    pub top_k: i32,
    /// 0 = off.
    pub min_p: f32,
    /// None = a random seed.
    pub seed: Option<u64>,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    pub max_tokens: u32,
    pub stop: Vec<String>,
    /// Log probabilities of the chosen tokens, with this many alternatives each.
    pub logprobs: Option<u32>,
    pub constraint: Constraint,
    /// Scheduling order, as vLLM's `priority`: lower values are admitted (and their prompts
    /// computed) first; equal ones in arrival order. Running sequences are never preempted.
    pub priority: i32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            min_p: 0.0,
            seed: None,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            max_tokens: 16,
            stop: vec![],
            logprobs: None,
            constraint: Constraint::None,
            priority: 0,
        }
    }
}

impl SamplingParams {
    /// Checks the ranges OpenAI documents; the error names the field.
    pub fn validate(&self) -> Result<(), LlmError> {
        let bad = |field: &str, rule: &str| Err(LlmError::InvalidParam(format!("{field}: {rule}")));
        if !(0.0..=2.0).contains(&self.temperature) {
            return bad("temperature", "must be between 0 and 2");
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", "must be in (0, 1]");
        }
        if self.top_k < 0 {
            return bad("top_k", "must be 0 (off) or positive");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", "must be between 0 and 1");
        }
        for (field, v) in [
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(field, "must be between -2 and 2");
            }
        }
        if self.max_tokens == 0 {
            return bad("max_tokens", "must be at least 1");
        }
        if self.stop.len() > MAX_STOP_SEQUENCES || self.stop.iter().any(String::is_empty) {
            return bad(
                "stop",
                &format!("at most {MAX_STOP_SEQUENCES} non-empty sequences"),
            );
        }
        if self.logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS) {
            return bad(
                "top_logprobs",
                &format!("must be between 0 and {MAX_TOP_LOGPROBS}"),
            );
        }
        Ok(())
    }

    /// The grammar (GBNF) the output must follow, if any. A schema llama.cpp cannot convert is
    /// the client's fault.
    pub fn grammar(&self) -> Result<Option<String>, LlmError> {
        match &self.constraint {
            Constraint::None => Ok(None),
            Constraint::JsonObject => Ok(Some(JSON_OBJECT_GRAMMAR.to_string())),
            Constraint::JsonSchema(schema) => {
                unsupported_keyword(schema, "response_format.json_schema.schema")?;
                let text = serde_json::to_string(schema)
                    .map_err(|e| LlmError::InvalidParam(format!("response_format: {e}")))?;
                llama_cpp_2::json_schema_to_grammar(&text).map(Some).map_err(|e| {
                    LlmError::InvalidParam(format!(
                        "response_format.json_schema.schema: llama.cpp cannot turn it into a grammar ({e})"
                    ))
                })
            }
        }
    }

    /// The sampler chain: penalties, grammar, then greedy or top-k → top-p → min-p →
    /// temperature → a seeded draw (llama.cpp's common order).
    pub(crate) fn sampler(
        &self,
        model: &LlamaModel,
        grammar: Option<&str>,
        seed: u32,
    ) -> Result<LlamaSampler, LlmError> {
        let mut chain = Vec::new();
        if self.presence_penalty != 0.0 || self.frequency_penalty != 0.0 {
            chain.push(LlamaSampler::penalties(
                model.n_vocab(),
                PENALTY_WINDOW,
                1.0,
                self.frequency_penalty,
                self.presence_penalty,
            ));
        }
        if let Some(g) = grammar {
            chain.push(LlamaSampler::grammar(model, g, "root").map_err(|e| {
                LlmError::InvalidParam(format!("response_format: the grammar does not load ({e})"))
            })?);
        }
        if self.temperature == 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            if self.top_k > 0 {
                chain.push(LlamaSampler::top_k(self.top_k));
            }
            if self.top_p < 1.0 {
                chain.push(LlamaSampler::top_p(self.top_p, 1));
            }
            if self.min_p > 0.0 {
                chain.push(LlamaSampler::min_p(self.min_p, 1));
            }
            chain.push(LlamaSampler::temp(self.temperature));
            chain.push(LlamaSampler::dist(seed));
        }
        Ok(LlamaSampler::chain_simple(chain))
    }
}

/// Keywords llama.cpp's converter skips silently (its grammars/README.md): a schema using them
/// is refused, since the output could not be guaranteed to validate.
const UNSUPPORTED_KEYWORDS: [&str; 11] = [
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "patternProperties",
    "prefixItems",
];

pub(crate) fn unsupported_keyword(schema: &serde_json::Value, path: &str) -> Result<(), LlmError> {
    match schema {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                let here = format!("{path}.{key}");
                // Under `properties`/`$defs` the keys are names, not keywords.
                let names = matches!(key.as_str(), "properties" | "$defs" | "definitions");
                if !names && UNSUPPORTED_KEYWORDS.contains(&key.as_str()) {
                    return Err(LlmError::InvalidParam(format!(
                        "{here}: '{key}' is not supported by the grammar converter"
                    )));
                }
                if names {
                    if let serde_json::Value::Object(children) = value {
                        for (name, child) in children {
                            unsupported_keyword(child, &format!("{here}.{name}"))?;
                        }
                    }
                } else {
                    unsupported_keyword(value, &here)?;
                }
            }
            Ok(())
        }
        serde_json::Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| unsupported_keyword(item, &format!("{path}[{i}]"))),
        _ => Ok(()),
    }
}

/// Any JSON object (llama.cpp's `grammars/json.gbnf`, rooted at an object), with bounded
/// whitespace so a weak model cannot pad forever.
const JSON_OBJECT_GRAMMAR: &str = r#"root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
ws ::= | " " | "\n" [ \t]{0,20}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked_and_the_field_named() {
        assert!(SamplingParams::default().validate().is_ok());
        let cases: Vec<(SamplingParams, &str)> = vec![
            (
                SamplingParams {
                    temperature: 2.5,
                    ..Default::default()
                },
                "temperature",
            ),
            (
                SamplingParams {
                    top_p: 0.0,
                    ..Default::default()
                },
                "top_p",
            ),
            (
                SamplingParams {
                    min_p: 1.5,
                    ..Default::default()
                },
                "min_p",
            ),
            (
                SamplingParams {
                    frequency_penalty: 3.0,
                    ..Default::default()
                },
                "frequency_penalty",
            ),
            (
                SamplingParams {
                    max_tokens: 0,
                    ..Default::default()
                },
                "max_tokens",
            ),
            (
                SamplingParams {
                    stop: vec!["".into()],
                    ..Default::default()
                },
                "stop",
            ),
            (
                SamplingParams {
                    logprobs: Some(21),
                    ..Default::default()
                },
                "top_logprobs",
            ),
        ];
        for (p, field) in cases {
            let e = p.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }

    #[test]
    fn json_schemas_become_grammars() {
        let p = SamplingParams {
            constraint: Constraint::JsonSchema(serde_json::json!({
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            })),
            ..Default::default()
        };
        let g = p.grammar().unwrap().unwrap();
        assert!(g.contains("root ::="), "{g}");
        assert!(g.contains("city"), "{g}");
        // A property may be named like a keyword; the keyword itself is refused.
        let named = SamplingParams {
            constraint: Constraint::JsonSchema(serde_json::json!({
                "type": "object", "properties": {"not": {"type": "string"}},
            })),
            ..Default::default()
        };
        assert!(named.grammar().is_ok());
        let refused = SamplingParams {
            constraint: Constraint::JsonSchema(serde_json::json!({
                "type": "array", "items": {"type": "string"}, "uniqueItems": true,
            })),
            ..Default::default()
        };
        let e = refused.grammar().unwrap_err().to_string();
        assert!(e.contains("schema.uniqueItems"), "{e}");
    }
}
