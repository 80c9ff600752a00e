//! Gateway replicas sharing one PostgreSQL store: joins, reports, drains and removals reach
//! every replica, and each goes on alone while the store is down.

use super::admission::create_join_secret;
use super::Manager;
use crate::config::ClusterConfig;
use infergate_cluster::credential;
use infergate_cluster::liveness::WorkerState;
use infergate_cluster::messages::{JoinRequest, LoadedModel, Report};
use infergate_store::Store;

fn replica(pg: &infergate_store::test_postgres::PgServer) -> (tempfile::TempDir, Store, Manager) {
    let dir = tempfile::tempdir().unwrap();
    let config = infergate_store::StoreConfig {
        url: Some(pg.url()),
        ..Default::default()
    };
    let store = Store::open_with(dir.path(), &config).unwrap();
    let manager = Manager::new(&store, ClusterConfig::default()).unwrap();
    (dir, store, manager)
}

fn states(manager: &Manager) -> Vec<(String, WorkerState)> {
    manager
        .view()
        .into_iter()
        .map(|v| (v.info.id, v.state))
        .collect()
}

#[test]
fn replicas_share_joins_reports_drains_and_removals_and_go_on_alone_while_the_store_is_down() {
    let mut pg = infergate_store::test_postgres::PgServer::start();
    let (_a_dir, a_store, a) = replica(&pg);
    let (_b_dir, b_store, b) = replica(&pg);
    // A secret made on A admits a worker through B: one cluster.
    let (secret, _) = create_join_secret(&a_store, &a.material().ca, None).unwrap();
    assert_eq!(a.material().ca.pin(), b.material().ca.pin());
    let request = JoinRequest {
        worker_id: None,
        advertise: "127.0.0.1:9".into(),
        version: "0.1.0".into(),
        devices: Default::default(),
    };
    let joined = b.join(&b_store, &secret.to_string(), request).unwrap();
    let id = joined.worker_id.clone();
    assert!(states(&a).is_empty(), "A has not refreshed yet");
    a.refresh(&a_store);
    assert_eq!(states(&a), [(id.clone(), WorkerState::Ready)]);

    // A heartbeat on A reaches B's registry; a drain on B holds on A.
    let record = a.authenticate(&a_store, &joined.credential).unwrap();
    let loaded = LoadedModel {
        name: "m".into(),
        version: 1,
    };
    let report = Report {
        models: vec![loaded.clone()],
        ..Report::default()
    };
    a.report(&a_store, &record, report.clone(), a.removals());
    b.refresh(&b_store);
    assert_eq!(b.view()[0].report.models, [loaded]);
    assert!(b.drain(&b_store, &id).unwrap());
    a.refresh(&a_store);
    assert_eq!(states(&a), [(id.clone(), WorkerState::Draining)]);
    a.report(&a_store, &record, report.clone(), a.removals());
    assert_eq!(
        states(&a),
        [(id.clone(), WorkerState::Draining)],
        "a heartbeat does not undo the drain"
    );

    // PostgreSQL stopped: the credential A checked still admits the worker there, and its
    // heartbeats keep it alive on A; an unknown credential is 503, not 401.
    pg.stop();
    let again = a.authenticate(&a_store, &joined.credential).unwrap();
    assert_eq!(again.id, id);
    let stranger = credential::issue("w-0123456789abcdef").text;
    let err = a.authenticate(&a_store, &stranger).unwrap_err();
    assert_eq!(err.kind, crate::error::Kind::Overloaded);
    a.report(&a_store, &record, Report::default(), a.removals());
    a.refresh(&a_store);
    assert!(a.view()[0].report.models.is_empty(), "applied here alone");
    assert_eq!(a.view().len(), 1, "a failed refresh forgets nobody");

    // Back: removed through B, A drops it at its next refresh.
    pg.resume();
    // A heartbeat whose credential B checked just before the removal reaches the registry
    // after it: it must not bring the worker back.
    let seen = b.removals();
    let late = b.authenticate(&b_store, &joined.credential).unwrap();
    assert!(b_store.remove_worker(&id).unwrap());
    assert!(b.forget(&id));
    assert!(states(&b).is_empty(), "at once where it was removed");
    b.report(&b_store, &late, Report::default(), seen);
    assert!(
        states(&b).is_empty(),
        "a heartbeat checked before the removal"
    );
    a.refresh(&a_store);
    assert!(states(&a).is_empty());
    assert!(a.authenticate(&a_store, &joined.credential).is_err());
}
