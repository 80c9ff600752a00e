//! The grammar that forces tool calls: `<tool_call>` blocks around a JSON object whose `name`
//! is an offered tool's and whose `arguments` follow that tool's parameters schema. The JSON
//! part comes from llama.cpp's JSON-Schema converter (the path `response_format` takes), its
//! root renamed and wrapped in the blocks.

use super::defs::{no_parameters, ToolDef};
use crate::error::LlmError;

/// Most bytes of grammar the calls may take (a schema's enums and nesting multiply).
const MAX_GRAMMAR_BYTES: usize = 256 * 1024;

/// The rule the converter's root becomes.
const CALL_RULE: &str = "tool-call";

/// A grammar for one call of one of `tools` (a block per call, several when `parallel`).
pub(super) fn calls(tools: &[&ToolDef], parallel: bool) -> Result<String, LlmError> {
    let mut alternatives = Vec::with_capacity(tools.len());
    for def in tools {
        let parameters = def.parameters.clone().unwrap_or_else(no_parameters);
        let name = serde_json::to_string(&def.name).unwrap_or_default();
        let params = serde_json::to_string(&parameters).unwrap_or_default();
        // Written by hand: "name" before "arguments", as the prompt shows calls (the converter
        // keeps the schema's order).
        let one = format!(
            r#"{{"type":"object","properties":{{"name":{{"const":{name}}},"arguments":{params}}},"required":["name","arguments"],"additionalProperties":false}}"#
        );
        // Converted alone first, so an error names its tool.
        llama_cpp_2::json_schema_to_grammar(&one).map_err(|e| {
            LlmError::InvalidParam(format!(
                "tools ('{}'): llama.cpp cannot turn its parameters into a grammar ({e})",
                def.name
            ))
        })?;
        alternatives.push(one);
    }
    let schema = match alternatives.as_slice() {
        [one] => one.clone(),
        many => format!(r#"{{"anyOf":[{}]}}"#, many.join(",")),
    };
    let json = llama_cpp_2::json_schema_to_grammar(&schema).map_err(|e| {
        LlmError::InvalidParam(format!(
            "tools: llama.cpp cannot turn the tools into a grammar ({e})"
        ))
    })?;
    let block = format!(r#""<tool_call>\n" {CALL_RULE} "\n</tool_call>""#);
    let root = if parallel {
        format!("root ::= {block} (\"\\n\" {block})*\n")
    } else {
        format!("root ::= {block}\n")
    };
    let grammar = format!("{root}{}", rename_rule(&json, "root", CALL_RULE));
    if grammar.len() > MAX_GRAMMAR_BYTES {
        return Err(LlmError::InvalidParam(format!(
            "tools: their schemas make a grammar of {} bytes, more than {MAX_GRAMMAR_BYTES}",
            grammar.len()
        )));
    }
    Ok(grammar)
}

/// `grammar` (GBNF) with rule `from` named `to`, where it is defined and used; strings and
/// character classes are left alone.
fn rename_rule(grammar: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(grammar.len());
    let mut chars = grammar.char_indices().peekable();
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    while let Some((i, c)) = chars.next() {
        match c {
            '"' | '[' => {
                let close = if c == '"' { '"' } else { ']' };
                out.push(c);
                while let Some((_, d)) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some((_, e)) = chars.next() {
                            out.push(e);
                        }
                    } else if d == close {
                        break;
                    }
                }
            }
            c if is_name(c) => {
                let mut end = i + c.len_utf8();
                while let Some(&(j, d)) = chars.peek() {
                    if !is_name(d) {
                        break;
                    }
                    end = j + d.len_utf8();
                    chars.next();
                }
                let word = &grammar[i..end];
                out.push_str(if word == from { to } else { word });
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_rule_is_renamed() {
        let g = "root ::= \"root\" [root] x-root root\nx-root ::= root-2 \"\\\"root\"\n";
        assert_eq!(
            rename_rule(g, "root", "call"),
            "call ::= \"root\" [root] x-root call\nx-root ::= root-2 \"\\\"root\"\n"
        );
    }
}
