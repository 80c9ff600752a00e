//! Which of the tables that replicas hold in memory (models, plugins, pipelines, models' settings,
//! payload log sinks, trace settings) changed in a PostgreSQL store, as counters that only grow:
//! the key listener ([`super::replica_keys`]) bumps one when the `infergate_catalog` trigger of
//! `migrations/postgres/0005_catalog_notify.sql` names its table, and all of them after every
//! (re)connection and full resync, so that what a lost notification missed is re-read too. The
//! gateway watches them (`infergate_service::replica_sync`) and re-reads what moved; a burst of
//! changes collapses into one re-read.

use tokio::sync::watch;

/// The channel the catalog triggers notify, with the changed table's name as payload.
pub(super) const CHANNEL: &str = "infergate_catalog";

/// How many times each table was seen to change (or may have: resyncs count for all).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatalogChanges {
    pub models: u64,
    pub plugins: u64,
    pub pipelines: u64,
    /// Models' own settings (`model_settings`: traffic policies).
    pub settings: u64,
    /// Payload log sinks defined or removed at run time (`payload_log_sinks`).
    pub sinks: u64,
    /// Trace settings (`trace_settings`).
    pub traces: u64,
}

pub(super) struct CatalogSignal {
    sender: watch::Sender<CatalogChanges>,
}

impl CatalogSignal {
    pub(super) fn new() -> CatalogSignal {
        CatalogSignal {
            sender: watch::Sender::new(CatalogChanges::default()),
        }
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<CatalogChanges> {
        self.sender.subscribe()
    }

    /// A notification naming `table`; unknown names (a later migration's table) are ignored.
    pub(super) fn table_changed(&self, table: &str) {
        self.sender.send_modify(|c| match table {
            "model_versions" => c.models += 1,
            "plugins" => c.plugins += 1,
            "pipelines" | "pipeline_plugins" => c.pipelines += 1,
            "model_settings" => c.settings += 1,
            "payload_log_sinks" => c.sinks += 1,
            "trace_settings" => c.traces += 1,
            _ => {}
        });
    }

    /// Anything may have changed (a resync, a reconnection of the listener).
    pub(super) fn everything_changed(&self) {
        self.sender.send_modify(|c| {
            c.models += 1;
            c.plugins += 1;
            c.pipelines += 1;
            c.settings += 1;
            c.sinks += 1;
            c.traces += 1;
        });
    }
}
