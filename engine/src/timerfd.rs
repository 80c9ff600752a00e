//! A one-shot timer with microsecond resolution that wakes a task on the async runtime: a
//! timerfd registered with tokio's I/O driver. Tokio's own timer ticks in whole milliseconds,
//! too coarse for a batch delay of a few hundred microseconds. Used by the engine's batch clock
//! ([`crate::batch_clock`]) and by the floor server's batching mode
//! (`bench/floor/floor_server.rs`), so that the floor measures the same mechanism.
//!
//! Linux only; elsewhere [`Timer::new`] fails with `Unsupported` and callers keep time another
//! way.

pub use imp::Timer;

#[cfg(target_os = "linux")]
mod imp {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;
    use tokio::io::unix::AsyncFd;

    /// The timer; arm it from any thread, wait for it on the runtime it was made on.
    pub struct Timer(AsyncFd<OwnedFd>);

    impl Timer {
        /// A non-blocking monotonic timerfd, registered with the current runtime's I/O driver.
        pub fn new() -> std::io::Result<Timer> {
            // SAFETY: plain system call; the descriptor is owned from here on.
            let fd = unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: `fd` was just created and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            // SAFETY: the AsyncFd owns the descriptor, which is closed only when it drops.
            let registered = unsafe { AsyncFd::register(fd) };
            Ok(Timer(registered.map_err(std::io::Error::from)?))
        }

        /// Expires once, `after` from now (at least 1 ns: zero would disarm it).
        pub fn arm(&self, after: Duration) {
            let after = after.max(Duration::from_nanos(1));
            let spec = libc::itimerspec {
                it_interval: libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: libc::timespec {
                    tv_sec: after.as_secs().min(i32::MAX as u64) as libc::time_t,
                    tv_nsec: after.subsec_nanos() as libc::c_long,
                },
            };
            // SAFETY: `spec` is a valid itimerspec and the descriptor a timerfd this owns; the
            // old value is not asked for. It cannot fail for a valid timerfd and spec.
            unsafe {
                libc::timerfd_settime(self.0.get_ref().as_raw_fd(), 0, &spec, std::ptr::null_mut())
            };
        }

        /// Calls `tick` at each expiry until it returns false or the runtime goes away.
        pub async fn run(&self, mut tick: impl FnMut() -> bool) {
            loop {
                let Ok(mut ready) = self.0.readable().await else {
                    return;
                };
                let mut expirations = [0u8; 8];
                // SAFETY: reads at most 8 bytes into an 8-byte buffer from the timerfd.
                let read = unsafe {
                    libc::read(
                        self.0.get_ref().as_raw_fd(),
                        expirations.as_mut_ptr().cast(),
                        expirations.len(),
                    )
                };
                // Read or not (re-armed meanwhile: nothing to read), the timer is not readable
                // again before its next expiry, whose edge the driver reports anew.
                ready.clear_ready();
                if read == 8 && !tick() {
                    return;
                }
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::time::Duration;

    /// No timerfd here: the clock never starts.
    pub struct Timer;

    impl Timer {
        pub fn new() -> std::io::Result<Timer> {
            Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "no timerfd on this system",
            ))
        }

        pub fn arm(&self, _after: Duration) {}

        pub async fn run(&self, _tick: impl FnMut() -> bool) {}
    }
}
