//! What live workers report, in a shared store (PostgreSQL; `worker_status` in
//! `migrations/postgres/0007_shared_workers.sql`): the replica a heartbeat lands on writes it
//! here, and every replica reads the whole table each heartbeat interval into its registry
//! (`infergate_cluster::registry::Registry::sync`). Every write takes the next revision of one
//! sequence and stamps `last_seen` with the database's clock; reads give its age on that clock.

use super::sql::vals;
use super::workers::worker_of;
use super::{Store, StoreError};
use infergate_cluster::messages::Report;
use infergate_cluster::registry::Observed;
use std::time::Duration;

/// A status row just written: its revision and whether an operator drained the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub revision: i64,
    pub drained: bool,
}

fn report_json(report: &Report) -> Result<String, StoreError> {
    serde_json::to_string(report).map_err(|e| StoreError::Corrupt(format!("worker report: {e}")))
}

impl Store {
    /// A worker joined (or joined again) through this replica: an empty report, seen now, not
    /// drained.
    pub fn worker_joined(&self, id: &str) -> Result<i64, StoreError> {
        self.with(|db| {
            db.query_one(
                "INSERT INTO worker_status (worker_id, report, drained, revision, last_seen)
                 VALUES (?1, ?2, FALSE, nextval('worker_status_revision'), now())
                 ON CONFLICT (worker_id) DO UPDATE SET report = excluded.report,
                    drained = FALSE, revision = excluded.revision, last_seen = excluded.last_seen
                 RETURNING revision",
                vals![id, report_json(&Report::default())?],
            )?
            .at(0)
        })
    }

    /// A heartbeat landed on this replica. A worker with no row yet (it joined before this
    /// table existed) gets one; an operator's drain is kept.
    pub fn worker_reported(&self, id: &str, report: &Report) -> Result<Written, StoreError> {
        self.with(|db| {
            let row = db.query_one(
                "INSERT INTO worker_status (worker_id, report, drained, revision, last_seen)
                 VALUES (?1, ?2, FALSE, nextval('worker_status_revision'), now())
                 ON CONFLICT (worker_id) DO UPDATE SET report = excluded.report,
                    revision = excluded.revision, last_seen = excluded.last_seen
                 RETURNING revision, drained",
                vals![id, report_json(report)?],
            )?;
            Ok(Written {
                revision: row.at(0)?,
                drained: row.at(1)?,
            })
        })
    }

    /// An operator drained the worker: every replica stops sending it new requests. `None`: no
    /// live status for it.
    pub fn worker_drained(&self, id: &str) -> Result<Option<i64>, StoreError> {
        self.with(|db| {
            db.query_opt(
                "UPDATE worker_status SET drained = TRUE,
                    revision = nextval('worker_status_revision')
                 WHERE worker_id = ?1 RETURNING revision",
                vals![id],
            )?
            .map(|r| r.at(0))
            .transpose()
        })
    }

    /// Every live worker that was not removed, as the registries apply it.
    pub fn live_workers(&self) -> Result<Vec<Observed>, StoreError> {
        self.with(|db| {
            db.query(
                "SELECT w.*, s.report, s.drained, s.revision,
                    CAST(GREATEST(0, EXTRACT(EPOCH FROM clock_timestamp() - s.last_seen) * 1000)
                         AS BIGINT) AS age_ms
                 FROM worker_status s JOIN workers w ON w.id = s.worker_id
                 WHERE w.removed_at IS NULL",
                &[],
            )?
            .iter()
            .map(|row| {
                let age_ms: i64 = row.get("age_ms")?;
                Ok(Observed {
                    info: worker_of(row)?.info(),
                    // A report this version cannot read counts as an empty one, not an error
                    // that would hide every other worker.
                    report: row.json("report").unwrap_or_default(),
                    drained: row.get("drained")?,
                    revision: row.get("revision")?,
                    age: Duration::from_millis(age_ms.max(0) as u64),
                })
            })
            .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_postgres::PgServer;
    use crate::workers::WorkerRecord;
    use crate::StoreConfig;

    fn replica(pg: &PgServer) -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig {
            url: Some(pg.url()),
            ..Default::default()
        };
        let store = Store::open_with(dir.path(), &config).unwrap();
        (dir, store)
    }

    fn joined(store: &Store, id: &str) -> i64 {
        let record = WorkerRecord {
            id: id.into(),
            advertise: "10.0.0.2:8445".into(),
            version: "0.1.0".into(),
            devices: Default::default(),
            credential_sha256: "00".into(),
            joined_with: "j".into(),
            joined_at: 1,
            removed_at: None,
        };
        assert!(store.upsert_worker(&record).unwrap());
        store.worker_joined(id).unwrap()
    }

    #[test]
    fn status_written_through_one_replica_is_read_by_the_other_with_ages_on_the_database_clock() {
        let pg = PgServer::start();
        let (_a_dir, a) = replica(&pg);
        let (_b_dir, b) = replica(&pg);
        let first = joined(&a, "w-1");
        let live = b.live_workers().unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!(
            (live[0].info.id.as_str(), live[0].revision, live[0].drained),
            ("w-1", first, false)
        );
        assert_eq!(live[0].info.advertise, "10.0.0.2:8445");

        let busy = Report {
            in_flight: 3,
            ..Report::default()
        };
        let reported = b.worker_reported("w-1", &busy).unwrap();
        assert!(reported.revision > first && !reported.drained);
        assert_eq!(a.live_workers().unwrap()[0].report, busy);

        // The age is the database's: a heartbeat stamped 10 s ago (by its clock) reads as 10 s
        // old on every replica, whatever their own clocks say.
        a.with(|db| {
            db.execute(
                "UPDATE worker_status SET last_seen = now() - interval '10 seconds'",
                &[],
            )
        })
        .unwrap();
        let age = b.live_workers().unwrap()[0].age;
        assert!(
            age >= Duration::from_secs(10) && age < Duration::from_secs(70),
            "{age:?}"
        );

        // A drain on one replica holds against heartbeats through the other until a new join.
        let drained = a.worker_drained("w-1").unwrap().unwrap();
        assert!(drained > reported.revision);
        let after = b.worker_reported("w-1", &busy).unwrap();
        assert!(after.drained && after.revision > drained);
        assert!(joined(&b, "w-1") > after.revision);
        assert!(!a.live_workers().unwrap()[0].drained);
        assert_eq!(a.worker_drained("w-unknown").unwrap(), None);

        // Removed through one replica: no replica's snapshot has it.
        assert!(b.remove_worker("w-1").unwrap());
        assert!(a.live_workers().unwrap().is_empty());
        // Deregistered: its status goes with its row.
        joined(&a, "w-2");
        a.forget_worker("w-2").unwrap();
        assert!(b.live_workers().unwrap().is_empty());
        assert!(
            a.worker_reported("w-2", &busy).is_err(),
            "no status for an unknown worker"
        );
    }
}
