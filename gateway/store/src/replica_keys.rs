//! Active API keys of a PostgreSQL store, held in memory by each replica: authenticating a
//! request never waits for the database, and keeps working while it is down.
//!
//! The cache follows the database three ways:
//! - a replica's own key writes refresh the key at once (read-your-writes on that replica);
//! - every key change in any replica (or by hand in SQL) fires a trigger that `NOTIFY`s
//!   `infergate_keys` with the key's public id inside the writing transaction; a connection of
//!   this replica `LISTEN`s and re-reads that one key (a revocation typically reaches every
//!   replica within milliseconds);
//! - a full reload every `resync` (and after every reconnection of the listener) covers
//!   notifications that were lost while the listener was disconnected, so a revocation reaches
//!   every replica within the resync interval at worst while the database is up.
//!
//! While this replica cannot reach PostgreSQL (the database down, or a partition between them)
//! a revocation made through another replica cannot reach it: its cached keys are honoured for
//! at most `honoured_for` past the last full reload that succeeded (`[store] keys_stale_s`
//! beyond the resync interval), then every key is refused with 503 until a reload succeeds
//! again. That bounds how long a revoked key outlives its revocation on a partitioned replica,
//! at the cost of the replica's availability once the bound passes.

use super::catalog_changes::{self, CatalogSignal};
use super::key_cache::ActiveKey;
use super::pg_tls::PgTls;
use super::sql::{vals, Db, Row};
use super::StoreError;
use crate::auth;
use deadpool_postgres::Pool;
use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_postgres::AsyncMessage;

/// The channel the key trigger of `migrations/postgres/0001_init.sql` notifies.
const CHANNEL: &str = "infergate_keys";
const ACTIVE: &str = "SELECT * FROM api_keys WHERE revoked_at IS NULL";
/// In PostgreSQL's placeholders: also run directly by the listener.
const ONE: &str = "SELECT * FROM api_keys WHERE public_id = $1 AND revoked_at IS NULL";

pub(super) struct ReplicaKeys {
    by_public_id: RwLock<HashMap<String, ActiveKey>>,
    /// When every key was last read from the database.
    reloaded: Mutex<Instant>,
    /// How long past that reload the cached keys are honoured; None: for as long as the
    /// database stays unreachable.
    honoured_for: Option<Duration>,
}

impl ReplicaKeys {
    pub(super) fn new(honoured_for: Option<Duration>) -> ReplicaKeys {
        ReplicaKeys {
            by_public_id: RwLock::default(),
            reloaded: Mutex::new(Instant::now()),
            honoured_for,
        }
    }

    /// The active key matching `presented`; unavailable once the cache is older than it may be
    /// (see the module's comment).
    pub(super) fn authenticate(
        &self,
        presented: &str,
    ) -> Result<Option<std::sync::Arc<crate::key_record::KeyRecord>>, StoreError> {
        if let Some(limit) = self.honoured_for {
            let age = self.reloaded.lock().elapsed();
            if age > limit {
                return Err(StoreError::Unavailable(format!(
                    "API keys cannot be checked: this replica has not reached PostgreSQL for {} s, and honours its cached keys for {} s ([store] resync_s + keys_stale_s)",
                    age.as_secs(),
                    limit.as_secs()
                )));
            }
        }
        let Some(public_id) = auth::public_id(presented) else {
            return Ok(None);
        };
        Ok(self
            .by_public_id
            .read()
            .get(public_id)
            .and_then(|key| key.verify(presented)))
    }

    /// Re-reads one key (`Some`: cached when active, dropped when revoked or deleted) or all of
    /// them (`None`: the cache becomes what the database holds).
    pub(super) fn reload(&self, db: &Db<'_>, public_id: Option<&str>) -> Result<(), StoreError> {
        let rows = match public_id {
            Some(id) => db.query(ONE, vals![id])?,
            None => db.query(ACTIVE, &[])?,
        };
        self.replace(public_id, &rows)
    }

    fn replace(&self, public_id: Option<&str>, rows: &[Row]) -> Result<(), StoreError> {
        let fresh = rows
            .iter()
            .map(ActiveKey::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        let mut cached = self.by_public_id.write();
        match public_id {
            Some(id) => {
                cached.remove(id);
            }
            None => {
                cached.clear();
                *self.reloaded.lock() = Instant::now();
            }
        }
        cached.extend(fresh.into_iter().map(|k| (k.record.public_id.clone(), k)));
        Ok(())
    }
}

/// The listener: runs on the store's runtime for the life of the store, reconnecting with a
/// growing pause (up to 2 s) while the database is unreachable. Cached keys stay as they were
/// meanwhile. It also listens for changes of models, plugins and pipelines and passes them on
/// to `catalog` (with "everything" at each full reload of the keys).
pub(super) async fn listen(
    config: tokio_postgres::Config,
    tls: PgTls,
    pool: Pool,
    keys: Arc<ReplicaKeys>,
    catalog: Arc<CatalogSignal>,
    resync: Duration,
) {
    let mut pause = Duration::from_millis(100);
    loop {
        let lost = session(&config, &tls, &pool, &keys, &catalog, resync, &mut pause).await;
        tracing::warn!(error = %lost, "key change listener lost PostgreSQL; cached keys stay in use until it reconnects");
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// One connection's worth of listening; returns why it ended.
async fn session(
    config: &tokio_postgres::Config,
    tls: &PgTls,
    pool: &Pool,
    keys: &ReplicaKeys,
    catalog: &CatalogSignal,
    resync: Duration,
    pause: &mut Duration,
) -> StoreError {
    let (client, mut connection) = match config.connect(tls.clone()).await {
        Ok(c) => c,
        Err(e) => return e.into(),
    };
    // The connection's messages: notifications go to this task, the end of the connection
    // ends the session.
    let (notified, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let message = (n.channel().to_owned(), n.payload().to_owned());
                    if notified.send(message).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(e) => return StoreError::from(e),
            }
        }
        StoreError::Unavailable("the listening connection closed".into())
    });
    let ended = async {
        client
            .batch_execute(&format!(
                "LISTEN {CHANNEL}; LISTEN {}",
                catalog_changes::CHANNEL
            ))
            .await
            .map_err(StoreError::from)?;
        // Listening from here on: a full reload now covers whatever changed while this replica
        // was not listening.
        reload(pool, keys, None).await?;
        catalog.everything_changed();
        *pause = Duration::from_millis(100);
        let mut tick = tokio::time::interval(resync);
        tick.tick().await;
        loop {
            tokio::select! {
                changed = notifications.recv() => match changed {
                    Some((channel, table)) if channel == catalog_changes::CHANNEL => {
                        catalog.table_changed(&table)
                    }
                    Some((_, public_id)) => reload(pool, keys, Some(public_id)).await?,
                    None => return Err(StoreError::Unavailable("the listening connection closed".into())),
                },
                _ = tick.tick() => {
                    reload(pool, keys, None).await?;
                    catalog.everything_changed();
                }
            }
        }
    };
    let result: Result<(), StoreError> = ended.await;
    driver.abort();
    match result {
        Err(e) => e,
        Ok(()) => StoreError::Unavailable("the listener stopped".into()),
    }
}

/// `ReplicaKeys::reload` on the listener's runtime: one key or all, on a pooled connection,
/// bounded in time.
async fn reload(
    pool: &Pool,
    keys: &ReplicaKeys,
    public_id: Option<String>,
) -> Result<(), StoreError> {
    let work = async {
        let client = pool
            .get()
            .await
            .map_err(|e| StoreError::Unavailable(format!("no connection to PostgreSQL: {e}")))?;
        let rows = match &public_id {
            Some(id) => client.query(ONE, &[id]).await?,
            None => client.query(ACTIVE, &[]).await?,
        };
        rows.iter()
            .map(Row::from_postgres)
            .collect::<Result<Vec<_>, _>>()
    };
    let rows = tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .map_err(|_| StoreError::Unavailable("reloading keys timed out".into()))??;
    keys.replace(public_id.as_deref(), &rows)
}
