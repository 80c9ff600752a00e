//! The id of the HTTP request a task serves (`X-Request-Id`), for what records a request
//! outside the log lines, such as payload logs. Set by the server's request middleware for
//! the request's own task; tasks it spawns do not inherit it.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static REQUEST_ID: Arc<str>;
}

/// Runs `f` with `id` as the current request id. Not an `async fn`: its future would hold `f`
/// twice over (the argument, and the scope around it), and a request's future is large and
/// moved whole.
pub fn scope<F: Future>(id: Arc<str>, f: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, f)
}

/// The current task's request id, inside [`scope`].
pub fn current() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_id_is_current_inside_its_scope_only() {
        assert!(current().is_none());
        let seen = scope(Arc::from("req-1"), async { current() }).await;
        assert_eq!(seen.as_deref(), Some("req-1"));
        assert!(current().is_none());
    }
}
