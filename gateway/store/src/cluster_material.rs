//! The cluster's CA and token signing key in a shared store (PostgreSQL), so that every gateway
//! replica is the same manager to the workers (`migrations/postgres/0007_shared_workers.sql`).
//! One row, made once: replicas starting together each offer theirs, and all keep the one that
//! was stored first.

use super::sql::vals;
use super::{now_secs, Store, StoreError};

/// The row's name: one store, one cluster.
const CLUSTER: &str = "cluster";

/// The cluster's secrets as stored.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredMaterial {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    /// PKCS#8 of the Ed25519 key that signs direct-mode tokens.
    pub token_key: Vec<u8>,
}

impl std::fmt::Debug for StoredMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredMaterial").finish_non_exhaustive()
    }
}

impl Store {
    /// The cluster's material, once a process stored it.
    pub fn cluster_material(&self) -> Result<Option<StoredMaterial>, StoreError> {
        self.with(|db| {
            db.query_opt(
                "SELECT ca_cert_pem, ca_key_pem, token_key FROM cluster_material WHERE name = ?1",
                vals![CLUSTER],
            )?
            .map(|r| {
                Ok(StoredMaterial {
                    ca_cert_pem: r.at(0)?,
                    ca_key_pem: r.at(1)?,
                    token_key: r.at(2)?,
                })
            })
            .transpose()
        })
    }

    /// Stores `offered` unless the store holds material already, and returns what it holds
    /// afterwards: `offered`, or the material another process stored first. The insert waits on
    /// the primary key for a concurrent one to commit, so two replicas starting together agree.
    pub fn keep_cluster_material(
        &self,
        offered: &StoredMaterial,
    ) -> Result<StoredMaterial, StoreError> {
        self.with(|db| {
            db.execute(
                "INSERT INTO cluster_material (name, ca_cert_pem, ca_key_pem, token_key, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
                vals![
                    CLUSTER,
                    &offered.ca_cert_pem,
                    &offered.ca_key_pem,
                    offered.token_key.as_slice(),
                    now_secs()
                ],
            )
        })?;
        self.cluster_material()?.ok_or_else(|| {
            StoreError::Corrupt("the cluster material vanished right after it was stored".into())
        })
    }
}
