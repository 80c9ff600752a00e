//! Plugin and pipeline rows. Plugin files are content-addressed like models; a row is written
//! only after the plugin host compiled the component and checked it implements the world. As
//! for models, a file and the rows that reference it change under the blob lock.

use super::files::write_atomic;
use super::{now_secs, Store, StoreError};
use rusqlite::{params, OptionalExtension, Row};
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

fn corrupt(e: serde_json::Error) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
}

fn plugin_record(row: &Row<'_>) -> rusqlite::Result<PluginRecord> {
    let description: String = row.get("description")?;
    let limits: String = row.get("limits")?;
    Ok(PluginRecord {
        name: row.get("name")?,
        version: row.get("version")?,
        kind: row.get("kind")?,
        sha256: row.get("sha256")?,
        size_bytes: row.get::<_, i64>("size_bytes")? as u64,
        description: serde_json::from_str(&description).map_err(corrupt)?,
        limits: serde_json::from_str(&limits).map_err(corrupt)?,
        created_at: row.get("created_at")?,
    })
}

fn pipeline_record(row: &Row<'_>) -> rusqlite::Result<PipelineRecord> {
    let spec: String = row.get("spec")?;
    Ok(PipelineRecord {
        name: row.get("name")?,
        spec: serde_json::from_str(&spec).map_err(corrupt)?,
        created_at: row.get("created_at")?,
        updated_at: row.get("updated_at")?,
    })
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
        let existed = dest.exists();
        if !existed {
            write_atomic(&dest, bytes, 0o644).map_err(StoreError::io("storing the plugin file"))?;
        }
        let inserted = self.insert_plugin(
            description.name,
            description.version,
            description.kind,
            sha256,
            bytes.len() as u64,
            description.json,
        );
        if !existed
            && !matches!(
                inserted,
                Ok(PluginInsert::Created(_) | PluginInsert::Unchanged(_))
            )
        {
            super::remove_blob(&dest);
        }
        inserted
    }

    /// Whether any stored plugin version is this content.
    pub fn plugin_content_stored(&self, sha256: &str) -> Result<bool, StoreError> {
        self.with(|conn| {
            Ok(conn.query_row(
                "SELECT EXISTS(SELECT 1 FROM plugins WHERE sha256 = ?1)",
                [sha256],
                |r| r.get(0),
            )?)
        })
    }

    fn insert_plugin(
        &self,
        name: &str,
        version: &str,
        kind: &str,
        sha256: &str,
        size_bytes: u64,
        description: &serde_json::Value,
    ) -> Result<PluginInsert, StoreError> {
        self.with(|conn| {
            let tx = conn.transaction()?;
            let existing = tx
                .query_row(
                    "SELECT * FROM plugins WHERE name = ?1 AND version = ?2",
                    params![name, version],
                    plugin_record,
                )
                .optional()?;
            if let Some(existing) = existing {
                return Ok(if existing.sha256 == sha256 {
                    PluginInsert::Unchanged(existing)
                } else {
                    PluginInsert::Conflict(existing)
                });
            }
            tx.execute(
                "INSERT INTO plugins (name, version, kind, sha256, size_bytes, description, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![name, version, kind, sha256, size_bytes as i64, description.to_string(), now_secs()],
            )?;
            let rec = tx.query_row(
                "SELECT * FROM plugins WHERE name = ?1 AND version = ?2",
                params![name, version],
                plugin_record,
            )?;
            tx.commit()?;
            Ok(PluginInsert::Created(rec))
        })
    }

    /// Replaces a plugin version's limits; false when the version does not exist.
    pub fn set_plugin_limits(
        &self,
        name: &str,
        version: &str,
        limits: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        self.with(|conn| {
            Ok(conn.execute(
                "UPDATE plugins SET limits = ?3 WHERE name = ?1 AND version = ?2",
                params![name, version, limits.to_string()],
            )? > 0)
        })
    }

    /// Every plugin version, oldest upload first within a name.
    pub fn list_plugins(&self) -> Result<Vec<PluginRecord>, StoreError> {
        self.with(|conn| {
            let mut stmt =
                conn.prepare("SELECT * FROM plugins ORDER BY name, created_at, rowid")?;
            let rows = stmt
                .query_map([], plugin_record)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
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
        let deletion = self.with(|conn| {
            let tx = conn.transaction()?;
            let all: Vec<PluginRecord> = {
                let mut stmt =
                    tx.prepare("SELECT * FROM plugins WHERE name = ?1 ORDER BY created_at, rowid")?;
                let rows = stmt
                    .query_map([name], plugin_record)?
                    .collect::<Result<Vec<_>, _>>()?;
                rows
            };
            let newest = all.last().map(|r| r.version.clone());
            let doomed: Vec<PluginRecord> = all
                .into_iter()
                .filter(|r| version.is_none_or(|v| v == r.version))
                .collect();
            let mut users: Vec<String> = Vec::new();
            {
                let mut stmt = tx.prepare(
                    "SELECT pipeline, version FROM pipeline_plugins WHERE plugin = ?1 ORDER BY pipeline",
                )?;
                let refs = stmt
                    .query_map([name], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                for (pipeline, pinned) in refs {
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
            }
            if !users.is_empty() {
                return Ok(Err(users));
            }
            let mut deleted = Vec::with_capacity(doomed.len());
            for rec in doomed {
                tx.execute(
                    "DELETE FROM plugins WHERE name = ?1 AND version = ?2",
                    params![rec.name, rec.version],
                )?;
                let shared: bool = tx.query_row(
                    "SELECT EXISTS(SELECT 1 FROM plugins WHERE sha256 = ?1)",
                    [&rec.sha256],
                    |r| r.get(0),
                )?;
                deleted.push((rec, shared));
            }
            tx.commit()?;
            Ok(Ok(deleted))
        })?;
        if let Ok(deleted) = &deletion {
            for (rec, shared) in deleted {
                if !shared {
                    super::remove_blob(&self.dir.plugin_file(&rec.sha256));
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
        self.with(|conn| {
            let tx = conn.transaction()?;
            let now = now_secs();
            let created = tx.execute(
                "INSERT INTO pipelines (name, spec, created_at, updated_at) VALUES (?1, ?2, ?3, ?3)
                 ON CONFLICT (name) DO NOTHING",
                params![name, spec.to_string(), now],
            )? > 0;
            if !created {
                tx.execute(
                    "UPDATE pipelines SET spec = ?2, updated_at = ?3 WHERE name = ?1",
                    params![name, spec.to_string(), now],
                )?;
            }
            tx.execute("DELETE FROM pipeline_plugins WHERE pipeline = ?1", [name])?;
            for (plugin, version) in plugins {
                tx.execute(
                    "INSERT OR IGNORE INTO pipeline_plugins (pipeline, plugin, version) VALUES (?1, ?2, ?3)",
                    params![name, plugin, version.as_deref().unwrap_or("")],
                )?;
            }
            let rec = tx.query_row(
                "SELECT * FROM pipelines WHERE name = ?1",
                [name],
                pipeline_record,
            )?;
            tx.commit()?;
            Ok((rec, created))
        })
    }

    pub fn list_pipelines(&self) -> Result<Vec<PipelineRecord>, StoreError> {
        self.with(|conn| {
            let mut stmt = conn.prepare("SELECT * FROM pipelines ORDER BY name")?;
            let rows = stmt
                .query_map([], pipeline_record)?
                .collect::<Result<Vec<_>, _>>()?;
            Ok(rows)
        })
    }

    pub fn pipeline(&self, name: &str) -> Result<Option<PipelineRecord>, StoreError> {
        self.with(|conn| {
            Ok(conn
                .query_row(
                    "SELECT * FROM pipelines WHERE name = ?1",
                    [name],
                    pipeline_record,
                )
                .optional()?)
        })
    }

    pub fn delete_pipeline(&self, name: &str) -> Result<bool, StoreError> {
        self.with(|conn| Ok(conn.execute("DELETE FROM pipelines WHERE name = ?1", [name])? > 0))
    }
}
