//! Warm-up: the config's sample requests, run through each new session before it serves, so the
//! first real request does not pay for ORT's lazy allocations and kernel selection.

use crate::config::{ModelConfig, WarmupSample};
use crate::error::{EngineError, Result};
use crate::session::OrtSession;
use crate::tensor::{element_count, DataType, Tensor, TensorData};

/// Builds the tensors of one warm-up sample. Random data comes from a fixed-seed generator so a
/// warm-up that fails, fails the same way every time.
pub(crate) fn tensors(config: &ModelConfig, sample: &WarmupSample) -> Result<Vec<Tensor>> {
    let mut rng = XorShift(SEED);
    sample
        .inputs
        .iter()
        .map(|(name, input)| {
            let datatype = input.datatype()?;
            let shape = config.warmup_shape(sample, input);
            let count = element_count(&shape).ok_or_else(|| {
                EngineError::InvalidConfig(format!("warm-up input '{name}': shape {shape:?}"))
            })?;
            let data = match datatype.size() {
                None => TensorData::Bytes(
                    (0..count)
                        .map(|_| {
                            if input.random_data {
                                (rng.next() % 10).to_string().into_bytes()
                            } else {
                                Vec::new()
                            }
                        })
                        .collect(),
                ),
                Some(size) => {
                    let mut bytes = vec![0u8; count * size];
                    if input.random_data {
                        fill_random(&mut bytes, datatype, &mut rng);
                    }
                    TensorData::Raw(bytes)
                }
            };
            Ok(Tensor::new(name.clone(), datatype, shape, data)?)
        })
        .collect()
}

/// A numeric tensor of `shape` filled with [`fill_random`]'s values (the same every time).
pub(crate) fn random_tensor(name: &str, datatype: DataType, shape: Vec<i64>) -> Result<Tensor> {
    let invalid = || EngineError::InvalidInput(format!("input '{name}': shape {shape:?}"));
    let size = datatype.size().ok_or_else(invalid)?;
    let bytes_len = element_count(&shape)
        .and_then(|n| n.checked_mul(size))
        .ok_or_else(invalid)?;
    let mut bytes = vec![0u8; bytes_len];
    fill_random(&mut bytes, datatype, &mut XorShift(SEED));
    Ok(Tensor::new(name, datatype, shape, TensorData::Raw(bytes))?)
}

/// The generator's fixed seed.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// Random values that models accept: floats in [0, 1), integers 0 or 1 (valid as token ids,
/// attention masks, segment ids and class indices alike), booleans.
fn fill_random(bytes: &mut [u8], datatype: DataType, rng: &mut XorShift) {
    let size = datatype.size().unwrap_or(1);
    for chunk in bytes.chunks_exact_mut(size) {
        let r = rng.next();
        match datatype {
            DataType::Fp32 => {
                chunk.copy_from_slice(&((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes())
            }
            DataType::Fp64 => {
                chunk.copy_from_slice(&((r >> 11) as f64 / (1u64 << 53) as f64).to_le_bytes())
            }
            DataType::Fp16 => chunk.copy_from_slice(
                &half::f16::from_f32((r >> 40) as f32 / (1u64 << 24) as f32).to_le_bytes(),
            ),
            DataType::Bool => chunk[0] = (r & 1) as u8,
            _ => chunk[0] = (r & 1) as u8,
        }
    }
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs every warm-up sample `count` times on `session`; returns the number of runs. A failure
/// names the sample and fails the load: a model that cannot run its own warm-up is not ready.
pub(crate) fn run(config: &ModelConfig, session: &mut OrtSession) -> Result<u64> {
    let mut runs = 0;
    for sample in &config.model_warmup {
        let inputs = tensors(config, sample)?;
        for _ in 0..sample.count {
            session.run(&inputs, &[]).map_err(|e| {
                EngineError::InvalidConfig(format!("model_warmup '{}' failed: {e}", sample.name))
            })?;
            runs += 1;
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_batched_shapes_and_data() {
        let config = ModelConfig::from_json_str(
            r#"{"max_batch_size": 4, "model_warmup": [{"name": "w", "batch_size": 2, "inputs": {
                "ids": {"data_type": "TYPE_INT64", "dims": [3], "random_data": true},
                "x": {"data_type": "TYPE_FP32", "dims": [5], "zero_data": true}}}]}"#,
        )
        .unwrap();
        let t = tensors(&config, &config.model_warmup[0]).unwrap();
        assert_eq!(t[0].name, "ids");
        assert_eq!(t[0].shape, vec![2, 3]);
        let TensorData::Raw(ids) = &t[0].data else {
            panic!("raw")
        };
        assert!(ids
            .chunks(8)
            .all(|c| c[0] < 2 && c[1..].iter().all(|&b| b == 0)));
        assert_eq!(t[1].shape, vec![2, 5]);
        assert!(t[1].to_f32().unwrap().iter().all(|&v| v == 0.0));
    }
}
