//! Comparing two sentences with an embedding pipeline: both go to `POST /v1/embeddings` in one
//! request and the page shows the cosine similarity of the two vectors.

use super::{now, origin};
use crate::api::{self, ApiError, Body};
use crate::format;
use crate::types::{Embedding, EmbeddingList, EmbeddingVector};
use crate::widgets::{CopyButton, ErrorBox};
use leptos::prelude::*;
use serde_json::{json, Value};

fn cosine(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.is_empty() {
        return None;
    }
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let denominator = norm(a) * norm(b);
    (denominator > 0.0).then(|| dot / denominator)
}

/// A vector's values; none when it came as base64 (this page asks for numbers).
fn vector(item: &Embedding) -> &[f64] {
    match &item.embedding {
        EmbeddingVector::Float(values) => values,
        EmbeddingVector::Base64(_) => &[],
    }
}

/// The response as the page shows it: each vector cut to its first values and a note of how
/// many more (which the answer's type cannot hold, so this edits its JSON).
fn abbreviated(v: &Value) -> Value {
    let mut v = v.clone();
    for item in v["data"].as_array_mut().into_iter().flatten() {
        if let Some(e) = item["embedding"].as_array_mut() {
            let n = e.len();
            if n > 6 {
                e.truncate(6);
                e.push(json!(format!("… {} more values", n - 6)));
            }
        }
    }
    v
}

/// How people read a similarity of sentence embeddings (MiniLM-style models).
fn reading(similarity: f64) -> &'static str {
    match similarity {
        s if s >= 0.75 => "very similar",
        s if s >= 0.5 => "related",
        s if s >= 0.25 => "loosely related",
        _ => "unrelated",
    }
}

#[derive(Clone)]
struct Comparison {
    similarity: f64,
    dimensions: usize,
    client_ms: f64,
    request: String,
    response: String,
}

#[component]
pub fn EmbeddingCompare(pipeline: String) -> impl IntoView {
    let first = RwSignal::new(String::from("A man is playing a guitar on stage."));
    let second = RwSignal::new(String::from(
        "Someone performs music with a guitar at a concert.",
    ));
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let result = RwSignal::new(None::<Comparison>);
    let curl = RwSignal::new(String::new());
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        let (a, b) = (first.get_untracked(), second.get_untracked());
        if a.trim().is_empty() || b.trim().is_empty() {
            error.set(Some(ApiError::client("Type two sentences to compare.")));
            return;
        }
        let body = json!({"model": pipeline, "input": [a, b]});
        let request = serde_json::to_string_pretty(&body).unwrap_or_default();
        let quoted = body.to_string().replace('\'', r"'\''");
        curl.set(format!(
            "curl --cacert data/tls/cert.pem {}/v1/embeddings \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d '{quoted}'",
            origin()
        ));
        busy.set(true);
        leptos::task::spawn_local(async move {
            let start = now();
            let answer = api::call("POST", "/v1/embeddings", Body::Json(body)).await;
            let client_ms = now() - start;
            busy.set(false);
            match answer {
                Ok(v) => {
                    let list = serde_json::from_value::<EmbeddingList>(v.clone()).ok();
                    let (va, vb) = match list.as_ref().map(|l| l.data.as_slice()) {
                        Some([x, y]) => (vector(x), vector(y)),
                        _ => (&[][..], &[][..]),
                    };
                    match cosine(va, vb) {
                        Some(similarity) => result.set(Some(Comparison {
                            similarity,
                            dimensions: va.len(),
                            client_ms,
                            request,
                            response: serde_json::to_string_pretty(&abbreviated(&v))
                                .unwrap_or_default(),
                        })),
                        None => error.set(Some(ApiError::client(
                            "the answer does not hold two vectors of the same length",
                        ))),
                    }
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <form class="playground" on:submit=submit id="compare-form">
            <section class="card">
                <div class="card-head">
                    <h2>"Compare two sentences"</h2>
                    <span class="muted small">"POST /v1/embeddings · cosine similarity"</span>
                </div>
                <div class="form-grid">
                    <div class="field">
                        <label for="embed-a">"First sentence"</label>
                        <textarea id="embed-a" rows="2" prop:value=move || first.get() on:input=move |ev| first.set(event_target_value(&ev))></textarea>
                    </div>
                    <div class="field">
                        <label for="embed-b">"Second sentence"</label>
                        <textarea id="embed-b" rows="2" prop:value=move || second.get() on:input=move |ev| second.set(event_target_value(&ev))></textarea>
                    </div>
                </div>
                <ErrorBox error=error/>
                <div class="form-actions">
                    <button class="btn primary" type="submit" id="compare" disabled=move || busy.get()>
                        {move || if busy.get() { "Embedding…" } else { "Compare" }}
                    </button>
                </div>
            </section>
            {move || result.get().map(|c| {
                let pct = (c.similarity.clamp(0.0, 1.0) * 100.0).round();
                view! {
                    <section class="card result" id="compare-result">
                        <div class="card-head">
                            <h2>"Similarity"</h2>
                            <span class="latency">{format!("{} round trip · {} dimensions", format::ms(c.client_ms), c.dimensions)}</span>
                        </div>
                        <div class="similarity">
                            <strong id="similarity">{format!("{:.3}", c.similarity)}</strong>
                            <span class="similarity-bar"><span style:width=format!("{pct}%")></span></span>
                            <span class="muted">{reading(c.similarity)}</span>
                        </div>
                        <details class="raw">
                            <summary>"Request"</summary>
                            <pre>{c.request.clone()}</pre>
                        </details>
                        <details class="raw">
                            <summary>"Response"</summary>
                            <pre>{c.response.clone()}</pre>
                        </details>
                        <div class="curl">
                            <div class="card-head"><h3>"curl"</h3><CopyButton text=Signal::derive(move || curl.get()) id="copy-compare-curl"/></div>
                            <pre>{move || curl.get()}</pre>
                        </div>
                    </section>
                }
            })}
        </form>
    }
}
