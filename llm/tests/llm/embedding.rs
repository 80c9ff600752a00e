//! Embeddings from the demo GGUF (`$INFERGATE_MODELS/smollm2.gguf`) beside its chat context:
//! shapes, normalisation, batching, the pooling types, and the vectors against llama.cpp's own
//! embedding of the same text (a context made here through `llama-cpp-2`, one input alone, as
//! llama-server `--embedding --pooling mean` computes it).

use infergate_llm::{EmbedInput, Embedder, EmbeddingConfig, Pooling};
use llama_cpp_2::context::params::{LlamaContextParams, LlamaPoolingType};
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use std::num::NonZeroU32;
use std::sync::OnceLock;
use crate::support::{model, model_path, serial};

const TEXTS: [&str; 4] = [
    "The cat sat on the mat.",
    "A dog slept near the window while the sun was warm.",
    "Quarterly revenue grew by four percent.",
    "Paris is the capital of France.",
];

fn embedder(pooling: Pooling) -> Embedder {
    model()
        .embedder(EmbeddingConfig {
            pooling: Some(pooling),
            max_input_tokens: 128,
            batch_tokens: 256,
            batch_inputs: 4,
            threads: 1,
            ..EmbeddingConfig::default()
        })
        .expect("an embedding context")
}

fn mean() -> &'static Embedder {
    static E: OnceLock<Embedder> = OnceLock::new();
    E.get_or_init(|| embedder(Pooling::Mean))
}

fn texts(t: &[&str]) -> Vec<EmbedInput> {
    t.iter().map(|s| EmbedInput::Text(s.to_string())).collect()
}

fn embed(e: &Embedder, t: &[&str]) -> Vec<Vec<f32>> {
    e.embed(&texts(t)).unwrap().wait_blocking().unwrap().vectors
}

/// llama.cpp's embedding of one text, through llama-cpp-2 directly, L2-normalised.
fn reference(text: &str, pooling: LlamaPoolingType) -> Vec<f32> {
    static MODEL: OnceLock<LlamaModel> = OnceLock::new();
    let backend = infergate_llm::backend().unwrap();
    let m = MODEL.get_or_init(|| {
        LlamaModel::load_from_file(backend, model_path(), &LlamaModelParams::default()).unwrap()
    });
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(256))
        .with_n_batch(256)
        .with_n_ubatch(256)
        .with_n_threads(1)
        .with_n_threads_batch(1)
        .with_embeddings(true)
        .with_pooling_type(pooling);
    let mut ctx = m.new_context(backend, params).unwrap();
    let tokens = m.vocab().tokenize(text.as_bytes(), true, true);
    let mut batch = LlamaBatch::new(256, 1);
    batch.add_sequence(&tokens, 0, true).unwrap();
    ctx.decode(&mut batch).unwrap();
    infergate_llm::embedding::normalized(ctx.embeddings_seq_ith(0).unwrap())
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn vectors_have_the_models_width_and_unit_length() {
    let _serial = serial();
    let e = mean();
    assert_eq!(e.dimensions(), 576);
    assert_eq!(e.pooling(), Pooling::Mean);
    let result = e.embed(&texts(&TEXTS)).unwrap().wait_blocking().unwrap();
    assert_eq!(result.vectors.len(), TEXTS.len());
    assert!(result.prompt_tokens as usize >= TEXTS.len() * 5);
    for v in &result.vectors {
        assert_eq!(v.len(), 576);
        let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    // Related sentences are closer than unrelated ones.
    let v = &result.vectors;
    assert!(cosine(&v[0], &v[1]) > cosine(&v[0], &v[2]));
    // The context's memory is reported: at least its KV cache (256 cells).
    assert!(
        e.memory_bytes() >= 256 * 2 * 2 * 30 * 3 * 64,
        "{}",
        e.memory_bytes()
    );
    eprintln!("embedding context: {} bytes", e.memory_bytes());
}

#[test]
fn vectors_equal_llama_cpps_own_within_rounding() {
    let _serial = serial();
    // Batched four at a time here, one alone in the reference: llama.cpp's sums run in
    // another order for another batch shape, so equal up to rounding.
    for (pooling, llama) in [
        (Pooling::Mean, LlamaPoolingType::Mean),
        (Pooling::Last, LlamaPoolingType::Last),
        (Pooling::Cls, LlamaPoolingType::Cls),
    ] {
        let e = if pooling == Pooling::Mean {
            mean().clone()
        } else {
            embedder(pooling)
        };
        let ours = embed(&e, &TEXTS);
        for (text, v) in TEXTS.iter().zip(&ours) {
            let r = reference(text, llama);
            let (c, d) = (cosine(v, &r), max_diff(v, &r));
            assert!(
                c > 0.9999 && d < 0.01,
                "{pooling:?} {text}: cosine {c}, max diff {d}"
            );
            eprintln!("{pooling:?} {text:?}: cosine {c:.7}, largest difference {d:e}");
        }
    }
}

#[test]
fn batching_gives_each_input_its_own_vector() {
    let _serial = serial();
    let e = mean();
    let together = embed(e, &TEXTS);
    // More inputs than one batch holds (4): split over batches, same vectors.
    let many: Vec<&str> = TEXTS.iter().chain(TEXTS.iter()).copied().collect();
    let split = embed(e, &many);
    assert_eq!(split.len(), 8);
    for (i, text) in TEXTS.iter().enumerate() {
        let alone = &embed(e, &[text])[0];
        assert!(cosine(alone, &together[i]) > 0.9999, "{text}");
        assert!(max_diff(&split[i], &split[i + 4]) < 1e-6, "{text}");
    }
    // Token ids work as text does.
    let ids = model().tokenize(TEXTS[3]);
    let by_ids = e
        .embed(&[EmbedInput::Tokens(ids)])
        .unwrap()
        .wait_blocking()
        .unwrap();
    assert!(cosine(&by_ids.vectors[0], &together[3]) > 0.9999);
}

#[test]
fn bad_inputs_and_dimensions_are_refused() {
    let _serial = serial();
    let e = mean();
    let error = |inputs: &[EmbedInput]| e.embed(inputs).unwrap_err().to_string();
    assert!(error(&[]).contains("input"));
    assert!(error(&texts(&["fine", ""])).contains("input[1]: must not be empty"));
    let long = "word ".repeat(300);
    assert!(error(&texts(&[&long])).contains("at most 128 tokens"));
    assert!(error(&[EmbedInput::Tokens(vec![1, -4])]).contains("token id -4"));
    assert!(e.check_dimensions(Some(576)).is_ok());
    assert!(e.check_dimensions(None).is_ok());
    let d = e.check_dimensions(Some(256)).unwrap_err().to_string();
    assert!(d.contains("dimensions") && d.contains("576"), "{d}");
    let bad = EmbeddingConfig {
        batch_inputs: 0,
        ..EmbeddingConfig::default()
    };
    assert!(model().embedder(bad).is_err());
}
