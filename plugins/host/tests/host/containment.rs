//! Each hostile plugin fails only its own call, with the right kind of fault,
//! while a stream of good calls on other threads keeps succeeding.

use crate::common::{host, load};
use infergate_plugin_host::{DataType, FaultKind, PluginError, PluginFault, PreInput, Tensor};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn payload() -> Vec<Tensor> {
    vec![Tensor {
        name: "x".into(),
        datatype: DataType::Fp32,
        shape: vec![256],
        data: (0..1024u32).map(|i| i as u8).collect(),
    }]
}

#[test]
fn hostile_plugins_are_contained_while_good_calls_succeed() {
    let host = host();
    let good = load(&host, "passthrough");
    let cases = [
        ("hostile-loop", FaultKind::Timeout),
        ("hostile-memory", FaultKind::Memory),
        ("hostile-recursion", FaultKind::StackOverflow),
        ("hostile-output", FaultKind::OutputTooLarge),
        ("hostile-trap", FaultKind::Trap),
    ];
    let hostile: Vec<_> = cases
        .iter()
        .map(|(name, kind)| (load(&host, name), *kind))
        .collect();

    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let good = good.clone();
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut calls = 0u64;
                // At least 50 calls each, and on until every hostile call is over.
                while calls < 50 || !done.load(Ordering::Acquire) {
                    let out = good
                        .preprocess(PreInput::Tensors(payload()), &vec![])
                        .expect("good call during hostile calls");
                    assert_eq!(out, payload());
                    calls += 1;
                }
                calls
            })
        })
        .collect();

    for round in 0..2 {
        for (plugin, expected) in &hostile {
            let err = plugin
                .preprocess(PreInput::Bytes(b"attack".to_vec()), &vec![])
                .expect_err("hostile call must fail");
            match &err {
                PluginError::Fault {
                    plugin: id,
                    kind,
                    detail,
                } => {
                    assert_eq!(kind, expected, "{id} (round {round}): {detail}");
                    assert_eq!(id.name, plugin.id().name);
                    assert_eq!(err.fault(), PluginFault::Plugin);
                }
                other => panic!(
                    "{}: expected a {expected} fault, got {other:?}",
                    plugin.id()
                ),
            }
        }
    }
    done.store(true, Ordering::Release);
    for worker in workers {
        assert!(worker.join().expect("good worker panicked") >= 50);
    }

    let metrics = host.metrics();
    for (_, kind) in &cases {
        assert_eq!(metrics.faults_of(*kind), 2, "{kind} faults counted");
    }
    assert!(metrics.ok >= 100);
    // The host still works after all of it.
    assert_eq!(
        good.preprocess(PreInput::Tensors(payload()), &vec![])
            .expect("call after attacks"),
        payload()
    );
}

#[test]
fn a_plugin_reporting_failure_is_a_fault_and_bad_input_is_the_clients() {
    let host = host();
    // counter is a pre-processing plugin: the SDK's postprocess reports failure.
    let counter = load(&host, "counter");
    let err = counter
        .postprocess(vec![], &vec![])
        .expect_err("not implemented");
    assert!(
        matches!(
            &err,
            PluginError::Fault {
                kind: FaultKind::Reported,
                ..
            }
        ),
        "{err:?}"
    );

    let decode = load(&host, "image-decode");
    let err = decode
        .preprocess(
            PreInput::Bytes(b"definitely not an image".to_vec()),
            &vec![],
        )
        .expect_err("garbage is not an image");
    match &err {
        PluginError::BadInput { plugin, message } => {
            assert_eq!(plugin.name, "image-decode");
            assert_eq!(plugin.version, "0.1.0");
            assert!(message.contains("not an image"), "{message}");
        }
        other => panic!("expected bad input, got {other:?}"),
    }
    assert_eq!(err.fault(), PluginFault::BadInput);
    assert_eq!(host.metrics().bad_input, 1);
}

#[test]
fn malformed_output_tensors_are_the_plugins_fault() {
    let host = host();
    let passthrough = load(&host, "passthrough");
    // Passed through unchanged, a tensor whose data does not match its shape
    // comes back malformed: the host checks every output.
    let bad = Tensor {
        name: "x".into(),
        datatype: DataType::Fp32,
        shape: vec![3],
        data: vec![0; 5],
    };
    let err = passthrough
        .preprocess(PreInput::Tensors(vec![bad]), &vec![])
        .expect_err("malformed output");
    assert!(
        matches!(
            &err,
            PluginError::Fault {
                kind: FaultKind::InvalidOutput,
                ..
            }
        ),
        "{err:?}"
    );
}
