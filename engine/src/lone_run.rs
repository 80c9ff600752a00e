//! How long a lone request runs on a freshly loaded session: a version left at the default
//! intra-op threads whose lone request runs in under [`crate::sizing::SHORT_RUN`] gets one intra-op
//! thread per instance (`instance::prepare` reloads its first session so), since ORT's threads
//! cost such a model more than they save.
//!
//! Why: with spinning off, every operator ORT splits wakes the pool's threads (a futex wake
//! and a context switch each) and joins them. For a run of a few tens of µs that is a large
//! share of the work, and the split saves little time for much CPU (`bench/cpu_per_request.py`'s
//! MLP: about the same latency on 2 threads as on 1, for over 1.5x the CPU). Longer runs
//! (EfficientNet-Lite0: about 10 ms) keep their threads: there the split cuts a lone request's
//! latency by about a third (`bench/sizing.py`).
//!
//! The probe needs shapes it can fill by itself: a version whose inputs leave a dimension
//! other than the batch open (a sequence length, an image size), or take strings, is not
//! probed and keeps the planned threads.

use crate::config::ModelConfig;
use crate::error::Result;
use crate::session::OrtSession;
use crate::signature::ModelSignature;
use crate::sizing::SHORT_RUN;
use crate::tensor::{DataType, Tensor};
use crate::warmup;
use std::time::{Duration, Instant};

/// Runs before timing: ORT allocates and picks kernels on the first runs.
const UNTIMED_RUNS: usize = 3;

/// Timed runs; their median is the figure (one preempted run must not decide).
const TIMED_RUNS: usize = 7;

/// A first run this many times [`SHORT_RUN`] ends the probe at once: the first run's
/// allocations do not make a run 50 times longer, and a big model should not pay for more runs
/// at load.
const CLEARLY_LONG: u32 = 50;

/// The median lone run of a made-up request on `session` when it is under
/// [`SHORT_RUN`]; `None` when longer or when no request could be made up or run (the
/// version keeps its planned threads, and a model that cannot run fails on real requests with
/// their own reason).
pub(crate) fn short(
    label: &str,
    config: &ModelConfig,
    session: &mut OrtSession,
) -> Option<Duration> {
    let Some(inputs) = probe_inputs(session.signature(), config) else {
        tracing::debug!(
            model = label,
            "no lone-run probe: an input's shape is open or textual"
        );
        return None;
    };
    match median(session, &inputs) {
        Ok(lone) => (lone < SHORT_RUN).then_some(lone),
        Err(e) => {
            tracing::debug!(model = label, error = %e, "lone-run probe failed");
            None
        }
    }
}

/// One request of one sample (batch dimension 1 where the version batches or leaves the first
/// dimension open), random data; `None` when a shape or datatype cannot be made up.
pub(crate) fn probe_inputs(
    signature: &ModelSignature,
    config: &ModelConfig,
) -> Option<Vec<Tensor>> {
    signature
        .inputs
        .iter()
        .map(|spec| {
            if spec.datatype == DataType::Bytes {
                return None;
            }
            let shape = spec
                .shape
                .iter()
                .enumerate()
                .map(|(i, &d)| {
                    if i == 0 && (d < 0 || config.max_batch_size > 0) {
                        Some(1)
                    } else {
                        (d >= 0).then_some(d)
                    }
                })
                .collect::<Option<Vec<i64>>>()?;
            warmup::random_tensor(&spec.name, spec.datatype, shape).ok()
        })
        .collect()
}

/// How long a lone run of `inputs` takes on `session`: the median of [`TIMED_RUNS`] runs after
/// [`UNTIMED_RUNS`], or, as soon as the answer is sure to be [`SHORT_RUN`] or more, the run
/// that made it sure (so a long model pays one to a few runs at load, not ten).
pub(crate) fn median(session: &mut OrtSession, inputs: &[Tensor]) -> Result<Duration> {
    let first = time(session, inputs)?;
    if first >= SHORT_RUN * CLEARLY_LONG {
        return Ok(first);
    }
    for _ in 1..UNTIMED_RUNS {
        session.run(inputs, &[])?;
    }
    let mut times = Vec::with_capacity(TIMED_RUNS);
    let mut long = 0;
    for _ in 0..TIMED_RUNS {
        let took = time(session, inputs)?;
        times.push(took);
        if took >= SHORT_RUN {
            long += 1;
            if long > TIMED_RUNS / 2 {
                // The median of all the runs would be long: at most TIMED_RUNS / 2 are short.
                return Ok(took);
            }
        }
    }
    times.sort_unstable();
    Ok(times[TIMED_RUNS / 2])
}

fn time(session: &mut OrtSession, inputs: &[Tensor]) -> Result<Duration> {
    let started = Instant::now();
    session.run(inputs, &[])?;
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::TensorSpec;
    use crate::tensor::TensorData;

    fn signature(inputs: Vec<(&str, DataType, Vec<i64>)>) -> ModelSignature {
        ModelSignature {
            inputs: inputs
                .into_iter()
                .map(|(name, datatype, shape)| TensorSpec {
                    name: name.into(),
                    datatype,
                    shape,
                })
                .collect(),
            outputs: vec![],
            metadata: Default::default(),
        }
    }

    fn config(max_batch_size: u32) -> ModelConfig {
        ModelConfig {
            max_batch_size,
            ..ModelConfig::default()
        }
    }

    #[test]
    fn one_sample_of_every_input_with_the_declared_dimensions() {
        let sig = signature(vec![
            ("x", DataType::Fp32, vec![-1, 1024]),
            ("mask", DataType::Int64, vec![-1, 4]),
        ]);
        let inputs = probe_inputs(&sig, &config(16)).expect("fixed shapes");
        assert_eq!(inputs[0].shape, vec![1, 1024]);
        assert_eq!(inputs[1].shape, vec![1, 4]);
        let TensorData::Raw(bytes) = &inputs[0].data else {
            panic!("raw data")
        };
        assert_eq!(bytes.len(), 1024 * 4);
        // A batching version's first dimension is the batch even where the model fixes it.
        let fixed = signature(vec![("x", DataType::Fp32, vec![8, 3])]);
        assert_eq!(
            probe_inputs(&fixed, &config(8)).unwrap()[0].shape,
            vec![1, 3]
        );
        assert_eq!(
            probe_inputs(&fixed, &config(0)).unwrap()[0].shape,
            vec![8, 3]
        );
    }

    #[test]
    fn open_dimensions_past_the_first_and_strings_are_not_probed() {
        let seq = signature(vec![("ids", DataType::Int64, vec![-1, -1])]);
        assert!(probe_inputs(&seq, &config(0)).is_none());
        let text = signature(vec![("text", DataType::Bytes, vec![-1])]);
        assert!(probe_inputs(&text, &config(4)).is_none());
    }
}
