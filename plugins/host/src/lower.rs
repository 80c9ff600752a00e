//! Writing a call's input into the plugin. Byte lists (tensor data, request
//! bodies) are copied into guest memory as usual, then their host buffers
//! are donated to the call (see [`crate::scope`]) for the output to reuse:
//! the input is owned by the call and dead once it is in the guest.

use crate::bindings::infergate::plugin::types as wit;
use crate::scope;
use std::mem::MaybeUninit;
use std::sync::{Mutex, PoisonError};
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};
use wasmtime::ValRaw;

/// A `list<u8>` whose buffer is donated once it has been lowered. (A mutex
/// because lowered types must be `Sync`; it is never contended.)
pub(crate) struct Donated(Mutex<Vec<u8>>);

impl Donated {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Donated(Mutex::new(bytes))
    }

    /// Lowers the bytes with wasmtime's own `list<u8>` lowering, then donates
    /// the buffer. A second lowering would see an empty list; wasmtime lowers
    /// each argument once.
    fn lower_then_donate<R>(
        &self,
        lower: impl FnOnce(&[u8]) -> wasmtime::Result<R>,
    ) -> wasmtime::Result<R> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        let lowered = lower(&bytes);
        scope::donate(bytes);
        lowered
    }
}

// SAFETY: the ABI and type check of `list<u8>`, which does the lowering.
unsafe impl ComponentType for Donated {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: delegates to `[u8]`.
unsafe impl Lower for Donated {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<[ValRaw; 2]>,
    ) -> wasmtime::Result<()> {
        self.lower_then_donate(|bytes| bytes.linear_lower_to_flat(cx, ty, dst))
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        self.lower_then_donate(|bytes| bytes.linear_lower_to_memory(cx, ty, offset))
    }
}

/// A tensor as handed to a plugin.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct InTensor {
    pub(crate) name: String,
    pub(crate) datatype: wit::Datatype,
    pub(crate) shape: Vec<u64>,
    pub(crate) data: Donated,
}

/// Input of a pre-processing call.
#[derive(ComponentType, Lower)]
#[component(variant)]
pub(crate) enum InPreInput {
    #[component(name = "bytes")]
    Bytes(Donated),
    #[component(name = "tensors")]
    Tensors(Vec<InTensor>),
}
