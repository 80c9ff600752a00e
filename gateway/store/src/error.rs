//! What can go wrong in the store, and whose fault each is: the database's (unreachable now,
//! or refusing), the files', the configuration's.

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Db(#[from] rusqlite::Error),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Migration(String),
    #[error("{0}")]
    Corrupt(String),
    #[error("PostgreSQL error: {0}")]
    Postgres(tokio_postgres::Error),
    /// The database cannot be reached or takes no queries now (PostgreSQL down, restarting,
    /// out of connections): the request may succeed later.
    #[error("the store is unavailable: {0}")]
    Unavailable(String),
    /// A bad `--store` URL or setting.
    #[error("{0}")]
    Config(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        if unavailable(&e) {
            // With its causes: "error performing TLS handshake" alone does not say that the
            // server's certificate was refused, and why.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            StoreError::Unavailable(text)
        } else {
            StoreError::Postgres(e)
        }
    }
}

impl StoreError {
    /// Wraps an I/O error with what was being done, for `map_err`.
    pub(crate) fn io(doing: &'static str) -> impl Fn(std::io::Error) -> StoreError {
        move |e| StoreError::Io(format!("{doing}: {e}"))
    }
}

/// Whether a PostgreSQL error means the database cannot be reached or is not taking queries
/// (so the request may succeed later: 503), rather than a fault in what was asked (500).
fn unavailable(e: &tokio_postgres::Error) -> bool {
    match e.as_db_error() {
        // 08: connection exception; 53: insufficient resources; 57: operator intervention
        // (shutdown, restart).
        Some(db) => matches!(&db.code().code()[..2], "08" | "53" | "57"),
        // I/O, a closed connection, a timeout: nothing reached the server.
        None => true,
    }
}
