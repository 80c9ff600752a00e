//! What the scheduler costs one greedy stream: tokens/s of `infergate-llm` (a generation queued
//! on [`LlmModel`], its events read on another thread as the gateway reads them) against
//! llama.cpp's plain decode loop through `llama-cpp-2` (one context with the same parameters,
//! one token per `llama_decode`, greedy sampling), on the same model in the same process,
//! alternating, so the ratio holds on a busy machine.
//!
//! ```text
//! cargo run --release -p infergate-llm --example decode_overhead -- [--tokens 256] [--rounds 3] [--threads 2]
//! ```
//! Both decode the same prompt to the same tokens (greedy); the rate counts tokens after the
//! first (the prompt's computation left out). `--only plain` or `--only scheduler` runs one side
//! alone, for `perf stat`. The scheduler runs without drafts unless `--speculate`.

mod support;

use infergate_llm::{Event, LlmConfig, LlmModel, SamplingParams, SpeculationParams};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::time::Instant;
use support::{arg, arg_text, chat, demo_config, demo_path};

/// How often the reader looks for events in the run that wakes no thread per token.
const DRAIN: std::time::Duration = std::time::Duration::from_millis(20);

const PROMPT: &str =
    "Write a long story about a dragon who learns to bake bread in a small village.";

/// Tokens generated, and the seconds and the CPU seconds of the whole process (every thread)
/// from the first token to the last.
struct Run {
    tokens: usize,
    seconds: f64,
    cpu: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        (self.tokens.saturating_sub(1)) as f64 / self.seconds
    }

    /// CPU milliseconds per token: unlike the rate, barely moved by other processes.
    fn cpu_ms(&self) -> f64 {
        self.cpu * 1000.0 / (self.tokens.saturating_sub(1)).max(1) as f64
    }
}

/// CPU seconds every thread of this process has run (Linux's per-thread schedstat, in ns).
fn process_cpu() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum::<u64>() as f64
        / 1e9
}

/// Marks the first and last token of a run. The process's CPU time is read at the first token
/// and at the run's end only: reading it costs more than a token's own handling.
struct Clock {
    first: Option<(Instant, f64)>,
    last: Instant,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            first: None,
            last: Instant::now(),
        }
    }

    fn tick(&mut self) {
        self.last = Instant::now();
        if self.first.is_none() {
            self.first = Some((self.last, process_cpu()));
        }
    }

    fn run(&self, tokens: usize) -> Run {
        let (t0, c0) = self.first.unwrap_or((self.last, process_cpu()));
        Run {
            tokens,
            seconds: (self.last - t0).as_secs_f64(),
            cpu: process_cpu() - c0,
        }
    }
}

/// A generation through the scheduler, its events read as they come (`drain: None`: the
/// reading thread woken for every token, as a streaming server's is) or every `drain`.
fn scheduler(
    model: &LlmModel,
    prompt: &[i32],
    max_tokens: u32,
    drain: Option<std::time::Duration>,
) -> Run {
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens,
        ..SamplingParams::default()
    };
    // The scheduler's own cost: no drafts (`--speculate` drafts as the model's default says).
    let speculation = SpeculationParams {
        enabled: (!std::env::args().any(|a| a == "--speculate")).then_some(false),
        ..SpeculationParams::default()
    };
    let mut g = model
        .generate_n_with(prompt, &params, None, 1, &speculation)
        .expect("queued")
        .pop()
        .expect("one");
    let mut clock = Clock::new();
    let tokens = loop {
        let event = match drain {
            None => g.events.blocking_recv(),
            Some(every) => loop {
                match g.events.try_recv() {
                    Ok(e) => break Some(e),
                    Err(tokio::sync::mpsc::error::TryRecvError::Empty) => std::thread::sleep(every),
                    Err(_) => break None,
                }
            },
        };
        match event.expect("events until Done") {
            Event::Text { .. } => clock.tick(),
            Event::Done(done) => break done.completion_tokens as usize,
            Event::Error(e) => panic!("{e}"),
        }
    };
    clock.run(tokens)
}

fn plain_loop(
    model: &LlamaModel,
    config: &LlmConfig,
    context: u32,
    prompt: &[i32],
    max_tokens: usize,
) -> Run {
    let backend = infergate_llm::backend().expect("llama.cpp");
    let mut ctx = model
        .new_context(backend, config.context_params(context))
        .expect("a context");
    let mut batch = LlamaBatch::new(config.batch_tokens, 1);
    for (i, &t) in prompt.iter().enumerate() {
        batch
            .add(LlamaToken(t), i as i32, &[0], i + 1 == prompt.len())
            .expect("room");
    }
    ctx.decode(&mut batch).expect("prompt decodes");
    let mut sampler = LlamaSampler::chain_simple([LlamaSampler::greedy()]);
    let vocab = model.vocab();
    let mut row = batch.n_tokens() - 1;
    let mut pos = prompt.len() as i32;
    let mut clock = Clock::new();
    let mut tokens = 0;
    while tokens < max_tokens {
        let token = sampler.sample(&ctx, row);
        tokens += 1;
        clock.tick();
        if vocab.is_eog(token) {
            break;
        }
        // What a server does with each token: its text.
        std::hint::black_box(vocab.token_to_piece(token, false, None));
        if tokens == max_tokens {
            break;
        }
        batch.clear();
        batch.add(token, pos, &[0], true).expect("room");
        ctx.decode(&mut batch).expect("decodes");
        pos += 1;
        row = 0;
    }
    clock.run(tokens)
}

fn main() {
    let tokens = arg("--tokens", 256);
    let rounds = arg("--rounds", 3);
    let threads = arg("--threads", 2);
    let path = demo_path();
    let config = demo_config(threads);
    let ours = LlmModel::load(&path, config.clone()).expect("the model loads");
    let backend = infergate_llm::backend().expect("llama.cpp");
    let plain = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default())
        .expect("the model loads");
    let prompt = chat(&ours, PROMPT);
    let context = ours.context_length();
    // Untimed: the first pass faults the weights in and starts llama.cpp's threads.
    plain_loop(&plain, &config, context, &prompt, 32);
    scheduler(&ours, &prompt, 32, None);
    match arg_text("--only").as_deref() {
        Some("plain") => {
            for _ in 0..rounds {
                let r = plain_loop(&plain, &config, context, &prompt, tokens);
                println!(
                    "llama.cpp loop: {:.1} tokens/s, {:.3} CPU ms/token ({} tokens)",
                    r.rate(),
                    r.cpu_ms(),
                    r.tokens
                );
            }
            return;
        }
        Some("scheduler") => {
            for _ in 0..rounds {
                let r = scheduler(&ours, &prompt, tokens as u32, None);
                println!(
                    "infergate-llm: {:.1} tokens/s, {:.3} CPU ms/token ({} tokens)",
                    r.rate(),
                    r.cpu_ms(),
                    r.tokens
                );
            }
            return;
        }
        Some(other) => panic!("--only plain|scheduler, not {other}"),
        None => {}
    }
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let a = plain_loop(&plain, &config, context, &prompt, tokens);
        let b = scheduler(&ours, &prompt, tokens as u32, None);
        let c = plain_loop(&plain, &config, context, &prompt, tokens);
        let d = scheduler(&ours, &prompt, tokens as u32, Some(DRAIN));
        let base = (a.rate() + c.rate()) / 2.0;
        let base_cpu = (a.cpu_ms() + c.cpu_ms()) / 2.0;
        let ratio = b.rate() / base;
        let cpu_ratio = b.cpu_ms() / base_cpu;
        let drained = d.rate() / base;
        ratios.push((ratio, cpu_ratio, drained));
        println!(
            "round {round}: llama.cpp loop {:.1} / {:.1} tokens/s ({:.3} / {:.3} CPU ms/token, {} tokens), \
             infergate-llm {:.1} tokens/s ({:.3} CPU ms/token, {} tokens): {ratio:.3}x the rate, {cpu_ratio:.3}x the CPU; \
             events read every {} ms: {:.1} tokens/s, {drained:.3}x",
            a.rate(),
            c.rate(),
            a.cpu_ms(),
            c.cpu_ms(),
            a.tokens,
            b.rate(),
            b.cpu_ms(),
            b.tokens,
            DRAIN.as_millis(),
            d.rate(),
        );
    }
    let median = |pick: fn(&(f64, f64, f64)) -> f64| {
        let mut v: Vec<f64> = ratios.iter().map(pick).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "infergate-llm / llama.cpp's loop, one greedy stream, {threads} threads (median of {rounds}): \
         {:.3}x the tokens/s, {:.3}x the CPU per token; with the events read every {} ms (no \
         thread woken per token): {:.3}x the tokens/s",
        median(|r| r.0),
        median(|r| r.1),
        DRAIN.as_millis(),
        median(|r| r.2)
    );
}
