//! The dynamic batcher on real models: results, grouping, queue limits, timeouts, cancellation
//! and priorities. Long `max_queue_delay`s make every case deterministic: a batch runs only when
//! it is full (or preferred), never because a timer fired during the test.

use crate::common::*;
use infergate_engine::{Engine, EngineError, Fault, InferOptions, ModelKey, Tensor};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Batched logits may differ from unbatched ones by ORT's choice of kernels per batch size.
const TOLERANCE: f32 = 1e-3;

/// A multi-thread runtime of 2 workers, or a current-thread one.
fn runtime(multi: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder.enable_all().build().unwrap()
}

/// One MiniLM request of 8 tokens (`seed` picks them) on a task of its own, as a client that
/// may go away: the engine's answer comes back through the task.
fn spawn_infer(
    engine: &Arc<Engine>,
    k: &ModelKey,
    path: &Path,
    seed: u64,
) -> tokio::task::JoinHandle<Result<Vec<Tensor>, EngineError>> {
    let (engine, path, k) = (engine.clone(), path.to_path_buf(), k.clone());
    tokio::spawn(async move { engine.infer(&k, &path, tokens(seed, 8), vec![]).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_results_equal_unbatched_and_stats_count_batches() {
    let Some(engine) = engine(|_| {}) else { return };
    let path = model("efficientnet-lite0.onnx");
    let (plain, batched) = (key("effnet", 1), key("effnet", 2));
    load_configured(
        &engine,
        &batched,
        &path,
        r#"{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 10000000}}"#,
    )
    .await;
    let (a, b, c, d) = tokio::join!(
        engine.infer(&batched, &path, image(1), vec![]),
        engine.infer(&batched, &path, image(2), vec![]),
        engine.infer(&batched, &path, image(3), vec![]),
        engine.infer(&batched, &path, image(4), vec![]),
    );
    let together = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    let mut worst = 0f32;
    for (seed, outputs) in (1..=4).zip(&together) {
        let alone = engine
            .infer(&plain, &path, image(seed), vec![])
            .await
            .unwrap();
        assert_eq!(outputs.len(), 2);
        for (x, y) in outputs.iter().zip(&alone) {
            assert_eq!(x.shape, vec![1, 1000]);
            worst = worst.max(max_diff(x, y));
        }
    }
    eprintln!("largest |batched - unbatched| = {worst:e} (tolerance {TOLERANCE:e})");
    assert!(worst <= TOLERANCE, "{worst}");

    let s = engine.stats(&batched).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (1, 4));
    assert_eq!(s.batch_stats.len(), 1);
    assert_eq!(s.batch_stats[0].batch_size, 4);
    assert_eq!(s.batch_stats[0].compute_infer.count, 1);
    // perf_analyzer needs the per-request counters to agree.
    assert_eq!(s.success.count, 4);
    assert_eq!(s.compute_input.count, 4);
    assert_eq!(s.compute_infer.count, 4);
    assert_eq!(s.compute_output.count, 4);
    let p = engine.stats(&plain).unwrap();
    assert_eq!((p.execution_count, p.inference_count), (4, 4));
    assert_eq!(p.batch_stats[0].batch_size, 1);
    assert_eq!(p.batch_stats[0].compute_infer.count, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mismatched_shapes_are_batched_apart_and_all_succeed() {
    let Some(engine) = engine(|_| {}) else { return };
    let path = model("minilm.onnx");
    let (plain, batched) = (key("minilm", 1), key("minilm", 2));
    load_configured(
        &engine,
        &batched,
        &path,
        r#"{"max_batch_size": 2, "dynamic_batching": {"max_queue_delay_microseconds": 10000000}}"#,
    )
    .await;
    let (a, b, c, d) = tokio::join!(
        engine.infer(&batched, &path, tokens(1, 8), vec![]),
        engine.infer(&batched, &path, tokens(2, 16), vec![]),
        engine.infer(&batched, &path, tokens(3, 8), vec![]),
        engine.infer(&batched, &path, tokens(4, 16), vec![]),
    );
    let results = [a.unwrap(), b.unwrap(), c.unwrap(), d.unwrap()];
    for ((seed, seq), got) in [(1, 8), (2, 16), (3, 8), (4, 16)].into_iter().zip(&results) {
        let alone = engine
            .infer(&plain, &path, tokens(seed, seq), vec![])
            .await
            .unwrap();
        assert_eq!(got[0].shape, vec![1, seq as i64, 384]);
        let diff = max_diff(&got[0], &alone[0]);
        assert!(diff <= TOLERANCE, "seq {seq}: {diff}");
    }
    // Two full batches of two: the 8-token pair and the 16-token pair.
    let s = engine.stats(&batched).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (2, 4));
    assert_eq!(s.batch_stats[0].batch_size, 2);
    assert_eq!(s.batch_stats[0].compute_infer.count, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_rejects_with_a_retry_hint() {
    let Some(engine) = engine(|_| {}) else { return };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let k = key("minilm-full", 1);
    load_configured(&engine, &k, &path, r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 10000000, "default_queue_policy": {"max_queue_size": 2}}}"#).await;
    let waiting: Vec<_> = (0..2).map(|i| spawn_infer(&engine, &k, &path, i)).collect();
    wait_until("two requests queue", || engine.queued(&k) == 2).await;
    let e = engine
        .infer(&k, &path, tokens(9, 8), vec![])
        .await
        .expect_err("the queue is full");
    assert!(matches!(e, EngineError::QueueFull { queued: 2, .. }), "{e}");
    assert_eq!(e.fault(), Fault::Unavailable);
    assert!(e.retry_after().unwrap() >= Duration::from_secs(1));
    for task in waiting {
        task.abort();
    }
    wait_until("aborted requests leave", || engine.in_flight(&k) == 0).await;
    assert_eq!(engine.stats(&k).unwrap().execution_count, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_request_fails_and_never_executes() {
    let Some(engine) = engine(|_| {}) else { return };
    let path = model("minilm.onnx");
    let k = key("minilm-timeout", 1);
    engine
        .set_config(
            &k,
            config(r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 10000000,
                "default_queue_policy": {"default_timeout_microseconds": 100000, "allow_timeout_override": true}}}"#),
        )
        .await
        .unwrap();
    let e = engine
        .infer(&k, &path, tokens(1, 8), vec![])
        .await
        .expect_err("no batch can form before the timeout");
    assert!(matches!(e, EngineError::Timeout { .. }), "{e}");
    assert_eq!(e.fault(), Fault::Timeout);
    // A request's own timeout overrides the default when the policy allows it.
    let options = InferOptions {
        timeout: Some(Duration::from_millis(30)),
        ..InferOptions::default()
    };
    let e = engine
        .infer_with(&k, || path.clone(), tokens(2, 8), vec![], options)
        .await
        .expect_err("times out");
    assert_eq!(e.fault(), Fault::Timeout);
    wait_until("the queue empties", || engine.queued(&k) == 0).await;
    let s = engine.stats(&k).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (0, 0));
}

/// An instance sleeping until a batch's delay is over is not woken by every request that joins
/// the batch, only by one that needs it sooner. These two cases must still be seen at once: a
/// request that fills the batch, and one whose own timeout ends before the delay. The delay is
/// the longest allowed (10 s): served by the instance's timer instead, either would come only
/// after it, which is what the checks look for (not how fast anything is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_batch_wakes_for_a_full_batch_and_for_an_earlier_timeout() {
    let Some(engine) = engine(|_| {}) else { return };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let k = key("minilm-sleeping", 1);
    load_configured(
        &engine,
        &k,
        &path,
        r#"{"max_batch_size": 3, "dynamic_batching": {"max_queue_delay_microseconds": 10000000,
            "default_queue_policy": {"allow_timeout_override": true}}}"#,
    )
    .await;
    let delay = Duration::from_secs(10);
    let started = std::time::Instant::now();
    let first = spawn_infer(&engine, &k, &path, 1);
    wait_until("the first request queues", || engine.queued(&k) == 1).await;
    let second = spawn_infer(&engine, &k, &path, 2);
    wait_until("the second request queues", || engine.queued(&k) == 2).await;
    // Queues behind the waiting batch (4 tokens: a batch of its own) but ends sooner: answered
    // with its timeout, the others still wait.
    let options = InferOptions {
        timeout: Some(Duration::from_millis(20)),
        ..InferOptions::default()
    };
    let late = engine
        .infer_with(&k, || path.clone(), tokens(3, 4), vec![], options)
        .await;
    assert!(
        matches!(&late, Err(e) if e.fault() == Fault::Timeout),
        "a timeout, not {:?}",
        late.map(|t| t.len())
    );
    assert!(
        started.elapsed() < delay,
        "the request's own timeout was served only when the batch's delay ran out"
    );
    assert_eq!(engine.queued(&k), 2, "the batch still waits for its delay");
    // The third sample fills the batch: all three run at once.
    let third = engine.infer(&k, &path, tokens(4, 8), vec![]).await.unwrap();
    assert_eq!(third[0].shape[0], 1);
    assert!(
        started.elapsed() < delay,
        "the full batch ran only when its delay ran out"
    );
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    let s = engine.stats(&k).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (1, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_is_never_executed() {
    let Some(engine) = engine(|_| {}) else { return };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let k = key("minilm-drop", 1);
    load_configured(
        &engine,
        &k,
        &path,
        r#"{"max_batch_size": 2, "dynamic_batching": {"max_queue_delay_microseconds": 10000000}}"#,
    )
    .await;
    let gone = spawn_infer(&engine, &k, &path, 1);
    wait_until("the first request queues", || engine.queued(&k) == 1).await;
    gone.abort(); // the client went away
    wait_until("it leaves", || engine.in_flight(&k) == 0).await;
    // Two new requests fill a batch; had the dropped one stayed, it would have joined them.
    let (b, c) = tokio::join!(
        engine.infer(&k, &path, tokens(2, 8), vec![]),
        engine.infer(&k, &path, tokens(3, 8), vec![]),
    );
    b.unwrap();
    c.unwrap();
    let s = engine.stats(&k).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (1, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_request_runs_before_a_waiting_lower_one() {
    let Some(engine) = engine(|_| {}) else { return };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let k = key("minilm-priority", 1);
    load_configured(
        &engine,
        &k,
        &path,
        r#"{"max_batch_size": 2, "dynamic_batching": {"max_queue_delay_microseconds": 10000000,
                "priority_levels": 2, "default_priority_level": 2}}"#,
    )
    .await;
    let low = spawn_infer(&engine, &k, &path, 1);
    wait_until("the low-priority request queues", || engine.queued(&k) == 1).await;
    // Two samples at level 1: in arrival order they could not join the waiting request (1 + 2 >
    // 2) and would wait behind it; by priority they form a full batch of their own at once.
    let mut high = tokens(2, 8);
    for t in &mut high {
        let infergate_engine::TensorData::Raw(bytes) = &mut t.data else {
            unreachable!()
        };
        bytes.extend_from_slice(&bytes.clone());
        t.shape[0] = 2;
    }
    let options = InferOptions {
        priority: 1,
        ..InferOptions::default()
    };
    let out = engine
        .infer_with(&k, || path.clone(), high, vec![], options)
        .await
        .unwrap();
    assert_eq!(out[0].shape[0], 2);
    assert_eq!(engine.queued(&k), 1, "the low-priority request still waits");
    let second = engine.infer(&k, &path, tokens(3, 8), vec![]).await.unwrap();
    assert_eq!(second[0].shape[0], 1);
    low.await.unwrap().unwrap();
    let s = engine.stats(&k).unwrap();
    assert_eq!((s.execution_count, s.inference_count), (2, 4));

    let bad = InferOptions {
        priority: 3,
        ..InferOptions::default()
    };
    let e = engine
        .infer_with(&k, || path.clone(), tokens(4, 8), vec![], bad)
        .await
        .unwrap_err();
    assert_eq!(e.fault(), Fault::Client);
}

/// Under load the requests' own threads and the instance threads share the sessions: a lone
/// request to an idle version runs on its caller's thread, the rest queue and batch. Every
/// request still gets its own answer, no batch exceeds the limit and nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_load_every_request_gets_its_own_answer_in_bounded_batches() {
    let Some(engine) = engine(|c| c.instances = Some(2)) else {
        return;
    };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let (plain, batched) = (key("minilm-load", 1), key("minilm-load", 2));
    load_configured(
        &engine,
        &batched,
        &path,
        r#"{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 2000}}"#,
    )
    .await;
    const REQUESTS: u64 = 24;
    let tasks: Vec<_> = (0..REQUESTS)
        .map(|seed| spawn_infer(&engine, &batched, &path, seed))
        .collect();
    for (seed, task) in (0..REQUESTS).zip(tasks) {
        let got = task.await.unwrap().unwrap();
        let alone = engine
            .infer(&plain, &path, tokens(seed, 8), vec![])
            .await
            .unwrap();
        let diff = max_diff(&got[0], &alone[0]);
        assert!(diff <= TOLERANCE, "request {seed}: {diff}");
    }
    let s = engine.stats(&batched).unwrap();
    assert_eq!(s.success.count, REQUESTS);
    assert_eq!(s.inference_count, REQUESTS);
    let mut samples = 0;
    for b in &s.batch_stats {
        assert!(b.batch_size <= 4, "batch of {}", b.batch_size);
        samples += b.batch_size * b.compute_infer.count;
    }
    assert_eq!(samples, REQUESTS, "every request ran exactly once");
    let info = engine.model_info(&batched).unwrap();
    assert_eq!(info.instances, 2);
    // Requests that found others queued were left to the instance threads to batch.
    assert!(
        info.caller_runs < s.execution_count,
        "{} of {} batches ran on callers' threads",
        info.caller_runs,
        s.execution_count
    );
}

/// A lone request to an idle version runs on its caller's thread (no instance thread woken on
/// its way in, none on its way out), on a multi-thread runtime; a current-thread runtime, which
/// cannot hand its other tasks over meanwhile, leaves every run to the instance threads, and so
/// does a batch of several requests.
#[test]
fn a_lone_request_to_an_idle_version_runs_on_its_callers_thread() {
    for (multi, expected) in [(true, 3), (false, 0)] {
        let runtime = runtime(multi);
        runtime.block_on(async {
            let Some(engine) = engine(|c| c.instances = Some(2)) else {
                return;
            };
            let path = model("minilm.onnx");
            let k = key("minilm-lone", 1);
            for seed in 0..3 {
                engine.infer(&k, &path, tokens(seed, 8), vec![]).await.unwrap();
            }
            let info = engine.model_info(&k).unwrap();
            assert_eq!(info.caller_runs, expected, "multi-thread runtime: {multi}");
            assert_eq!(engine.stats(&k).unwrap().success.count, 3);

            // A batch that fills up is run by an instance thread, not by the caller whose
            // request completed it: that caller is not the only one waiting.
            let batched = key("minilm-lone", 2);
            load_configured(
                &engine,
                &batched,
                &path,
                r#"{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 10000000}}"#,
            )
            .await;
            let engine = Arc::new(engine);
            let tasks: Vec<_> = (1..=4)
                .map(|seed| spawn_infer(&engine, &batched, &path, seed))
                .collect();
            for task in tasks {
                task.await.unwrap().unwrap();
            }
            let s = engine.stats(&batched).unwrap();
            assert_eq!((s.execution_count, s.inference_count), (1, 4));
            assert_eq!(engine.model_info(&batched).unwrap().caller_runs, 0);
        });
    }
}

/// A batch that waits out its queue delay is run by the batch clock on a tokio worker (once the
/// version's last batch says batches are short), each request getting its own answer; the
/// version still unloads cleanly, its instance threads ending although they slept on the clock.
/// A current-thread runtime has no clock: its instance threads keep the time, and the delay
/// still closes the batch.
#[test]
fn a_batch_closed_by_its_delay_runs_on_the_batch_clock() {
    for multi in [true, false] {
        let runtime = runtime(multi);
        runtime.block_on(async {
            let Some(engine) = engine(|_| {}) else { return };
            let engine = Arc::new(engine);
            let dir = tempfile::tempdir().unwrap();
            let path = tiny_model(dir.path());
            let k = key("tiny-clock", 1);
            // Batches of up to 8 that never fill here: each pair of requests waits the delay.
            load_configured(
                &engine,
                &k,
                &path,
                r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 20000}}"#,
            )
            .await;
            const ROUNDS: u64 = 6;
            for round in 0..ROUNDS {
                let seeds = [2 * round, 2 * round + 1];
                let tasks: Vec<_> = seeds
                    .iter()
                    .map(|&seed| {
                        let (engine, path, k) = (engine.clone(), path.clone(), k.clone());
                        let input = Tensor::from_f32("x", vec![1, 16], &values(seed, 16)).unwrap();
                        tokio::spawn(async move { engine.infer(&k, &path, vec![input], vec![]).await })
                    })
                    .collect();
                for (&seed, task) in seeds.iter().zip(tasks) {
                    let got = task.await.unwrap().unwrap();
                    let doubled: Vec<f32> = values(seed, 16).iter().map(|v| v + v).collect();
                    assert_eq!(got[0].shape, vec![1, 16]);
                    assert_eq!(got[0].to_f32().unwrap(), doubled, "request {seed}");
                }
            }
            let s = engine.stats(&k).unwrap();
            assert_eq!(s.success.count, 2 * ROUNDS);
            assert_eq!(
                s.execution_count, ROUNDS,
                "each pair ran as one batch: {:?}",
                s.batch_stats
            );
            let info = engine.model_info(&k).unwrap();
            assert_eq!(info.caller_runs, 0);
            // The first batch runs on an instance thread, which measures how long batches
            // take; the clock runs later ones. Not necessarily all: a batch that a loaded
            // machine stretched past the limit, or another test's run blocking a worker at the
            // moment, sends the next one to an instance thread.
            if multi {
                assert!(
                    (1..ROUNDS).contains(&info.clock_runs),
                    "{} of {ROUNDS} batches ran on the clock",
                    info.clock_runs
                );
            } else {
                assert_eq!(info.clock_runs, 0, "no clock on a current-thread runtime");
            }
            let before = engine.memory().0;
            assert!(before > 0);
            assert!(engine.unload(&k));
            wait_until("the unloaded version's instances free its memory", || {
                engine.memory().0 < before
            })
            .await;
        });
    }
}
