//! The global allocator of plugins built with the SDK (feature `arena`, on
//! by default): a bump allocator over a zero-initialised static, falling
//! back to the system allocator when it is full.
//!
//! Why: Rust's wasm32 allocator takes every new chunk from `memory.grow`, so
//! a call that receives a 600 KiB tensor grows linear memory, and the host
//! must map the new pages in (and out again before the next call reuses the
//! slot). The arena is part of the module's initial memory instead (a
//! `.bss` static: no bytes in the module), which the host keeps mapped.
//! Every call runs in a fresh instance, so nothing needs to be returned to
//! the arena: freeing or growing the newest block reuses its space, anything
//! else is reclaimed when the instance goes away.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};

/// Room for a 224×224×3 f32 tensor in and out. Not more: the host resets
/// every page a pool slot has ever touched on each reuse (it cannot tell
/// which are still zero), so a slot that once held a large payload here
/// costs a memset of it on later calls too; this bounds that.
const ARENA_BYTES: usize = 2 << 20;

#[repr(C, align(16))]
struct Arena {
    bytes: UnsafeCell<[u8; ARENA_BYTES]>,
    /// Offset of the first free byte.
    next: Cell<usize>,
}

// SAFETY: wasm32 without the atomics feature has one thread per instance.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena {
    bytes: UnsafeCell::new([0; ARENA_BYTES]),
    next: Cell::new(0),
};

impl Arena {
    fn base(&self) -> usize {
        self.bytes.get() as usize
    }

    fn contains(&self, ptr: *mut u8) -> bool {
        (self.base()..self.base() + ARENA_BYTES).contains(&(ptr as usize))
    }

    fn alloc(&self, layout: Layout) -> Option<*mut u8> {
        let start = (self.base() + self.next.get()).next_multiple_of(layout.align()) - self.base();
        let end = start.checked_add(layout.size())?;
        if end > ARENA_BYTES {
            return None;
        }
        self.next.set(end);
        Some((self.base() + start) as *mut u8)
    }

    /// Whether `ptr` (of `size` bytes) is the newest block.
    fn is_last(&self, ptr: *mut u8, size: usize) -> bool {
        ptr as usize + size == self.base() + self.next.get()
    }

    fn free(&self, ptr: *mut u8, size: usize) {
        if self.is_last(ptr, size) {
            self.next.set(ptr as usize - self.base());
        }
    }

    /// Resizes the newest block in place; `false` if `ptr` is not the newest
    /// block or the arena has no room.
    fn resize_last(&self, ptr: *mut u8, old_size: usize, new_size: usize) -> bool {
        let start = ptr as usize - self.base();
        if !self.is_last(ptr, old_size) || new_size > ARENA_BYTES - start {
            return false;
        }
        self.next.set(start + new_size);
        true
    }
}

/// The arena, then the system allocator.
pub struct ArenaAllocator;

// SAFETY: blocks are disjoint ranges of the arena or come from `System`;
// `contains` tells which, so each is freed where it was allocated.
unsafe impl GlobalAlloc for ArenaAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match ARENA.alloc(layout) {
            Some(ptr) => ptr,
            // SAFETY: the caller's contract, passed on.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ARENA.contains(ptr) {
            ARENA.free(ptr, layout.size());
        } else {
            // SAFETY: not in the arena, so `System` allocated it.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !ARENA.contains(ptr) {
            // SAFETY: not in the arena, so `System` allocated it.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        if ARENA.resize_last(ptr, layout.size(), new_size) {
            return ptr;
        }
        // SAFETY: `new_size` with the old alignment is a valid layout (the
        // caller's contract); the blocks are disjoint.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[global_allocator]
static GLOBAL: ArenaAllocator = ArenaAllocator;
