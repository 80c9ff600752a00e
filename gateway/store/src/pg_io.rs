//! One round trip to PostgreSQL on a pooled connection, bounded by [`ROUND_TRIP`]: what both
//! the store's queries ([`crate::sql::Db`]) and its own statements (migrations, transactions)
//! wait for, inside `Postgres::run`.

use crate::error::StoreError;
use deadpool_postgres::ClientWrapper;
use std::future::Future;
use std::time::Duration;
use tokio_postgres::types::ToSql;

/// How long one round trip (or getting a connection) may take before the database counts as
/// unavailable: a partitioned network otherwise hangs a request until TCP gives up.
pub(crate) const ROUND_TRIP: Duration = Duration::from_secs(5);

/// Waits for one round trip, bounded by [`ROUND_TRIP`].
pub(crate) fn wait<T>(
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match futures_executor::block_on(tokio::time::timeout(ROUND_TRIP, fut)) {
        Ok(result) => result.map_err(StoreError::from),
        Err(_) => Err(StoreError::Unavailable(format!(
            "PostgreSQL did not answer within {} s",
            ROUND_TRIP.as_secs()
        ))),
    }
}

/// Runs a statement (prepared once per connection); returns the number of rows it changed.
pub(crate) fn execute(
    client: &ClientWrapper,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, StoreError> {
    let stmt = wait(client.prepare_cached(sql))?;
    wait(client.execute(&stmt, params))
}

/// Every row of a query (prepared once per connection).
pub(crate) fn query(
    client: &ClientWrapper,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<tokio_postgres::Row>, StoreError> {
    let stmt = wait(client.prepare_cached(sql))?;
    wait(client.query(&stmt, params))
}

/// Runs statements without parameters.
pub(crate) fn batch(client: &ClientWrapper, sql: &str) -> Result<(), StoreError> {
    wait(client.batch_execute(sql))
}
