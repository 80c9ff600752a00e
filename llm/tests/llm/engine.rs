//! The engine on the real demo model (`$INFERGATE_MODELS/smollm2.gguf`, SmolLM2-135M-Instruct
//! Q4_1, fetched by scripts/setup.sh): answers, batching equal to running alone, cancellation,
//! the prefix cache, stop sequences and grammar-constrained JSON. Short generations only.

use infergate_llm::{
    ChatMessage, Constraint, Event, Finish, Generation, LlmConfig, LlmError, LlmModel,
    SamplingParams,
};
use std::time::{Duration, Instant};
use crate::support::{chat, model, model_path, serial, wait_for};

fn greedy(max_tokens: u32) -> SamplingParams {
    SamplingParams {
        temperature: 0.0,
        max_tokens,
        ..SamplingParams::default()
    }
}

/// Runs a generation to its end: text, finish reason, completion tokens.
fn collect(mut g: Generation) -> (String, Finish, u32) {
    let mut text = String::new();
    while let Some(event) = g.events.blocking_recv() {
        match event {
            Event::Text { text: t, .. } => text.push_str(&t),
            Event::Done(done) => return (text, done.finish, done.completion_tokens),
            Event::Error(e) => panic!("generation failed: {e}"),
        }
    }
    panic!("the generation ended without Done");
}

fn run(prompt: &[i32], params: &SamplingParams) -> (String, Finish, u32) {
    collect(model().generate(prompt, params, None).unwrap())
}

#[test]
fn answers_the_capital_of_france() {
    let _serial = serial();
    let (text, finish, tokens) = run(
        &chat("What is the capital city of France? Answer in one word."),
        &greedy(16),
    );
    assert!(text.contains("Paris"), "{text:?}");
    assert_eq!(finish, Finish::Stop, "{text:?}");
    assert!(tokens <= 16);
}

#[test]
fn batched_sequences_equal_their_runs_alone() {
    let _serial = serial();
    let prompts: Vec<Vec<i32>> = (0..5)
        .map(|i| chat(&format!("Count from {i} to {}.", i + 3)))
        .collect();
    let alone: Vec<String> = prompts.iter().map(|p| run(p, &greedy(10)).0).collect();
    // All at once: 4 run together, 1 waits and joins when a slot frees up.
    let together: Vec<String> = prompts
        .iter()
        .map(|p| model().generate(p, &greedy(10), None).unwrap())
        .collect::<Vec<_>>()
        .into_iter()
        .map(|g| collect(g).0)
        .collect();
    // Batched decoding is not bit-identical to decoding alone (llama.cpp's matrix products take
    // other kernel paths for a batch of several sequences), so a near tie between two greedy
    // candidates may flip on some CPUs. What must hold: no sequence receives another's tokens,
    // so each answer shares a longer start with its own run alone than with any other.
    for (i, text) in together.iter().enumerate() {
        let own = common_prefix(text, &alone[i]);
        let others = (0..alone.len())
            .filter(|&j| alone[j] != alone[i])
            .map(|j| common_prefix(text, &alone[j]))
            .max()
            .unwrap_or(0);
        assert!(own >= 1 && own > others, "{i}: {text:?} vs {alone:?}");
    }
    let same = alone.iter().zip(&together).filter(|(a, t)| a == t).count();
    assert!(same >= 3, "{alone:?} vs {together:?}");
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.chars().zip(b.chars()).take_while(|(x, y)| x == y).count()
}

#[test]
fn seeds_repeat_and_stop_sequences_cut() {
    let _serial = serial();
    let prompt = chat("Tell me about the sea.");
    let sampled = SamplingParams {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.05,
        seed: Some(7),
        max_tokens: 16,
        ..SamplingParams::default()
    };
    let a = run(&prompt, &sampled);
    assert_eq!(a, run(&prompt, &sampled));
    let (text, finish, _) = run(&prompt, &greedy(16));
    let word = text
        .split_whitespace()
        .nth(2)
        .expect("a few words")
        .to_string();
    let stopped = SamplingParams {
        stop: vec![word.clone()],
        ..greedy(16)
    };
    let (cut, cut_finish, _) = run(&prompt, &stopped);
    assert_eq!(cut, text[..text.find(&word).unwrap()], "{finish:?}");
    assert_eq!(cut_finish, Finish::Stop);
}

#[test]
fn dropping_the_receiver_frees_the_sequence() {
    let _serial = serial();
    let g = model()
        .generate(
            &chat("Write a long story about a dragon."),
            &greedy(400),
            None,
        )
        .unwrap();
    let mut events = g.events;
    events.blocking_recv().expect("a first token");
    drop(events);
    let deadline = Instant::now() + Duration::from_secs(30);
    while model().stats().running != 0 {
        assert!(Instant::now() < deadline, "the sequence is still running");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(model().stats().cancelled >= 1);
}

#[test]
fn a_shared_prefix_is_reused() {
    let _serial = serial();
    let system = "You are a geography teacher. ".repeat(20);
    let prompt = |q: &str| {
        let m = model();
        m.tokenize(
            &m.render_chat(&[
                ChatMessage {
                    role: "system".into(),
                    content: system.clone(),
                },
                ChatMessage {
                    role: "user".into(),
                    content: q.into(),
                },
            ])
            .unwrap(),
        )
    };
    let first = prompt("Where is Paris?");
    run(&first, &greedy(2));
    let before = model().stats().prefix_cache_hits;
    let mut g = model()
        .generate(&prompt("Where is Rome?"), &greedy(2), None)
        .unwrap();
    let cached = loop {
        match g.events.blocking_recv().unwrap() {
            Event::Done(d) => break d.cached_tokens,
            Event::Error(e) => panic!("{e}"),
            Event::Text { .. } => {}
        }
    };
    assert!(cached as usize >= 100, "{cached} cached of {}", first.len());
    assert!(model().stats().prefix_cache_hits - before >= u64::from(cached));
}

#[test]
fn json_schema_output_parses() {
    let _serial = serial();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    });
    let params = SamplingParams {
        constraint: Constraint::JsonSchema(schema),
        ..greedy(40)
    };
    let grammar = params.grammar().unwrap();
    let g = model()
        .generate(
            &chat("Give the largest city of Japan and its population as JSON."),
            &params,
            grammar.as_deref(),
        )
        .unwrap();
    let (text, finish, _) = collect(g);
    assert_eq!(finish, Finish::Stop, "{text}");
    let value: serde_json::Value = serde_json::from_str(&text).expect(&text);
    assert!(
        value["city"].is_string() && value["population"].is_i64(),
        "{value}"
    );
}

#[test]
fn a_prompt_over_the_context_is_refused_with_the_counts() {
    let _serial = serial();
    let long = vec![1; 600];
    let e = model().generate(&long, &greedy(4), None).unwrap_err();
    assert!(matches!(
        e,
        LlmError::ContextLength {
            limit: 512,
            prompt: 600,
            completion: 4
        }
    ));
    assert!(e.to_string().contains("600 in the prompt"), "{e}");
}

#[test]
fn validation_reads_the_real_file_and_refuses_a_cut_one() {
    let _serial = serial();
    let info = infergate_llm::validate(&model_path()).unwrap();
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.context_length, Some(8192));
    assert!(info.chat_template.is_some());
    assert_eq!(info.kv_bytes_per_token(), 2 * 2 * 30 * 3 * 64);
    let bytes = std::fs::read(model_path()).unwrap();
    let cut = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cut.path(), &bytes[..bytes.len() / 2]).unwrap();
    let e = infergate_llm::validate(cut.path()).unwrap_err().to_string();
    assert!(e.contains("truncated"), "{e}");
}

#[test]
fn a_higher_priority_request_is_admitted_first() {
    let _serial = serial();
    // Sequences that cannot end by themselves (a grammar with no end, a long budget) hold the
    // 4 slots until the test drops them, so which request gets a freed slot is deterministic.
    let endless = r#"root ::= "ab" root"#;
    let prompt = chat("Write the letters a and b.");
    let start = |priority, max_tokens| {
        let params = SamplingParams {
            priority,
            ..greedy(max_tokens)
        };
        model().generate(&prompt, &params, Some(endless)).unwrap()
    };
    let mut blockers: Vec<Generation> = (0..4).map(|_| start(0, 400)).collect();
    wait_for("4 running", |s| s.running == 4);
    let mut low = start(5, 6);
    let mut high = start(-5, 400);
    wait_for("2 waiting", |s| s.waiting == 2);
    // One slot frees: the request queued last, but with the higher priority, takes it.
    drop(blockers.pop());
    assert!(matches!(
        high.events.blocking_recv(),
        Some(Event::Text { .. })
    ));
    assert_eq!(model().stats().waiting, 1);
    assert!(
        low.events.try_recv().is_err(),
        "the low-priority request started first"
    );
    drop(blockers);
    drop(high);
    let (text, finish, tokens) = collect(low);
    let alternating = "ab".chars().cycle();
    assert!(
        text.len() >= 6 && text.chars().zip(alternating).all(|(c, want)| c == want),
        "{text:?}"
    );
    assert_eq!((finish, tokens), (Finish::Length, 6));
}

#[test]
fn n_choices_compute_the_prompt_once() {
    let _serial = serial();
    let prompt = chat("What is the capital city of France?");
    let (alone, _, _) = run(&prompt, &greedy(8));
    let before = model().stats();
    let choices: Vec<String> = model()
        .generate_n(&prompt, &greedy(8), None, 3)
        .unwrap()
        .into_iter()
        .map(|g| collect(g).0)
        .collect();
    let after = model().stats();
    // Looked up in the prefix cache and counted once: the other two copied its KV.
    assert_eq!(
        after.prefix_cache_queries - before.prefix_cache_queries,
        prompt.len() as u64
    );
    assert_eq!(
        after.prompt_tokens - before.prompt_tokens,
        prompt.len() as u64
    );
    // Greedy choices over the same copied KV decode identically, as the prompt run alone does
    // (their first token comes from the very same logits).
    assert!(choices.iter().all(|c| c == &choices[0]), "{choices:?}");
    assert!(!choices[0].is_empty());
    assert_eq!(
        choices[0].split_whitespace().next(),
        alone.split_whitespace().next()
    );
}

/// A generation's tokens with their log probabilities (bit for bit), and how it ended.
fn logprobs(g: Generation) -> (Vec<(String, u32)>, Finish) {
    let (tokens, done) = crate::support::with_logprobs(g);
    (tokens, done.finish)
}

#[test]
fn a_seeded_request_repeats_exactly_from_the_prefix_cache() {
    let _serial = serial();
    // The second run finds the whole prompt in the cache and the choices' KV where the first
    // run's left it; it must still compute the very same logits (a quantised model turns the
    // smallest difference into other tokens at temperature 1).
    let prompt = chat("Tell me a fact about cats.");
    for seed in [1, 3] {
        let params = SamplingParams {
            temperature: 1.0,
            seed: Some(seed),
            max_tokens: 24,
            logprobs: Some(1),
            ..SamplingParams::default()
        };
        let run = || -> Vec<_> {
            model()
                .generate_n(&prompt, &params, None, 2)
                .unwrap()
                .into_iter()
                .map(logprobs)
                .collect()
        };
        let first = run();
        let again = run();
        assert_eq!(first, again, "seed {seed}");
        assert_ne!(first[0], first[1], "choices are seeded apart");
    }
}

#[test]
fn a_repeat_recomputes_its_last_rows_on_the_path_they_took() {
    let _serial = serial();
    // A model of its own, whose 256-token steps compute a prompt of up to 256 tokens in one
    // chunk. Each prompt is computed whole from position 0 first; the repeat finds it whole in
    // the cache and recomputes only its last rows, on the path (see the scheduler's `RowPath`)
    // its last token took: 2 of a 40-row chunk, 64 of a 200-row chunk (tiled attention), the
    // last token alone after 256 + 1. Equal log probabilities, bit for bit, show that the rows
    // kept and the rows recomputed in a smaller chunk are those of the first run; recomputing
    // the last token alone after the 200-row chunk gives other bits and another text.
    let model = LlmModel::load(
        &model_path(),
        LlmConfig {
            max_sequences: 2,
            context_per_sequence: 512,
            batch_tokens: 256,
            threads: 1,
            queue_capacity: 8,
            ..LlmConfig::default()
        },
    )
    .expect("the demo model loads");
    let text = "Once upon a time a fox lived by the river and ran to the hill every morning. ";
    let tokens = model.tokenize(&text.repeat(30));
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(5),
        max_tokens: 8,
        logprobs: Some(1),
        ..SamplingParams::default()
    };
    // Each case starts with another token, so none finds another's prefix.
    for (skip, len, recomputed) in [(0, 40, 2), (1, 200, 64), (2, 257, 1)] {
        assert!(tokens.len() >= skip + len, "{} tokens", tokens.len());
        let prompt = &tokens[skip..skip + len];
        let first = logprobs(model.generate(prompt, &params, None).unwrap());
        let before = model.stats().prefix_cache_hits;
        let again = logprobs(model.generate(prompt, &params, None).unwrap());
        let hits = model.stats().prefix_cache_hits - before;
        assert_eq!(first, again, "{len} tokens");
        assert_eq!(hits, (len - recomputed) as u64, "{len} tokens");
    }
}
