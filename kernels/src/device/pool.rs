//! A bounded, size-classed pool of memory blocks, so that after warm-up a request's GPU
//! buffers and pinned host staging buffers come from free lists instead of `cuMemAlloc` /
//! `cuMemHostAlloc` (each a driver call that can synchronise the device).
//!
//! The pool is generic over a [`RawAllocator`]: [`super::Gpu`] instantiates it with device
//! memory and pinned host memory from cudarc, and the unit tests below with plain host memory,
//! so the bookkeeping the GPU relies on (classes, free lists, the bound, the counters) is the
//! code under test, not a copy of it.
//!
//! Sizes are rounded up to a class: a power of two or 1¼, 1½, 1¾ times one (at most 25%
//! waste), and at least [`MIN_CLASS`]. A freed block goes back to its class's free list while
//! the pool holds at most `limit` bytes (free and lent together); a request that would exceed
//! the limit first evicts free blocks (largest first), and if lent blocks alone fill the
//! limit, gets a block that is freed when returned instead of kept ("transient"). The pool
//! never refuses for its own bound; only the allocator can fail.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

/// The smallest class, in bytes.
pub const MIN_CLASS: usize = 256;

/// Makes and (by dropping a block) frees raw memory of one kind.
pub trait RawAllocator {
    type Block;
    type Error;
    /// A block of exactly `bytes` bytes (a class size).
    fn allocate(&self, bytes: usize) -> Result<Self::Block, Self::Error>;
}

/// The class a request of `bytes` is served from.
pub fn class_of(bytes: usize) -> usize {
    let bytes = bytes.max(MIN_CLASS);
    let power = bytes.next_power_of_two();
    if power == bytes {
        return bytes;
    }
    // Quarter steps between the previous power of two and `power`.
    let quarter = power / 8;
    let base = power / 2;
    let steps = (bytes - base).div_ceil(quarter);
    base + steps * quarter
}

/// Counters for `/metrics` and the dashboard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub limit_bytes: usize,
    /// Bytes the pool holds: blocks lent out plus blocks on free lists.
    pub held_bytes: usize,
    pub free_bytes: usize,
    /// Requests served from a free list.
    pub hits: u64,
    /// Requests that called the allocator.
    pub misses: u64,
    /// Free blocks released to make room under the limit.
    pub evictions: u64,
    /// Requests served outside the limit (freed on return, not kept).
    pub transient: u64,
}

struct State<B> {
    free: BTreeMap<usize, Vec<B>>,
    stats: PoolStats,
}

pub struct Pool<A: RawAllocator> {
    allocator: A,
    state: Mutex<State<A::Block>>,
}

/// A block lent by the pool; it goes back when dropped.
pub struct Lease<'p, A: RawAllocator> {
    block: Option<A::Block>,
    class: usize,
    kept: bool,
    pool: &'p Pool<A>,
}

impl<A: RawAllocator> Pool<A> {
    pub fn new(allocator: A, limit_bytes: usize) -> Self {
        Self {
            allocator,
            state: Mutex::new(State {
                free: BTreeMap::new(),
                stats: PoolStats {
                    limit_bytes,
                    ..PoolStats::default()
                },
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<A::Block>> {
        // A panic while holding the lock cannot leave the lists inconsistent (every update is
        // a push/pop plus counter), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A block of at least `bytes` bytes (its class size: see [`Lease::bytes`]).
    pub fn take(&self, bytes: usize) -> Result<Lease<'_, A>, A::Error> {
        let class = class_of(bytes);
        let mut state = self.lock();
        if let Some(block) = state.free.get_mut(&class).and_then(Vec::pop) {
            state.stats.hits += 1;
            state.stats.free_bytes -= class;
            return Ok(self.lease(block, class, true));
        }
        state.stats.misses += 1;
        // Make room: evict free blocks, largest first, until the new block fits.
        let mut evicted = Vec::new();
        while state.stats.held_bytes + class > state.stats.limit_bytes {
            let Some((&size, _)) = state.free.iter().rev().find(|(_, v)| !v.is_empty()) else {
                break;
            };
            if let Some(block) = state.free.get_mut(&size).and_then(Vec::pop) {
                evicted.push(block);
                state.stats.free_bytes -= size;
                state.stats.held_bytes -= size;
                state.stats.evictions += 1;
            }
        }
        let kept = state.stats.held_bytes + class <= state.stats.limit_bytes;
        if kept {
            state.stats.held_bytes += class;
        } else {
            state.stats.transient += 1;
        }
        drop(state);
        // Freed outside the lock: releasing device memory can wait for the device.
        drop(evicted);
        match self.allocator.allocate(class) {
            Ok(block) => Ok(self.lease(block, class, kept)),
            Err(e) => {
                if kept {
                    self.lock().stats.held_bytes -= class;
                }
                Err(e)
            }
        }
    }

    fn lease(&self, block: A::Block, class: usize, kept: bool) -> Lease<'_, A> {
        Lease {
            block: Some(block),
            class,
            kept,
            pool: self,
        }
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }

    /// Frees every block on the free lists (lent blocks are freed when returned).
    pub fn trim(&self) {
        let mut state = self.lock();
        let free = std::mem::take(&mut state.free);
        state.stats.held_bytes -= state.stats.free_bytes;
        state.stats.free_bytes = 0;
        drop(state);
        drop(free);
    }
}

impl<A: RawAllocator> Lease<'_, A> {
    /// The block's size: the class of the requested size.
    pub fn bytes(&self) -> usize {
        self.class
    }

    pub fn block(&self) -> &A::Block {
        // Present until drop.
        self.block.as_ref().unwrap_or_else(|| unreachable!())
    }

    pub fn block_mut(&mut self) -> &mut A::Block {
        self.block.as_mut().unwrap_or_else(|| unreachable!())
    }
}

impl<A: RawAllocator> Drop for Lease<'_, A> {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        if !self.kept {
            return;
        }
        let mut state = self.pool.lock();
        state.stats.free_bytes += self.class;
        state.free.entry(self.class).or_default().push(block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Host memory standing in for the device: counts live blocks so the tests can see what
    /// the pool really allocated and freed.
    #[derive(Default)]
    struct Host {
        live: std::rc::Rc<Cell<usize>>,
        calls: Cell<usize>,
        fail_above: Option<usize>,
    }

    struct Block {
        data: Vec<u8>,
        live: std::rc::Rc<Cell<usize>>,
    }

    impl Drop for Block {
        fn drop(&mut self) {
            self.live.set(self.live.get() - self.data.len());
        }
    }

    impl RawAllocator for Host {
        type Block = Block;
        type Error = String;
        fn allocate(&self, bytes: usize) -> Result<Block, String> {
            self.calls.set(self.calls.get() + 1);
            if self.fail_above.is_some_and(|max| bytes > max) {
                return Err(format!("out of memory for {bytes}"));
            }
            self.live.set(self.live.get() + bytes);
            Ok(Block {
                data: vec![0; bytes],
                live: self.live.clone(),
            })
        }
    }

    #[test]
    fn classes_round_up_by_at_most_a_quarter() {
        assert_eq!(class_of(0), MIN_CLASS);
        assert_eq!(class_of(256), 256);
        assert_eq!(class_of(257), 320);
        assert_eq!(class_of(1024), 1024);
        assert_eq!(class_of(1025), 1280);
        assert_eq!(class_of(1500), 1536);
        assert_eq!(class_of(1793), 2048);
        for n in (1..200_000).step_by(97) {
            let c = class_of(n);
            assert!(c >= n && (c == MIN_CLASS || c * 4 <= n * 5), "{n} -> {c}");
            assert_eq!(class_of(c), c, "a class is its own class");
        }
    }

    #[test]
    fn reuses_blocks_after_warm_up_without_allocating() {
        let pool = Pool::new(Host::default(), 1 << 20);
        for _ in 0..3 {
            let a = pool.take(1000).unwrap();
            let mut b = pool.take(50_000).unwrap();
            b.block_mut().data[0] = 7;
            assert_eq!(a.bytes(), 1024);
            assert!(b.bytes() >= 50_000);
        }
        let s = pool.stats();
        assert_eq!((s.misses, s.hits), (2, 4));
        assert_eq!(pool.allocator.calls.get(), 2);
        assert_eq!(s.held_bytes, 1024 + class_of(50_000));
        assert_eq!(s.free_bytes, s.held_bytes);
        assert_eq!(pool.allocator.live.get(), s.held_bytes);
        // A block handed out again is the one that was returned (its contents show it).
        assert_eq!(pool.take(50_000).unwrap().block().data[0], 7);
    }

    #[test]
    fn stays_within_its_limit_by_evicting_then_lending_transient_blocks() {
        let pool = Pool::new(Host::default(), 4096);
        drop(pool.take(2048).unwrap());
        drop(pool.take(1024).unwrap());
        assert_eq!(pool.stats().held_bytes, 3072);
        // 2048 more does not fit next to 3072: the largest free block goes first.
        let big = pool.take(1536).unwrap();
        let s = pool.stats();
        assert_eq!(s.evictions, 1);
        assert_eq!(s.held_bytes, 1024 + 1536);
        // Lent blocks alone fill the limit: the next one is transient, freed on return.
        let other = pool.take(2048).unwrap();
        assert_eq!(pool.stats().evictions, 2);
        let over = pool.take(4096).unwrap();
        let s = pool.stats();
        assert_eq!(s.transient, 1);
        assert!(s.held_bytes <= s.limit_bytes);
        let live = pool.allocator.live.get();
        drop(over);
        assert_eq!(pool.allocator.live.get(), live - 4096);
        drop((big, other));
        let s = pool.stats();
        assert_eq!(s.free_bytes, s.held_bytes);
        assert!(s.held_bytes <= 4096);
        pool.trim();
        assert_eq!(pool.allocator.live.get(), 0);
        assert_eq!(pool.stats().held_bytes, 0);
    }

    #[test]
    fn an_allocator_failure_is_returned_and_not_counted_as_held() {
        let pool = Pool::new(
            Host {
                fail_above: Some(1 << 16),
                ..Host::default()
            },
            1 << 30,
        );
        let e = pool.take(1 << 20).err().unwrap();
        assert!(e.contains("out of memory"), "{e}");
        assert_eq!(pool.stats().held_bytes, 0);
        assert!(pool.take(1 << 10).is_ok());
    }
}
