//! Post-processing: ImageNet-1k classifier output, fp32 [B,1000] (logits or
//! probabilities) -> JSON with the top-k labels per image.
//!
//! Metadata: `top-k` (default 5). Labels are the 1000 ImageNet-1k class names
//! in index order (`labels.txt`).

use infergate_plugin_sdk::*;
use std::fmt::Write;

const LABELS: &str = include_str!("../labels.txt");
const CLASSES: usize = 1000;
const DEFAULT_K: usize = 5;

struct ImagenetTopK;

impl Plugin for ImagenetTopK {
    fn describe() -> Description {
        describe(
            "imagenet-topk",
            "0.1.0",
            PluginKind::Post,
            &["logits or probabilities: fp32 [B,1000]"],
            &["application/json: {\"predictions\": [[{index, label, probability}]]}"],
        )
    }

    fn postprocess(outputs: Vec<Tensor>, metadata: Metadata) -> Result<PostOutput, PluginError> {
        let [scores] = outputs.as_slice() else {
            return Err(PluginError::bad_input(format!(
                "expected one output tensor, got {}",
                outputs.len()
            )));
        };
        let values = scores.to_f32()?;
        if scores.shape.last() != Some(&(CLASSES as u64)) {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` has shape {:?}, expected [B,{CLASSES}]",
                scores.name, scores.shape
            )));
        }
        let k = match metadata_get(&metadata, "top-k") {
            Some(k) => k
                .parse::<usize>()
                .ok()
                .filter(|k| (1..=CLASSES).contains(k))
                .ok_or_else(|| PluginError::bad_input(format!("top-k `{k}` is not in 1..=1000")))?,
            None => DEFAULT_K,
        };
        let labels: Vec<&str> = LABELS.lines().collect();
        let mut json = String::from("{\"predictions\":[");
        for (row, logits) in values.chunks_exact(CLASSES).enumerate() {
            if row > 0 {
                json.push(',');
            }
            json.push('[');
            for (rank, (index, probability)) in
                top_k(&probabilities(logits), k).into_iter().enumerate()
            {
                if rank > 0 {
                    json.push(',');
                }
                let label = labels.get(index).copied().unwrap_or("unknown");
                let _ = write!(
                    json,
                    "{{\"index\":{index},\"label\":\"{}\",\"probability\":{probability}}}",
                    escape(label)
                );
            }
            json.push(']');
        }
        json.push_str("]}");
        Ok(PostOutput::Json(json))
    }
}

/// Softmax of `scores`, unless they already are a probability distribution.
fn probabilities(scores: &[f32]) -> Vec<f32> {
    let sum: f32 = scores.iter().sum();
    if scores.iter().all(|p| (0.0..=1.0).contains(p)) && (sum - 1.0).abs() < 1e-3 {
        return scores.to_vec();
    }
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f32> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f32 = exp.iter().sum();
    exp.into_iter().map(|e| e / total).collect()
}

/// The `k` largest values with their indices, largest first; NaN sorts last.
fn top_k(values: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut indexed: Vec<(usize, f32)> = values.iter().copied().enumerate().collect();
    indexed.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    indexed.retain(|(_, v)| !v.is_nan());
    indexed.truncate(k);
    indexed
}

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

export_plugin!(ImagenetTopK);
