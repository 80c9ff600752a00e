//! Reading and writing a 1 MiB tensor in a shared-memory region: the crate's `pread`/`pwrite`
//! against a copy from (and to) a mapping of the object kept for the region's life, and a
//! mapping made per request. Prints time per transfer and the ratio to `pread`/`pwrite`,
//! measured in the same run, in alternating rounds (timings on a shared machine are noisy).
//!
//!     cargo bench -p infergate-shm --bench copy
//!
//! A mapping would have to survive a client shrinking its object (a copy from the vanished
//! pages is a SIGBUS): copying through `process_vm_readv`/`writev` would (the kernel returns
//! EFAULT instead), a plain copy would need a process-wide SIGBUS handler. This measures what
//! each would buy.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{Object, PREFIX};
use infergate_shm::{Limits, SharedMemory};
use std::time::{Duration, Instant};

const SIZE: usize = 1 << 20;
const ROUNDS: usize = 3;
const PER_ROUND: usize = 500;

/// Maps the whole object; the caller unmaps it.
fn map(object: &Object) -> *mut u8 {
    // SAFETY: maps SIZE bytes of an object that holds SIZE bytes; nothing else is at the
    // returned address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            object.fd,
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

fn time(mut f: impl FnMut()) -> Duration {
    let started = Instant::now();
    for _ in 0..PER_ROUND {
        f();
    }
    started.elapsed() / PER_ROUND as u32
}

fn main() {
    let object = Object::new("bench", SIZE);
    let shm = SharedMemory::new(PREFIX, Limits::default()).expect("prefix");
    shm.register("bench", "r", &object.key, 0, SIZE as u64)
        .expect("register");
    let region = shm.region("bench", "r").expect("region");
    let kept = map(&object);
    let data = vec![7u8; SIZE];
    let mut sums = [Duration::ZERO; 8];
    for _ in 0..ROUNDS {
        sums[0] += time(|| {
            std::hint::black_box(region.read(0, SIZE).expect("read"));
        });
        sums[1] += time(|| {
            // SAFETY: `kept` maps SIZE bytes, and nothing shrinks the object here.
            let v = unsafe { std::slice::from_raw_parts(kept, SIZE) }.to_vec();
            std::hint::black_box(v);
        });
        sums[2] += time(|| {
            let p = map(&object);
            // SAFETY: `p` maps SIZE bytes until the munmap below.
            let v = unsafe { std::slice::from_raw_parts(p, SIZE) }.to_vec();
            // SAFETY: unmaps exactly the mapping made above.
            unsafe { libc::munmap(p.cast(), SIZE) };
            std::hint::black_box(v);
        });
        // The kernel copying from the mapping for us (a fault becomes EFAULT, not SIGBUS).
        sums[6] += time(|| {
            let mut v: Vec<u8> = Vec::with_capacity(SIZE);
            let local = libc::iovec {
                iov_base: v.as_mut_ptr().cast(),
                iov_len: SIZE,
            };
            let remote = libc::iovec {
                iov_base: kept.cast(),
                iov_len: SIZE,
            };
            // SAFETY: both vectors describe SIZE valid bytes of this process: the Vec's spare
            // capacity and the kept mapping.
            let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
            assert_eq!(n, SIZE as isize);
            // SAFETY: the kernel wrote all SIZE bytes.
            unsafe { v.set_len(SIZE) };
            std::hint::black_box(v);
        });
        sums[7] += time(|| {
            let local = libc::iovec {
                iov_base: data.as_ptr().cast_mut().cast(),
                iov_len: SIZE,
            };
            let remote = libc::iovec {
                iov_base: kept.cast(),
                iov_len: SIZE,
            };
            // SAFETY: `data` is SIZE readable bytes (the kernel only reads it) and the kept
            // mapping SIZE writable ones.
            let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
            assert_eq!(n, SIZE as isize);
        });
        sums[3] += time(|| region.write(0, &data).expect("write"));
        sums[4] += time(|| {
            // SAFETY: `kept` maps SIZE writable bytes; `data` is SIZE bytes elsewhere.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), kept, SIZE) };
        });
        sums[5] += time(|| {
            let p = map(&object);
            // SAFETY: as above, for the mapping made here, unmapped at once.
            unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), p, SIZE);
                libc::munmap(p.cast(), SIZE);
            }
        });
    }
    // SAFETY: unmaps the mapping kept for the run.
    unsafe { libc::munmap(kept.cast(), SIZE) };
    let us = |d: Duration| d.as_secs_f64() * 1e6 / ROUNDS as f64;
    let rows = [
        ("read  pread into a new Vec (this crate)", 0, 0),
        ("read  copy from a kept mapping", 1, 0),
        ("read  map, copy, unmap per request", 2, 0),
        ("write pwrite (this crate)", 3, 3),
        ("write copy into a kept mapping", 4, 3),
        ("write map, copy, unmap per request", 5, 3),
        ("read  process_vm_readv from a kept mapping", 6, 0),
        ("write process_vm_writev into a kept mapping", 7, 3),
    ];
    println!("1 MiB transfers, {ROUNDS} rounds of {PER_ROUND}:");
    for (what, i, base) in rows {
        println!(
            "  {what:<42} {:>8.1} µs  ({:.2}x the crate's time)",
            us(sums[i]),
            sums[i].as_secs_f64() / sums[base].as_secs_f64()
        );
    }
}
