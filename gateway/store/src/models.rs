//! Model version rows. Files are content-addressed; a row is written only after ONNX Runtime
//! accepted the file. A file and the rows that reference it change under the data directory's
//! blob lock, so a delete never removes a file that an upload has just stored for a new row.

use super::files::persist;
use super::sql::{vals, Row};
use super::{now_secs, Store, StoreError};
use infergate_protocol::signature::ModelSignature;
use serde::{Deserialize, Serialize};

/// Also what a worker receives from its manager for a version it serves.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelRecord {
    pub name: String,
    pub version: u64,
    pub sha256: String,
    pub size_bytes: u64,
    pub signature: ModelSignature,
    pub config: serde_json::Value,
    pub created_at: i64,
}

fn record(row: &Row) -> Result<ModelRecord, StoreError> {
    Ok(ModelRecord {
        name: row.get("name")?,
        version: row.get::<i64>("version")? as u64,
        sha256: row.get("sha256")?,
        size_bytes: row.get::<i64>("size_bytes")? as u64,
        signature: row.json("signature")?,
        config: row.json("config")?,
        created_at: row.get("created_at")?,
    })
}

const ONE: &str = "SELECT * FROM model_versions WHERE name = ?1 AND version = ?2";

impl Store {
    /// Moves a finished upload to its content address and records it as the next version of
    /// `name`, as one step with respect to deletes (both under the blob lock). On failure a
    /// file this call stored is removed again; one that existed before is left to its rows.
    pub fn add_model_version(
        &self,
        upload: tempfile::NamedTempFile,
        name: &str,
        sha256: &str,
        size_bytes: u64,
        signature: &ModelSignature,
        config: &serde_json::Value,
    ) -> Result<ModelRecord, StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let dest = self.dir.model_file(sha256);
        let existed = super::blobs::intact_copy(&dest, sha256);
        persist(upload, &dest).map_err(StoreError::io("storing the model file"))?;
        let inserted =
            self.insert_model_version(name, sha256, &dest, size_bytes, signature, config);
        if inserted.is_err() && !existed {
            crate::files::remove_blob(&dest);
        }
        inserted
    }

    /// Records a new version (the next number for this name) in one transaction, with the
    /// file's shared copy (PostgreSQL, `super::blobs`).
    fn insert_model_version(
        &self,
        name: &str,
        sha256: &str,
        file: &std::path::Path,
        size_bytes: u64,
        signature: &ModelSignature,
        config: &serde_json::Value,
    ) -> Result<ModelRecord, StoreError> {
        let signature =
            serde_json::to_string(signature).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.transaction(|db| {
            super::blobs::put(db, sha256, file)?;
            let version: i64 = db
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) + 1 FROM model_versions WHERE name = ?1",
                    vals![name],
                )?
                .at(0)?;
            db.execute(
                "INSERT INTO model_versions (name, version, sha256, size_bytes, signature, config, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                vals![name, version, sha256, size_bytes as i64, signature, config.to_string(), now_secs()],
            )?;
            record(&db.query_one(ONE, vals![name, version])?)
        })
    }

    pub fn list_model_versions(&self) -> Result<Vec<ModelRecord>, StoreError> {
        self.with(|db| {
            db.query("SELECT * FROM model_versions ORDER BY name, version", &[])?
                .iter()
                .map(record)
                .collect()
        })
    }

    pub fn model_version(
        &self,
        name: &str,
        version: u64,
    ) -> Result<Option<ModelRecord>, StoreError> {
        self.with(|db| {
            db.query_opt(ONE, vals![name, version as i64])?
                .as_ref()
                .map(record)
                .transpose()
        })
    }

    /// Deletes a version's row and, when no other row references its file, the file (after
    /// the commit, still under the blob lock: a crash in between leaves an unreferenced file,
    /// which the next start collects). Returns the deleted row.
    pub fn delete_model_version(
        &self,
        name: &str,
        version: u64,
    ) -> Result<Option<ModelRecord>, StoreError> {
        let _blobs = self
            .dir
            .lock_blobs()
            .map_err(StoreError::io("locking blobs"))?;
        let deleted = self.transaction(|db| {
            let Some(rec) = db
                .query_opt(ONE, vals![name, version as i64])?
                .as_ref()
                .map(record)
                .transpose()?
            else {
                return Ok(None);
            };
            db.execute(
                "DELETE FROM model_versions WHERE name = ?1 AND version = ?2",
                vals![name, version as i64],
            )?;
            let shared: bool = db
                .query_one(
                    "SELECT EXISTS(SELECT 1 FROM model_versions WHERE sha256 = ?1)",
                    vals![&rec.sha256],
                )?
                .at(0)?;
            if !shared {
                super::blobs::release(db, &rec.sha256)?;
            }
            crate::model_settings::drop_if_orphaned(db, name)?;
            Ok(Some((rec, shared)))
        })?;
        Ok(deleted.map(|(rec, shared)| {
            if !shared {
                crate::files::remove_blob(&self.dir.model_file(&rec.sha256));
            }
            rec
        }))
    }

    pub fn set_model_config(
        &self,
        name: &str,
        version: u64,
        config: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        self.with(|db| {
            Ok(db.execute(
                "UPDATE model_versions SET config = ?3 WHERE name = ?1 AND version = ?2",
                vals![name, version as i64, config.to_string()],
            )? > 0)
        })
    }
}
