//! A request in flight on a worker that the manager declares lost ends at once: run again on
//! another worker when it is a unary request outside a sequence, else failed with a 503 that
//! names the worker; a recorded request's trace shows both attempts and why it moved. The
//! workers are in this process: each joins through the manager's own join (its certificate
//! from the cluster CA), serves mutual TLS on 127.0.0.1, and reports heartbeats until told to
//! stop, as a partitioned worker does. The one that is cut off reads the request and never
//! answers.
//!
//! Without the lost-worker signal each of these requests waits for `request_timeout_s` (an
//! hour here) and fails with 504: the hang guard below turns that into a failure.

use crate::support::{traces, App};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use infergate_cluster::messages::{JoinRequest, LoadedModel, Report};
use infergate_service::manager::admission::create_join_secret;
use infergate_service::state::AppState;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a worker does with the requests it receives.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Reads the request, never answers.
    Hold,
    /// Answers with the model's outputs.
    Answer,
}

struct Worker {
    id: String,
    /// Requests it received.
    received: Arc<AtomicUsize>,
    /// Set: its heartbeats stop (a partition between it and the manager).
    cut: Arc<AtomicBool>,
}

impl Worker {
    async fn start(state: &Arc<AppState>, behaviour: Behaviour) -> Worker {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let advertise = tcp.local_addr().unwrap().to_string();
        let (manager, store) = (state.workers(), state.store());
        let (secret, _) = create_join_secret(store, &manager.material().ca, None).unwrap();
        let request = JoinRequest {
            worker_id: None,
            advertise,
            version: "test".into(),
            devices: Default::default(),
        };
        let joined = manager.join(store, &secret.to_string(), request).unwrap();
        let issued = infergate_cluster::ca::Issued {
            cert_pem: joined.cert_pem.clone(),
            key_pem: joined.key_pem.clone(),
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(
            infergate_hop::tls::worker_server_config(&issued, &joined.ca_pem).unwrap(),
        );
        let received = Arc::new(AtomicUsize::new(0));
        let counted = received.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = tcp.accept().await {
                let (acceptor, counted) = (acceptor.clone(), counted.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(
                        move |request: http::Request<Incoming>| {
                            let counted = counted.clone();
                            async move {
                                let _ = request.into_body().collect().await;
                                counted.fetch_add(1, Ordering::SeqCst);
                                if let Behaviour::Hold = behaviour {
                                    std::future::pending::<()>().await;
                                }
                                let answer = json!({"model_name": "tiny", "model_version": "1",
                                "outputs": [{"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [2.0, 4.0]}]});
                                let response = http::Response::builder()
                                    .header(http::header::CONTENT_TYPE, "application/json")
                                    .body(Full::new(bytes::Bytes::from(answer.to_string())))
                                    .unwrap();
                                Ok::<_, hyper::Error>(response)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        let record = manager.authenticate(store, &joined.credential).unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let (state, stopped) = (state.clone(), cut.clone());
        let every = manager.heartbeat().interval / 2;
        tokio::spawn(async move {
            while !stopped.load(Ordering::SeqCst) {
                let report = Report {
                    models: vec![LoadedModel {
                        name: "tiny".into(),
                        version: 1,
                    }],
                    ..Report::default()
                };
                let workers = state.workers();
                workers.report(state.store(), &record, report, workers.removals());
                tokio::time::sleep(every).await;
            }
        });
        Worker {
            id: joined.worker_id,
            received,
            cut,
        }
    }

    async fn until_received(&self, count: usize) {
        while self.received.load(Ordering::SeqCst) < count {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A routing-only manager with fast heartbeats (lost after 2 × 100 ms) and a request deadline
/// far beyond any test: only the lost signal can end a held request.
async fn manager(retry_in_flight: bool) -> App {
    let app = App::with_config(|c| {
        c.cluster.local_engine = false;
        c.cluster.heartbeat_ms = 100;
        c.cluster.missed_heartbeats = std::num::NonZeroU32::new(2).unwrap();
        c.cluster.request_timeout_s = 3600;
        c.cluster.retry_in_flight = retry_in_flight;
    })
    .await;
    infergate_service::startup::spawn_worker_sweep(&app.state);
    app
}

/// What became of a request whose worker was cut off while it held the request.
struct Cut {
    reply: crate::support::Reply,
    /// The worker that held it and was declared lost.
    held: String,
    /// The worker that joined meanwhile and answers.
    other: String,
}

/// The request, sent (with the caller's `traceparent`, if given) while only `held` serves the
/// model; once `held` has it, `other` joins and `held` is cut off.
async fn cut_while_held(app: &Arc<App>, body: Value, traceparent: Option<String>) -> Cut {
    let held = Worker::start(&app.state, Behaviour::Hold).await;
    let sent = {
        let app = app.clone();
        tokio::spawn(async move {
            let path = "/v2/models/tiny/infer";
            let request = traces::post(path, &app.infer, &body, traceparent.as_deref());
            app.call(request).await
        })
    };
    held.until_received(1).await;
    let other = Worker::start(&app.state, Behaviour::Answer).await;
    held.cut.store(true, Ordering::SeqCst);
    let reply = tokio::time::timeout(Duration::from_secs(120), sent)
        .await
        .expect("the request stayed on the lost worker")
        .unwrap();
    if reply.status != 200 {
        assert!(
            reply.error().contains(&held.id),
            "the error names the lost worker: {}",
            reply.error()
        );
    }
    Cut {
        reply,
        held: held.id,
        other: other.id,
    }
}

fn counter(
    app: &App,
    read: fn(&infergate_service::manager::metrics::RoutingCounters) -> u64,
) -> u64 {
    read(app.state.workers().counters())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_request_on_a_lost_worker_is_run_again_on_another() {
    let app = Arc::new(manager(true).await);
    let reply = cut_while_held(&app, App::tiny_request(&[1.0, 2.0]), None)
        .await
        .reply;
    assert_eq!(
        reply.status,
        200,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["outputs"][0]["data"], json!([2.0, 4.0]));
    assert_eq!(counter(&app, |c| c.cut.load(Ordering::Relaxed)), 1);
    assert_eq!(counter(&app, |c| c.retries.load(Ordering::Relaxed)), 1);
    assert_eq!(
        counter(&app, |c| c.retries_sent.load(Ordering::Relaxed)),
        1,
        "it had reached the lost worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequence_parameters_to_a_model_without_sequences_do_not_stop_a_retry() {
    // The model has no sequence batching, so it holds no state between requests and ignores
    // the parameters, as Triton does: the request is retried like any other. (A stateful
    // model's sequence on a lost worker ends with a 503: tests/python/test_triton_streams.py.)
    let app = Arc::new(manager(true).await);
    let mut body = App::tiny_request(&[1.0, 2.0]);
    body["parameters"] = json!({"sequence_id": 42, "sequence_start": true});
    let reply = cut_while_held(&app, body, None).await.reply;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["outputs"][0]["data"], json!([2.0, 4.0]));
    assert_eq!(counter(&app, |c| c.retries.load(Ordering::Relaxed)), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_retry_in_flight_a_request_that_reached_a_lost_worker_fails() {
    let app = Arc::new(manager(false).await);
    let reply = cut_while_held(&app, App::tiny_request(&[1.0, 2.0]), None)
        .await
        .reply;
    assert_eq!(reply.status, 503);
    assert!(
        reply.error().contains("retry_in_flight"),
        "{}",
        reply.error()
    );
    assert_eq!(counter(&app, |c| c.cut.load(Ordering::Relaxed)), 1);
    assert_eq!(counter(&app, |c| c.retries.load(Ordering::Relaxed)), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_requests_trace_shows_the_lost_attempt_and_the_one_that_answered() {
    traces::install();
    let app = Arc::new(manager(true).await);
    // A keyed caller's sampled flag is honoured by default: the request is recorded.
    let trace = "5c0ffee0000000000000000000000a11";
    let cut = cut_while_held(
        &app,
        App::tiny_request(&[1.0, 2.0]),
        Some(traces::traceparent(trace)),
    )
    .await;
    assert_eq!(cut.reply.status, 200, "{:?}", cut.reply.body);
    assert_eq!(cut.reply.header("x-trace-id"), Some(trace));

    let hops = |spans: &[opentelemetry_sdk::trace::SpanData]| {
        let mut hops: Vec<_> = spans
            .iter()
            .filter(|s| s.name == "worker hop")
            .cloned()
            .collect();
        hops.sort_by_key(|s| s.start_time);
        hops
    };
    let spans = traces::until(trace, "two worker hops", |spans| hops(spans).len() == 2).await;
    let [lost, answered] = <[_; 2]>::try_from(hops(&spans)).expect("two hops");
    assert_eq!(traces::attribute(&lost, "worker"), Some(cut.held.clone()));
    assert_eq!(
        traces::attribute(&lost, "failure").as_deref(),
        Some("failed after the request reached it")
    );
    assert_eq!(traces::attribute(&answered, "worker"), Some(cut.other));
    assert_eq!(traces::attribute(&answered, "failure"), None);
    assert!(traces::attribute(&answered, "answer_bytes").is_some());
    assert!(
        lost.end_time <= answered.start_time,
        "the second attempt follows the first"
    );

    // Both attempts hang from one span, which says why the request went elsewhere.
    assert_eq!(lost.parent_span_id, answered.parent_span_id);
    let parent = spans
        .iter()
        .find(|s| s.span_context.span_id() == lost.parent_span_id)
        .expect("the hops' parent is in the trace");
    let retry = parent
        .events
        .iter()
        .find(|e| e.name.contains("trying another"))
        .unwrap_or_else(|| panic!("no retry event on {}: {:?}", parent.name, parent.events));
    let field = |key: &str| {
        retry
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(field("worker"), Some(cut.held));
    assert_eq!(field("reached").as_deref(), Some("true"));
    assert!(
        field("error").is_some_and(|e| e.contains("declared lost")),
        "{:?}",
        retry.attributes
    );
}
