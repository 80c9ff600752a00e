//! Chat guardrail: masks personal data in prompts and answers: e-mail addresses (`[EMAIL]`),
//! payment card numbers that pass the Luhn check (`[CARD]`) and phone numbers (`[PHONE]`).
//! A streamed answer is masked across its pieces: the end of the pending text that may still
//! become a match (a trailing word or number) is held back until more text comes.

pub mod mask;

#[cfg(target_arch = "wasm32")]
mod guest {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "infergate:plugin/guardrail@0.1.0",
    });

    use crate::mask::{held_suffix, mask};

    struct PiiMask;

    fn verdict(text: &str) -> TextVerdict {
        match mask(text) {
            Some(masked) => TextVerdict::Rewrite(masked),
            None => TextVerdict::Pass,
        }
    }

    impl Guest for PiiMask {
        fn describe() -> GuardrailDescription {
            GuardrailDescription {
                name: "pii-mask".into(),
                version: "1.0.0".into(),
                summary: "masks e-mail addresses, phone numbers and card numbers (Luhn-checked)"
                    .into(),
            }
        }

        fn check_prompt(
            messages: Vec<ChatMessage>,
            _metadata: Metadata,
        ) -> Result<PromptVerdict, PluginError> {
            let masked: Vec<Option<String>> = messages.iter().map(|m| mask(&m.content)).collect();
            if masked.iter().all(Option::is_none) {
                return Ok(PromptVerdict::Pass);
            }
            Ok(PromptVerdict::Rewrite(
                masked
                    .into_iter()
                    .zip(messages)
                    .map(|(m, original)| m.unwrap_or(original.content))
                    .collect(),
            ))
        }

        fn check_answer(text: String, _metadata: Metadata) -> Result<TextVerdict, PluginError> {
            Ok(verdict(&text))
        }

        fn check_stream(
            _released: String,
            pending: String,
            last: bool,
            _metadata: Metadata,
        ) -> Result<StreamVerdict, PluginError> {
            let hold = if last { 0 } else { held_suffix(&pending) };
            let ready = &pending[..pending.len() - hold];
            Ok(StreamVerdict {
                verdict: verdict(ready),
                hold: hold as u32,
            })
        }
    }

    export!(PiiMask);
}
