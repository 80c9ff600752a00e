//! Plugin and pipeline rows. Plugin files are content-addressed like models; a row is written
//! only after the plugin host compiled the component and checked it implements the world. As
//! for models, a file and the rows that reference it change under the blob lock.

use super::files::write_atomic;
use super::sql::{vals, Db, Row};
use super::{now_secs, Store, StoreError};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct PluginRecord {
    pub name: String,
    pub version: String,
    /// `pre` or `post`.
    pub kind: String,
    pub sha256: String,
    pub size_bytes: u64,
    /// What the plugin's `describe` export returned.
    pub description: serde_json::Value,
    /// Per-call limits overriding the server's defaults (`{}` = defaults).
    pub limits: serde_json::Value,
    pub created_at: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PipelineRecord {
    pub name: String,
    pub spec: serde_json::Value,
    pub created_at: i64,
    pub updated_at: i64,
}

fn plugin_record(row: &Row) -> Result<PluginRecord, StoreError> {
    Ok(PluginRecord {
        name: row.get("name")?,
        version: row.get("version")?,
        kind: row.get("kind")?,
        sha256: row.get("sha256")?,
        size_bytes: row.get::<i64>("size_bytes")? as u64,
        description: row.json("description")?,
        limits: row.json("limits")?,
        created_at: row.get("created_at")?,
    })
}

fn pipeline_record(row: &Row) -> Result<PipelineRecord, StoreError> {
    Ok(PipelineRecord {
        name: row.get("name")?,
        spec: row.json("spec")?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
}

const PLUGIN: &str = "SELECT * FROM plugins WHERE name = ?1 AND version = ?2";
const PIPELINE: &str = "SELECT * FROM pipelines WHERE name = ?1";

/// Whether any stored plugin version is `sha256`.
fn content_stored(db: &Db<'_>, sha256: &str) -> Result<bool, StoreError> {
    db.query_one(
        "SELECT EXISTS(SELECT 1 FROM plugins WHERE sha256 = ?1)",
        vals![sha256],
    )?
    .at(0)
}

/// What deleting plugin versions did: the rows deleted, each with whether its file is still
/// referenced by another row (an unreferenced one has been removed); or the pipelines that run
/// a version it would delete.
pub type PluginDeletion = Result<Vec<(PluginRecord, bool)>, Vec<String>>;

/// The columns of a new plugin row that come from its `describe` export.
pub struct PluginDescriptionRow<'a> {
    pub name: &'a str,
    pub version: &'a str,
    /// `pre` or `post`.
    pub kind: &'a str,
    pub json: &'a serde_json::Value,
}

/// What inserting a plugin did.
pub enum PluginInsert {
    Created(PluginRecord),
    /// The same name, version and content were uploaded before.
    Unchanged(PluginRecord),
    /// The name and version exist with other content: versions are immutable.
    Conflict(PluginRecord),
}

impl Store {
    /// Stores a validated component under its content address (unless there already) and
    /// records it, as one step with respect to deletes (both under the blob lock). A file this
    /// call stored is removed again when the row is not created (error or conflict).
    pub fn add_plugin(
        &self,
        bytes: &[u8],
        sha256: &str,
        description: &PluginDescriptionRow<'_>,
    ) -> Result<PluginInsert, StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let dest = self.dir.plugin_file(sha256);
        let existed = super::blobs::intact_copy(&dest, sha256);
        if !existed {
            write_atomic(&dest, bytes, 0o644).map_err(StoreError::io("storing the plugin file"))?;
        }
        let inserted = self.insert_plugin(&dest, sha256, bytes.len() as u64, description);
        if !existed
            && !matches!(
                inserted,
                Ok(PluginInsert::Created(_) | PluginInsert::Unchanged(_))
            )
        {
            crate::files::remove_blob(&dest);
        }
        inserted
    }

    /// Whether any stored plugin version is this content.
    pub fn plugin_content_stored(&self, sha256: &str) -> Result<bool, StoreError> {
        self.with(|db| content_stored(db, sha256))
    }

    fn insert_plugin(
        &self,
        file: &std::path::Path,
        sha256: &str,
        size_bytes: u64,
        row: &PluginDescriptionRow<'_>,
    ) -> Result<PluginInsert, StoreError> {
        let (name, version, kind, description) = (row.name, row.version, row.kind, row.json);
        self.transaction(|db| {
            let existing = db
                .query_opt(PLUGIN, vals![name, version])?
                .as_ref()
                .map(plugin_record)
                .transpose()?;
            if let Some(existing) = existing {
                return Ok(if existing.sha256 == sha256 {
                    // Shares it when stored before the database kept files.
                    super::blobs::put(db, sha256, file)?;
                    PluginInsert::Unchanged(existing)
                } else {
                    PluginInsert::Conflict(existing)
                });
            }
            super::blobs::put(db, sha256, file)?;
            db.execute(
                "INSERT INTO plugins (name, version, kind, sha256, size_bytes, description, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                vals![name, version, kind, sha256, size_bytes as i64, description.to_string(), now_secs()],
            )?;
            Ok(PluginInsert::Created(plugin_record(
                &db.query_one(PLUGIN, vals![name, version])?,
            )?))
        })
    }

    /// Replaces a plugin version's limits; false when the version does not exist.
    pub fn set_plugin_limits(
        &self,
        name: &str,
        version: &str,
        limits: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        self.with(|db| {
            Ok(db.execute(
                "UPDATE plugins SET limits = ?3 WHERE name = ?1 AND version = ?2",
                vals![name, version, limits.to_string()],
            )? > 0)
        })
    }

    /// Every plugin version, oldest upload first within a name.
    pub fn list_plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT * FROM plugins ORDER BY name, created_at, rowid",
                &[],
            )?
            .iter()
            .map(plugin_record)
            .collect()
        })
    }

    /// Deletes one version (or every version when `version` is None) unless a pipeline runs
    /// it: a pipeline runs the version it pins, or the newest upload of the name. Returns the
    /// deleted rows with whether each file is still referenced, or the pipelines in the way.
    /// Files no row references any more are removed after the commit, under the blob lock.
    pub fn delete_plugin(
        &self,
        name: &str,
        version: Option<&str>,
    ) -> Result<PluginDeletion, StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let deletion = self.transaction(|db| {
            let all = db
                .query(
                    "SELECT * FROM plugins WHERE name = ?1 ORDER BY created_at, rowid",
                    vals![name],
                )?
                .iter()
                .map(plugin_record)
                .collect::<Result<Vec<_>, _>>()?;
            let newest = all.last().map(|r| r.version.clone());
            let doomed: Vec<PluginRecord> = all
                .into_iter()
                .filter(|r| version.is_none_or(|v| v == r.version))
                .collect();
            let mut users: Vec<String> = Vec::new();
            let refs = db.query(
                "SELECT pipeline, version FROM pipeline_plugins WHERE plugin = ?1 ORDER BY pipeline",
                vals![name],
            )?;
            for row in refs {
                let (pipeline, pinned): (String, String) = (row.at(0)?, row.at(1)?);
                let runs = if pinned.is_empty() {
                    newest.clone()
                } else {
                    Some(pinned)
                };
                if doomed.iter().any(|d| Some(&d.version) == runs.as_ref())
                    && !users.contains(&pipeline)
                {
                    users.push(pipeline);
                }
            }
            if !users.is_empty() {
                return Ok(Err(users));
            }
            let mut deleted = Vec::with_capacity(doomed.len());
            for rec in doomed {
                db.execute(
                    "DELETE FROM plugins WHERE name = ?1 AND version = ?2",
                    vals![&rec.name, &rec.version],
                )?;
                let shared = content_stored(db, &rec.sha256)?;
                if !shared {
                    super::blobs::release(db, &rec.sha256)?;
                }
                deleted.push((rec, shared));
            }
            Ok(Ok(deleted))
        })?;
        if let Ok(deleted) = &deletion {
            for (rec, shared) in deleted {
                if !shared {
                    crate::files::remove_blob(&self.dir.plugin_file(&rec.sha256));
                }
            }
        }
        Ok(deletion)
    }

    /// Creates or replaces a pipeline and records which plugins it uses, in one transaction.
    pub fn put_pipeline(
        &self,
        name: &str,
        spec: &serde_json::Value,
        plugins: &[(String, Option<String>)],
    ) -> Result<(PipelineRecord, bool), StoreError> {
        self.transaction(|db| {
            let now = now_secs();
            let created = db.execute(
                "INSERT INTO pipelines (name, spec, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (name) DO NOTHING",
                vals![name, spec.to_string(), now],
            )? > 0;
            if !created {
                db.execute(
                    "UPDATE pipelines SET spec = ?2, updated_at = ?3 WHERE name = ?1",
                    vals![name, spec.to_string(), now],
                )?;
            }
            db.execute(
                "DELETE FROM pipeline_plugins WHERE pipeline = ?1",
                vals![name],
            )?;
            for (plugin, version) in plugins {
                db.execute(
                    "INSERT INTO pipeline_plugins (pipeline, plugin, version) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                    vals![name, plugin, version.as_deref().unwrap_or("")],
                )?;
            }
            Ok((
                pipeline_record(&db.query_one(PIPELINE, vals![name])?)?,
                created,
            ))
        })
    }

    pub fn list_pipelines(&self) -> Result<Vec<PipelineRecord>, StoreError> {
        self.with(|db| {
            db.query("SELECT * FROM pipelines ORDER BY name", &[])?
                .iter()
                .map(pipeline_record)
                .collect()
        })
    }

    pub fn pipeline(&self, name: &str) -> Result<Option<PipelineRecord>, StoreError> {
        self.with(|db| {
            db.query_opt(PIPELINE, vals![name])?
                .as_ref()
                .map(pipeline_record)
                .transpose()
        })
    }

    /// Deletes a pipeline and its own settings (`model_settings`).
    pub fn delete_pipeline(&self, name: &str) -> Result<bool, StoreError> {
        self.transaction(|db| {
            let deleted = db.execute("DELETE FROM pipelines WHERE name = ?1", vals![name])? > 0;
            crate::model_settings::drop_if_orphaned(db, name)?;
            Ok(deleted)
        })
    }
}
