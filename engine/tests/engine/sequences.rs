//! Sequence batching on a real stateful model (`scripts/test_models.py accumulator`: state in,
//! state out, `acc_out = acc_in * (1 - start) + x * ready`): interleaved sequences under both
//! strategies get their own running sums, the engine fills the control inputs and carries the
//! state, idle sequences expire, and requests outside a live sequence are refused clearly.

use crate::common::{engine, key, load_configured, test_model, wait_until};
use infergate_engine::{
    CorrelationId, DataType, Engine, EngineError, InferOptions, ModelKey, SequenceFlags, Tensor,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The accumulator's sequence batching: START, READY and CORRID filled by the engine, the sum
/// carried as implicit state from `acc_out` to `acc_in`.
fn config(strategy: &str, max_batch_size: u32, idle_us: u64) -> String {
    // Without a batch dimension the state's dims are the whole [1, 1].
    let dims = if max_batch_size > 0 { "[1]" } else { "[1, 1]" };
    format!(
        r#"{{
        "max_batch_size": {max_batch_size},
        "sequence_batching": {{
            "max_sequence_idle_microseconds": {idle_us},
            {strategy},
            "control_input": [
                {{"name": "start", "control": [{{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}}]}},
                {{"name": "ready", "control": [{{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0, 1]}}]}},
                {{"name": "corrid", "control": [{{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_INT64"}}]}}
            ],
            "state": [{{"input_name": "acc_in", "output_name": "acc_out", "data_type": "TYPE_FP32", "dims": {dims},
                        "initial_state": {{"name": "zero", "data_type": "TYPE_FP32", "dims": {dims}, "zero_data": true}}}}]
        }}
    }}"#
    )
}

fn flags(id: u64, start: bool, end: bool) -> SequenceFlags {
    SequenceFlags {
        id: CorrelationId::Int(id),
        start,
        end,
    }
}

fn x(value: f32) -> Vec<Tensor> {
    vec![Tensor::from_f32("x", vec![1, 1], &[value]).unwrap()]
}

async fn send(
    engine: &Engine,
    k: &ModelKey,
    path: &Path,
    inputs: Vec<Tensor>,
    flags: SequenceFlags,
) -> Result<Vec<Tensor>, EngineError> {
    engine
        .infer_in_sequence(
            k,
            || path.to_path_buf(),
            inputs,
            vec![],
            InferOptions::default(),
            flags,
        )
        .await
}

fn output<'a>(out: &'a [Tensor], name: &str) -> &'a Tensor {
    out.iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no output '{name}' in {out:?}"))
}

fn int64(t: &Tensor) -> i64 {
    assert_eq!(t.datatype, DataType::Int64);
    match &t.data {
        infergate_engine::TensorData::Raw(b) => i64::from_le_bytes(b[..8].try_into().unwrap()),
        other => panic!("{other:?}"),
    }
}

/// Runs `sequences` sequences of `steps` requests each, every sequence on its own task (its
/// requests one after another, as a client of a stateful model sends them), and checks each
/// answer: the running sum of the sequence's own values, and its own correlation id.
async fn interleaved(engine: Arc<Engine>, k: ModelKey, path: PathBuf, sequences: u64, steps: u64) {
    let tasks: Vec<_> = (1..=sequences)
        .map(|id| {
            let (engine, k, path) = (engine.clone(), k.clone(), path.clone());
            tokio::spawn(async move {
                let mut sum = 0.0f32;
                for step in 0..steps {
                    let value = (id * 100 + step) as f32;
                    sum += value;
                    let out = send(
                        &engine,
                        &k,
                        &path,
                        x(value),
                        flags(id, step == 0, step + 1 == steps),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("sequence {id} step {step}: {e}"));
                    assert_eq!(
                        output(&out, "sum").to_f32().unwrap(),
                        vec![sum],
                        "sequence {id} step {step}"
                    );
                    assert_eq!(int64(output(&out, "corr")), id as i64);
                    assert!(
                        out.iter().all(|t| t.name != "acc_out"),
                        "the state output is not answered unless asked for"
                    );
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn direct_sequences_keep_their_own_running_sums() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    // 4 slots on one instance; 6 sequences: two of them wait in the backlog for a slot.
    load_configured(&engine, &k, &path, &config(r#""direct": {}"#, 4, 5_000_000)).await;
    let engine = Arc::new(engine);
    interleaved(engine.clone(), k.clone(), path, 6, 5).await;
    assert_eq!(engine.sequences(&k), Some(vec![]), "every sequence ended");
    let stats = engine.stats(&k).unwrap();
    assert_eq!(stats.inference_count, 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oldest_sequences_keep_their_own_running_sums() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    let oldest = r#""oldest": {"max_candidate_sequences": 3, "preferred_batch_size": [2], "max_queue_delay_microseconds": 2000}"#;
    load_configured(&engine, &k, &path, &config(oldest, 4, 5_000_000)).await;
    let engine = Arc::new(engine);
    interleaved(engine.clone(), k.clone(), path, 5, 6).await;
    assert_eq!(engine.sequences(&k), Some(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_without_a_batch_dimension_runs_its_sequences_one_request_at_a_time() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    // max_batch_size 0: each request is the whole [1, 1] tensor, one slot per instance.
    load_configured(&engine, &k, &path, &config(r#""direct": {}"#, 0, 5_000_000)).await;
    let engine = Arc::new(engine);
    interleaved(engine, k, path, 3, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sequence_expires_and_its_next_request_says_so() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    load_configured(&engine, &k, &path, &config(r#""direct": {}"#, 2, 50_000)).await;
    let out = send(&engine, &k, &path, x(3.0), flags(11, true, false))
        .await
        .unwrap();
    assert_eq!(output(&out, "sum").to_f32().unwrap(), vec![3.0]);
    let listed = engine.sequences(&k).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, CorrelationId::Int(11));
    assert_eq!(listed[0].requests, 1);
    wait_until("the idle sequence expired", || {
        engine.sequences(&k).is_some_and(|s| s.is_empty())
    })
    .await;
    let e = send(&engine, &k, &path, x(1.0), flags(11, false, false))
        .await
        .unwrap_err();
    assert!(matches!(e, EngineError::InvalidInput(_)), "{e}");
    assert!(e.to_string().contains("expired"), "{e}");
    // Started again, it begins from zero.
    let out = send(&engine, &k, &path, x(5.0), flags(11, true, true))
        .await
        .unwrap();
    assert_eq!(output(&out, "sum").to_f32().unwrap(), vec![5.0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_outside_a_sequence_are_refused_with_the_reason() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    load_configured(&engine, &k, &path, &config(r#""direct": {}"#, 2, 5_000_000)).await;
    let refused = |r: Result<Vec<Tensor>, EngineError>, expected: &str| {
        let e = r.expect_err(expected);
        assert!(matches!(e, EngineError::InvalidInput(_)), "{e}");
        assert!(e.to_string().contains(expected), "{e}");
    };
    refused(
        send(&engine, &k, &path, x(1.0), flags(21, false, false)).await,
        "must specify the START flag",
    );
    refused(
        engine.infer(&k, &path, x(1.0), vec![]).await,
        "must specify a non-zero or non-empty correlation ID",
    );
    refused(
        send(&engine, &k, &path, x(1.0), flags(0, true, false)).await,
        "non-zero",
    );
    send(&engine, &k, &path, x(1.0), flags(21, true, false))
        .await
        .unwrap();
    refused(
        send(&engine, &k, &path, x(1.0), flags(21, true, false)).await,
        "already in progress",
    );
    let mut with_control = x(1.0);
    with_control.push(
        Tensor::new(
            "start",
            DataType::Int32,
            vec![1, 1],
            infergate_engine::TensorData::Raw(1i32.to_le_bytes().to_vec()),
        )
        .unwrap(),
    );
    refused(
        send(&engine, &k, &path, with_control, flags(21, false, false)).await,
        "filled by the sequence batcher",
    );
    let two = vec![Tensor::from_f32("x", vec![2, 1], &[1.0, 2.0]).unwrap()];
    refused(
        send(&engine, &k, &path, two, flags(21, false, false)).await,
        "batch-size 1",
    );
    let named = SequenceFlags {
        id: CorrelationId::Str("abc".into()),
        start: true,
        end: false,
    };
    refused(
        send(&engine, &k, &path, x(1.0), named).await,
        "integer ids only",
    );
    // The sequence went on untouched by the refused requests.
    let out = send(&engine, &k, &path, x(2.0), flags(21, false, true))
        .await
        .unwrap();
    assert_eq!(output(&out, "sum").to_f32().unwrap(), vec![3.0]);
    refused(
        send(&engine, &k, &path, x(1.0), flags(21, false, false)).await,
        "must specify the START flag",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlogged_sequence_waits_for_a_slot_and_a_cleared_one_frees_it() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    // One slot: a second sequence waits until the first one is cleared.
    load_configured(&engine, &k, &path, &config(r#""direct": {}"#, 1, 5_000_000)).await;
    let engine = Arc::new(engine);
    send(&engine, &k, &path, x(1.0), flags(1, true, false))
        .await
        .unwrap();
    let waiting = {
        let (engine, k, path) = (engine.clone(), k.clone(), path.clone());
        tokio::spawn(async move { send(&engine, &k, &path, x(7.0), flags(2, true, false)).await })
    };
    wait_until("sequence 2 waits in the backlog", || {
        engine.sequences(&k).is_some_and(|s| {
            s.iter()
                .any(|i| i.id == CorrelationId::Int(2) && i.slot.is_none())
        })
    })
    .await;
    assert!(!waiting.is_finished());
    assert!(engine.clear_sequence(&k, &CorrelationId::Int(1)));
    assert!(!engine.clear_sequence(&k, &CorrelationId::Int(1)));
    let out = waiting.await.unwrap().unwrap();
    assert_eq!(output(&out, "sum").to_f32().unwrap(), vec![7.0]);
    let e = send(&engine, &k, &path, x(1.0), flags(1, false, false))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("START"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn string_ids_and_the_state_output_on_request() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "accumulator");
    let k = key("acc", 1);
    // Without a CORRID control the client gives `corrid` itself, and ids may be strings.
    let json = config(r#""direct": {}"#, 2, 5_000_000).replace(
        r#",
                {"name": "corrid", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": "TYPE_INT64"}]}"#,
        "",
    );
    assert!(!json.contains("CORRID"));
    load_configured(&engine, &k, &path, &json).await;
    let corrid = Tensor::from_i64("corrid", vec![1, 1], &[42]).unwrap();
    let mut sum = 0.0;
    for (step, value) in [1.5f32, 2.5, 4.0].into_iter().enumerate() {
        sum += value;
        let mut inputs = x(value);
        inputs.push(corrid.clone());
        let out = engine
            .infer_in_sequence(
                &k,
                || path.clone(),
                inputs,
                vec!["sum".into(), "acc_out".into()],
                InferOptions::default(),
                SequenceFlags {
                    id: CorrelationId::Str("user-7".into()),
                    start: step == 0,
                    end: step == 2,
                },
            )
            .await
            .unwrap();
        assert_eq!(output(&out, "sum").to_f32().unwrap(), vec![sum]);
        assert_eq!(output(&out, "acc_out").to_f32().unwrap(), vec![sum]);
    }
}
