//! What every call of a compiled component shares, a pipeline plugin's or a guardrail's: a
//! fresh store under the call's limits, and whose fault a failed call was (counted).

use crate::config::Limits;
use crate::error::{FaultKind, PluginError, PluginId};
use crate::shared::Shared;
use crate::store::CallState;
use std::sync::Arc;
use wasmtime::{PoolConcurrencyLimitError, Store, Trap};

/// A store for one call: the limiter, the deadline in epoch ticks, the ticker held.
pub(crate) fn new_store(host: &Shared, id: &Arc<PluginId>, limits: &Limits) -> Store<CallState> {
    let state = CallState::new(Arc::clone(id), limits, host.ticker.hold());
    let mut store = Store::new(&host.engine, state);
    store.limiter(|state| state);
    store.set_epoch_deadline(host.deadline_ticks(limits.deadline));
    store
}

/// Says whose fault a failed instantiation or call was, and counts it.
pub(crate) fn classify(
    host: &Shared,
    id: &PluginId,
    limits: &Limits,
    error: wasmtime::Error,
    store: &Store<CallState>,
    over_budget: bool,
) -> PluginError {
    if error.is::<PoolConcurrencyLimitError>() {
        host.metrics.busy();
        return PluginError::Busy { plugin: id.clone() };
    }
    let trap = error.downcast_ref::<Trap>().copied();
    let kind = match trap {
        _ if over_budget => FaultKind::OutputTooLarge,
        Some(Trap::Interrupt) => FaultKind::Timeout,
        Some(Trap::StackOverflow) => FaultKind::StackOverflow,
        _ if store.data().refused_growth => FaultKind::Memory,
        _ => FaultKind::Trap,
    };
    let detail = match kind {
        FaultKind::Timeout => format!("exceeded its {:?} deadline", limits.deadline),
        FaultKind::Memory => format!(
            "exceeded its memory limit of {} MiB",
            limits.memory_bytes >> 20
        ),
        FaultKind::OutputTooLarge => format!(
            "returned more than its output limit of {} bytes",
            limits.output_bytes
        ),
        _ => match trap {
            Some(trap) => trap.to_string(),
            None => format!("{error:#}"),
        },
    };
    fault(host, id, kind, detail)
}

/// A fault of the plugin, counted.
pub(crate) fn fault(host: &Shared, id: &PluginId, kind: FaultKind, detail: String) -> PluginError {
    host.metrics.fault(kind);
    PluginError::Fault {
        plugin: id.clone(),
        kind,
        detail,
    }
}
