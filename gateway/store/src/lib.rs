//! infergate's persistent store: the database and content-addressed files under the data directory.
//! The database is one SQLite file (WAL, foreign keys on, schema from `migrations/`), the
//! default; or PostgreSQL (`--store postgres://...`, schema from `migrations/postgres/`), which
//! several gateway replicas share. Every query is written once for both ([`sql`]).
//!
//! It owns the tables (models, versions, keys and their scopes, plugins, pipelines, workers,
//! join secrets, cluster material), the blobs, the key caches and the migrations runner. It
//! must not know what is served or how: no engine, plugin host, llama.cpp or transport (no
//! wasmtime, ONNX Runtime, llama-cpp or tonic in its tree: `scripts/check_layers.sh`), so it
//! builds and tests alone.

pub mod auth;
pub mod blobs;
mod catalog_changes;
mod clock;
mod cluster_material;
pub mod collect;
mod error;
pub mod files;
mod key_cache;
mod key_record;
pub mod keys;
pub mod migrate;
pub mod model_settings;
pub mod models;
mod pg_io;
mod pg_tls;
pub mod plugins;
mod postgres;
mod replica_keys;
pub mod shared_settings;
mod sql;
mod store;
#[cfg(any(test, feature = "test-support"))]
pub mod test_postgres;
#[cfg(test)]
mod tests;
pub mod token_usage;
mod worker_status;
pub mod workers;

pub use blobs::BlobKind;
pub use catalog_changes::CatalogChanges;
pub use clock::now_secs;
pub use cluster_material::StoredMaterial;
pub use error::StoreError;
pub use files::DataDir;
pub use store::{Store, StoreConfig};
