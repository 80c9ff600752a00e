//! Call and fault counters, as plain atomics; the gateway exports a
//! [`MetricsSnapshot`] to Prometheus.

use crate::error::FaultKind;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Default)]
pub(crate) struct Metrics {
    calls: AtomicU64,
    ok: AtomicU64,
    bad_input: AtomicU64,
    busy: AtomicU64,
    faults: [AtomicU64; FaultKind::ALL.len()],
    compiles: AtomicU64,
    cache_hits: AtomicU64,
    cache_rejected: AtomicU64,
    invalid: AtomicU64,
}

/// Counters since the host started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetricsSnapshot {
    /// Calls started (pre- and post-processing).
    pub calls: u64,
    /// Calls that returned output.
    pub ok: u64,
    /// Calls whose input the plugin rejected.
    pub bad_input: u64,
    /// Calls refused because every instance slot was busy.
    pub busy: u64,
    /// Faulted calls per kind, in [`FaultKind::ALL`] order.
    pub faults: Vec<(FaultKind, u64)>,
    /// Plugins compiled by Cranelift (cache misses included).
    pub compiles: u64,
    /// Plugins loaded from the compiled-artifact cache.
    pub cache_hits: u64,
    /// Cache files found corrupt or stale, and recompiled.
    pub cache_rejected: u64,
    /// Uploads rejected as invalid.
    pub invalid: u64,
}

impl MetricsSnapshot {
    /// Faults of one kind.
    pub fn faults_of(&self, kind: FaultKind) -> u64 {
        self.faults
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    }
}

impl Metrics {
    pub(crate) fn call(&self) {
        self.calls.fetch_add(1, Relaxed);
    }
    pub(crate) fn ok(&self) {
        self.ok.fetch_add(1, Relaxed);
    }
    pub(crate) fn bad_input(&self) {
        self.bad_input.fetch_add(1, Relaxed);
    }
    pub(crate) fn busy(&self) {
        self.busy.fetch_add(1, Relaxed);
    }
    pub(crate) fn fault(&self, kind: FaultKind) {
        if let Some(i) = FaultKind::ALL.iter().position(|k| *k == kind) {
            self.faults[i].fetch_add(1, Relaxed);
        }
    }
    pub(crate) fn compiled(&self) {
        self.compiles.fetch_add(1, Relaxed);
    }
    pub(crate) fn cache_hit(&self) {
        self.cache_hits.fetch_add(1, Relaxed);
    }
    pub(crate) fn cache_rejected(&self) {
        self.cache_rejected.fetch_add(1, Relaxed);
    }
    pub(crate) fn invalid(&self) {
        self.invalid.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self) -> MetricsSnapshot {
        MetricsSnapshot {
            calls: self.calls.load(Relaxed),
            ok: self.ok.load(Relaxed),
            bad_input: self.bad_input.load(Relaxed),
            busy: self.busy.load(Relaxed),
            faults: FaultKind::ALL
                .iter()
                .zip(&self.faults)
                .map(|(k, n)| (*k, n.load(Relaxed)))
                .collect(),
            compiles: self.compiles.load(Relaxed),
            cache_hits: self.cache_hits.load(Relaxed),
            cache_rejected: self.cache_rejected.load(Relaxed),
            invalid: self.invalid.load(Relaxed),
        }
    }
}
