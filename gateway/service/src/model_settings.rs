//! Models' own settings (the store's `model_settings`: what belongs to a model rather than to
//! one of its versions, so that it survives the next upload), in memory next to the catalog so
//! that the request path never reads the store for them.
//!
//! The store keeps one JSON object per model, one field per feature; this view parses each
//! field it knows once, when it changes, and keeps the others as they are (a feature this
//! build does not know is left alone, not dropped). Fields today:
//! - [`TRAFFIC`]: the traffic policy (weighted, sticky and mirrored traffic between versions),
//!   compiled into a [`TrafficRoute`];
//! - [`PAYLOAD_LOG`]: which requests are logged, and to which sink (`crate::payload_log`);
//! - [`GUARDRAILS`]: the chat guardrails attached to the model (after the server's).
//!
//! A new feature adds a field name, its parsed form to [`Settings`], and a line in
//! [`Settings::parse`]; no table, no store method.
//!
//! Updated by the routes that write settings, by the model repository when a model goes, and
//! on PostgreSQL by `replica_sync` when another replica wrote them.

use crate::error::{ApiError, ApiResult};
use crate::guardrail_attachment::Attachment;
use crate::payload_log::setting::LogSetting;
use infergate_store::{Store, StoreError};
use infergate_traffic::choose::Router;
use infergate_traffic::policy::TrafficPolicy;
use parking_lot::RwLock;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The field of a model's settings that holds its traffic policy.
pub const TRAFFIC: &str = "traffic";

/// The field of a model's settings that says whether its payloads are logged.
pub const PAYLOAD_LOG: &str = "payload_log";
/// The field of a model's settings that holds its chat guardrails.
pub const GUARDRAILS: &str = "guardrails";

/// A traffic policy compiled for the request path.
#[derive(Debug)]
pub struct TrafficRoute {
    pub policy: TrafficPolicy,
    pub router: Router,
}

impl TrafficRoute {
    pub fn new(policy: TrafficPolicy) -> TrafficRoute {
        TrafficRoute {
            router: Router::new(&policy),
            policy,
        }
    }
}

/// One model's settings, parsed.
#[derive(Debug, Default)]
pub struct Settings {
    pub traffic: Option<Arc<TrafficRoute>>,
    pub payload_log: Option<Arc<LogSetting>>,
    /// The chat guardrails attached to the model, in order.
    pub guardrails: Vec<Attachment>,
    /// Why the stored guardrails do not parse: serving without them would let unchecked text
    /// through, so the model's chat requests fail with it instead.
    pub guardrails_error: Option<String>,
    /// The stored object, every field (known or not), as the API shows it.
    pub raw: Map<String, Value>,
}

impl Settings {
    /// Parses the fields this build knows. A stored field that no longer parses (written by a
    /// newer replica, or by hand) is logged and left out: the model serves as if it were not
    /// set, rather than not at all.
    pub fn parse(model: &str, raw: Map<String, Value>) -> Settings {
        let traffic = raw.get(TRAFFIC).and_then(|v| {
            let text = v.to_string();
            match TrafficPolicy::from_json(text.as_bytes()) {
                Ok(policy) => Some(Arc::new(TrafficRoute::new(policy))),
                Err(e) => {
                    tracing::error!(model, error = %e, "stored traffic policy does not parse; ignored");
                    None
                }
            }
        });
        let payload_log = raw.get(PAYLOAD_LOG).and_then(|v| match LogSetting::from_stored(v) {
            Ok(setting) => Some(Arc::new(setting)),
            Err(e) => {
                tracing::error!(model, error = %e, "stored payload log setting does not parse; ignored");
                None
            }
        });
        let (guardrails, guardrails_error) = match raw
            .get(GUARDRAILS)
            .map(|v| Attachment::list(v.clone()))
        {
            None => (Vec::new(), None),
            Some(Ok(list)) => (list, None),
            Some(Err(e)) => {
                tracing::error!(model, error = %e, "stored guardrails do not parse; the model's chat requests fail until they are set again");
                (Vec::new(), Some(e))
            }
        };
        Settings {
            traffic,
            payload_log,
            guardrails,
            guardrails_error,
            raw,
        }
    }
}

/// Every model's settings, by model name.
#[derive(Default)]
pub struct ModelSettings {
    models: RwLock<HashMap<String, Arc<Settings>>>,
    /// Whether any model has settings: the request path skips the lookup when none has.
    any: AtomicBool,
}

impl ModelSettings {
    /// Every model's settings from the store.
    pub fn load(store: &Store) -> Result<ModelSettings, StoreError> {
        let settings = ModelSettings::default();
        settings.replace_all(store.list_model_settings()?);
        Ok(settings)
    }

    /// Replaces everything with `stored` (start-up, a replica's re-read).
    pub fn replace_all(&self, stored: Vec<(String, Map<String, Value>)>) {
        let map: HashMap<String, Arc<Settings>> = stored
            .into_iter()
            .map(|(name, raw)| {
                let parsed = Arc::new(Settings::parse(&name, raw));
                (name, parsed)
            })
            .collect();
        let mut models = self.models.write();
        self.any.store(!map.is_empty(), Ordering::Relaxed);
        *models = map;
    }

    /// `name`'s settings are now `raw` (empty: it has none).
    pub fn set(&self, name: &str, raw: Map<String, Value>) {
        let mut models = self.models.write();
        if raw.is_empty() {
            models.remove(name);
        } else {
            models.insert(name.to_owned(), Arc::new(Settings::parse(name, raw)));
        }
        self.any.store(!models.is_empty(), Ordering::Relaxed);
    }

    /// Writes `name`'s settings field `field` (None removes it) to `store` and applies what is
    /// stored now here; returns it. Not found: the model was deleted meanwhile.
    pub async fn write(
        &self,
        store: &Arc<Store>,
        name: &str,
        field: &'static str,
        value: Option<Value>,
    ) -> ApiResult<Map<String, Value>> {
        let store = store.clone();
        let model = name.to_owned();
        let written =
            tokio::task::spawn_blocking(move || store.set_model_setting(&model, field, value))
                .await
                .map_err(|e| ApiError::internal(format!("settings task failed: {e}")))??;
        let settings = written
            .ok_or_else(|| ApiError::not_found(format!("model '{name}' was deleted meanwhile")))?;
        self.set(name, settings.clone());
        Ok(settings)
    }

    /// Forgets `name`'s settings (the model is gone).
    pub fn remove(&self, name: &str) {
        self.set(name, Map::new());
    }

    pub fn get(&self, name: &str) -> Option<Arc<Settings>> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.models.read().get(name).cloned()
    }

    /// `name`'s traffic policy, when it has one.
    pub fn traffic(&self, name: &str) -> Option<Arc<TrafficRoute>> {
        self.get(name)?.traffic.clone()
    }

    /// `name`'s payload log setting, when it has one.
    pub fn payload_log(&self, name: &str) -> Option<Arc<LogSetting>> {
        self.get(name)?.payload_log.clone()
    }

    /// The stored objects of every model that has settings, by name.
    pub fn all(&self) -> Vec<(String, Map<String, Value>)> {
        let mut all: Vec<_> = self
            .models
            .read()
            .iter()
            .map(|(name, s)| (name.clone(), s.raw.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn known_fields_are_parsed_and_others_kept() {
        let settings = ModelSettings::default();
        assert!(settings.get("m").is_none());
        settings.set(
            "m",
            object(json!({
                "traffic": {"split": [{"version": 1, "weight": 9}, {"version": 2, "weight": 1}]},
                "guardrails": ["later"],
            })),
        );
        let route = settings.traffic("m").expect("a route");
        assert!(route.router.splits());
        assert_eq!(
            settings.get("m").unwrap().raw["guardrails"],
            json!(["later"])
        );
        // A policy that no longer parses leaves the model without one, not without settings.
        settings.set("bad", object(json!({"traffic": {"canary": 5}})));
        assert!(settings.traffic("bad").is_none());
        assert!(settings.get("bad").is_some());
        settings.remove("m");
        settings.remove("bad");
        assert!(settings.get("m").is_none());
        assert!(settings.all().is_empty());
        settings.replace_all(vec![(
            "x".into(),
            object(json!({"traffic": {"mirror": {"version": 2, "percent": 5}}})),
        )]);
        assert!(!settings.traffic("x").unwrap().router.splits());
    }
}
