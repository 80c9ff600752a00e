//! Post-processing for sentence-embedding models (all-MiniLM-L6-v2 and other BERT-style
//! encoders): token states fp32 [B,S,H] → mean over the S tokens → L2-normalised fp32 [B,H]
//! named `embedding`. A single unpadded sentence per row makes the plain mean exactly the
//! attention-masked mean sentence-transformers computes.

use infergate_plugin_sdk::*;

struct MeanPool;

impl Plugin for MeanPool {
    fn describe() -> Description {
        describe(
            "mean-pool",
            "0.1.0",
            PluginKind::Post,
            &["token states: fp32 [B,S,H]"],
            &["embedding: fp32 [B,H], unit length"],
        )
    }

    fn postprocess(outputs: Vec<Tensor>, _metadata: Metadata) -> Result<PostOutput, PluginError> {
        let [states] = outputs.as_slice() else {
            return Err(PluginError::bad_input(format!(
                "expected one output tensor, got {}",
                outputs.len()
            )));
        };
        let &[batch, tokens, hidden] = states.shape.as_slice() else {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` has shape {:?}, expected [B,S,H]",
                states.name, states.shape
            )));
        };
        if tokens == 0 || hidden == 0 {
            return Err(PluginError::bad_input("no tokens to pool"));
        }
        let values = states.to_f32()?;
        let (tokens, hidden) = (tokens as usize, hidden as usize);
        let mut pooled = vec![0f32; batch as usize * hidden];
        for (row, out) in values.chunks_exact(tokens * hidden).zip(pooled.chunks_exact_mut(hidden)) {
            for token in row.chunks_exact(hidden) {
                for (o, v) in out.iter_mut().zip(token) {
                    *o += v;
                }
            }
            let norm = out.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            out.iter_mut().for_each(|v| *v /= norm);
        }
        Ok(PostOutput::Tensors(vec![Tensor::from_f32(
            "embedding",
            vec![batch, hidden as u64],
            &pooled,
        )]))
    }
}

export_plugin!(MeanPool);
