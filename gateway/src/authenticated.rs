//! The key the admission middleware has just authenticated, handed to the handler of the same
//! request so that it does not look the key up in SQLite a second time.
//!
//! Every request with a key is authenticated by the admission middleware (to apply the key's
//! limits) and again by its handler (`AppState::authorize`, which also checks the scope). The
//! handler runs inside the middleware's future, so a task-local carries the record across. It
//! is only reused for exactly the key string the handler sees; anything spawned elsewhere
//! (a WebSocket after its upgrade, gRPC) authenticates against the store as before.

use crate::store::keys::KeyRecord;
use std::future::Future;

tokio::task_local! {
    static AUTHENTICATED: (Box<str>, KeyRecord);
}

/// Runs `work` (the rest of the request) knowing that `presented` authenticated as `key`.
pub async fn with<F: Future>(presented: &str, key: KeyRecord, work: F) -> F::Output {
    AUTHENTICATED.scope((presented.into(), key), work).await
}

/// The record authenticated earlier in this request for exactly `presented`, if any.
pub fn lookup(presented: &str) -> Option<KeyRecord> {
    AUTHENTICATED
        .try_with(|(seen, key)| (seen.as_ref() == presented).then(|| key.clone()))
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Scopes;
    use crate::store::Store;

    #[tokio::test]
    async fn only_the_same_key_inside_the_request_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let (record, secret) = store
            .create_key("t", &Scopes::parse_list("infer").unwrap())
            .unwrap();
        assert!(lookup(&secret).is_none(), "outside a request");
        let inside = with(&secret, record.clone(), async {
            (lookup(&secret).map(|k| k.id), lookup("ig_other").is_none())
        })
        .await;
        assert_eq!(inside, (Some(record.id), true));
        assert!(lookup(&secret).is_none(), "the request is over");
    }
}
