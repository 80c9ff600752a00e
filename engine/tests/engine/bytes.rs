//! BYTES elements carry any bytes through ONNX Runtime's string tensors and back: zero bytes,
//! bytes that are not UTF-8, empty elements, in a lone request and in a batch.

use crate::common::{config, engine, key, test_model};
use infergate_engine::{DataType, Tensor, TensorData};

fn bytes_tensor(items: &[&[u8]]) -> Tensor {
    Tensor::new(
        "text",
        DataType::Bytes,
        vec![items.len() as i64],
        TensorData::Bytes(items.iter().map(|b| b.to_vec()).collect()),
    )
    .unwrap()
}

fn items(t: &Tensor) -> Vec<Vec<u8>> {
    match &t.data {
        TensorData::Bytes(items) => items.clone(),
        other => panic!("'{}' is not BYTES: {other:?}", t.name),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_bytes_and_binary_elements_round_trip_through_a_string_model() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "string-identity");
    let k = key("strings", 1);
    let sent: [&[u8]; 5] = [
        b"he\x00llo",
        b"\x00\x01\x02\x03",
        b"",
        b"\xff\xfe not UTF-8 \xc3",
        "plain text, ünïcode".as_bytes(),
    ];
    let out = engine
        .infer(&k, &path, vec![bytes_tensor(&sent)], vec!["echo".into()])
        .await
        .unwrap();
    assert_eq!(out[0].datatype, DataType::Bytes);
    assert_eq!(out[0].shape, vec![5]);
    let expected: Vec<Vec<u8>> = sent.iter().map(|b| b.to_vec()).collect();
    assert_eq!(items(&out[0]), expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batched_bytes_requests_each_get_their_own_elements_back() {
    let Some(engine) = engine(|_| {}) else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = test_model(dir.path(), "string-identity");
    let k = key("strings", 1);
    // A queue delay long enough that concurrent requests share a batch.
    engine
        .set_config(
            &k,
            config(r#"{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 20000}}"#),
        )
        .await
        .unwrap();
    engine.load(&k, &path).await.unwrap();
    let requests: Vec<Vec<Vec<u8>>> = (0u8..6)
        .map(|i| vec![vec![0, i, 0], vec![i; i as usize], b"x\x00y".to_vec()])
        .collect();
    let engine = std::sync::Arc::new(engine);
    let handles: Vec<_> = requests
        .iter()
        .map(|req| {
            let (engine, k, path) = (engine.clone(), k.clone(), path.clone());
            let refs: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
            let t = bytes_tensor(&refs);
            tokio::spawn(async move { engine.infer(&k, &path, vec![t], vec!["echo".into()]).await })
        })
        .collect();
    let mut answers = Vec::new();
    for h in handles {
        answers.push(h.await.unwrap());
    }
    for (req, answer) in requests.iter().zip(answers) {
        let out = answer.unwrap();
        assert_eq!(&items(&out[0]), req);
    }
}
