//! Pre-processing: text -> BERT WordPiece token ids, for sentence-embedding
//! models such as all-MiniLM-L6-v2.
//!
//! Input: UTF-8 text (request body) or a bytes tensor of B texts.
//! Output: `input_ids`, `attention_mask`, `token_type_ids`, int64 [B, L],
//! `[CLS] ... [SEP]`, truncated to the tokenizer's max length and padded to
//! the longest text (metadata `padding` = `max-length` pads to the maximum).

mod normalize;
mod wordpiece;

use infergate_plugin_sdk::*;

mod vocab {
    include!(concat!(env!("OUT_DIR"), "/vocab.rs"));
}

struct WordpieceTokenizer;

impl Plugin for WordpieceTokenizer {
    fn describe() -> Description {
        describe(
            "wordpiece-tokenizer",
            "0.1.0",
            PluginKind::Pre,
            &["text/plain", "texts: bytes [B]"],
            &[
                "input_ids: int64 [B,L]",
                "attention_mask: int64 [B,L]",
                "token_type_ids: int64 [B,L]",
            ],
        )
    }

    fn preprocess(input: PreInput, metadata: Metadata) -> Result<Vec<Tensor>, PluginError> {
        let texts: Vec<&[u8]> = match &input {
            PreInput::Bytes(bytes) => vec![bytes.as_slice()],
            PreInput::Tensors(tensors) => match tensors.as_slice() {
                [tensor] => tensor.byte_elements()?.collect(),
                _ => {
                    return Err(PluginError::bad_input(format!(
                        "expected one bytes tensor of texts, got {} tensors",
                        tensors.len()
                    )))
                }
            },
        };
        if texts.is_empty() {
            return Err(PluginError::bad_input("no text to tokenize"));
        }
        let mut sequences = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let text = std::str::from_utf8(text)
                .map_err(|e| PluginError::bad_input(format!("text {i} is not UTF-8: {e}")))?;
            sequences.push(encode(text));
        }
        let width = match metadata_get(&metadata, "padding") {
            Some("max-length") => vocab::MAX_LENGTH,
            _ => sequences.iter().map(Vec::len).max().unwrap_or(0),
        };
        let batch = sequences.len();
        let mut ids = Vec::with_capacity(batch * width);
        let mut mask = Vec::with_capacity(batch * width);
        for sequence in &sequences {
            ids.extend_from_slice(sequence);
            ids.resize(ids.len() + width - sequence.len(), vocab::PAD_ID);
            mask.extend(std::iter::repeat_n(1i64, sequence.len()));
            mask.resize(mask.len() + width - sequence.len(), 0);
        }
        let shape = vec![batch as u64, width as u64];
        Ok(vec![
            Tensor::from_i64("input_ids", shape.clone(), &ids),
            Tensor::from_i64("attention_mask", shape.clone(), &mask),
            Tensor::from_i64("token_type_ids", shape, &vec![0i64; batch * width]),
        ])
    }
}

/// `[CLS] wordpieces [SEP]`, truncated to `MAX_LENGTH`.
fn encode(text: &str) -> Vec<i64> {
    let mut ids = vec![vocab::CLS_ID];
    for word in normalize::words(text) {
        wordpiece::push_ids(&word, &mut ids);
        if ids.len() >= vocab::MAX_LENGTH - 1 {
            break;
        }
    }
    ids.truncate(vocab::MAX_LENGTH - 1);
    ids.push(vocab::SEP_ID);
    ids
}

export_plugin!(WordpieceTokenizer);
