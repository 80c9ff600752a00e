//! Speculative decoding on the real demo model (`$INFERGATE_MODELS/smollm2.gguf`) over the
//! committed prompt set (`tests/data/speculation_prompts.json`: code edits, list copies,
//! rewrites, and prose that never matches): greedy answers identical with and without it (bit
//! for bit: the log probability of every token too), acceptance counted per request and per
//! model, a sequence cancelled while it drafts freed, speculating sequences beside plain ones.
//!
//! Every sequence here stays under 256 KV cells: there llama.cpp computes a lone token's
//! attention on the path verification rows take (the scheduler's "Reproducibility");
//! `bench/llm_speculation.py` measures the longer answers.

use infergate_llm::{Finish, Generation, SamplingParams, SpeculationParams};
use std::path::PathBuf;
use crate::support::{chat, model, serial, wait_for};

/// Cells a test sequence may use (prompt + answer), below 256.
const CELLS: usize = 250;

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    kind: String,
    prompt: String,
    prediction: Option<String>,
}

fn cases() -> Vec<Case> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/speculation_prompts.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn greedy(max_tokens: u32) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_tokens,
        // The chosen token's log probability: equal bits mean equal logits.
        logprobs: Some(0),
        ..SamplingParams::default()
    }
}

fn off() -> SpeculationParams {
    SpeculationParams {
        enabled: Some(false),
        ..SpeculationParams::default()
    }
}

fn on(prediction: Option<&str>) -> SpeculationParams {
    SpeculationParams {
        enabled: Some(true),
        prediction: prediction.map(str::to_string),
        ..SpeculationParams::default()
    }
}

/// A generation's tokens (text and log-probability bits), its end and its draft counts.
#[derive(Debug, PartialEq)]
struct Answer {
    tokens: Vec<(String, u32)>,
    finish: Finish,
    accepted: u32,
    rejected: u32,
}

impl Answer {
    fn text(&self) -> String {
        self.tokens.iter().map(|t| t.0.as_str()).collect()
    }
}

fn collect(g: Generation) -> Answer {
    let (tokens, done) = crate::support::with_logprobs(g);
    // Every token gave an event, but the end-of-generation token.
    let n = done.completion_tokens as usize;
    assert!(n == tokens.len() || n == tokens.len() + 1, "{n} {tokens:?}");
    Answer {
        tokens,
        finish: done.finish,
        accepted: done.accepted_prediction_tokens,
        rejected: done.rejected_prediction_tokens,
    }
}

fn start(prompt: &[i32], max_tokens: u32, spec: &SpeculationParams) -> Generation {
    model()
        .generate_n_with(prompt, &greedy(max_tokens), None, 1, spec)
        .unwrap()
        .pop()
        .unwrap()
}

fn budget(prompt: &[i32]) -> u32 {
    (CELLS - prompt.len()).min(160) as u32
}

#[test]
fn greedy_answers_are_identical_with_and_without_speculation() {
    let _serial = serial();
    let before = model().stats();
    let (mut accepted, mut rejected) = (0, 0);
    let mut copied = 0;
    for case in cases() {
        let prompt = chat(&case.prompt);
        let max = budget(&prompt);
        let plain = collect(start(&prompt, max, &off()));
        assert_eq!((plain.accepted, plain.rejected), (0, 0), "{}", case.name);
        let ngrams = collect(start(&prompt, max, &on(None)));
        let mut runs = vec![("n-grams", ngrams)];
        if let Some(p) = case.prediction.as_deref() {
            runs.push(("prediction", collect(start(&prompt, max, &on(Some(p))))));
        }
        for (how, run) in runs {
            assert_eq!(
                run.tokens,
                plain.tokens,
                "{} ({how}): {:?} vs {:?}",
                case.name,
                run.text(),
                plain.text()
            );
            assert_eq!(run.finish, plain.finish, "{}", case.name);
            accepted += run.accepted;
            rejected += run.rejected;
            if case.kind != "prose" && run.accepted > 0 {
                copied += 1;
            }
            eprintln!(
                "{} ({how}): {} tokens, {} drafted tokens accepted, {} rejected",
                case.name,
                run.tokens.len(),
                run.accepted,
                run.rejected
            );
        }
    }
    // Copying answers are drafted and mostly accepted; the model's counters add up the
    // requests'.
    assert!(copied >= 5, "only {copied} copying answers accepted drafts");
    assert!(
        accepted > rejected,
        "{accepted} accepted, {rejected} rejected"
    );
    let after = model().stats();
    assert_eq!(
        after.speculative_accepted_tokens - before.speculative_accepted_tokens,
        u64::from(accepted)
    );
    assert_eq!(
        after.speculative_draft_tokens - before.speculative_draft_tokens,
        u64::from(accepted + rejected)
    );
}

#[test]
fn a_wrong_prediction_costs_drafts_but_not_the_answer() {
    let _serial = serial();
    let prompt = chat("Write a short poem about the sea.");
    let max = budget(&prompt).min(48);
    let plain = collect(start(&prompt, max, &off()));
    // The answer's first words, then something else: followed, drafted, rejected.
    let opening: String = plain.tokens[..4].iter().map(|t| t.0.as_str()).collect();
    let wrong = format!("{opening} tax forms are due in April, and receipts must be kept.");
    let guessed = collect(start(&prompt, max, &on(Some(&wrong))));
    assert_eq!(guessed.tokens, plain.tokens);
    assert!(guessed.rejected > 0, "{guessed:?}");
}

#[test]
fn a_sequence_cancelled_while_drafting_is_freed() {
    let _serial = serial();
    let case = cases()
        .into_iter()
        .find(|c| c.name == "cat-to-dog")
        .unwrap();
    let prompt = chat(&case.prompt);
    let before = model().stats();
    let g = start(&prompt, budget(&prompt), &on(case.prediction.as_deref()));
    let mut events = g.events;
    // Drafts are verified from the first generated token on: wait for one verification.
    wait_for("a verified draft", |s| {
        s.speculative_draft_tokens > before.speculative_draft_tokens
    });
    events.blocking_recv().expect("a first token");
    drop(events);
    wait_for("the sequence freed", |s| s.running == 0);
    assert!(model().stats().cancelled > before.cancelled);
    // The slot's KV is consistent: the same prompt now answers as it does from scratch.
    let again = collect(start(&prompt, budget(&prompt), &off()));
    let spec = collect(start(
        &prompt,
        budget(&prompt),
        &on(case.prediction.as_deref()),
    ));
    assert_eq!(again.tokens, spec.tokens);
}

#[test]
fn speculating_sequences_run_beside_plain_ones() {
    let _serial = serial();
    let all = cases();
    let picked: Vec<&Case> = ["rename-function", "shopping-list", "sea-poem", "cat-to-dog"]
        .iter()
        .map(|n| all.iter().find(|c| c.name == *n).unwrap())
        .collect();
    let prompts: Vec<Vec<i32>> = picked.iter().map(|c| chat(&c.prompt)).collect();
    let together = |specs: &[SpeculationParams]| -> Vec<Answer> {
        prompts
            .iter()
            .zip(specs)
            .map(|(p, s)| start(p, budget(p).min(64), s))
            .collect::<Vec<_>>()
            .into_iter()
            .map(collect)
            .collect()
    };
    // All four at once, first without drafts: this leaves every prompt whole in the prefix
    // cache, where the next two runs find it (a prompt computed beside other prompts has other
    // bits than one computed alone or found in the cache).
    let none = [off(), off(), off(), off()];
    together(&none);
    // Two speculate (one with its prediction), two do not.
    let mixed = [on(picked[0].prediction.as_deref()), off(), on(None), off()];
    let with = together(&mixed);
    let without = together(&none);
    for (i, (w, o)) in with.iter().zip(&without).enumerate() {
        assert_eq!(
            w.tokens,
            o.tokens,
            "{}: {:?} vs {:?}",
            picked[i].name,
            w.text(),
            o.text()
        );
    }
    assert!(
        with[0].accepted + with[2].accepted > 0,
        "nothing was drafted"
    );
    assert_eq!((with[1].accepted, with[3].accepted), (0, 0));
}

#[test]
fn bad_speculation_parameters_are_refused() {
    let _serial = serial();
    let prompt = chat("Hi");
    let e = model()
        .generate_n_with(
            &prompt,
            &greedy(4),
            None,
            1,
            &SpeculationParams {
                max_draft: Some(0),
                ..on(None)
            },
        )
        .unwrap_err();
    assert!(e.to_string().contains("speculation.max_draft"), "{e}");
    let long = "word ".repeat(600);
    let e = model()
        .generate_n_with(&prompt, &greedy(4), None, 1, &on(Some(&long)))
        .unwrap_err();
    assert!(e.to_string().contains("prediction"), "{e}");
    // Off, the prediction is not even read.
    assert!(model()
        .generate_n_with(
            &prompt,
            &greedy(4),
            None,
            1,
            &SpeculationParams {
                prediction: Some(long),
                ..off()
            }
        )
        .is_ok());
}

#[test]
fn seeded_sampling_draws_the_same_tokens_with_speculation() {
    let _serial = serial();
    // Verification samples each row with the sequence's own sampler, one draw per produced
    // token in order: with the same logits, the same seed gives the same tokens.
    for name in ["rename-function", "sea-poem"] {
        let case = cases().into_iter().find(|c| c.name == name).unwrap();
        let prompt = chat(&case.prompt);
        let params = SamplingParams {
            temperature: 0.7,
            top_k: 40,
            seed: Some(11),
            ..greedy(budget(&prompt).min(96))
        };
        let run = |spec: &SpeculationParams| {
            collect(
                model()
                    .generate_n_with(&prompt, &params, None, 1, spec)
                    .unwrap()
                    .pop()
                    .unwrap(),
            )
        };
        let plain = run(&off());
        let spec = run(&on(case.prediction.as_deref()));
        assert_eq!(spec.tokens, plain.tokens, "{name}");
        if case.prediction.is_some() {
            assert!(spec.accepted > 0, "{name}: nothing was drafted");
        }
    }
}
