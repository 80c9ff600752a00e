//! Tests of `key_cache` against a real store.

use super::{KeyCache, RECHECK_AFTER};
use crate::auth::Scopes;
use crate::Store;

/// Waits out the time the server trusts its last look at the database.
fn window() {
    std::thread::sleep(RECHECK_AFTER + std::time::Duration::from_millis(1));
}

/// With nothing committed, a lookup is answered from the snapshot by the WAL-index header
/// alone (no `data_version` call); a commit changes the header.
#[test]
fn an_unchanged_wal_index_header_confirms_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let scopes = Scopes::parse_list("infer").unwrap();
    let (_, secret) = store.create_key("k", &scopes).unwrap();
    let cache = KeyCache::open(&store.dir().database()).unwrap();
    let load = || store.with(super::load_active);
    assert!(cache.authenticate(&secret, load).unwrap().is_some());
    let header = cache.wal_index_header().expect("the WAL index is readable");
    assert_eq!(cache.snapshot.read().header, Some(header));
    assert!(cache
        .authenticate(&secret, || panic!("no commit: no reload"))
        .unwrap()
        .is_some());
    store.create_key("another", &scopes).unwrap();
    assert_ne!(
        cache.wal_index_header(),
        Some(header),
        "a commit rewrites the header"
    );
}

#[test]
fn another_connections_new_keys_are_seen_at_once_and_revocations_after_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let server = Store::open(dir.path()).unwrap();
    let scopes = Scopes::parse_list("infer").unwrap();
    let (own, own_secret) = server.create_key("own", &scopes).unwrap();
    assert_eq!(
        server.authenticate(&own_secret).unwrap().unwrap().id,
        own.id
    );

    // A second process (here: a second store on the same file) creates and revokes keys;
    // the server trusts its last look for RECHECK_AFTER.
    let offline = Store::open(dir.path()).unwrap();
    let (other, other_secret) = offline.create_key("offline", &scopes).unwrap();
    // A key the snapshot lacks is looked for at once, window or not.
    assert_eq!(
        server.authenticate(&other_secret).unwrap().unwrap().id,
        other.id
    );
    offline.revoke_key(&own.public_id).unwrap().unwrap();
    window();
    assert!(server.authenticate(&own_secret).unwrap().is_none());

    // The server's own writes at once, window or not.
    server.revoke_key(&other.public_id).unwrap().unwrap();
    assert!(server.authenticate(&other_secret).unwrap().is_none());

    // After a checkpoint that empties the WAL (its header starts over), a change is still
    // seen, and an unchanged database keeps answering from the snapshot.
    let (third, third_secret) = offline.create_key("third", &scopes).unwrap();
    assert_eq!(
        server.authenticate(&third_secret).unwrap().unwrap().id,
        third.id
    );
    offline
        .with(|db| match db {
            crate::sql::Db::Sqlite(conn) => {
                Ok(conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?)
            }
            _ => unreachable!("a SQLite store"),
        })
        .unwrap();
    offline.revoke_key(&third.public_id).unwrap().unwrap();
    window();
    assert!(server.authenticate(&third_secret).unwrap().is_none());
    for _ in 0..3 {
        assert!(server.authenticate(&third_secret).unwrap().is_none());
        assert!(server.authenticate(&own_secret).unwrap().is_none());
    }
}
