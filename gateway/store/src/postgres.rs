//! The PostgreSQL backend (`--store postgres://...`): the database that several gateway replicas
//! share. A pool of connections (deadpool-postgres) for the store's queries, a connection of
//! its own that `LISTEN`s for changes of keys ([`super::replica_keys`]) and of models, plugins
//! and pipelines ([`super::catalog_changes`]), and schema migrations from
//! `migrations/postgres/`, applied at start under an advisory lock.
//!
//! The rest of the gateway calls the store synchronously (from request handlers and from CLI
//! commands), and a round trip to PostgreSQL must not stall the tokio worker it runs on. So
//! the connections live on a small runtime of the store's own, and a call waits for its round
//! trips in [`Postgres::run`]: on a worker of a multi-threaded runtime inside
//! `block_in_place` (tokio first hands the worker's other tasks to another thread), elsewhere
//! (the CLI, a current-thread runtime) by plain blocking, which cannot deadlock because the
//! connections' I/O is driven by the store's runtime, never the caller's. The hot path does
//! not wait at all: API keys are authenticated from memory ([`super::replica_keys`]).

use super::catalog_changes::CatalogSignal;
use super::pg_io::{self, ROUND_TRIP};
use super::replica_keys::ReplicaKeys;
use super::sql::{vals, Db};
use super::StoreError;
use deadpool_postgres::{ClientWrapper, Manager, ManagerConfig, Pool, RecyclingMethod};
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

/// Connections in the pool: queries are short; more would only queue inside PostgreSQL.
const POOL_SIZE: usize = 16;
/// Every migration, in order, as for SQLite (`super::migrate`), in PostgreSQL's dialect.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_init.sql",
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        "0002_rate_limits.sql",
        include_str!("../../../migrations/postgres/0002_rate_limits.sql"),
    ),
    (
        3,
        "0003_plugins.sql",
        include_str!("../../../migrations/postgres/0003_plugins.sql"),
    ),
    (
        4,
        "0004_workers.sql",
        include_str!("../../../migrations/postgres/0004_workers.sql"),
    ),
    (
        5,
        "0005_catalog_notify.sql",
        include_str!("../../../migrations/postgres/0005_catalog_notify.sql"),
    ),
    (
        6,
        "0006_blobs.sql",
        include_str!("../../../migrations/postgres/0006_blobs.sql"),
    ),
    (
        7,
        "0007_shared_workers.sql",
        include_str!("../../../migrations/postgres/0007_shared_workers.sql"),
    ),
    (
        8,
        "0008_traffic.sql",
        include_str!("../../../migrations/postgres/0008_traffic.sql"),
    ),
    (
        9,
        "0009_guardrail_plugins.sql",
        include_str!("../../../migrations/postgres/0009_guardrail_plugins.sql"),
    ),
    (
        10,
        "0010_key_guardrails.sql",
        include_str!("../../../migrations/postgres/0010_key_guardrails.sql"),
    ),
    (
        11,
        "0011_key_payload_log.sql",
        include_str!("../../../migrations/postgres/0011_key_payload_log.sql"),
    ),
    (
        12,
        "0012_shared_settings.sql",
        include_str!("../../../migrations/postgres/0012_shared_settings.sql"),
    ),
];
/// `pg_advisory_xact_lock` key that serialises migrations of replicas starting together
/// ("infergat" in ASCII).
const MIGRATION_LOCK: i64 = 0x696e_6665_7267_6174;

pub struct Postgres {
    /// Always Some until dropped: dropping a runtime from inside another one panics, so `Drop`
    /// takes it out and shuts it down in the background.
    runtime: Option<Runtime>,
    pool: Pool,
    pub(super) keys: Arc<ReplicaKeys>,
    /// Changes of models, plugins and pipelines made anywhere (`super::catalog_changes`).
    pub(super) catalog: Arc<CatalogSignal>,
}

impl Postgres {
    /// Connects, applies migrations, loads the API keys and starts listening for key changes
    /// (with a full reload every `resync`); cached keys are honoured for `keys_stale` beyond
    /// `resync` while no reload succeeds (None: without a limit).
    pub fn connect(
        url: &str,
        resync: Duration,
        keys_stale: Option<Duration>,
    ) -> Result<Postgres, StoreError> {
        let (mut config, tls) = super::pg_tls::parse(url)?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(ROUND_TRIP);
        }
        if config.get_application_name().is_none() {
            config.application_name("infergate");
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("infergate-store")
            .enable_all()
            .build()
            .map_err(StoreError::io("starting the store's runtime"))?;
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                // A connection that PostgreSQL closed (restart, failover) is noticed by its
                // connection task and replaced when next taken from the pool.
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(ROUND_TRIP))
            .create_timeout(Some(ROUND_TRIP))
            .recycle_timeout(Some(ROUND_TRIP))
            .build()
            .map_err(|e| StoreError::Config(format!("--store: {e}")))?;
        let pg = Postgres {
            runtime: Some(runtime),
            pool,
            keys: Arc::new(ReplicaKeys::new(keys_stale.map(|stale| resync + stale))),
            catalog: Arc::new(CatalogSignal::new()),
        };
        pg.migrate()?;
        pg.with(|db| pg.keys.reload(db, None))?;
        pg.handle().spawn(super::replica_keys::listen(
            config,
            tls,
            pg.pool.clone(),
            pg.keys.clone(),
            pg.catalog.clone(),
            resync,
        ));
        Ok(pg)
    }

    fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("the runtime is only taken on drop")
            .handle()
    }

    /// Runs `f`, which waits for round trips, without stalling the caller's runtime (see the
    /// module's comment).
    fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let on_worker =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        let go = || {
            let _store_runtime = self.handle().enter();
            f()
        };
        if on_worker {
            tokio::task::block_in_place(go)
        } else {
            go()
        }
    }

    /// Runs `f` on a pooled connection.
    pub(super) fn with<T>(
        &self,
        f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with_client(|client| f(&Db::Postgres(client)))
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(&ClientWrapper) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.run(|| {
            let client = futures_executor::block_on(self.pool.get()).map_err(pool_error)?;
            f(&client)
        })
    }

    /// Runs `f` in a transaction on a pooled connection: committed when `f` succeeds.
    pub(super) fn transaction<T>(
        &self,
        f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.with_client(|client| self.in_transaction(client, f))
    }

    fn in_transaction<T>(
        &self,
        client: &ClientWrapper,
        f: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        pg_io::batch(client, "BEGIN")?;
        match f(&Db::Postgres(client)) {
            Ok(out) => {
                pg_io::batch(client, "COMMIT")?;
                Ok(out)
            }
            Err(e) => {
                // A connection that cannot roll back is broken, and the pool drops it.
                let _ = pg_io::batch(client, "ROLLBACK");
                Err(e)
            }
        }
    }

    fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        self.with_client(|client| self.apply_migrations(client, MIGRATIONS))
            .map_err(|e| match e {
                StoreError::Unavailable(_) => e,
                e => StoreError::Migration(e.to_string()),
            })
    }

    /// Applies what `list` holds and the database has not recorded, each migration in its own
    /// transaction under an advisory lock, so that replicas starting together apply each once.
    fn apply_migrations(
        &self,
        client: &ClientWrapper,
        list: &[(i64, &str, &str)],
    ) -> Result<Vec<i64>, StoreError> {
        let mut applied = Vec::new();
        for &(version, name, sql) in list {
            let fresh = self.in_transaction(client, |db| {
                db.execute("SELECT pg_advisory_xact_lock(?1)", vals![MIGRATION_LOCK])?;
                pg_io::batch(
                    client,
                    "CREATE TABLE IF NOT EXISTS schema_migrations (
                        version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)",
                )?;
                let done: bool = db
                    .query_one(
                        "SELECT EXISTS(SELECT 1 FROM schema_migrations WHERE version = ?1)",
                        vals![version],
                    )?
                    .at(0)?;
                if done {
                    return Ok(false);
                }
                pg_io::batch(client, sql)
                    .map_err(|e| StoreError::Migration(format!("migration {name} failed: {e}")))?;
                db.execute(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)",
                    vals![version, name, super::now_secs()],
                )?;
                Ok(true)
            })?;
            if fresh {
                applied.push(version);
            }
        }
        Ok(applied)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => StoreError::from(e),
        e => StoreError::Unavailable(format!("no connection to PostgreSQL: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_postgres::PgServer;

    #[test]
    fn migrations_apply_once_and_a_failed_one_changes_nothing() {
        let server = PgServer::start();
        let pg = Postgres::connect(&server.url(), Duration::from_secs(5), None).unwrap();
        // Applied at connect; a second replica starting finds nothing to do.
        assert!(pg.migrate().unwrap().is_empty());
        let again = Postgres::connect(&server.url(), Duration::from_secs(5), None).unwrap();
        assert!(again.migrate().unwrap().is_empty());

        let broken: &[(i64, &str, &str)] = &[(
            999,
            "0999_broken.sql",
            "CREATE TABLE t2 (x BIGINT); SELEC oops;",
        )];
        let err = pg
            .with_client(|client| pg.apply_migrations(client, broken))
            .unwrap_err()
            .to_string();
        assert!(err.contains("0999_broken.sql"), "{err}");
        let (t2, recorded) = pg
            .with(|db| {
                let t2: bool = db
                    .query_one("SELECT to_regclass('t2') IS NOT NULL", &[])?
                    .at(0)?;
                let recorded: i64 = db
                    .query_one(
                        "SELECT count(*) FROM schema_migrations WHERE version = 999",
                        &[],
                    )?
                    .at(0)?;
                Ok((t2, recorded))
            })
            .unwrap();
        assert!(!t2, "the half-applied table must be rolled back");
        assert_eq!(recorded, 0);
    }
}
