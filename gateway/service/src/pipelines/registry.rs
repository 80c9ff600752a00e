//! The compiled plugins the server can run, kept in memory next to their rows: pipeline plugins
//! and chat guardrails alike (an upload is either, as its component's world says). A plugin is
//! stored only after the host compiled it and read its description; at start every stored
//! plugin is compiled again (from the host's on-disk artifact cache, so this is fast).

use super::spec::PluginRef;
use crate::error::{ApiError, ApiResult};
use infergate_api_types::plugins::{self, PluginDescription, PluginLimits};
use infergate_plugin_host::{
    Description, Guardrail, Limits, Loaded, Plugin, PluginError, PluginHost, PluginKind,
};
use infergate_store::plugins::{PluginDescriptionRow, PluginInsert, PluginRecord};
use infergate_store::{BlobKind, Store};
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// Reads a version's limits (as PUT, or as stored), refusing unknown fields and zeros.
pub fn parse_limits(value: &serde_json::Value) -> ApiResult<PluginLimits> {
    let limits: PluginLimits = serde_json::from_value(value.clone())
        .map_err(|e| ApiError::bad_request(format!("invalid plugin limits: {e}")))?;
    if limits.deadline_ms == Some(0)
        || limits.memory_mib == Some(0)
        || limits.max_output_mib == Some(0)
    {
        return Err(ApiError::bad_request(
            "invalid plugin limits: every limit must be at least 1",
        ));
    }
    Ok(limits)
}

/// The host limits a version's calls run under: its own where it has them, else `defaults`.
fn apply_limits(limits: &PluginLimits, defaults: &Limits) -> Limits {
    let mib = |m: u64| {
        usize::try_from(m)
            .unwrap_or(usize::MAX)
            .saturating_mul(1 << 20)
    };
    Limits {
        deadline: limits
            .deadline_ms
            .map_or(defaults.deadline, Duration::from_millis),
        memory_bytes: limits.memory_mib.map_or(defaults.memory_bytes, mib),
        output_bytes: limits.max_output_mib.map_or(defaults.output_bytes, mib),
        ..defaults.clone()
    }
}

/// A stored plugin version and its compiled form.
pub struct LoadedPlugin {
    pub record: PluginRecord,
    /// The version's own limits, as applied to `plugin` (the defaults where the stored value
    /// does not parse).
    pub limits: PluginLimits,
    pub plugin: Loaded,
}

impl LoadedPlugin {
    /// Where it runs: before or after a pipeline's model, or on the chat routes.
    pub fn kind(&self) -> plugins::PluginKind {
        match &self.plugin {
            Loaded::Pipeline(p) => kind_of(p.description().kind),
            Loaded::Guardrail(_) => plugins::PluginKind::Guardrail,
        }
    }

    /// The pipeline plugin this version is. Pipelines check kinds when they resolve their
    /// plugins, so a guardrail here is the gateway's bug.
    pub fn pipeline(&self) -> Result<&Plugin, PluginError> {
        match &self.plugin {
            Loaded::Pipeline(p) => Ok(p),
            Loaded::Guardrail(_) => Err(PluginError::Internal(format!(
                "{}@{} is a chat guardrail, not a pipeline plugin",
                self.record.name, self.record.version
            ))),
        }
    }

    /// The chat guardrail this version is, if it is one.
    pub fn guardrail(&self) -> Option<&Guardrail> {
        match &self.plugin {
            Loaded::Guardrail(g) => Some(g),
            Loaded::Pipeline(_) => None,
        }
    }

    /// What the plugin says it is, as stored and answered.
    pub fn description(&self) -> PluginDescription {
        describe(&self.plugin)
    }

    /// The limits its calls run under.
    pub fn effective_limits(&self) -> &Limits {
        match &self.plugin {
            Loaded::Pipeline(p) => p.limits(),
            Loaded::Guardrail(g) => g.limits(),
        }
    }
}

/// What a compiled plugin says it is. A guardrail takes and gives chat text.
fn describe(loaded: &Loaded) -> PluginDescription {
    match loaded {
        Loaded::Pipeline(p) => description_of(p.description()),
        Loaded::Guardrail(g) => {
            let d = g.description();
            PluginDescription {
                name: d.name.clone(),
                version: d.version.clone(),
                kind: plugins::PluginKind::Guardrail,
                consumes: vec!["chat messages and answers (text)".into()],
                produces: vec![format!("pass, rewrite or refuse: {}", d.summary)],
            }
        }
    }
}

/// `loaded` with `limits` for its calls.
fn with_limits(loaded: Loaded, limits: Limits) -> Loaded {
    match loaded {
        Loaded::Pipeline(p) => Loaded::Pipeline(p.with_limits(limits)),
        Loaded::Guardrail(g) => Loaded::Guardrail(g.with_limits(limits)),
    }
}

pub struct PluginRegistry {
    host: Arc<PluginHost>,
    /// Name → versions in upload order (the last is the newest).
    loaded: RwLock<BTreeMap<String, Vec<Arc<LoadedPlugin>>>>,
    /// Stored plugins that failed to compile at start, with the reason (shown on use).
    broken: RwLock<BTreeMap<(String, String), String>>,
}

pub fn kind_of(kind: PluginKind) -> plugins::PluginKind {
    match kind {
        PluginKind::Pre => plugins::PluginKind::Pre,
        PluginKind::Post => plugins::PluginKind::Post,
    }
}

/// What a plugin says it is, as stored and answered.
pub fn description_of(d: &Description) -> PluginDescription {
    PluginDescription {
        name: d.name.clone(),
        version: d.version.clone(),
        kind: kind_of(d.kind),
        consumes: d.consumes.clone(),
        produces: d.produces.clone(),
    }
}

impl PluginRegistry {
    /// Compiles every stored plugin. One that no longer compiles (a host upgrade that dropped
    /// its world version, a damaged file) is reported and left out; the server still starts.
    pub fn load(host: Arc<PluginHost>, store: &Store) -> ApiResult<PluginRegistry> {
        let registry = PluginRegistry {
            host,
            loaded: RwLock::new(BTreeMap::new()),
            broken: RwLock::new(BTreeMap::new()),
        };
        for record in store.list_plugins()? {
            registry.load_stored(store, record);
        }
        Ok(registry)
    }

    /// Compiles a stored version from its file and serves it, or records why it does not load.
    fn load_stored(&self, store: &Store, record: PluginRecord) {
        // Checked against its sha256; with PostgreSQL fetched first when this replica lacks it.
        let compiled = store
            .local_blob(BlobKind::Plugin, &record.sha256)
            .map_err(|e| e.to_string())
            .and_then(|path| {
                std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))
            })
            .and_then(|bytes| self.host.load(&bytes).map_err(|e| e.to_string()));
        match compiled {
            Ok(plugin) => {
                self.insert(record, plugin);
            }
            Err(reason) => {
                tracing::error!(plugin = %record.name, version = %record.version, %reason, "stored plugin does not load");
                self.broken
                    .write()
                    .insert((record.name.clone(), record.version.clone()), reason);
            }
        }
    }

    /// Makes the served plugins what `store` holds now: versions another replica uploaded are
    /// compiled and served, deleted ones dropped, changed limits applied. Blocking (compiles):
    /// run it on a blocking thread. Only versions served before the store was read are dropped,
    /// so an upload this replica makes meanwhile is never lost.
    pub fn sync(&self, store: &Store) -> ApiResult<()> {
        let before: Vec<(String, String, String)> = self
            .all()
            .iter()
            .map(|p| {
                let r = &p.record;
                (r.name.clone(), r.version.clone(), r.sha256.clone())
            })
            .collect();
        let stored = store.list_plugins()?;
        let kept: HashSet<(String, String)> = stored
            .iter()
            .map(|r| (r.name.clone(), r.version.clone()))
            .collect();
        for record in stored {
            let current = self
                .versions(&record.name)
                .into_iter()
                .find(|p| p.record.version == record.version);
            match current {
                Some(c) if c.record.sha256 == record.sha256 => {
                    if c.record.limits != record.limits {
                        self.insert(record, c.plugin.clone());
                    }
                }
                _ => self.load_stored(store, record),
            }
        }
        for (name, version, sha256) in before {
            if !kept.contains(&(name.clone(), version.clone())) {
                self.remove(&name, &version);
                // Deleted by another replica: this replica's copy goes once nothing uses it.
                if let Err(e) = store.drop_unreferenced_local_blob(BlobKind::Plugin, &sha256) {
                    tracing::warn!(plugin = %name, %version, error = %e, "could not drop this replica's copy of a deleted plugin file; the next start collects it");
                }
            }
        }
        Ok(())
    }

    pub fn host(&self) -> &PluginHost {
        &self.host
    }

    /// Keeps a compiled plugin under its record, with the record's limits applied (a stored
    /// value that no longer parses falls back to the defaults, with a warning), and returns
    /// what requests will now run.
    fn insert(&self, record: PluginRecord, plugin: Loaded) -> Arc<LoadedPlugin> {
        let limits = parse_limits(&record.limits).unwrap_or_else(|e| {
            tracing::warn!(plugin = %record.name, version = %record.version, error = %e.message, "stored plugin limits ignored");
            PluginLimits::default()
        });
        let plugin = with_limits(
            plugin,
            apply_limits(&limits, &self.host.config().default_limits),
        );
        self.broken
            .write()
            .remove(&(record.name.clone(), record.version.clone()));
        let entry = Arc::new(LoadedPlugin {
            record,
            limits,
            plugin,
        });
        let mut loaded = self.loaded.write();
        let versions = loaded.entry(entry.record.name.clone()).or_default();
        // A version already served keeps its place in upload order (new limits must not make
        // it the newest).
        match versions
            .iter_mut()
            .find(|p| p.record.version == entry.record.version)
        {
            Some(slot) => *slot = entry.clone(),
            None => versions.push(entry.clone()),
        }
        entry
    }

    /// Validates and stores an uploaded component. Blocking (compiles): run it on a blocking
    /// thread. Returns what requests will run and whether it is new (false: the same bytes were
    /// uploaded before under this name and version). A rejected upload leaves nothing behind:
    /// neither its file nor its compiled artifact.
    pub fn register(&self, store: &Store, bytes: &[u8]) -> ApiResult<(Arc<LoadedPlugin>, bool)> {
        if bytes.is_empty() {
            return Err(ApiError::bad_request("the plugin file is empty"));
        }
        let sha256 = hex::encode(Sha256::digest(bytes));
        let registered = self.compile_and_store(store, bytes, &sha256);
        if registered.is_err() {
            self.evict_unless_stored(store, &sha256);
        }
        registered
    }

    fn compile_and_store(
        &self,
        store: &Store,
        bytes: &[u8],
        sha256: &str,
    ) -> ApiResult<(Arc<LoadedPlugin>, bool)> {
        let plugin = self.host.load(bytes)?;
        let description = describe(&plugin);
        crate::names::validate_name("plugin", &description.name).map_err(|e| {
            ApiError::bad_request(format!(
                "the plugin describes itself with a bad name: {}",
                e.message
            ))
        })?;
        if description.version.is_empty()
            || description.version.len() > 64
            || description
                .version
                .chars()
                .any(|c| c.is_control() || c == '/' || c == '@')
        {
            return Err(ApiError::bad_request(format!(
                "the plugin describes itself with a bad version {:?}: 1-64 characters, no '/', '@' or control characters",
                description.version
            )));
        }
        let json =
            serde_json::to_value(&description).map_err(|e| ApiError::internal(e.to_string()))?;
        let row = PluginDescriptionRow {
            name: &description.name,
            version: &description.version,
            kind: description.kind.as_str(),
            json: &json,
        };
        match store.add_plugin(bytes, sha256, &row)? {
            PluginInsert::Created(record) => {
                tracing::info!(plugin = %record.name, version = %record.version, sha256 = %record.sha256, "plugin registered");
                Ok((self.insert(record, plugin), true))
            }
            // The same bytes again: (re)load them under the stored record, which also heals a
            // version that failed to load at start.
            PluginInsert::Unchanged(record) => Ok((self.insert(record, plugin), false)),
            PluginInsert::Conflict(existing) => Err(ApiError::conflict(format!(
                "plugin {}@{} already exists with other content (sha256 {}); versions are immutable: bump the version the plugin describes",
                existing.name, existing.version, existing.sha256
            ))),
        }
    }

    /// Drops the compiled artifact of content no stored version uses (a rejected upload's, a
    /// deleted version's). Should another upload of the same bytes be in flight, it only costs
    /// that version a compile at the next start.
    fn evict_unless_stored(&self, store: &Store, sha256: &str) {
        match store.plugin_content_stored(sha256) {
            Ok(false) => self.host.evict_cached(sha256),
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(sha256, error = %e, "cannot tell whether a compiled plugin is still used; the next start prunes it")
            }
        }
    }

    /// Deletes one version (or every version) unless a pipeline runs it, with the files and
    /// compiled artifacts no other version uses. Blocking (file system): run it on a blocking
    /// thread. Returns the deleted versions, or the pipelines in the way.
    pub fn delete(
        &self,
        store: &Store,
        name: &str,
        version: Option<&str>,
    ) -> ApiResult<Result<Vec<String>, Vec<String>>> {
        let deleted = match store.delete_plugin(name, version)? {
            Ok(deleted) => deleted,
            Err(pipelines) => return Ok(Err(pipelines)),
        };
        let mut versions = Vec::with_capacity(deleted.len());
        for (record, file_shared) in deleted {
            self.remove(&record.name, &record.version);
            if !file_shared {
                self.evict_unless_stored(store, &record.sha256);
            }
            versions.push(record.version);
        }
        Ok(Ok(versions))
    }

    /// Prunes the compiled-artifact cache down to the stored plugins' artifacts: what rejected
    /// uploads, deletes and a crash in between left behind. Run at start, before serving.
    pub fn prune_cache(&self, store: &Store) -> ApiResult<()> {
        let stored: HashSet<String> = store
            .list_plugins()?
            .into_iter()
            .map(|r| r.sha256)
            .collect();
        let (files, bytes) = self
            .host
            .retain_cached(&|sha256| stored.contains(sha256))
            .map_err(|e| ApiError::internal(format!("pruning the plugin cache: {e}")))?;
        if files > 0 {
            tracing::info!(
                files,
                bytes,
                "removed unused compiled plugins from the cache"
            );
        }
        Ok(())
    }

    /// The plugin a reference runs now.
    pub fn resolve(&self, r: &PluginRef) -> ApiResult<Arc<LoadedPlugin>> {
        let loaded = self.loaded.read();
        let found = loaded.get(&r.name).and_then(|versions| match &r.version {
            Some(v) => versions.iter().find(|p| &p.record.version == v).cloned(),
            None => versions.last().cloned(),
        });
        drop(loaded);
        if let Some(found) = found {
            return Ok(found);
        }
        let broken = self.broken.read();
        let reason = broken
            .iter()
            .find(|((name, version), _)| {
                name == &r.name && r.version.as_ref().is_none_or(|v| v == version)
            })
            .map(|(_, reason)| reason.clone());
        Err(match reason {
            Some(reason) => ApiError::unavailable(format!("plugin {r} failed to load: {reason}")),
            None => ApiError::not_found(format!("plugin {r} not found")),
        })
    }

    /// Every loaded plugin version, by name then upload order.
    pub fn all(&self) -> Vec<Arc<LoadedPlugin>> {
        self.loaded.read().values().flatten().cloned().collect()
    }

    pub fn versions(&self, name: &str) -> Vec<Arc<LoadedPlugin>> {
        self.loaded.read().get(name).cloned().unwrap_or_default()
    }

    /// Replaces a version's limits: stored, then applied to new calls (calls running finish
    /// under the limits they started with).
    pub fn set_limits(
        &self,
        store: &Store,
        name: &str,
        version: &str,
        value: &serde_json::Value,
    ) -> ApiResult<Arc<LoadedPlugin>> {
        let limits = parse_limits(value)?;
        let normalized =
            serde_json::to_value(&limits).map_err(|e| ApiError::internal(e.to_string()))?;
        let current = self
            .versions(name)
            .into_iter()
            .find(|p| p.record.version == version)
            .ok_or_else(|| ApiError::not_found(format!("plugin {name}@{version} not found")))?;
        if !store.set_plugin_limits(name, version, &normalized)? {
            return Err(ApiError::not_found(format!(
                "plugin {name}@{version} not found"
            )));
        }
        let mut record = current.record.clone();
        record.limits = normalized;
        Ok(self.insert(record, current.plugin.clone()))
    }

    /// Forgets deleted versions. Requests already running keep their `Arc` and finish.
    fn remove(&self, name: &str, version: &str) {
        let mut loaded = self.loaded.write();
        if let Some(versions) = loaded.get_mut(name) {
            versions.retain(|p| p.record.version != version);
            if versions.is_empty() {
                loaded.remove(name);
            }
        }
        self.broken
            .write()
            .remove(&(name.to_string(), version.to_string()));
    }
}
