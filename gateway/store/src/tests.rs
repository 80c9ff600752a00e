//! The store's behaviour, run against both backends: each test below runs once on SQLite in a
//! temporary directory and once on a real PostgreSQL server started for it
//! (`test_postgres`). Tests of one backend's own machinery live beside it (`key_cache`:
//! SQLite's data_version; `postgres`: migrations; the replica tests at the end: NOTIFY).

use super::files::BlobWriter;
use super::keys::KeyLimits;
use super::plugins::{PluginDescriptionRow, PluginInsert};
use super::test_postgres::PgServer;
use super::workers::WorkerRecord;
use super::{Store, StoreConfig, StoreError};
use crate::auth::Scopes;
use infergate_cluster::join::JoinSecret;
use infergate_cluster::messages::Devices;
use infergate_limits::RateLimit;
use infergate_protocol::signature::ModelSignature;
use serde_json::json;
use std::time::{Duration, Instant};

/// A PostgreSQL store on `server`, its files under `dir`.
fn postgres_store(server: &PgServer, dir: &std::path::Path, resync_s: u64) -> Store {
    Store::open_with(
        dir,
        &StoreConfig {
            url: Some(server.url()),
            resync_s,
            ..StoreConfig::default()
        },
    )
    .expect("opening the PostgreSQL store")
}

/// `name` becomes a module with a `sqlite` and a `postgres` test, both running `name(&store)`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn sqlite() {
                let dir = tempfile::tempdir().unwrap();
                super::$name(&super::Store::open(dir.path()).unwrap());
            }

            #[test]
            fn postgres() {
                let server = super::PgServer::start();
                let dir = tempfile::tempdir().unwrap();
                super::$name(&super::postgres_store(&server, dir.path(), 5));
            }
        }
    )*};
}

on_both_backends!(
    keys_are_created_authenticated_limited_and_revoked,
    a_wrong_secret_for_a_known_id_is_refused,
    model_versions_are_numbered_configured_and_deleted,
    plugins_and_pipelines_keep_versions_a_pipeline_runs,
    join_secrets_are_stored_hashed_and_found_by_id,
    a_removed_worker_stays_removed_and_a_deregistered_one_is_forgotten,
    start_up_collection_keeps_referenced_files_and_drops_the_rest,
    token_limits_and_usage_are_kept_per_key_model_and_hour,
    model_settings_survive_new_versions_and_go_with_the_model,
    a_keys_guardrails_are_kept_cleared_and_seen_by_its_next_request,
    a_keys_payload_log_is_kept_cleared_and_seen_by_its_next_request,
    run_time_sinks_and_trace_settings_are_kept_field_by_field,
);

fn run_time_sinks_and_trace_settings_are_kept_field_by_field(store: &Store) {
    store
        .set_payload_log_sink("audit", Some(r#"{"file":{"path":"/a"}}"#))
        .unwrap();
    store.set_payload_log_sink("filed", None).unwrap();
    store
        .set_payload_log_sink("audit", Some(r#"{"file":{"path":"/b"}}"#))
        .unwrap();
    store.set_payload_log_sink("gone", Some("{}")).unwrap();
    store.delete_payload_log_sink("gone").unwrap();
    assert_eq!(
        store.list_payload_log_sinks().unwrap(),
        vec![
            (
                "audit".to_owned(),
                Some(r#"{"file":{"path":"/b"}}"#.to_owned())
            ),
            ("filed".to_owned(), None),
        ]
    );

    let set = store
        .change_trace_setting("", true, |r| {
            r.rate = Some(10);
            r.count = Some(5);
        })
        .unwrap();
    assert_eq!(
        (set.rate, set.count, set.count_revision),
        (Some(10), Some(5), 1)
    );
    // Another field: the count is kept, and so is its revision.
    let set = store
        .change_trace_setting("", false, |r| r.level = Some(0))
        .unwrap();
    assert_eq!(
        (set.level, set.count, set.count_revision),
        (Some(0), Some(5), 1)
    );
    // The same count again starts it again.
    store
        .change_trace_setting("", true, |r| r.count = Some(5))
        .unwrap();
    store
        .change_trace_setting("m", false, |r| r.rate = Some(2))
        .unwrap();
    let all = store.list_trace_settings().unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].scope.as_str(), all[0].count_revision, all[0].level),
        ("", 2, Some(0))
    );
    assert_eq!(
        (all[1].scope.as_str(), all[1].rate, all[1].count),
        ("m", Some(2), None)
    );
}

fn infer() -> Scopes {
    Scopes::parse_list("infer").unwrap()
}

fn keys_are_created_authenticated_limited_and_revoked(store: &Store) {
    let (rec, secret) = store.create_key("ci", &infer()).unwrap();
    assert_eq!(store.authenticate(&secret).unwrap().unwrap().id, rec.id);
    assert!(store.authenticate(&format!("{secret}x")).unwrap().is_none());
    assert_eq!(store.key_count().unwrap(), 1);
    assert_eq!(
        store.get_key(&rec.id.to_string()).unwrap().unwrap().name,
        "ci"
    );
    let revoked = store.revoke_key(&rec.public_id).unwrap().unwrap();
    assert!(revoked.revoked_at.is_some());
    assert!(store.authenticate(&secret).unwrap().is_none());
    assert!(store.revoke_key("nope").unwrap().is_none());
    assert_eq!(rec.rate_limit, None);

    let limits = KeyLimits {
        rate_limit: Some(RateLimit::new(2.5, Some(4)).unwrap()),
        max_concurrent: Some(3),
        tokens: Default::default(),
    };
    let (limited, limited_secret) = store
        .create_key_with_limits("lim", &infer(), &limits)
        .unwrap();
    assert_eq!(limited.rate_limit, limits.rate_limit);
    assert_eq!(limited.max_concurrent, Some(3));
    let cleared = store
        .set_key_limits(&limited.public_id, &KeyLimits::default())
        .unwrap()
        .unwrap();
    assert_eq!((cleared.rate_limit, cleared.max_concurrent), (None, None));
    let seen = store.authenticate(&limited_secret).unwrap().unwrap();
    assert_eq!(seen.rate_limit, None, "the cached key follows its limits");
    assert!(store.set_key_limits("nope", &limits).unwrap().is_none());
    let names: Vec<String> = store
        .list_keys()
        .unwrap()
        .into_iter()
        .map(|k| k.name)
        .collect();
    assert_eq!(names, ["ci", "lim"]);
}

fn a_keys_guardrails_are_kept_cleared_and_seen_by_its_next_request(store: &Store) {
    let (rec, secret) = store.create_key("guarded", &infer()).unwrap();
    assert_eq!(rec.guardrails, None);
    assert!(rec.info().guardrails.is_empty());
    // Authenticated once: the key is in the cache (SQLite's snapshot, a replica's keys).
    assert!(store.authenticate(&secret).unwrap().is_some());
    let list =
        r#"[{"plugin":"pii-mask"},{"plugin":"blocked-terms@1.0.0","config":{"terms":["x"]}}]"#;
    let set = store
        .set_key_guardrails(&rec.public_id, Some(list))
        .unwrap()
        .unwrap();
    assert_eq!(set.guardrails.as_deref(), Some(list));
    assert_eq!(set.info().guardrails[1]["config"], json!({"terms": ["x"]}));
    let seen = store.authenticate(&secret).unwrap().unwrap();
    assert_eq!(
        seen.guardrails.as_deref(),
        Some(list),
        "the cached key follows its guardrails"
    );
    let other = store.set_key_guardrails(&rec.id.to_string(), None).unwrap();
    assert_eq!(other.unwrap().guardrails, None);
    assert_eq!(
        store.authenticate(&secret).unwrap().unwrap().guardrails,
        None
    );
    assert!(store
        .set_key_guardrails("nope", Some("[]"))
        .unwrap()
        .is_none());
}

fn a_keys_payload_log_is_kept_cleared_and_seen_by_its_next_request(store: &Store) {
    let (rec, secret) = store.create_key("logged", &infer()).unwrap();
    assert_eq!(
        (rec.payload_log.as_deref(), rec.info().payload_log),
        (None, None)
    );
    assert!(store.authenticate(&secret).unwrap().is_some());
    let setting = r#"{"mode":"all","sample":0.5,"sink":"audit"}"#;
    let set = store
        .set_key_payload_log(&rec.public_id, Some(setting))
        .unwrap()
        .unwrap();
    assert_eq!(set.info().payload_log.unwrap()["sink"], json!("audit"));
    assert_eq!(
        store
            .authenticate(&secret)
            .unwrap()
            .unwrap()
            .payload_log
            .as_deref(),
        Some(setting),
        "the cached key follows its setting"
    );
    store
        .set_key_payload_log(&rec.id.to_string(), None)
        .unwrap();
    assert_eq!(
        store.authenticate(&secret).unwrap().unwrap().payload_log,
        None
    );
    assert!(store.set_key_payload_log("nope", None).unwrap().is_none());
}

fn a_wrong_secret_for_a_known_id_is_refused(store: &Store) {
    let (_, secret) = store.create_key("k", &infer()).unwrap();
    assert!(store.authenticate(&secret).unwrap().is_some());
    let forged = format!("{}AAAA", &secret[..secret.len() - 4]);
    assert!(store.authenticate(&forged).unwrap().is_none());
    assert!(store.authenticate("ig_000000000000_x").unwrap().is_none());
}

pub(super) fn signature() -> ModelSignature {
    ModelSignature {
        inputs: Vec::new(),
        outputs: Vec::new(),
        metadata: Default::default(),
    }
}

/// A finished upload of `content`, as the upload handler makes it.
pub(super) fn upload(store: &Store, content: &[u8]) -> (String, tempfile::NamedTempFile) {
    let mut w = BlobWriter::new(store.dir()).unwrap();
    w.write(content).unwrap();
    w.finish().unwrap()
}

fn model_versions_are_numbered_configured_and_deleted(store: &Store) {
    let (sha, tmp) = upload(store, b"model bytes");
    let v1 = store
        .add_model_version(tmp, "m", &sha, 11, &signature(), &json!({"a": 1}))
        .unwrap();
    let (same, tmp) = upload(store, b"model bytes");
    let v2 = store
        .add_model_version(tmp, "m", &same, 11, &signature(), &json!({}))
        .unwrap();
    assert_eq!((v1.version, v2.version), (1, 2));
    assert_eq!(v1.config, json!({"a": 1}));
    assert!(store.set_model_config("m", 2, &json!({"b": 2})).unwrap());
    assert!(!store.set_model_config("m", 9, &json!({})).unwrap());
    assert_eq!(
        store.model_version("m", 2).unwrap().unwrap().config,
        json!({"b": 2})
    );
    assert!(store.model_version("m", 9).unwrap().is_none());
    let listed: Vec<u64> = store
        .list_model_versions()
        .unwrap()
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(listed, [1, 2]);
    store.delete_model_version("m", 1).unwrap().unwrap();
    assert!(
        store.dir().model_file(&sha).is_file(),
        "v2 still uses the file"
    );
    store.delete_model_version("m", 2).unwrap().unwrap();
    assert!(
        !store.dir().model_file(&sha).exists(),
        "the last delete removes it"
    );
    assert!(store.delete_model_version("m", 2).unwrap().is_none());
}

fn plugin(store: &Store, version: &str, content: &[u8], sha: &str) -> PluginInsert {
    let json = json!({"name": "p", "version": version});
    store
        .add_plugin(
            content,
            sha,
            &PluginDescriptionRow {
                name: "p",
                version,
                kind: "pre",
                json: &json,
            },
        )
        .unwrap()
}

fn plugins_and_pipelines_keep_versions_a_pipeline_runs(store: &Store) {
    // Content addresses: PostgreSQL refuses to share a file that does not hash to its own.
    let address = |content: &[u8]| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(content));
    let (a, b) = (address(b"one"), address(b"two"));
    assert!(matches!(
        plugin(store, "1.0.0", b"one", &a),
        PluginInsert::Created(_)
    ));
    assert!(matches!(
        plugin(store, "2.0.0", b"two", &b),
        PluginInsert::Created(_)
    ));
    assert!(matches!(
        plugin(store, "2.0.0", b"two", &b),
        PluginInsert::Unchanged(_)
    ));
    assert!(matches!(
        plugin(store, "2.0.0", b"one", &a),
        PluginInsert::Conflict(_)
    ));
    assert!(store.plugin_content_stored(&a).unwrap());
    let versions: Vec<String> = store
        .list_plugins()
        .unwrap()
        .into_iter()
        .map(|p| p.version)
        .collect();
    assert_eq!(versions, ["1.0.0", "2.0.0"], "oldest upload first");
    assert!(store
        .set_plugin_limits("p", "1.0.0", &json!({"fuel": 5}))
        .unwrap());
    assert!(!store.set_plugin_limits("p", "9", &json!({})).unwrap());

    // "newest" runs 2.0.0; "pinned" runs 1.0.0.
    let spec = json!({"model": "m"});
    let (newest, created) = store
        .put_pipeline("newest", &spec, &[("p".into(), None)])
        .unwrap();
    assert!(created);
    assert_eq!(newest.spec, spec);
    let (_, created) = store
        .put_pipeline("newest", &spec, &[("p".into(), None), ("p".into(), None)])
        .unwrap();
    assert!(!created, "a second put replaces");
    store
        .put_pipeline("pinned", &spec, &[("p".into(), Some("1.0.0".into()))])
        .unwrap();
    let names: Vec<String> = store
        .list_pipelines()
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(names, ["newest", "pinned"]);
    assert_eq!(
        store
            .delete_plugin("p", Some("2.0.0"))
            .unwrap()
            .unwrap_err(),
        ["newest"]
    );
    assert_eq!(
        store.delete_plugin("p", None).unwrap().unwrap_err(),
        ["newest", "pinned"]
    );
    // A pipeline has settings of its own, which go with it.
    let log = json!({"mode": "all", "sink": "audit"});
    let set = store
        .set_model_setting("newest", "payload_log", Some(log.clone()))
        .unwrap();
    assert_eq!(set.unwrap()["payload_log"], log);
    assert!(store.delete_pipeline("newest").unwrap());
    assert!(store.model_settings("newest").unwrap().is_empty());
    assert!(!store.delete_pipeline("newest").unwrap());
    assert!(store.pipeline("newest").unwrap().is_none());
    let deleted = store.delete_plugin("p", Some("2.0.0")).unwrap().unwrap();
    assert_eq!(deleted.len(), 1);
    assert!(!store.dir().plugin_file(&b).exists());
    assert!(store.pipeline("pinned").unwrap().is_some());
}

fn worker(id: &str, credential: &str) -> WorkerRecord {
    WorkerRecord {
        id: id.into(),
        advertise: "127.0.0.1:9000".into(),
        version: "0.1.0".into(),
        devices: Devices {
            cores: 4,
            ..Devices::default()
        },
        credential_sha256: credential.into(),
        joined_with: "abc".into(),
        joined_at: 1,
        removed_at: None,
    }
}

fn join_secrets_are_stored_hashed_and_found_by_id(store: &Store) {
    let (join, stored) = JoinSecret::generate(&"a".repeat(64), Some(99));
    store.add_join_secret(&stored).unwrap();
    let back = store.join_secret(&join.id).unwrap().unwrap();
    assert_eq!(back, stored);
    assert!(store.join_secret("nope").unwrap().is_none());
    assert_eq!(join.verify(Some(&back), 5), Ok(()));
    assert!(store.revoke_join_secret(&join.id).unwrap());
    assert!(!store.revoke_join_secret(&join.id).unwrap());
    assert!(store.join_secret(&join.id).unwrap().is_none());
}

fn a_removed_worker_stays_removed_and_a_deregistered_one_is_forgotten(store: &Store) {
    assert!(store.upsert_worker(&worker("w-1", "h1")).unwrap());
    assert!(store.upsert_worker(&worker("w-1", "h2")).unwrap());
    let w = store.worker("w-1").unwrap().unwrap();
    assert_eq!((w.credential_sha256.as_str(), w.devices.cores), ("h2", 4));
    assert!(store.remove_worker("w-1").unwrap());
    assert!(!store.remove_worker("w-1").unwrap());
    // A rejoin under a removed id changes nothing.
    assert!(!store.upsert_worker(&worker("w-1", "h3")).unwrap());
    let w = store.worker("w-1").unwrap().unwrap();
    assert_eq!(w.credential_sha256, "h2");
    assert!(w.removed_at.is_some());
    store.forget_worker("w-1").unwrap();
    assert!(store.worker("w-1").unwrap().is_some(), "removal sticks");
    assert!(store.upsert_worker(&worker("w-2", "h")).unwrap());
    store.forget_worker("w-2").unwrap();
    assert!(store.worker("w-2").unwrap().is_none());
    assert_eq!(store.list_workers().unwrap().len(), 1);
}

fn start_up_collection_keeps_referenced_files_and_drops_the_rest(store: &Store) {
    use std::fs;
    let dir = store.dir().clone();
    let (kept_sha, tmp) = upload(store, b"kept model");
    store
        .add_model_version(tmp, "m", &kept_sha, 10, &signature(), &json!({}))
        .unwrap();
    // What a crash leaves: a persisted file without its row, an unfinished upload, the
    // temporary files of atomic writes, in every directory they are written to.
    let orphan = dir.model_file(&"a".repeat(64));
    fs::write(&orphan, b"orphan").unwrap();
    fs::write(dir.plugin_file(&"b".repeat(64)), b"orphan plugin").unwrap();
    fs::write(dir.plugins().join(".tmp-x1"), b"half").unwrap();
    fs::write(dir.tmp().join("upload-x2"), b"half").unwrap();
    fs::write(dir.root().join(".tmp-x3"), b"key").unwrap();
    fs::write(dir.tls().join(".tmp-x4"), b"pem").unwrap();

    let collected = store.collect_orphans().unwrap();
    assert_eq!(collected.files, 6, "{collected:?}");
    assert!(
        dir.model_file(&kept_sha).is_file(),
        "a referenced file stays"
    );
    assert!(!orphan.exists());
    assert_eq!(fs::read_dir(dir.tmp()).unwrap().count(), 0);
    assert_eq!(fs::read_dir(dir.plugins()).unwrap().count(), 0);
    assert_eq!(store.collect_orphans().unwrap(), Default::default());
}

/// Polls `check` every 5 ms for up to 10 s; returns how long it took to hold.
fn within_10s(mut check: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if check() {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// Two replicas on one PostgreSQL: what one writes, the other's cache follows through NOTIFY
/// (resync set to an hour, so only a notification can explain it).
#[test]
fn replicas_follow_each_others_key_writes_through_notifications() {
    let server = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = postgres_store(&server, da.path(), 3600);
    let b = postgres_store(&server, db.path(), 3600);
    let (rec, secret) = a.create_key("shared", &infer()).unwrap();
    let seen = within_10s(|| b.authenticate(&secret).unwrap().is_some());
    assert!(seen.is_some(), "B never saw the key A created");
    a.set_key_guardrails(&rec.public_id, Some(r#"[{"plugin":"pii-mask"}]"#))
        .unwrap()
        .unwrap();
    let guarded = within_10s(|| {
        b.authenticate(&secret)
            .unwrap()
            .is_some_and(|k| k.guardrails.is_some())
    });
    assert!(
        guarded.is_some(),
        "B never saw the guardrails A set on the key"
    );
    a.revoke_key(&rec.public_id).unwrap().unwrap();
    let gone = within_10s(|| b.authenticate(&secret).unwrap().is_none());
    assert!(gone.is_some(), "B still accepts a key A revoked");
    eprintln!(
        "revocation reached the other replica in {:?}",
        gone.unwrap()
    );
}

/// PostgreSQL stopped: cached keys keep authenticating, writes fail as unavailable (503), and
/// both sides recover by themselves when it is back.
#[test]
fn a_stopped_database_keeps_cached_keys_and_refuses_writes_until_it_is_back() {
    let mut server = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = postgres_store(&server, da.path(), 1);
    let b = postgres_store(&server, db.path(), 1);
    let (_, secret) = a.create_key("before", &infer()).unwrap();
    assert!(within_10s(|| b.authenticate(&secret).unwrap().is_some()).is_some());

    server.stop();
    assert!(a.authenticate(&secret).unwrap().is_some());
    assert!(b.authenticate(&secret).unwrap().is_some());
    let err = a.create_key("during", &infer()).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
    assert!(matches!(b.list_keys(), Err(StoreError::Unavailable(_))));

    server.resume();
    let mut created = None;
    let back = within_10s(|| {
        created = a.create_key("after", &infer()).ok();
        created.is_some()
    });
    assert!(
        back.is_some(),
        "writes did not recover after PostgreSQL came back"
    );
    let (_, after) = created.unwrap();
    // B's listener reconnects (or its resync runs) and sees the key written since.
    assert!(within_10s(|| b.authenticate(&after).unwrap().is_some()).is_some());
    assert!(b.authenticate(&secret).unwrap().is_some());
}

/// A change whose notification never comes (here: the trigger switched off, as when a listener
/// was reconnecting) reaches the other replica through the periodic full reload.
#[test]
fn the_resync_catches_a_change_that_sent_no_notification() {
    let server = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = postgres_store(&server, da.path(), 3600);
    let b = postgres_store(&server, db.path(), 1);
    let (rec, secret) = a.create_key("quiet", &infer()).unwrap();
    assert!(within_10s(|| b.authenticate(&secret).unwrap().is_some()).is_some());
    a.with(|db| {
        db.execute("ALTER TABLE api_keys DISABLE TRIGGER api_keys_notify", &[])?;
        db.execute(
            "UPDATE api_keys SET revoked_at = 1 WHERE id = ?1",
            super::sql::vals![rec.id],
        )?;
        db.execute("ALTER TABLE api_keys ENABLE TRIGGER api_keys_notify", &[])
    })
    .unwrap();
    let took = within_10s(|| b.authenticate(&secret).unwrap().is_none());
    assert!(took.is_some(), "the resync never dropped the revoked key");
    eprintln!(
        "a change without notification arrived in {:?}",
        took.unwrap()
    );
}

/// A replica that cannot reload its keys honours them for `resync_s + keys_stale_s`, then
/// refuses every key as unavailable (503) until a reload succeeds again.
#[test]
fn cached_keys_are_honoured_for_a_bounded_time_while_postgres_is_away() {
    let mut server = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path(),
        &StoreConfig {
            url: Some(server.url()),
            resync_s: 1,
            keys_stale_s: 1,
        },
    )
    .unwrap();
    let (_, secret) = store.create_key("cached", &infer()).unwrap();
    assert!(store.authenticate(&secret).unwrap().is_some());
    server.stop();
    // Honoured at first (the last reload is recent), refused once it is older than the bound.
    let refused =
        within_10s(|| matches!(store.authenticate(&secret), Err(StoreError::Unavailable(_))));
    assert!(refused.is_some(), "cached keys honoured without a bound");
    match store.authenticate(&secret) {
        Err(StoreError::Unavailable(why)) => assert!(why.contains("keys_stale_s"), "{why}"),
        other => panic!("{other:?}"),
    }
    server.resume();
    let back = within_10s(|| matches!(store.authenticate(&secret), Ok(Some(_))));
    assert!(
        back.is_some(),
        "the keys never came back after PostgreSQL did"
    );
    // No bound at all: honoured for as long as it takes.
    let other = tempfile::tempdir().unwrap();
    let unbounded = Store::open_with(
        other.path(),
        &StoreConfig {
            url: Some(server.url()),
            resync_s: 1,
            keys_stale_s: 0,
        },
    )
    .unwrap();
    assert!(unbounded.authenticate(&secret).unwrap().is_some());
}

/// What the gateway follows besides keys: a model version or a pipeline written through one
/// replica is announced to the other (resync set to an hour: only a notification explains it),
/// and SQLite announces nothing.
#[test]
fn replicas_hear_of_each_others_model_and_pipeline_writes() {
    let server = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = postgres_store(&server, da.path(), 3600);
    let b = postgres_store(&server, db.path(), 3600);
    let changes = b.catalog_changes().expect("PostgreSQL announces changes");
    // B's listener announces "everything" once when it starts listening; wait for that first,
    // so that what follows can only be A's notifications.
    assert!(within_10s(|| changes.borrow().models > 0).is_some());
    let before = *changes.borrow();
    let (sha, file) = upload(&a, b"model bytes");
    a.add_model_version(file, "m", &sha, 11, &signature(), &json!({}))
        .unwrap();
    let models = within_10s(|| changes.borrow().models > before.models);
    assert!(models.is_some(), "B never heard of A's model version");
    let before = *changes.borrow();
    a.put_pipeline("p", &json!({"model": "m"}), &[]).unwrap();
    let pipelines = within_10s(|| changes.borrow().pipelines > before.pipelines);
    assert!(pipelines.is_some(), "B never heard of A's pipeline");
    eprintln!(
        "announced to the other replica: model version in {:?}, pipeline in {:?}",
        models.unwrap(),
        pipelines.unwrap()
    );
    let sqlite = Store::open(da.path().join("sqlite").as_path()).unwrap();
    assert!(sqlite.catalog_changes().is_none());
}

/// The number of rows a `SELECT count(*) ... WHERE sha256 = ?1` finds.
fn count(store: &Store, sql: &str, sha: &str) -> i64 {
    store
        .with(|db| db.query_one(sql, super::sql::vals![sha])?.at(0))
        .unwrap()
}

/// Model files in PostgreSQL, for replicas without a shared volume: a file of two and a half
/// chunks uploaded through A is fetched by B into its own data directory and checked; B's
/// damaged copy is replaced; a damaged copy in the database is refused and leaves nothing
/// behind; the chunks go with the last row that references them, whichever replica deletes it.
#[test]
fn postgres_shares_multi_chunk_files_between_data_directories() {
    use super::blobs::CHUNK;
    use super::sql::vals;
    use super::BlobKind;
    let server = PgServer::start();
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = postgres_store(&server, da.path(), 3600);
    let b = postgres_store(&server, db.path(), 3600);
    let content: Vec<u8> = (0..CHUNK * 5 / 2).map(|i| (i * 7 % 251) as u8).collect();
    let size = content.len() as u64;
    let (sha, file) = upload(&a, &content);
    a.add_model_version(file, "m", &sha, size, &signature(), &json!({}))
        .unwrap();
    let chunks = "SELECT count(*) FROM blob_chunks WHERE sha256 = ?1";
    let blobs = "SELECT count(*) FROM blobs WHERE sha256 = ?1";
    assert_eq!(count(&a, chunks, &sha), 3);

    let path = b.local_blob(BlobKind::Model, &sha).unwrap();
    assert_eq!(path, b.dir().model_file(&sha));
    assert!(std::fs::read(&path).unwrap() == content, "B's copy differs");

    let mut damaged = content.clone();
    damaged[CHUNK + 1] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    b.local_blob(BlobKind::Model, &sha).unwrap();
    assert!(std::fs::read(&path).unwrap() == content, "not replaced");

    // The database's copy damaged too (one byte of the second chunk): refused, not stored.
    let flip = |store: &Store| {
        store
            .with(|db| {
                let mut data: Vec<u8> = db
                    .query_one(
                        "SELECT data FROM blob_chunks WHERE sha256 = ?1 AND n = 1",
                        vals![&sha],
                    )?
                    .at(0)?;
                data[1] ^= 0xff;
                db.execute(
                    "UPDATE blob_chunks SET data = ?2 WHERE sha256 = ?1 AND n = 1",
                    vals![&sha, data.as_slice()],
                )
            })
            .unwrap()
    };
    flip(&a);
    std::fs::write(&path, &damaged).unwrap();
    let err = b.local_blob(BlobKind::Model, &sha).unwrap_err().to_string();
    assert!(
        err.contains("copy in PostgreSQL is damaged") && err.contains(&sha),
        "{err}"
    );
    assert!(!path.exists(), "a damaged file was left to be loaded");
    assert_eq!(std::fs::read_dir(b.dir().tmp()).unwrap().count(), 0);
    flip(&a);

    // B stores the same bytes under another name over its damaged copy, which the upload
    // replaces; one copy in PostgreSQL, kept while either row exists.
    std::fs::write(&path, &damaged).unwrap();
    let (same, file) = upload(&b, &content);
    b.add_model_version(file, "n", &same, size, &signature(), &json!({}))
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == content, "not replaced");
    assert_eq!(count(&a, chunks, &sha), 3);
    a.delete_model_version("m", 1).unwrap().unwrap();
    assert_eq!(count(&a, blobs, &sha), 1, "'n' still references it");
    b.delete_model_version("n", 1).unwrap().unwrap();
    assert_eq!((count(&a, blobs, &sha), count(&a, chunks, &sha)), (0, 0));
    assert!(
        !b.dir().model_file(&sha).exists(),
        "B's copy goes with its row"
    );
    let err = b.local_blob(BlobKind::Model, &sha).unwrap_err().to_string();
    assert!(
        err.contains("neither in this replica's data directory nor in PostgreSQL"),
        "{err}"
    );
}

/// SQLite's data directory is the only copy: a damaged model file is refused, never loaded.
#[test]
fn sqlite_refuses_a_damaged_model_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let (sha, file) = upload(&store, b"model bytes");
    store
        .add_model_version(file, "m", &sha, 11, &signature(), &json!({}))
        .unwrap();
    let path = store.local_blob(super::BlobKind::Model, &sha).unwrap();
    std::fs::write(&path, b"model bytez").unwrap();
    let err = store
        .local_blob(super::BlobKind::Model, &sha)
        .unwrap_err()
        .to_string();
    assert!(err.contains("hashes to") && err.contains(&sha), "{err}");
}

/// Replicas starting together on an empty database: exactly one creates the first admin key.
#[test]
fn replicas_starting_together_create_one_first_key() {
    let server = PgServer::start();
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<Store> = dirs
        .iter()
        .map(|d| postgres_store(&server, d.path(), 3600))
        .collect();
    let admin = Scopes::parse_list("admin").unwrap();
    let start = std::sync::Barrier::new(stores.len());
    // A few rounds on an emptied table: without the lock, one round alone often passes.
    for round in 0..5 {
        stores[0]
            .with(|db| db.execute("DELETE FROM api_keys", &[]))
            .unwrap();
        let created = std::thread::scope(|s| {
            let racers: Vec<_> = stores
                .iter()
                .map(|store| {
                    s.spawn(|| {
                        start.wait();
                        store.create_first_key("admin", &admin).unwrap().is_some()
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|r| r.join().unwrap())
                .filter(|&created| created)
                .count()
        });
        assert_eq!(created, 1, "round {round}");
        assert_eq!(stores[0].key_count().unwrap(), 1, "round {round}");
    }
    assert!(stores[1]
        .create_first_key("admin", &admin)
        .unwrap()
        .is_none());
}

fn token_limits_and_usage_are_kept_per_key_model_and_hour(store: &Store) {
    use crate::token_usage::TokenUsage;
    use infergate_traffic::period::Period;
    use infergate_traffic::tokens::{TokenBudget, TokenLimits};
    let limits = KeyLimits {
        tokens: TokenLimits {
            tokens_per_minute: Some(1500),
            token_budget: Some(TokenBudget {
                tokens: 90_000,
                period: Period::Month,
            }),
        },
        ..KeyLimits::default()
    };
    let (rec, secret) = store
        .create_key_with_limits("llm", &infer(), &limits)
        .unwrap();
    assert_eq!(rec.tokens, limits.tokens);
    assert_eq!(
        store.authenticate(&secret).unwrap().unwrap().tokens,
        limits.tokens
    );
    let cleared = store
        .set_key_limits(&rec.public_id, &KeyLimits::default())
        .unwrap()
        .unwrap();
    assert!(cleared.tokens.is_unlimited());

    let noon = 1_710_504_000;
    let row = |key_id, model: &str, hour, prompt, completion| TokenUsage {
        key_id,
        model: model.into(),
        hour,
        requests: 1,
        prompt_tokens: prompt,
        completion_tokens: completion,
        cached_tokens: 0,
    };
    store
        .add_token_usage(&[
            row(rec.id, "chat", noon, 10, 5),
            row(rec.id, "chat", noon + 1800, 1, 1),
            row(rec.id, "other", noon, 3, 0),
            row(rec.id, "chat", noon - 3600, 100, 100),
        ])
        .unwrap();
    // Added to the same row by a second writer (another replica).
    store
        .add_token_usage(&[row(rec.id, "chat", noon, 1, 1)])
        .unwrap();
    let used = store.token_usage_since(rec.id, noon).unwrap();
    assert_eq!(used.len(), 2);
    assert_eq!(used[0].model, "chat");
    assert_eq!(
        (
            used[0].requests,
            used[0].prompt_tokens,
            used[0].completion_tokens
        ),
        (3, 12, 7)
    );
    assert_eq!(used[1].total(), 3);
    assert_eq!(
        store.tokens_spent_since(noon - 3600).unwrap(),
        vec![(rec.id, 200 + 19 + 3)]
    );
}

fn model_settings_survive_new_versions_and_go_with_the_model(store: &Store) {
    assert!(store
        .set_model_setting("m", "traffic", Some(json!({"split": []})))
        .unwrap()
        .is_none());
    let (sha, tmp) = upload(store, b"a model");
    store
        .add_model_version(tmp, "m", &sha, 7, &signature(), &json!({}))
        .unwrap();
    let set = store
        .set_model_setting("m", "traffic", Some(json!({"mirror": 1})))
        .unwrap()
        .unwrap();
    assert_eq!(set["traffic"], json!({"mirror": 1}));
    store
        .set_model_setting("m", "later", Some(json!(true)))
        .unwrap();
    let (sha, tmp) = upload(store, b"a model");
    store
        .add_model_version(tmp, "m", &sha, 7, &signature(), &json!({}))
        .unwrap();
    let all = store.list_model_settings().unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].1["traffic"], json!({"mirror": 1}));
    let left = store
        .set_model_setting("m", "later", None)
        .unwrap()
        .unwrap();
    assert!(!left.contains_key("later"));
    store.delete_model_version("m", 1).unwrap().unwrap();
    assert!(
        !store.model_settings("m").unwrap().is_empty(),
        "one version left"
    );
    store.delete_model_version("m", 2).unwrap().unwrap();
    assert!(store.model_settings("m").unwrap().is_empty());
    assert!(store.list_model_settings().unwrap().is_empty());
}
