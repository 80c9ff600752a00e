//! What lowering and lifting share during one call, on the calling thread:
//! the output byte budget, and the host buffers of byte lists already copied
//! into the guest, reused for the byte lists the call returns.
//!
//! wasmtime lowers and lifts through trait methods that take no state of
//! ours, so the state lives in thread-locals that a [`CallScope`] sets up and
//! clears. Lowering finishes before the guest runs and lifting starts after
//! it, so an input buffer is never read after it is handed over.

use std::cell::{Cell, RefCell};

thread_local! {
    /// Bytes the current call may still return; `None` outside a call.
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
    /// Whether the current call ran out of budget.
    static EXCEEDED: Cell<bool> = const { Cell::new(false) };
    /// Allocations of input byte lists, already copied into the guest.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A spare buffer is reused for an output of `len` bytes only if it wastes
/// at most this much more than `len`, so a small output does not pin a
/// large input's memory.
const MAX_SLACK: usize = 64 << 10;

/// Arms the output budget for the calls made while it lives, on this thread,
/// and frees the spare buffers nobody took when it is dropped.
pub(crate) struct CallScope(());

impl CallScope {
    pub(crate) fn enter(output_bytes: usize) -> Self {
        BUDGET.set(Some(output_bytes as u64));
        EXCEEDED.set(false);
        SPARE.with_borrow_mut(Vec::clear);
        CallScope(())
    }

    /// Whether reading the output stopped because it was over budget.
    pub(crate) fn exceeded(&self) -> bool {
        EXCEEDED.get()
    }
}

impl Drop for CallScope {
    fn drop(&mut self) {
        BUDGET.set(None);
        SPARE.with_borrow_mut(Vec::clear);
    }
}

/// Charges `elements` of `element_size` bytes to the budget; `Err` (and the
/// call fails) when they do not fit.
pub(crate) fn charge(elements: u32, element_size: u64) -> wasmtime::Result<()> {
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

/// Hands over the buffer of an input byte list that is now in guest memory.
pub(crate) fn donate(buffer: Vec<u8>) {
    if BUDGET.get().is_some() && buffer.capacity() > 0 {
        SPARE.with_borrow_mut(|spare| spare.push(buffer));
    }
}

/// `bytes` in a host buffer: a donated one that fits, else a new one. Its
/// pages are already mapped when donated, so a pass-through output costs one
/// copy and no page faults.
pub(crate) fn copy_out(bytes: &[u8]) -> Vec<u8> {
    let fits = |b: &Vec<u8>| b.capacity() >= bytes.len() && b.capacity() - bytes.len() <= MAX_SLACK;
    let mut buffer = SPARE
        .with_borrow_mut(|spare| {
            let i = spare.iter().position(fits)?;
            Some(spare.swap_remove(i))
        })
        .unwrap_or_else(|| Vec::with_capacity(bytes.len()));
    buffer.clear();
    buffer.extend_from_slice(bytes);
    buffer
}
