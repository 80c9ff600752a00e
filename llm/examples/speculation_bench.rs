//! Speculative decoding in process (no HTTP): tokens/s of greedy answers to the committed
//! prompt set (`llm/tests/data/speculation_prompts.json`) with drafting off, from n-grams, and
//! from n-grams plus the prompts' predictions, at 1 and 8 concurrent streams, alternating in
//! rounds so the ratios hold on a busy machine. Beside each: the acceptance rate of drafted
//! tokens, what verifying one drafted token cost (as a fraction of a plain decode step:
//! `(time − (tokens − accepted) × step) / drafted`, the step measured without drafts), and how
//! many answers differ from the answer without drafts (greedy: the goal is none).
//!
//! ```text
//! cargo run --release -p infergate-llm --example speculation_bench -- [--rounds 3] [--threads 2] [--max-tokens 256] [--streams 1,8] [--json]
//! ```
//! `--json` prints each pass as a JSON line instead (what `bench/llm_speculation.py` reads).

mod support;

use infergate_llm::{Event, LlmModel, SamplingParams, SpeculationParams};
use std::path::PathBuf;
use std::time::Instant;
use support::{arg, arg_text, chat, demo_config, demo_path};

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    prompt: String,
    prediction: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Off,
    Ngrams,
    Predicted,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Off => "no drafts",
            Mode::Ngrams => "n-grams",
            Mode::Predicted => "n-grams + prediction",
        }
    }

    fn params(self, case: &Case) -> SpeculationParams {
        SpeculationParams {
            enabled: Some(self != Mode::Off),
            prediction: (self == Mode::Predicted)
                .then(|| case.prediction.clone())
                .flatten(),
            ..SpeculationParams::default()
        }
    }
}

/// One pass over the prompt set: seconds, generated tokens, accepted and drafted tokens, and
/// each answer's text.
struct Pass {
    seconds: f64,
    tokens: u64,
    accepted: u64,
    drafted: u64,
    answers: Vec<String>,
}

fn pass(
    model: &LlmModel,
    cases: &[Case],
    prompts: &[Vec<i32>],
    mode: Mode,
    streams: usize,
    max: u32,
) -> Pass {
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: max,
        ..SamplingParams::default()
    };
    let started = Instant::now();
    let mut out = Pass {
        seconds: 0.0,
        tokens: 0,
        accepted: 0,
        drafted: 0,
        answers: vec![String::new(); cases.len()],
    };
    // `streams` at a time: each finished answer lets the next prompt in.
    let mut next = 0;
    let mut running = Vec::new();
    while next < cases.len() || !running.is_empty() {
        while running.len() < streams && next < cases.len() {
            let g = model
                .generate_n_with(&prompts[next], &params, None, 1, &mode.params(&cases[next]))
                .expect("queued")
                .pop()
                .expect("one");
            running.push((next, g, String::new()));
            next += 1;
        }
        let mut k = 0;
        while k < running.len() {
            let (i, g, text) = &mut running[k];
            match g.events.blocking_recv().expect("events until Done") {
                Event::Text { text: t, .. } => {
                    text.push_str(&t);
                    k += 1;
                }
                Event::Done(d) => {
                    out.tokens += u64::from(d.completion_tokens);
                    out.accepted += u64::from(d.accepted_prediction_tokens);
                    out.drafted +=
                        u64::from(d.accepted_prediction_tokens + d.rejected_prediction_tokens);
                    out.answers[*i] = std::mem::take(text);
                    running.swap_remove(k);
                }
                Event::Error(e) => panic!("{e}"),
            }
        }
    }
    out.seconds = started.elapsed().as_secs_f64();
    out
}

fn main() {
    let rounds = arg("--rounds", 3);
    let threads = arg("--threads", 2);
    let max = arg("--max-tokens", 256) as u32;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let cases: Vec<Case> = serde_json::from_str(
        &std::fs::read_to_string(root.join("tests/data/speculation_prompts.json"))
            .expect("prompts"),
    )
    .expect("the prompt set parses");
    let model = LlmModel::load(&demo_path(), demo_config(threads)).expect("the model loads");
    let prompts: Vec<Vec<i32>> = cases.iter().map(|c| chat(&model, &c.prompt)).collect();
    // Untimed: weights faulted in, every prompt in the prefix cache (each mode then starts
    // from the same cached prompts).
    pass(&model, &cases, &prompts, Mode::Off, 1, 8);
    let modes = [Mode::Off, Mode::Ngrams, Mode::Predicted];
    let json = std::env::args().any(|a| a == "--json");
    let stream_counts: Vec<usize> = arg_text("--streams")
        .unwrap_or_else(|| "1,8".into())
        .split(',')
        .map(|s| s.parse().expect("stream counts"))
        .collect();
    for streams in stream_counts {
        let mut rows: Vec<Vec<Pass>> = modes.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            // Alternate the order so a drift of the machine's speed hits each mode alike.
            let order: Vec<usize> = if round % 2 == 0 {
                vec![0, 1, 2]
            } else {
                vec![2, 1, 0]
            };
            for m in order {
                let p = pass(&model, &cases, &prompts, modes[m], streams, max);
                if json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "mode": modes[m].label(), "streams": streams, "round": round,
                            "seconds": p.seconds, "tokens": p.tokens, "accepted": p.accepted,
                            "drafted": p.drafted, "answers": p.answers,
                        })
                    );
                }
                rows[m].push(p);
            }
        }
        if json {
            continue;
        }
        let rate = |p: &Pass| p.tokens as f64 / p.seconds;
        for (m, passes) in rows.iter().enumerate().skip(1) {
            let mut ratios: Vec<f64> = passes
                .iter()
                .zip(&rows[0])
                .map(|(on, off)| rate(on) / rate(off))
                .collect();
            ratios.sort_by(f64::total_cmp);
            let (tokens, accepted, drafted): (u64, u64, u64) =
                passes.iter().fold((0, 0, 0), |a, p| {
                    (a.0 + p.tokens, a.1 + p.accepted, a.2 + p.drafted)
                });
            let seconds: f64 = passes.iter().map(|p| p.seconds).sum();
            let off_seconds: f64 = rows[0].iter().map(|p| p.seconds).sum();
            let off_tokens: u64 = rows[0].iter().map(|p| p.tokens).sum();
            let step = off_seconds / off_tokens as f64 * streams as f64;
            let steps = (tokens - accepted) as f64 / streams as f64;
            let cost = (seconds - steps * step) / drafted.max(1) as f64 / step;
            let differ: Vec<&str> = cases
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    passes
                        .iter()
                        .zip(&rows[0])
                        .any(|(on, off)| on.answers[*i] != off.answers[*i])
                })
                .map(|(_, c)| c.name.as_str())
                .collect();
            println!(
                "{streams} stream(s), {:>21}: {:.1} vs {:.1} tokens/s = {:.2}x (median of {rounds}; rounds {}), \
                 acceptance {:.0}% of {} drafted, a drafted token cost {:.2} of a step, {} of {} answers differ {differ:?}",
                modes[m].label(),
                passes.iter().map(rate).sum::<f64>() / passes.len() as f64,
                rows[0].iter().map(rate).sum::<f64>() / rows[0].len() as f64,
                ratios[ratios.len() / 2],
                ratios.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", "),
                100.0 * accepted as f64 / drafted.max(1) as f64,
                drafted / rounds as u64,
                cost,
                differ.len(),
                cases.len()
            );
        }
    }
}
