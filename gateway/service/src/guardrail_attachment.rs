//! Where a chat guardrail is attached (`[guardrails] chat`, a model's settings): which
//! uploaded guardrail, and the configuration it is handed. Checked when it is read, resolved
//! per request by [`crate::guardrails`].

use crate::pipelines::spec::PluginRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One guardrail attached to the chat routes: which uploaded guardrail, and what it is told.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    /// The guardrail: a plugin name (its newest upload) or `name@version`.
    pub plugin: String,
    /// Handed to the guardrail as JSON text in its `config` metadata (e.g. blocked-terms'
    /// `{"terms": [...], "action": "refuse" | "mask"}`); none: `{}`.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
}

impl Attachment {
    /// A list of attachments as an API body or a model's settings hold it, checked.
    pub fn list(value: Value) -> Result<Vec<Attachment>, String> {
        let list: Vec<Attachment> = serde_json::from_value(value).map_err(|e| {
            format!("guardrails: a list of {{\"plugin\": \"name[@version]\", \"config\": {{...}}}} is expected: {e}")
        })?;
        for a in &list {
            PluginRef::parse(&a.plugin).map_err(|e| format!("guardrails: {}", e.0))?;
            if !(a.config.is_null() || a.config.is_object()) {
                return Err(format!(
                    "guardrails: {}: config must be an object",
                    a.plugin
                ));
            }
        }
        Ok(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_are_checked() {
        let list = Attachment::list(serde_json::json!([
            {"plugin": "pii-mask"},
            {"plugin": "blocked-terms@1.0.0", "config": {"terms": ["x"]}}
        ]))
        .expect("valid");
        assert_eq!(list[1].plugin, "blocked-terms@1.0.0");
        for bad in [
            serde_json::json!({"plugin": "pii-mask"}),
            serde_json::json!([{"plugin": "pii-mask", "confg": {}}]),
            serde_json::json!([{"plugin": "pii-mask@"}]),
            serde_json::json!([{"plugin": "pii-mask", "config": ["x"]}]),
        ] {
            assert!(Attachment::list(bad.clone()).is_err(), "{bad}");
        }
    }
}
