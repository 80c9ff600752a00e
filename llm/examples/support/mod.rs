//! What the examples share: their command line, the demo model and its chat prompts.

#![allow(dead_code)]

use infergate_llm::{ChatMessage, LlmConfig, LlmModel};
use std::path::PathBuf;

/// The value after `name` on the command line.
pub fn arg_text(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The number after `name` on the command line, or `default`.
pub fn arg(name: &str, default: usize) -> usize {
    arg_text(name).map_or(default, |v| v.parse().expect("a number"))
}

/// `$INFERGATE_MODELS/smollm2.gguf`.
pub fn demo_path() -> PathBuf {
    PathBuf::from(std::env::var("INFERGATE_MODELS").expect("INFERGATE_MODELS")).join("smollm2.gguf")
}

/// The gateway's sizes on two cores (8 sequences of 2048 tokens) on `threads`.
pub fn demo_config(threads: usize) -> LlmConfig {
    LlmConfig {
        threads,
        max_sequences: 8,
        context_per_sequence: 2048,
        ..LlmConfig::default()
    }
}

/// The tokens of a one-message chat.
pub fn chat(model: &LlmModel, content: &str) -> Vec<i32> {
    model.tokenize(
        &model
            .render_chat(&[ChatMessage {
                role: "user".into(),
                content: content.into(),
            }])
            .expect("renders"),
    )
}
