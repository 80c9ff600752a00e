//! The durable half of the worker registry: join secrets and the workers that joined.
//! What workers report each heartbeat stays in the manager's memory
//! (`infergate_cluster::registry`), and with a shared store in [`super::worker_status`] too;
//! identities, addresses and credentials live here.

use super::sql::{vals, Row};
use super::{now_secs, Store, StoreError};
use infergate_cluster::join::StoredJoin;
use infergate_cluster::messages::Devices;
use infergate_cluster::registry::WorkerInfo;
use serde::Serialize;

/// A worker as the store knows it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRecord {
    pub id: String,
    pub advertise: String,
    pub version: String,
    pub devices: Devices,
    #[serde(skip)]
    pub credential_sha256: String,
    /// The join secret's id it last joined with.
    pub joined_with: String,
    pub joined_at: i64,
    pub removed_at: Option<i64>,
}

impl WorkerRecord {
    /// Who the worker is, as the live registry holds it.
    pub fn info(&self) -> WorkerInfo {
        WorkerInfo {
            id: self.id.clone(),
            advertise: self.advertise.clone(),
            version: self.version.clone(),
            devices: self.devices.clone(),
        }
    }
}

pub(super) fn worker_of(row: &Row) -> Result<WorkerRecord, StoreError> {
    let devices: String = row.get("devices")?;
    Ok(WorkerRecord {
        id: row.get("id")?,
        advertise: row.get("advertise")?,
        version: row.get("version")?,
        // A devices column this version cannot read is shown as unknown, not an error.
        devices: serde_json::from_str(&devices).unwrap_or_default(),
        credential_sha256: row.get("credential_sha256")?,
        joined_with: row.get("joined_with")?,
        joined_at: row.get("joined_at")?,
        removed_at: row.get("removed_at")?,
    })
}

impl Store {
    pub fn add_join_secret(&self, stored: &StoredJoin) -> Result<(), StoreError> {
        self.with(|db| {
            db.execute(
                "INSERT INTO join_secrets (id, secret_sha256, created_at, expires_at)
                 VALUES (?1, ?2, ?3, ?4)",
                vals![
                    &stored.id,
                    &stored.secret_sha256,
                    now_secs(),
                    stored.expires_at.map(|s| s as i64)
                ],
            )?;
            Ok(())
        })
    }

    /// The join secret stored under `id`, unless revoked.
    pub fn join_secret(&self, id: &str) -> Result<Option<StoredJoin>, StoreError> {
        self.with(|db| {
            db.query_opt(
                "SELECT id, secret_sha256, expires_at FROM join_secrets
                 WHERE id = ?1 AND revoked_at IS NULL",
                vals![id],
            )?
            .map(|r| {
                Ok(StoredJoin {
                    id: r.at(0)?,
                    secret_sha256: r.at(1)?,
                    expires_at: r.at::<Option<i64>>(2)?.map(|s| s.max(0) as u64),
                })
            })
            .transpose()
        })
    }

    /// Revokes a join secret: it admits nobody from now on (workers that joined with it keep
    /// their own credentials). Returns false when no such unrevoked secret.
    pub fn revoke_join_secret(&self, id: &str) -> Result<bool, StoreError> {
        self.with(|db| {
            let n = db.execute(
                "UPDATE join_secrets SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                vals![id, now_secs()],
            )?;
            Ok(n == 1)
        })
    }

    /// Records a join: a new worker, or a returning one (not removed) with a new credential.
    /// Returns false, and changes nothing, when `record.id` was removed by an operator.
    pub fn upsert_worker(&self, record: &WorkerRecord) -> Result<bool, StoreError> {
        let devices = serde_json::to_string(&record.devices)
            .map_err(|e| StoreError::Corrupt(format!("worker devices: {e}")))?;
        self.with(|db| {
            let n = db.execute(
                "INSERT INTO workers (id, advertise, version, devices, credential_sha256, joined_with, joined_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET
                    advertise = excluded.advertise, version = excluded.version,
                    devices = excluded.devices, credential_sha256 = excluded.credential_sha256,
                    joined_with = excluded.joined_with, joined_at = excluded.joined_at
                 WHERE workers.removed_at IS NULL",
                vals![
                    &record.id,
                    &record.advertise,
                    &record.version,
                    devices,
                    &record.credential_sha256,
                    &record.joined_with,
                    record.joined_at
                ],
            )?;
            Ok(n == 1)
        })
    }

    pub fn worker(&self, id: &str) -> Result<Option<WorkerRecord>, StoreError> {
        self.with(|db| {
            db.query_opt("SELECT * FROM workers WHERE id = ?1", vals![id])?
                .as_ref()
                .map(worker_of)
                .transpose()
        })
    }

    pub fn list_workers(&self) -> Result<Vec<WorkerRecord>, StoreError> {
        self.with(|db| {
            db.query("SELECT * FROM workers ORDER BY joined_at, id", &[])?
                .iter()
                .map(worker_of)
                .collect()
        })
    }

    /// Marks a worker removed: its credential stops working at once and it cannot rejoin
    /// under this id; a shared store forgets its live status too, so every replica drops it.
    /// Returns false when no such worker (or it was removed already).
    pub fn remove_worker(&self, id: &str) -> Result<bool, StoreError> {
        let shared = self.is_shared();
        self.transaction(|db| {
            let n = db.execute(
                "UPDATE workers SET removed_at = ?2 WHERE id = ?1 AND removed_at IS NULL",
                vals![id, now_secs()],
            )?;
            if shared {
                db.execute("DELETE FROM worker_status WHERE worker_id = ?1", vals![id])?;
            }
            Ok(n == 1)
        })
    }

    /// A worker left on its own (drained and deregistered): forgotten, so it may join again.
    pub fn forget_worker(&self, id: &str) -> Result<(), StoreError> {
        self.with(|db| {
            db.execute(
                "DELETE FROM workers WHERE id = ?1 AND removed_at IS NULL",
                vals![id],
            )?;
            Ok(())
        })
    }
}
