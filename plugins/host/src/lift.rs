//! Reading a plugin's output under a byte budget.
//!
//! The canonical ABI lets a component return many lists that all point at the
//! same memory, so a 64 MiB plugin can "return" terabytes, and wasmtime would
//! copy every one. The output types below check each list's and string's
//! length against a per-call budget *before* it is copied.

use crate::bindings::infergate::plugin::types as wit;
use std::cell::Cell;
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime::ValRaw;

thread_local! {
    /// Bytes the current call may still return; `None` outside a call.
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
    /// Whether the current call ran out of budget.
    static EXCEEDED: Cell<bool> = const { Cell::new(false) };
}

/// Arms the output budget for the calls made while it lives, on this thread.
pub(crate) struct BudgetGuard(());

impl BudgetGuard {
    pub(crate) fn arm(bytes: usize) -> Self {
        BUDGET.set(Some(bytes as u64));
        EXCEEDED.set(false);
        BudgetGuard(())
    }

    /// Whether reading the output stopped because it was over budget.
    pub(crate) fn exceeded(&self) -> bool {
        EXCEEDED.get()
    }
}

impl Drop for BudgetGuard {
    fn drop(&mut self) {
        BUDGET.set(None);
    }
}

fn charge(elements: u32, element_size: u64) -> wasmtime::Result<()> {
    let cost = u64::from(elements) * element_size;
    match BUDGET.get() {
        Some(left) if cost <= left => {
            BUDGET.set(Some(left - cost));
            Ok(())
        }
        Some(_) => {
            EXCEEDED.set(true);
            Err(wasmtime::Error::msg(
                "plugin output exceeds the output size limit",
            ))
        }
        None => Err(wasmtime::Error::msg("plugin output read outside a call")),
    }
}

/// A list or string that is charged to the budget before it is copied.
pub(crate) struct Limited<T>(pub(crate) T);

macro_rules! limited {
    ($($t:ty => $element_size:expr;)*) => {$(
        // SAFETY: same ABI and type check as the wrapped type, which does the lifting.
        unsafe impl ComponentType for Limited<$t> {
            type Lower = [ValRaw; 2];
            const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

            fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
                <$t as ComponentType>::typecheck(ty, types)
            }
        }

        // SAFETY: reads only the (pointer, length) pair, then delegates.
        unsafe impl Lift for Limited<$t> {
            fn linear_lift_from_flat(
                cx: &mut LiftContext<'_>,
                ty: InterfaceType,
                src: &Self::Lower,
            ) -> wasmtime::Result<Self> {
                charge(src[1].get_u32(), $element_size)?;
                <$t as Lift>::linear_lift_from_flat(cx, ty, src).map(Limited)
            }

            fn linear_lift_from_memory(
                cx: &mut LiftContext<'_>,
                ty: InterfaceType,
                bytes: &[u8],
            ) -> wasmtime::Result<Self> {
                let len = bytes
                    .get(4..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u32::from_le_bytes)
                    .ok_or_else(|| wasmtime::Error::msg("list header out of bounds"))?;
                charge(len, $element_size)?;
                <$t as Lift>::linear_lift_from_memory(cx, ty, bytes).map(Limited)
            }
        }
    )*};
}

// Strings count one byte per code unit; UTF-16 strings (tagged lengths) count
// as huge and are refused, which no Rust or C guest produces.
limited! {
    Vec<u8> => 1;
    Vec<u64> => 8;
    String => 1;
    // Host-side size of a tensor, so a list of millions of empty tensors is
    // refused before its backing vector is allocated.
    Vec<RawTensor> => 64;
    Vec<Limited<String>> => 32;
}

/// A tensor as read from a plugin, every variable-size part budgeted.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct RawTensor {
    pub(crate) name: Limited<String>,
    pub(crate) datatype: wit::Datatype,
    pub(crate) shape: Limited<Vec<u64>>,
    pub(crate) data: Limited<Vec<u8>>,
}

#[derive(ComponentType, Lift)]
#[component(variant)]
pub(crate) enum RawPostOutput {
    #[component(name = "tensors")]
    Tensors(Limited<Vec<RawTensor>>),
    #[component(name = "json")]
    Json(Limited<String>),
    #[component(name = "bytes")]
    Bytes(Limited<Vec<u8>>),
}

#[derive(ComponentType, Lift)]
#[component(variant)]
pub(crate) enum RawPluginError {
    #[component(name = "bad-input")]
    BadInput(Limited<String>),
    #[component(name = "failure")]
    Failure(Limited<String>),
}

/// A plugin's self-description as read from it, budgeted like any output.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct RawDescription {
    pub(crate) name: Limited<String>,
    pub(crate) version: Limited<String>,
    pub(crate) kind: wit::PluginKind,
    pub(crate) consumes: Limited<Vec<Limited<String>>>,
    pub(crate) produces: Limited<Vec<Limited<String>>>,
}
