//! What the tests on the real demo model share: the model (one per test binary), one test at a
//! time, chat prompts, and waiting on the model's counters.

#![allow(dead_code)]

use infergate_llm::{ChatMessage, Done, Event, Generation, LlmConfig, LlmModel, StatsSnapshot};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// `$INFERGATE_MODELS/smollm2.gguf`: SmolLM2-135M-Instruct Q4_1, fetched by scripts/setup.sh.
pub fn model_path() -> PathBuf {
    let dir = std::env::var("INFERGATE_MODELS")
        .expect("INFERGATE_MODELS must point at the demo models (source .cache/env.sh)");
    PathBuf::from(dir).join("smollm2.gguf")
}

/// The tests share one model and read its counters and cache: one at a time.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One model for every test of a binary (loading takes a moment): 4 sequences, short
/// contexts.
pub fn model() -> &'static LlmModel {
    static MODEL: OnceLock<LlmModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let config = LlmConfig {
            max_sequences: 4,
            context_per_sequence: 512,
            batch_tokens: 64,
            // 1 thread: 2 stall for seconds per token when the machine is oversubscribed (CI).
            threads: 1,
            queue_capacity: 64,
            ..LlmConfig::default()
        };
        LlmModel::load(&model_path(), config).expect("the demo model loads")
    })
}

/// The tokens of a one-message chat, as the model's template writes it.
pub fn chat(content: &str) -> Vec<i32> {
    let m = model();
    let prompt = m
        .render_chat(&[ChatMessage {
            role: "user".into(),
            content: content.into(),
        }])
        .unwrap();
    m.tokenize(&prompt)
}

/// Waits (bounded) until the model's counters satisfy `what`.
pub fn wait_for(what: &str, ready: impl Fn(&StatsSnapshot) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready(&model().stats()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A generation's tokens with their log probabilities (bit for bit: equal bits, equal logits),
/// and its end.
pub fn with_logprobs(mut g: Generation) -> (Vec<(String, u32)>, Done) {
    let mut tokens = Vec::new();
    while let Some(event) = g.events.blocking_recv() {
        match event {
            Event::Text { logprob, .. } => {
                let lp = logprob.expect("log probabilities were asked for");
                tokens.push((lp.token, lp.logprob.to_bits()));
            }
            Event::Done(done) => return (tokens, done),
            Event::Error(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the generation ended without Done");
}
