//! A request's tools checked once: names, schemas (size, keywords the grammar converter
//! supports, compiled for validation), the choice against them, and a forced call's grammar.

use super::defs::{no_parameters, ToolChoice, ToolDef, MAX_SCHEMA_BYTES, MAX_TOOLS};
use super::grammar;
use crate::error::LlmError;
use serde_json::Value;
use std::sync::Arc;

/// A request's tools, checked: names unique and well formed, schemas small, supported by the
/// grammar converter and compiled for validation. Cloning shares them (a stream parser holds a
/// clone).
#[derive(Clone)]
pub struct Tools {
    defs: Arc<[ToolDef]>,
    validators: Arc<[jsonschema::Validator]>,
    choice: ToolChoice,
    parallel: bool,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("defs", &self.defs)
            .field("choice", &self.choice)
            .field("parallel", &self.parallel)
            .finish()
    }
}

impl Tools {
    /// Checks `defs` (each error names the tool: `tools[i] ('name'): ...`) and the choice
    /// against them; `parallel` is OpenAI's `parallel_tool_calls` (false: one call at most).
    pub fn new(defs: Vec<ToolDef>, choice: ToolChoice, parallel: bool) -> Result<Tools, LlmError> {
        let bad = |m: String| Err(LlmError::InvalidParam(m));
        if defs.len() > MAX_TOOLS {
            return bad(format!("tools: at most {MAX_TOOLS} tools"));
        }
        let mut validators = Vec::with_capacity(defs.len());
        for (i, def) in defs.iter().enumerate() {
            let who = format!("tools[{i}] ('{}')", def.name);
            let name_ok = (1..=64).contains(&def.name.len())
                && def
                    .name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
            if !name_ok {
                return bad(format!(
                    "{who}: a name is 1 to 64 letters, digits, '_' or '-'"
                ));
            }
            if defs[..i].iter().any(|d| d.name == def.name) {
                return bad(format!("{who}: another tool has this name"));
            }
            let schema = def.parameters.clone().unwrap_or_else(no_parameters);
            let Value::Object(map) = &schema else {
                return bad(format!("{who}: parameters must be a JSON Schema object"));
            };
            if map.get("type").is_some_and(|t| t != "object") {
                return bad(format!(
                    "{who}: parameters must describe an object (\"type\": \"object\")"
                ));
            }
            let size = serde_json::to_string(&schema).map_or(usize::MAX, |s| s.len());
            if size > MAX_SCHEMA_BYTES {
                return bad(format!(
                    "{who}: parameters is {size} bytes of JSON Schema, at most {MAX_SCHEMA_BYTES}"
                ));
            }
            crate::params::unsupported_keyword(&schema, "parameters")
                .map_err(|e| LlmError::InvalidParam(format!("{who}: {e}")))?;
            let validator = jsonschema::validator_for(&schema).map_err(|e| {
                LlmError::InvalidParam(format!("{who}: parameters is not a valid JSON Schema: {e}"))
            })?;
            validators.push(validator);
        }
        match &choice {
            ToolChoice::Required if defs.is_empty() => {
                return bad("tool_choice: 'required' needs tools".into())
            }
            ToolChoice::Function(name) if !defs.iter().any(|d| &d.name == name) => {
                return bad(format!("tool_choice: no tool is named '{name}'"));
            }
            _ => {}
        }
        let tools = Tools {
            defs: defs.into(),
            validators: validators.into(),
            choice,
            parallel,
        };
        // A forced call's grammar must build; its errors name the tool.
        tools.grammar()?;
        Ok(tools)
    }

    pub fn defs(&self) -> &[ToolDef] {
        &self.defs
    }

    pub fn choice(&self) -> &ToolChoice {
        &self.choice
    }

    pub fn parallel(&self) -> bool {
        self.parallel
    }

    /// Whether the tools are offered to the model (there are some and the choice is not
    /// `none`).
    pub fn offered(&self) -> bool {
        !self.defs.is_empty() && self.choice != ToolChoice::None
    }

    /// Whether a grammar forces the call (`required` or a named function).
    pub fn forced(&self) -> bool {
        matches!(self.choice, ToolChoice::Required | ToolChoice::Function(_))
    }

    /// The grammar (GBNF, root `root`) a forced choice samples with: one `<tool_call>` block
    /// per call of an offered tool (of the named one), its arguments valid against the tool's
    /// schema, several blocks when parallel calls are allowed and the choice is `required`.
    /// None for `auto` and `none`.
    pub fn grammar(&self) -> Result<Option<String>, LlmError> {
        match &self.choice {
            ToolChoice::None | ToolChoice::Auto => Ok(None),
            ToolChoice::Required => {
                grammar::calls(&self.defs.iter().collect::<Vec<_>>(), self.parallel).map(Some)
            }
            ToolChoice::Function(name) => {
                let def: Vec<&ToolDef> = self.defs.iter().filter(|d| &d.name == name).collect();
                grammar::calls(&def, false).map(Some)
            }
        }
    }

    /// Why `arguments` are not a valid call of tool `name`, if they are not.
    pub(crate) fn invalid_call(&self, name: &str, arguments: &Value) -> Option<String> {
        let Some(i) = self.defs.iter().position(|d| d.name == name) else {
            return Some(format!("no tool is named '{name}'"));
        };
        if !arguments.is_object() {
            return Some("the arguments are not a JSON object".into());
        }
        self.validators[i]
            .iter_errors(arguments)
            .next()
            .map(|e| format!("{name}: {e}"))
    }
}
