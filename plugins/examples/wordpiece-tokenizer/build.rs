//! Compiles a Hugging Face `tokenizer.json` (BERT WordPiece) into static
//! tables at build time: each call runs in a fresh instance, so parsing
//! 30k vocabulary entries per call would dominate the cost. The path comes
//! from `INFERGATE_TOKENIZER_JSON`.

use serde_json::Value;
use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=INFERGATE_TOKENIZER_JSON");
    let path = env::var("INFERGATE_TOKENIZER_JSON").unwrap_or_else(|_| {
        panic!("set INFERGATE_TOKENIZER_JSON to a BERT tokenizer.json (plugins/build.sh does)")
    });
    println!("cargo:rerun-if-changed={path}");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {path}: {e}"));

    let model = &json["model"];
    assert_eq!(
        model["type"], "WordPiece",
        "{path}: only WordPiece models are supported"
    );
    let vocab = model["vocab"]
        .as_object()
        .expect("model.vocab is an object");
    let mut entries: Vec<(&str, u64)> = vocab
        .iter()
        .map(|(token, id)| (token.as_str(), id.as_u64().expect("vocab ids are integers")))
        .collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let id_of = |token: &str| -> u64 {
        vocab
            .get(token)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| panic!("{path}: `{token}` is not in the vocabulary"))
    };

    let normalizer = &json["normalizer"];
    let lowercase = normalizer["lowercase"].as_bool().unwrap_or(true);
    // BERT: strip_accents unset means "same as lowercase".
    let strip_accents = normalizer["strip_accents"].as_bool().unwrap_or(lowercase);
    let chinese_chars = normalizer["handle_chinese_chars"].as_bool().unwrap_or(true);
    let unk = model["unk_token"].as_str().unwrap_or("[UNK]");
    let prefix = model["continuing_subword_prefix"].as_str().unwrap_or("##");
    let max_chars = model["max_input_chars_per_word"].as_u64().unwrap_or(100);
    let max_length = json["truncation"]["max_length"].as_u64().unwrap_or(512);
    let pad_id = json["padding"]["pad_id"].as_u64().unwrap_or(0);

    let mut out = String::new();
    out.push_str(&format!(
        "pub const LOWERCASE: bool = {lowercase};\n\
         pub const STRIP_ACCENTS: bool = {strip_accents};\n\
         pub const CHINESE_CHARS: bool = {chinese_chars};\n\
         pub const UNK_ID: i64 = {};\n\
         pub const CLS_ID: i64 = {};\n\
         pub const SEP_ID: i64 = {};\n\
         pub const PAD_ID: i64 = {pad_id};\n\
         pub const CONTINUING_PREFIX: &str = {prefix:?};\n\
         pub const MAX_CHARS_PER_WORD: usize = {max_chars};\n\
         pub const MAX_LENGTH: usize = {max_length};\n",
        id_of(unk),
        id_of("[CLS]"),
        id_of("[SEP]"),
    ));
    out.push_str("/// (token, id), sorted by token.\npub static VOCAB: &[(&str, i64)] = &[\n");
    for (token, id) in entries {
        out.push_str(&format!("({token:?}, {id}),\n"));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("vocab.rs");
    fs::write(dest, out).expect("writing vocab.rs");
}
