//! Settings an admin changes at run time that every replica follows and the next start
//! applies: payload log sinks defined through the admin API (`payload_log_sinks`) and Triton's
//! trace settings (`trace_settings`). The gateway keeps both in memory; on PostgreSQL a change
//! is announced to the other replicas like a model's (`super::catalog_changes`).

use crate::sql::{vals, Db, Row};
use crate::{now_secs, Store, StoreError};

/// `pg_advisory_xact_lock` key that orders replicas changing trace settings ("tracesET").
const TRACE_LOCK: i64 = 0x7472_6163_6573_4554;

/// A sink as stored: its name and the JSON text of its definition, `None` when it was removed.
pub type StoredSink = (String, Option<String>);

/// One scope's trace settings as stored: `""` is server-wide, any other scope a model's (or a
/// pipeline's) override. A `None` field is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceRecord {
    pub scope: String,
    pub level: Option<i64>,
    pub rate: Option<i64>,
    pub count: Option<i64>,
    /// Grows each time `count` is set or cleared: a replica restarts its count only then.
    pub count_revision: i64,
}

impl Store {
    /// Every sink defined or removed at run time, by name.
    pub fn list_payload_log_sinks(&self) -> Result<Vec<StoredSink>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT name, config FROM payload_log_sinks ORDER BY name",
                &[],
            )?
            .iter()
            .map(|row| Ok((row.get("name")?, row.get("config")?)))
            .collect()
        })
    }

    /// Records sink `name` as defined by `config` (its JSON text), or as removed (`None`).
    pub fn set_payload_log_sink(&self, name: &str, config: Option<&str>) -> Result<(), StoreError> {
        self.with(|db| {
            db.execute(
                "INSERT INTO payload_log_sinks (name, config, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO UPDATE SET config = excluded.config,
                                                  updated_at = excluded.updated_at",
                vals![name, config, now_secs()],
            )?;
            Ok(())
        })
    }

    /// Forgets what was stored for sink `name`: the configuration file's sink of that name,
    /// if any, applies again.
    pub fn delete_payload_log_sink(&self, name: &str) -> Result<(), StoreError> {
        self.with(|db| {
            db.execute("DELETE FROM payload_log_sinks WHERE name = ?1", vals![name])?;
            Ok(())
        })
    }

    /// Every scope's trace settings.
    pub fn list_trace_settings(&self) -> Result<Vec<TraceRecord>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT scope, level, rate, count, count_revision FROM trace_settings
                 ORDER BY scope",
                &[],
            )?
            .iter()
            .map(trace_record)
            .collect()
        })
    }

    /// Changes `scope`'s trace settings with `change` as one step even across replicas, and
    /// returns them after it. `count_changed`: whether the change sets or clears the count,
    /// which then starts again on every replica.
    pub fn change_trace_setting(
        &self,
        scope: &str,
        count_changed: bool,
        change: impl FnOnce(&mut TraceRecord),
    ) -> Result<TraceRecord, StoreError> {
        self.transaction(|db| {
            if let Db::Postgres(..) = db {
                db.execute("SELECT pg_advisory_xact_lock(?1)", vals![TRACE_LOCK])?;
            }
            let mut record = read_trace(db, scope)?;
            change(&mut record);
            if count_changed {
                record.count_revision += 1;
            }
            db.execute(
                "INSERT INTO trace_settings (scope, level, rate, count, count_revision, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (scope) DO UPDATE SET level = excluded.level,
                     rate = excluded.rate, count = excluded.count,
                     count_revision = excluded.count_revision, updated_at = excluded.updated_at",
                vals![
                    scope,
                    record.level,
                    record.rate,
                    record.count,
                    record.count_revision,
                    now_secs()
                ],
            )?;
            Ok(record)
        })
    }
}

fn read_trace(db: &Db<'_>, scope: &str) -> Result<TraceRecord, StoreError> {
    let row = db.query_opt(
        "SELECT scope, level, rate, count, count_revision FROM trace_settings WHERE scope = ?1",
        vals![scope],
    )?;
    match row {
        Some(row) => trace_record(&row),
        None => Ok(TraceRecord {
            scope: scope.to_owned(),
            ..TraceRecord::default()
        }),
    }
}

/// A `trace_settings` row read with every column.
fn trace_record(row: &Row) -> Result<TraceRecord, StoreError> {
    Ok(TraceRecord {
        scope: row.get("scope")?,
        level: row.get("level")?,
        rate: row.get("rate")?,
        count: row.get("count")?,
        count_revision: row.get("count_revision")?,
    })
}
