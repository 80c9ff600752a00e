//! `/api/plugins`: the WebAssembly plugins a server runs, one view per stored version, with
//! what the plugin says about itself and the limits its calls run under.

use serde::{Deserialize, Serialize};

/// Where a plugin runs: in a pipeline, before the model or after it; or on the chat routes as a
/// guardrail (a component of the `infergate:plugin/guardrail` world).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Pre,
    Post,
    Guardrail,
}

impl PluginKind {
    /// The name the JSON (and the store) uses.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::Pre => "pre",
            PluginKind::Post => "post",
            PluginKind::Guardrail => "guardrail",
        }
    }
}

/// What a plugin's `describe` export returned when it was uploaded.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginDescription {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    /// What the plugin takes: media types for raw bytes (`image/png`, `text/plain`), tensor
    /// descriptions otherwise, or `any`.
    pub consumes: Vec<String>,
    /// What it gives, in the same notation.
    pub produces: Vec<String>,
}

/// Per-call limits of one plugin version overriding the server's `[plugins]` defaults: what
/// `PUT /api/plugins/{name}/versions/{version}/limits` takes and the view shows. An absent
/// field is the server's default; the host caps every value.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PluginLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_mib: Option<u64>,
}

/// The limits a version's calls run under now: its own, else the server's defaults, capped by
/// the host.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = PluginEffectiveLimits))]
pub struct EffectiveLimits {
    pub deadline_ms: u64,
    pub memory_mib: u64,
    pub max_output_mib: u64,
}

/// One stored plugin version: the answer of `POST /api/plugins` and of a limits change, and
/// each entry of the lists.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginView {
    pub name: String,
    pub version: String,
    pub kind: PluginKind,
    /// Of the uploaded component.
    pub sha256: String,
    pub size_bytes: u64,
    pub description: PluginDescription,
    /// The version's own limits (`{}`: the server's defaults).
    pub limits: PluginLimits,
    pub effective_limits: EffectiveLimits,
    /// Unix seconds.
    pub created_at: i64,
}

/// `GET /api/plugins`: every version, by name then upload order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginList {
    pub plugins: Vec<PluginView>,
}

/// `GET /api/plugins/{name}`: its versions in upload order (the last is the newest).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginVersions {
    pub name: String,
    pub versions: Vec<PluginView>,
}

/// `DELETE /api/plugins/{name}` and `DELETE /api/plugins/{name}/versions/{version}`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PluginDeleted {
    pub deleted: DeletedVersions,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeletedVersions {
    pub name: String,
    pub versions: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn view(limits: serde_json::Value) -> serde_json::Value {
        json!({
            "name": "top-k", "version": "0.1.0", "kind": "post", "sha256": "ab", "size_bytes": 9,
            "description": {"name": "top-k", "version": "0.1.0", "kind": "post",
                "consumes": ["FP32 [N, C]"], "produces": ["application/json: {...}"]},
            "limits": limits,
            "effective_limits": {"deadline_ms": 100, "memory_mib": 64, "max_output_mib": 16},
            "created_at": 3,
        })
    }

    #[test]
    fn a_plugin_version_keeps_its_shape() {
        for limits in [json!({}), json!({"deadline_ms": 100, "memory_mib": 64})] {
            let answer = json!({"name": "top-k", "versions": [view(limits)]});
            let parsed: PluginVersions = serde_json::from_value(answer.clone()).unwrap();
            assert_eq!(parsed.versions[0].kind, PluginKind::Post);
            assert_eq!(serde_json::to_value(&parsed).unwrap(), answer);
        }
        let list = json!({"plugins": [view(json!({"max_output_mib": 1}))]});
        let parsed: PluginList = serde_json::from_value(list.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), list);
        let deleted = json!({"deleted": {"name": "top-k", "versions": ["0.1.0"]}});
        let parsed: PluginDeleted = serde_json::from_value(deleted.clone()).unwrap();
        assert_eq!(serde_json::to_value(&parsed).unwrap(), deleted);
    }

    #[test]
    fn limits_refuse_fields_they_do_not_know() {
        assert!(serde_json::from_value::<PluginLimits>(json!({"deadline": 1})).is_err());
        assert_eq!(
            serde_json::from_value::<PluginLimits>(json!({})).unwrap(),
            PluginLimits::default()
        );
    }
}
