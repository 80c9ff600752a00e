//! Shutdown for long-lived streams. HTTP requests are drained by hyper; an upgraded WebSocket
//! is no longer an HTTP connection, so each registers here: on shutdown it stops taking new
//! requests, finishes those in flight and closes with 1001, and the server waits for all of
//! them (up to the grace period) before exiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{watch, Notify};

pub struct Drain {
    draining: watch::Sender<bool>,
    open: Arc<AtomicUsize>,
    closed: Arc<Notify>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            draining: watch::Sender::new(false),
            open: Arc::new(AtomicUsize::new(0)),
            closed: Arc::new(Notify::new()),
        }
    }
}

/// Whether the server drains, for what only asks (a connection's service): cheap to clone.
#[derive(Clone)]
pub struct Draining(watch::Receiver<bool>);

impl Draining {
    pub fn is_draining(&self) -> bool {
        *self.0.borrow()
    }
}

/// Held by an open stream; dropping it tells a waiting shutdown.
pub struct StreamGuard {
    open: Arc<AtomicUsize>,
    closed: Arc<Notify>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.closed.notify_waiters();
        }
    }
}

impl Drain {
    /// Tells every stream to finish.
    pub fn start(&self) {
        self.draining.send_replace(true);
    }

    pub fn is_draining(&self) -> bool {
        *self.draining.borrow()
    }

    pub fn draining(&self) -> Draining {
        Draining(self.draining.subscribe())
    }

    /// Resolves when draining starts (at once if it has).
    pub fn signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.draining.subscribe();
        async move {
            let _ = rx.wait_for(|d| *d).await;
        }
    }

    pub fn stream_opened(&self) -> StreamGuard {
        self.open.fetch_add(1, Ordering::AcqRel);
        StreamGuard {
            open: self.open.clone(),
            closed: self.closed.clone(),
        }
    }

    pub fn open_streams(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// Resolves once no stream is open.
    pub async fn streams_closed(&self) {
        loop {
            let notified = self.closed.notified();
            if self.open_streams() == 0 {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_open_streams() {
        let d = Arc::new(Drain::default());
        let g = d.stream_opened();
        let signal = d.signal();
        assert!(!d.is_draining());
        d.start();
        signal.await;
        let waiter = tokio::spawn({
            let d = d.clone();
            async move { d.streams_closed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(g);
        waiter.await.unwrap();
        assert_eq!(d.open_streams(), 0);
    }
}
