//! Hostile test guardrail: misbehaves as the text it is given asks: `loop` spins forever (the
//! deadline must stop it), `memory` allocates until it runs out (the memory cap), `trap`
//! panics; any other text passes.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "infergate:plugin/guardrail@0.1.0",
});

use std::hint::black_box;

struct HostileGuardrail;

fn misbehave(text: &str) {
    if text.contains("loop") {
        let mut spins = 0u64;
        loop {
            spins = black_box(spins.wrapping_add(1));
        }
    }
    if text.contains("memory") {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(black_box(vec![0xA5; 16 << 20]));
        }
    }
    if text.contains("trap") {
        panic!("hostile-guardrail: trapping on purpose");
    }
}

impl Guest for HostileGuardrail {
    fn describe() -> GuardrailDescription {
        GuardrailDescription {
            name: "hostile-guardrail".into(),
            version: "0.1.0".into(),
            summary: "loops, hoards memory or traps when the text asks".into(),
        }
    }

    fn check_prompt(messages: Vec<ChatMessage>, _: Metadata) -> Result<PromptVerdict, PluginError> {
        for m in &messages {
            misbehave(&m.content);
        }
        Ok(PromptVerdict::Pass)
    }

    fn check_answer(text: String, _: Metadata) -> Result<TextVerdict, PluginError> {
        misbehave(&text);
        Ok(TextVerdict::Pass)
    }

    fn check_stream(
        _released: String,
        pending: String,
        _last: bool,
        _: Metadata,
    ) -> Result<StreamVerdict, PluginError> {
        misbehave(&pending);
        Ok(StreamVerdict {
            verdict: TextVerdict::Pass,
            hold: 0,
        })
    }
}

export!(HostileGuardrail);
