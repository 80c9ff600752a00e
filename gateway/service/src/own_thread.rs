//! Runs a token-by-token generation loop on a thread of its own instead of a runtime worker.
//!
//! Each generated token is one round trip to the model's instance thread. Awaited on a tokio
//! worker, the reply wakes the task through the scheduler (inject queue, worker unpark, often
//! through the I/O driver), a share of a small model's step time worth saving (about a tenth;
//! `cargo bench -p infergate --bench streaming`); a thread blocked in `block_on` is woken directly
//! by the reply. The transport (SSE writer, WebSocket writer) stays on the runtime and works in
//! parallel with the next step.

use crate::error::{ApiError, ApiResult};
use std::future::Future;
use tokio::sync::oneshot;
use tracing::Instrument;

/// Drives `work` to completion on a blocking-pool thread. Dropping the returned future (client
/// gone, WebSocket request cancelled) cancels `work` at its next await point: the model call
/// in progress is dropped and no further token is generated.
pub async fn run<F, T>(work: F) -> ApiResult<T>
where
    F: Future<Output = ApiResult<T>> + Send + 'static,
    T: Send + 'static,
{
    let (alive, gone) = oneshot::channel::<()>();
    let handle = tokio::runtime::Handle::current();
    let work = work.in_current_span();
    let task = tokio::task::spawn_blocking(move || {
        handle.block_on(async move {
            tokio::select! {
                biased;
                _ = gone => None,
                out = work => Some(out),
            }
        })
    });
    let outcome = task.await;
    drop(alive);
    match outcome {
        Ok(Some(out)) => out,
        // Only reachable if `alive` was dropped first, which happens after the task ends.
        Ok(None) => Err(ApiError::internal("generation was cancelled")),
        Err(e) => Err(ApiError::internal(format!("generation thread failed: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn returns_the_result_and_stops_when_dropped() {
        assert_eq!(run(async { Ok(7) }).await.ok(), Some(7));

        let dropped = Arc::new(AtomicBool::new(false));
        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let guard = SetOnDrop(dropped.clone());
        let never = run(async move {
            let _guard = guard;
            std::future::pending::<ApiResult<()>>().await
        });
        // The caller gives up: the work on the other thread must be dropped.
        assert!(tokio::time::timeout(Duration::from_millis(50), never)
            .await
            .is_err());
        for _ in 0..200 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the abandoned work was not dropped");
    }
}
