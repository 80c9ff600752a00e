//! Chat guardrail: refuses (or masks) prompts and answers that contain a blocked term. The
//! terms come from the configuration it is attached with: `{"terms": ["..."], "action":
//! "refuse" | "mask"}` (`refuse` by default); a term matches whole words, ignoring case.
//! A streamed answer is checked across its pieces: the end of the pending text that may be the
//! start of a term is held back until more text comes.

pub mod terms;

#[cfg(target_arch = "wasm32")]
mod guest {
    wit_bindgen::generate!({
        path: "../../wit",
        world: "infergate:plugin/guardrail@0.1.0",
    });

    use crate::terms::{Outcome, Terms};

    struct BlockedTerms;

    fn terms(metadata: &Metadata) -> Result<Terms, PluginError> {
        let config = metadata
            .iter()
            .find(|(k, _)| k == "config")
            .map_or("", |(_, v)| v.as_str());
        Terms::from_config(config).map_err(PluginError::Failure)
    }

    fn verdict(terms: &Terms, text: &str, whose: &str) -> TextVerdict {
        match terms.check(text) {
            Outcome::Clean => TextVerdict::Pass,
            Outcome::Masked(masked) => TextVerdict::Rewrite(masked),
            Outcome::Blocked(_) => TextVerdict::Refuse(format!("{whose} contains a blocked term")),
        }
    }

    impl Guest for BlockedTerms {
        fn describe() -> GuardrailDescription {
            GuardrailDescription {
                name: "blocked-terms".into(),
                version: "1.0.0".into(),
                summary: "refuses or masks the terms it is configured with".into(),
            }
        }

        fn check_prompt(
            messages: Vec<ChatMessage>,
            metadata: Metadata,
        ) -> Result<PromptVerdict, PluginError> {
            let terms = terms(&metadata)?;
            let mut rewritten = Vec::with_capacity(messages.len());
            let mut changed = false;
            for m in messages {
                match verdict(&terms, &m.content, "the request") {
                    TextVerdict::Pass => rewritten.push(m.content),
                    TextVerdict::Rewrite(text) => {
                        changed = true;
                        rewritten.push(text);
                    }
                    TextVerdict::Refuse(reason) => return Ok(PromptVerdict::Refuse(reason)),
                }
            }
            Ok(if changed {
                PromptVerdict::Rewrite(rewritten)
            } else {
                PromptVerdict::Pass
            })
        }

        fn check_answer(text: String, metadata: Metadata) -> Result<TextVerdict, PluginError> {
            Ok(verdict(&terms(&metadata)?, &text, "the answer"))
        }

        fn check_stream(
            _released: String,
            pending: String,
            last: bool,
            metadata: Metadata,
        ) -> Result<StreamVerdict, PluginError> {
            let terms = terms(&metadata)?;
            let hold = if last { 0 } else { terms.held(&pending) };
            let ready = &pending[..pending.len() - hold];
            Ok(StreamVerdict {
                verdict: verdict(&terms, ready, "the answer"),
                hold: hold as u32,
            })
        }
    }

    export!(BlockedTerms);
}
