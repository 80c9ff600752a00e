//! The model versions in the database, kept in memory so the request path never queries the
//! store for them, with each model's version policy parsed once.

use crate::error::{ApiError, ApiResult};
use infergate_engine::{ModelConfig, ModelKey, VersionPolicy};
use infergate_store::models::ModelRecord;
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The engine's key for a stored version.
pub fn model_key(record: &ModelRecord) -> ModelKey {
    ModelKey {
        name: record.name.clone(),
        version: record.version,
    }
}

/// The model versions in the database, kept in memory so the request path never queries SQLite
/// for them. Updated by the handlers that change the database.
#[derive(Default)]
pub struct Catalog {
    models: RwLock<BTreeMap<String, ModelVersions>>,
}

/// One model's versions and the version policy its newest version's config names, parsed
/// when the versions change so the request path never parses configuration.
#[derive(Default)]
struct ModelVersions {
    versions: BTreeMap<u64, Arc<ModelRecord>>,
    policy: Option<VersionPolicy>,
}

impl ModelVersions {
    fn refresh_policy(&mut self) {
        self.policy = self.versions.values().next_back().and_then(|newest| {
            newest.config.get("version_policy")?;
            ModelConfig::from_json(&newest.config)
                .ok()
                .and_then(|c| c.version_policy)
        });
    }
}

impl Catalog {
    pub fn replace_all(&self, records: Vec<ModelRecord>) {
        let mut map: BTreeMap<String, ModelVersions> = BTreeMap::new();
        for r in records {
            map.entry(r.name.clone())
                .or_default()
                .versions
                .insert(r.version, Arc::new(r));
        }
        map.values_mut().for_each(ModelVersions::refresh_policy);
        *self.models.write() = map;
    }

    pub fn insert(&self, record: ModelRecord) {
        let mut models = self.models.write();
        let entry = models.entry(record.name.clone()).or_default();
        entry.versions.insert(record.version, Arc::new(record));
        entry.refresh_policy();
    }

    pub fn remove(&self, name: &str, version: u64) {
        let mut models = self.models.write();
        if let Some(entry) = models.get_mut(name) {
            entry.versions.remove(&version);
            if entry.versions.is_empty() {
                models.remove(name);
            } else {
                entry.refresh_policy();
            }
        }
    }

    /// A version the newest version's `version_policy` serves, or the policy's default when
    /// `version` is None (the newest without a policy). 404 names what is missing, in Triton's
    /// words first ("Request for unknown model: 'm' is not found", which its clients match).
    pub fn resolve(&self, name: &str, version: Option<u64>) -> ApiResult<Arc<ModelRecord>> {
        let models = self.models.read();
        let unknown =
            || ApiError::not_found(format!("Request for unknown model: '{name}' is not found"));
        let no_version = |v: u64, why: &str| {
            ApiError::not_found(format!(
                "Request for unknown model: '{name}' version {v} is not found{why}"
            ))
        };
        let entry = models.get(name).ok_or_else(unknown)?;
        let versions = &entry.versions;
        let newest = versions.values().next_back().ok_or_else(unknown)?;
        // Without a policy every stored version is addressable and the newest is the default.
        let Some(policy) = &entry.policy else {
            return match version {
                Some(v) => versions.get(&v).cloned().ok_or_else(|| no_version(v, "")),
                None => Ok(newest.clone()),
            };
        };
        let available: Vec<u64> = versions.keys().copied().collect();
        let servable = policy.servable(&available);
        let wanted = match version {
            Some(v) if !versions.contains_key(&v) => return Err(no_version(v, "")),
            Some(v) if !servable.versions.contains(&v) => {
                return Err(no_version(v, " (its version policy does not serve it)"))
            }
            Some(v) => v,
            None => servable.default.ok_or_else(|| {
                ApiError::not_found(format!(
                    "Request for unknown model: '{name}' has no available versions (none its version policy serves)"
                ))
            })?,
        };
        versions
            .get(&wanted)
            .cloned()
            .ok_or_else(|| no_version(wanted, ""))
    }

    /// One stored version, whatever the version policy serves (a traffic split names its
    /// versions itself).
    pub fn version(&self, name: &str, version: u64) -> Option<Arc<ModelRecord>> {
        self.models
            .read()
            .get(name)
            .and_then(|m| m.versions.get(&version).cloned())
    }

    pub fn versions(&self, name: &str) -> Vec<Arc<ModelRecord>> {
        self.models
            .read()
            .get(name)
            .map(|v| v.versions.values().cloned().collect())
            .unwrap_or_default()
    }

    /// `name`'s versions; not found (naming the model) when it has none: what the routes on
    /// a model's own settings answer for a model that does not exist.
    pub fn known_versions(&self, name: &str) -> ApiResult<Vec<Arc<ModelRecord>>> {
        let versions = self.versions(name);
        if versions.is_empty() {
            return Err(ApiError::not_found(format!("unknown model '{name}'")));
        }
        Ok(versions)
    }

    pub fn all(&self) -> Vec<Arc<ModelRecord>> {
        self.models
            .read()
            .values()
            .flat_map(|v| v.versions.values().cloned())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, config: serde_json::Value) -> ModelRecord {
        ModelRecord {
            name: "m".into(),
            version,
            sha256: format!("{version:064}"),
            size_bytes: 1,
            signature: infergate_engine::ModelSignature {
                inputs: vec![],
                outputs: vec![],
                metadata: Default::default(),
            },
            config,
            created_at: 0,
        }
    }

    #[test]
    fn the_newest_versions_policy_decides_what_resolves() {
        let catalog = Catalog::default();
        catalog.replace_all(vec![record(1, serde_json::json!({}))]);
        catalog.insert(record(2, serde_json::json!({"version_policy": "latest:1"})));
        assert_eq!(catalog.resolve("m", None).unwrap().version, 2);
        let refused = catalog.resolve("m", Some(1)).unwrap_err();
        assert_eq!(refused.kind, crate::error::Kind::NotFound);
        assert!(
            refused.message.contains("version policy"),
            "{}",
            refused.message
        );
        // Version 1 names no policy: once it is the newest, every version is addressable.
        catalog.remove("m", 2);
        assert_eq!(catalog.resolve("m", Some(1)).unwrap().version, 1);
        assert!(catalog.resolve("m", Some(2)).is_err());
    }
}
