//! Model lifecycle on real models: idle unload, warm-up, the memory budget and config changes
//! while requests run.

use crate::common::*;
use infergate_engine::{EngineError, Fault, ModelState, Tensor};
use std::sync::Arc;

#[tokio::test]
async fn an_idle_model_unloads_and_loads_again_on_demand() {
    let Some(engine) = engine(|_| {}) else { return };
    let path = model("minilm.onnx");
    let k = key("minilm-idle", 1);
    engine
        .set_config(&k, config(r#"{"unload_after_s": 1}"#))
        .await
        .unwrap();
    engine.infer(&k, &path, tokens(1, 8), vec![]).await.unwrap();
    assert_eq!(engine.state(&k), ModelState::Ready);
    wait_until("the idle model unloads", || {
        engine.state(&k) == ModelState::Unloaded
    })
    .await;
    engine.infer(&k, &path, tokens(2, 8), vec![]).await.unwrap();
    assert_eq!(engine.state(&k), ModelState::Ready);
}

#[tokio::test]
async fn warm_up_runs_on_every_instance_before_ready_and_a_failing_one_fails_the_load() {
    let Some(engine) = engine(|_| {}) else { return };
    let path = model("minilm.onnx");
    let k = key("minilm-warm", 1);
    let input = |dims: &str| {
        format!(r#"{{"data_type": "TYPE_INT64", "dims": {dims}, "random_data": true}}"#)
    };
    let warm = format!(
        r#"{{"instance_group": [{{"count": 2, "kind": "KIND_CPU"}}], "model_warmup": [{{"name": "short", "count": 3,
            "inputs": {{"input_ids": {a}, "attention_mask": {a}, "token_type_ids": {a}}}}}]}}"#,
        a = input("[1, 8]")
    );
    engine.set_config(&k, config(&warm)).await.unwrap();
    engine.load(&k, &path).await.unwrap();
    let info = engine.model_info(&k).unwrap();
    assert_eq!((info.instances, info.warmup_runs), (2, 6));
    // Warm-up executions are not requests.
    assert_eq!(engine.stats(&k).unwrap().execution_count, 0);

    // A sequence longer than the model's 512 positions: the signature allows it, only running
    // the graph can tell.
    let k = key("minilm-warm", 2);
    let broken = format!(
        r#"{{"model_warmup": [{{"name": "too-long", "inputs": {{"input_ids": {}, "attention_mask": {}, "token_type_ids": {}}}}}]}}"#,
        input("[1, 1000]"),
        input("[1, 1000]"),
        input("[1, 1000]")
    );
    engine.set_config(&k, config(&broken)).await.unwrap();
    let e = engine.load(&k, &path).await.unwrap_err();
    assert!(e.to_string().contains("model_warmup 'too-long'"), "{e}");
    assert!(matches!(engine.state(&k), ModelState::Failed(_)));
}

#[tokio::test]
async fn loads_beyond_the_memory_budget_are_refused_until_memory_is_freed() {
    let path = model_if_ort("minilm.onnx");
    let Some(path) = path else { return };
    let file = std::fs::metadata(&path).unwrap().len();
    // Room for one instance (file × factor 2), not two.
    let Some(engine) = engine(|c| c.host_memory_budget = Some(file * 3)) else {
        return;
    };
    let (first, second) = (key("minilm-mem", 1), key("minilm-mem", 2));
    engine.load(&first, &path).await.unwrap();
    assert_eq!(engine.memory(), (file * 2, Some(file * 3)));
    let e = engine.load(&second, &path).await.unwrap_err();
    assert!(matches!(e, EngineError::OverMemoryBudget { .. }), "{e}");
    assert_eq!(e.fault(), Fault::Unavailable);
    assert!(e.to_string().contains("minilm-mem:2"), "{e}");
    assert!(matches!(engine.state(&second), ModelState::Failed(_)));
    // A config asking for more instances than fit is refused the same way, and changes nothing.
    let e = engine
        .set_config(&first, config(r#"{"instance_group": [{"count": 2}]}"#))
        .await
        .unwrap_err();
    assert!(matches!(e, EngineError::OverMemoryBudget { .. }), "{e}");
    assert_eq!(engine.model_info(&first).unwrap().instances, 1);
    assert!(engine.unload(&first));
    wait_until("the unloaded instance frees its memory", || {
        engine.memory().0 == 0
    })
    .await;
    engine.load(&second, &path).await.unwrap();
}

fn model_if_ort(file: &str) -> Option<std::path::PathBuf> {
    if std::env::var_os("ORT_DYLIB_PATH").is_none() {
        eprintln!("skipped: ORT_DYLIB_PATH is unset (source .cache/env.sh)");
        return None;
    }
    Some(model(file))
}

#[tokio::test]
async fn config_changes_apply_while_requests_run() {
    let Some(engine) = engine(|_| {}) else { return };
    let engine = Arc::new(engine);
    let path = model("minilm.onnx");
    let k = key("minilm-live", 1);
    engine.load(&k, &path).await.unwrap();
    let traffic: Vec<_> = (0..12)
        .map(|i| {
            let (engine, path, k) = (engine.clone(), path.clone(), k.clone());
            tokio::spawn(async move {
                engine
                    .infer(&k, &path, tokens(i, 8 + (i as usize % 2) * 8), vec![])
                    .await
            })
        })
        .collect();
    engine
        .set_config(
            &k,
            config(
                r#"{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": 1000},
                       "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}"#,
            ),
        )
        .await
        .unwrap();
    assert_eq!(engine.model_info(&k).unwrap().instances, 2);
    engine
        .set_config(&k, config(r#"{"instance_group": [{"count": 1}]}"#))
        .await
        .unwrap();
    assert_eq!(engine.model_info(&k).unwrap().instances, 1);
    for task in traffic {
        task.await
            .unwrap()
            .expect("no request fails across config changes");
    }
    let s = engine.stats(&k).unwrap();
    assert_eq!(s.inference_count, 12);
    assert_eq!(s.success.count, 12);

    // A config the model cannot take is refused with the reason; the old one stays.
    let e = engine
        .set_config(
            &k,
            config(r#"{"model_warmup": [{"name": "w", "inputs": {"pixels": {"data_type": "TYPE_FP32", "dims": [1], "zero_data": true}}}]}"#),
        )
        .await
        .unwrap_err();
    assert_eq!(e.fault(), Fault::Client);
    assert!(
        e.to_string().contains("input_ids") || e.to_string().contains("pixels"),
        "{e}"
    );
    assert_eq!(engine.model_config(&k).instance_count(1), 1);
    engine.infer(&k, &path, tokens(1, 8), vec![]).await.unwrap();
}

/// Sessions whose intra-op threads sleep instead of spinning (`intra_spinning: false`) load and
/// give the same answers as spinning ones: the option changes scheduling only.
#[tokio::test]
async fn sessions_without_intra_op_spinning_answer_the_same() {
    let (Some(spinning), Some(sleeping)) = (
        engine(|c| {
            c.intra_threads = Some(2);
            c.intra_spinning = true;
        }),
        engine(|c| {
            c.intra_threads = Some(2);
            c.intra_spinning = false;
        }),
    ) else {
        return;
    };
    let path = model("minilm.onnx");
    let k = key("minilm-spin", 1);
    let a = spinning
        .infer(&k, &path, tokens(3, 8), vec![])
        .await
        .unwrap();
    let b = sleeping
        .infer(&k, &path, tokens(3, 8), vec![])
        .await
        .unwrap();
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!(max_diff(x, y) < 1e-5, "{}", max_diff(x, y));
    }
}

/// A version left at the default intra-op threads whose lone request runs in microseconds (the
/// tiny model) loads with one intra-op thread per instance instead of the two its 2 cores
/// plan, and instances added by a config change get one too. Threads the operator set are
/// kept, and a model whose lone request runs for milliseconds (EfficientNet-Lite0) keeps the
/// planned two.
#[tokio::test]
async fn a_model_whose_lone_request_runs_short_gets_one_intra_op_thread() {
    let (Some(defaulted), Some(explicit)) = (
        engine(|c| {
            c.intra_threads = None;
            c.cores = 2;
        }),
        engine(|c| {
            c.intra_threads = Some(2);
            c.cores = 2;
        }),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tiny = tiny_model(dir.path());
    let batching = r#"{"max_batch_size": 8}"#;
    let k = key("tiny-threads", 1);
    load_configured(&defaulted, &k, &tiny, batching).await;
    let info = defaulted.model_info(&k).unwrap();
    assert_eq!((info.instances, info.intra_threads), (1, 1));
    let input = Tensor::from_f32("x", vec![1, 16], &values(7, 16)).unwrap();
    let got = defaulted
        .infer(&k, &tiny, vec![input], vec![])
        .await
        .unwrap();
    let doubled: Vec<f32> = values(7, 16).iter().map(|v| v + v).collect();
    assert_eq!(got[0].to_f32().unwrap(), doubled);
    // Two instances of one intra-op thread each, not the one each of 2 cores / 2 plans anew.
    defaulted
        .set_config(
            &k,
            config(
                r#"{"max_batch_size": 8, "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}"#,
            ),
        )
        .await
        .unwrap();
    let input = Tensor::from_f32("x", vec![1, 16], &values(8, 16)).unwrap();
    defaulted
        .infer(&k, &tiny, vec![input], vec![])
        .await
        .unwrap();
    let info = defaulted.model_info(&k).unwrap();
    assert_eq!((info.instances, info.intra_threads), (2, 1));

    load_configured(&explicit, &k, &tiny, batching).await;
    assert_eq!(explicit.model_info(&k).unwrap().intra_threads, 2);

    let Some(effnet) = model_if_ort("efficientnet-lite0.onnx") else {
        return;
    };
    let big = key("effnet-threads", 1);
    load_configured(&defaulted, &big, &effnet, "{}").await;
    assert_eq!(defaulted.model_info(&big).unwrap().intra_threads, 2);
}
