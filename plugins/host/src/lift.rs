//! Reading a plugin's output under a byte budget.
//!
//! The canonical ABI lets a component return many lists that all point at the
//! same memory, so a 64 MiB plugin can "return" terabytes, and wasmtime would
//! copy every one. The output types below check each list's and string's
//! length against a per-call budget *before* it is copied.

use crate::bindings::infergate::plugin::types as wit;
use crate::scope::{self, charge};
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime::ValRaw;

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
    Vec<u64> => 8;
    String => 1;
    // Host-side size of a tensor, so a list of millions of empty tensors is
    // refused before its backing vector is allocated.
    Vec<RawTensor> => 64;
    Vec<Limited<String>> => 32;
}

// SAFETY: the ABI and type check of `list<u8>`.
unsafe impl ComponentType for Limited<Vec<u8>> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <Vec<u8> as ComponentType>::typecheck(ty, types)
    }
}

// Byte lists (tensor data) are most of what plugins return: lifted with one
// bounds check and one memcpy into a reused buffer, where wasmtime's generic
// list lifting copies element by element into a new allocation.
// SAFETY: reads only the (pointer, length) pair and the bytes it names,
// bounds-checked against the guest's memory.
unsafe impl Lift for Limited<Vec<u8>> {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        lift_bytes(cx, src[0].get_u32(), src[1].get_u32())
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        _ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        let word = |at: usize| {
            bytes
                .get(at..at + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| wasmtime::Error::msg("list header out of bounds"))
        };
        lift_bytes(cx, word(0)?, word(4)?)
    }
}

fn lift_bytes(cx: &mut LiftContext<'_>, ptr: u32, len: u32) -> wasmtime::Result<Limited<Vec<u8>>> {
    charge(len, 1)?;
    let bytes = cx
        .memory()
        .get(ptr as usize..)
        .and_then(|m| m.get(..len as usize))
        .ok_or_else(|| wasmtime::Error::msg("list pointer/length out of bounds of memory"))?;
    Ok(Limited(scope::copy_out(bytes)))
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
