//! The store the offline commands work on.

use anyhow::Context;
use infergate_store::Store;
use std::path::PathBuf;

/// The store of the offline commands: the data directory's SQLite database, or the PostgreSQL
/// database that `INFERGATE_STORE` names (as `serve --store` does), so that `keys create` and
/// the like work against the database replicas share.
pub(crate) fn open_store(dir: &Option<PathBuf>) -> anyhow::Result<Store> {
    let dir = dir.clone().unwrap_or_else(|| PathBuf::from("./data"));
    let config = infergate_store::StoreConfig {
        url: std::env::var("INFERGATE_STORE")
            .ok()
            .filter(|u| !u.is_empty()),
        ..Default::default()
    };
    Store::open_with(&dir, &config)
        .with_context(|| format!("opening data directory {}", dir.display()))
}
