//! An API key as the store keeps it: its record, its own limits, and how a row becomes one.

use crate::auth::{self, Scope, Scopes};
use crate::error::StoreError;
use crate::sql::Row;
use infergate_limits::RateLimit;
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct KeyRecord {
    pub id: i64,
    pub public_id: String,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: i64,
    pub revoked_at: Option<i64>,
    /// The key's own limits; None = the server default (`[limits] default_*`).
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
}

/// A key's own admission limits, as set at creation or by an admin.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct KeyLimits {
    pub rate_limit: Option<RateLimit>,
    pub max_concurrent: Option<u32>,
}

impl KeyRecord {
    pub fn scopes(&self) -> Scopes {
        Scopes::new(self.scopes.clone())
    }

    /// Whether the key may use `wanted` (`admin` allows everything), without copying its
    /// scopes into a [`Scopes`].
    pub fn allows(&self, wanted: Scope) -> bool {
        auth::allows(&self.scopes, wanted)
    }

    /// The key's own limits (`None` where it takes the server's default).
    pub fn limits(&self) -> KeyLimits {
        KeyLimits {
            rate_limit: self.rate_limit,
            max_concurrent: self.max_concurrent,
        }
    }

    /// The key as the key routes and the CLI show it (without its usage).
    pub fn info(&self) -> infergate_api_types::keys::KeyInfo {
        infergate_api_types::keys::KeyInfo {
            id: self.id,
            public_id: self.public_id.clone(),
            name: self.name.clone(),
            scopes: self.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
            created_at: self.created_at,
            revoked_at: self.revoked_at,
            rate_limit: self.rate_limit.map(RateLimit::shown),
            max_concurrent: self.max_concurrent,
        }
    }
}

pub(crate) fn record(row: &Row) -> Result<KeyRecord, StoreError> {
    let scopes: String = row.get("scopes")?;
    Ok(KeyRecord {
        id: row.get("id")?,
        public_id: row.get("public_id")?,
        name: row.get("name")?,
        scopes: scopes.split(',').filter_map(Scope::parse).collect(),
        created_at: row.get("created_at")?,
        revoked_at: row.get("revoked_at")?,
        rate_limit: match (
            row.get::<Option<f64>>("rate_rps")?,
            row.get::<Option<u32>>("rate_burst")?,
        ) {
            (Some(rps), Some(burst)) => Some(RateLimit { rps, burst }),
            _ => None,
        },
        max_concurrent: row.get("max_concurrent")?,
    })
}
