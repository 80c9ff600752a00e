//! Post-processing: CTC greedy decoding of a text recogniser's output,
//! fp32 [B,T,C] per-step class probabilities (PP-OCRv4: C = 6625) -> text.
//!
//! Output is JSON `{"texts":[{"text","confidence"}]}`, or with metadata
//! `output` = `tensor` a bytes tensor `text` [B]. The charset is taken from
//! the model's metadata at build time (see build.rs).

use infergate_plugin_sdk::*;
use std::fmt::Write;

mod charset {
    include!(concat!(env!("OUT_DIR"), "/charset.rs"));
}

const BLANK: usize = 0;

struct CtcDecode;

impl Plugin for CtcDecode {
    fn describe() -> Description {
        describe(
            "ctc-decode",
            "0.1.0",
            PluginKind::Post,
            &["probabilities: fp32 [B,T,6625] (PP-OCRv4 recognition)"],
            &[
                "application/json: {\"texts\": [{text, confidence}]}",
                "text: bytes [B]",
            ],
        )
    }

    fn postprocess(outputs: Vec<Tensor>, metadata: Metadata) -> Result<PostOutput, PluginError> {
        let [probs] = outputs.as_slice() else {
            return Err(PluginError::bad_input(format!(
                "expected one output tensor, got {}",
                outputs.len()
            )));
        };
        let classes = charset::CLASSES.len();
        let &[batch, _steps, width] = probs.shape.as_slice() else {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` has shape {:?}, expected [B,T,C]",
                probs.name, probs.shape
            )));
        };
        if width != classes as u64 {
            return Err(PluginError::bad_input(format!(
                "tensor `{}` has {width} classes, the charset has {classes}",
                probs.name
            )));
        }
        let values = probs.to_f32()?;
        let rows = if batch == 0 {
            0
        } else {
            values.len() / batch as usize
        };
        let texts: Vec<(String, f32)> = values
            .chunks_exact(rows.max(1))
            .take(batch as usize)
            .map(|row| greedy_decode(row, classes))
            .collect();

        if metadata_get(&metadata, "output") == Some("tensor") {
            return Ok(PostOutput::Tensors(vec![Tensor::from_byte_strings(
                "text",
                vec![batch],
                texts.iter().map(|(text, _)| text.as_bytes()),
            )]));
        }
        let mut json = String::from("{\"texts\":[");
        for (i, (text, confidence)) in texts.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            let _ = write!(
                json,
                "{{\"text\":{},\"confidence\":{confidence}}}",
                json_string(text)
            );
        }
        json.push_str("]}");
        Ok(PostOutput::Json(json))
    }
}

/// Best class per step, repeats collapsed, blanks dropped; confidence is the
/// mean probability of the kept steps.
fn greedy_decode(steps: &[f32], classes: usize) -> (String, f32) {
    let mut text = String::new();
    let (mut total, mut kept) = (0.0f32, 0u32);
    let mut previous = BLANK;
    for step in steps.chunks_exact(classes) {
        let (best, probability) =
            step.iter()
                .copied()
                .enumerate()
                .fold((BLANK, f32::NEG_INFINITY), |acc, (i, p)| {
                    if p > acc.1 {
                        (i, p)
                    } else {
                        acc
                    }
                });
        if best != BLANK && best != previous {
            text.push_str(charset::CLASSES[best]);
            total += probability;
            kept += 1;
        }
        previous = best;
    }
    let confidence = if kept == 0 { 0.0 } else { total / kept as f32 };
    (text, confidence)
}

fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

export_plugin!(CtcDecode);
