//! Running a pipeline from the playground: an image file (OCR, classification) or a text goes
//! as the raw body of `POST /api/pipelines/{name}/run`; the answer is shown as recognised text,
//! labels with scores, or tensors, with the stage latencies from the `Server-Timing` header.

use super::{now, origin, outcome_badge, outputs_view, stages_view, Exchange};
use crate::api::{self, ApiError, Body};
use crate::format;
use crate::tensor;
use crate::types::{DetectedRegions, PipelineView, PluginDescription, PluginView, StatsList};
use crate::widgets::ErrorBox;
use leptos::html;
use leptos::prelude::*;
use serde_json::Value;

/// What a pipeline's first pre-plugin reads, from the plugins' own descriptions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Input {
    Image,
    Text,
    /// No pre-plugin takes a raw body: the pipeline runs on tensors over KServe only.
    Tensors,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PipelineInfo {
    pub name: String,
    pub model: String,
    /// "image-decode → ocr-rec → ctc-decode"
    pub chain: String,
    pub input: Input,
    /// The last post-plugin produces an embedding vector (served by /v1/embeddings too).
    pub embeds: bool,
}

impl PipelineInfo {
    /// From one entry of `GET /api/pipelines` and the list of `GET /api/plugins`.
    pub fn new(p: &PipelineView, plugins: &[PluginView]) -> PipelineInfo {
        let spec = &p.spec;
        // `name@version` pins a version; the description is the same kind of thing either way.
        let described = |reference: &str| -> Option<&PluginDescription> {
            let plugin = reference.split('@').next().unwrap_or(reference);
            plugins
                .iter()
                .find(|p| p.name == plugin)
                .map(|p| &p.description)
        };
        let input = match spec.pre.first() {
            None => Input::Tensors,
            Some(first) => {
                let image = described(first)
                    .is_some_and(|d| d.consumes.iter().any(|c| c.starts_with("image/")));
                if image {
                    Input::Image
                } else {
                    Input::Text
                }
            }
        };
        let embeds = spec
            .post
            .last()
            .and_then(|last| described(last))
            .is_some_and(|d| d.produces.iter().any(|p| p.starts_with("embedding")));
        let detect = spec.detect.iter().flat_map(|d| d.models());
        let chain = spec
            .pre
            .iter()
            .map(String::as_str)
            .chain(detect)
            .chain(std::iter::once(spec.model.as_str()))
            .chain(spec.post.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" → ");
        PipelineInfo {
            name: p.name.clone(),
            model: spec.model.clone(),
            chain,
            input,
            embeds,
        }
    }
}

/// What the last run sent and got.
#[derive(Clone)]
struct PipelineRecord {
    request_text: String,
    curl: String,
    answer: Option<api::RawAnswer>,
    client_ms: f64,
    stages: Vec<(&'static str, f64)>,
    failure: Option<ApiError>,
    /// The image sent (an object URL), to draw text regions over.
    image: Option<String>,
}

/// The model's queue time over one request: the difference of its cumulative counters, when
/// exactly one request of that model completed in between (else another client's requests
/// would be mixed in and nothing is shown).
async fn queue_ms(model: &str) -> Option<(u64, u64)> {
    let path = format!("/v2/models/{}/stats", api::seg(model));
    let list = api::get::<StatsList>(&path).await.ok()?;
    Some(list.model_stats.iter().fold((0, 0), |(n, ns), s| {
        (
            n + s.inference_stats.success.count,
            ns + s.inference_stats.queue.ns,
        )
    }))
}

/// Pre-plugins, queue, model, post-plugins: the server's `Server-Timing` stages, with the
/// queue wait split off the model stage when the counters allow it.
fn stages(timing: &[(String, f64)], queue: Option<f64>) -> Vec<(&'static str, f64)> {
    let get = |name: &str| timing.iter().find(|(n, _)| n == name).map(|(_, d)| *d);
    let mut out = Vec::new();
    if let Some(pre) = get("pre") {
        out.push(("Pre-plugins", pre));
    }
    if let Some(model) = get("model") {
        match queue {
            Some(q) if q <= model => {
                out.push(("Queue", q));
                out.push(("Model", model - q));
            }
            _ => out.push(("Model (with queue)", model)),
        }
    }
    if let Some(post) = get("post") {
        out.push(("Post-plugins", post));
    }
    if !out.is_empty() {
        out.push(("Server total", timing.iter().map(|(_, d)| d).sum()));
    }
    out
}

/// A string as one shell word.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[component]
pub fn PipelineRun(pipeline: PipelineInfo) -> impl IntoView {
    let file: StoredValue<Option<web_sys::File>, LocalStorage> = StoredValue::new_local(None);
    let file_label = RwSignal::new(None::<String>);
    let preview = RwSignal::new(None::<String>);
    let text = RwSignal::new(String::from("A man is playing a guitar on stage."));
    let dragging = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let run = RwSignal::new(None::<PipelineRecord>);
    let file_input = NodeRef::<html::Input>::new();
    let input = pipeline.input;

    let take = move |f: web_sys::File| {
        error.set(None);
        file_label.set(Some(format!(
            "{} ({})",
            f.name(),
            format::bytes(f.size() as u64)
        )));
        if let Some(old) = preview.get_untracked() {
            let _ = web_sys::Url::revoke_object_url(&old);
        }
        preview.set(web_sys::Url::create_object_url_with_blob(&f).ok());
        file.set_value(Some(f));
    };
    on_cleanup(move || {
        if let Some(url) = preview.try_get_untracked().flatten() {
            let _ = web_sys::Url::revoke_object_url(&url);
        }
    });

    let name = pipeline.name.clone();
    let model = pipeline.model.clone();
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        let path = format!("/api/pipelines/{}/run", api::seg(&name));
        let url = format!("{}{path}", origin());
        let (body, request_text, curl) = match input {
            Input::Image => {
                let Some(f) = file.get_value() else {
                    error.set(Some(ApiError::client("Choose or drop an image first.")));
                    return;
                };
                let content_type = if f.type_().is_empty() {
                    "application/octet-stream".to_string()
                } else {
                    f.type_()
                };
                let request_text = format!(
                    "POST {path}\nContent-Type: {content_type}\n\n[{} bytes: the file {}]",
                    f.size() as u64,
                    f.name()
                );
                let curl = format!(
                    "curl --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: {content_type}' \\\n  --data-binary @{}",
                    shell_quote(&f.name())
                );
                let blob: web_sys::Blob = f.into();
                (Body::Raw { content_type, blob }, request_text, curl)
            }
            Input::Text | Input::Tensors => {
                let t = text.get_untracked();
                if t.is_empty() {
                    error.set(Some(ApiError::client("Type a text to send.")));
                    return;
                }
                let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(&t));
                let options = web_sys::BlobPropertyBag::new();
                options.set_type("text/plain");
                let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options)
                else {
                    error.set(Some(ApiError::client(
                        "the browser could not hold the text",
                    )));
                    return;
                };
                let request_text = format!("POST {path}\nContent-Type: text/plain\n\n{t}");
                let curl = format!(
                    "curl --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: text/plain' \\\n  --data-binary {}",
                    shell_quote(&t)
                );
                (
                    Body::Raw {
                        content_type: "text/plain".into(),
                        blob,
                    },
                    request_text,
                    curl,
                )
            }
        };
        busy.set(true);
        run.set(None);
        let model = model.clone();
        let image = (input == Input::Image)
            .then(|| preview.get_untracked())
            .flatten();
        leptos::task::spawn_local(async move {
            let before = queue_ms(&model).await;
            let start = now();
            let result = api::call_raw("POST", &path, body).await;
            let client_ms = now() - start;
            let after = match result {
                Ok(_) => queue_ms(&model).await,
                Err(_) => None,
            };
            let queue = match (before, after) {
                (Some((n0, q0)), Some((n1, q1))) if n1 == n0 + 1 => {
                    Some(q1.saturating_sub(q0) as f64 / 1e6)
                }
                _ => None,
            };
            busy.set(false);
            match result {
                Ok(answer) => {
                    let timing = answer
                        .server_timing
                        .as_deref()
                        .map(api::server_timing)
                        .unwrap_or_default();
                    run.set(Some(PipelineRecord {
                        request_text,
                        curl,
                        stages: stages(&timing, queue),
                        answer: Some(answer),
                        client_ms,
                        failure: None,
                        image,
                    }));
                }
                Err(e) => {
                    run.set(Some(PipelineRecord {
                        request_text,
                        curl,
                        answer: None,
                        client_ms,
                        stages: Vec::new(),
                        failure: Some(e.clone()),
                        image,
                    }));
                    error.set(Some(e));
                }
            }
        });
    };

    let input_view = match input {
        Input::Image => view! {
            <label
                class="dropzone"
                class:dragging=move || dragging.get()
                for="pg-pipeline-file"
                on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
                on:dragleave=move |_| dragging.set(false)
                on:drop=move |ev: web_sys::DragEvent| {
                    ev.prevent_default();
                    dragging.set(false);
                    if let Some(f) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
                        take(f);
                    }
                }
            >
                {move || preview.get().map(|src| view! { <img class="preview" src=src alt="The chosen image"/> })}
                <span class="drop-text">{move || file_label.get().unwrap_or_else(|| "Drop an image here, or click to choose one".into())}</span>
                <span class="hint">"The file is sent as it is; the pipeline's plugins decode and resize it on the server."</span>
            </label>
            <input id="pg-pipeline-file" type="file" accept="image/*" class="visually-hidden" node_ref=file_input
                on:change=move |_| {
                    if let Some(f) = file_input.get().and_then(|i| i.files()).and_then(|f| f.get(0)) {
                        take(f);
                    }
                }/>
        }
        .into_any(),
        Input::Text | Input::Tensors => view! {
            <div class="field">
                <label for="pg-pipeline-text">"Text (sent as text/plain)"</label>
                <textarea id="pg-pipeline-text" rows="3" prop:value=move || text.get() on:input=move |ev| text.set(event_target_value(&ev))></textarea>
            </div>
        }
        .into_any(),
    };
    view! {
        <form class="playground" on:submit=submit id="pipeline-form">
            <section class="card">
                <div class="card-head">
                    <h2>"Input"</h2>
                    <span class="muted small">{pipeline.chain.clone()}</span>
                </div>
                {(input == Input::Tensors).then(|| view! {
                    <p class="notice">"This pipeline has no pre-plugin that reads a raw body; it runs on tensors at "<code>{format!("/v2/models/{}/infer", pipeline.name)}</code>"."</p>
                })}
                {input_view}
                <ErrorBox error=error/>
                <div class="form-actions">
                    <button class="btn primary" type="submit" id="pipeline-run" disabled=move || busy.get() || input == Input::Tensors>
                        {move || if busy.get() { "Running…" } else { "Run pipeline" }}
                    </button>
                    {move || busy.get().then(|| view! { <span class="progress-inline" role="status">"Waiting for the pipeline…"</span> })}
                </div>
            </section>
            {move || run.get().map(|r| view! { <PipelineResult r/> })}
        </form>
    }
}

/// The answer as people read it: recognised text, labels with scores, or tensors.
fn answer_view(answer: &api::RawAnswer, image: Option<String>) -> AnyView {
    let Ok(v) = serde_json::from_str::<Value>(&answer.text) else {
        return view! { <p class="muted">{format!("{} bytes of {}", answer.text.len(), answer.content_type)}</p> }.into_any();
    };
    if let Ok(detected) = serde_json::from_value::<DetectedRegions>(v.clone()) {
        return regions_view(&detected, image);
    }
    if let Some(texts) = v["texts"].as_array() {
        return view! {
            <div class="recognised" id="pipeline-text">
                {texts.iter().map(|t| view! {
                    <p class="recognised-line">
                        <strong>{t["text"].as_str().unwrap_or("").to_string()}</strong>
                        <span class="muted small">{t["confidence"].as_f64().map(|c| format!(" confidence {:.1}%", c * 100.0))}</span>
                    </p>
                }).collect_view()}
            </div>
        }
        .into_any();
    }
    if let Some(rows) = v["predictions"].as_array() {
        let first = rows
            .first()
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        return view! {
            <ol class="topk labels" id="pipeline-labels">
                {first.into_iter().map(|p| {
                    let prob = p["probability"].as_f64().unwrap_or(0.0);
                    view! {
                        <li>
                            <span class="topk-label" title=format!("class {}", p["index"])>{p["label"].as_str().unwrap_or("?").to_string()}</span>
                            <span class="topk-bar"><span style:width=format!("{:.1}%", prob * 100.0)></span></span>
                            <span class="topk-score">{format!("{:.1}%", prob * 100.0)}</span>
                        </li>
                    }
                }).collect_view()}
            </ol>
        }
        .into_any();
    }
    if let Some(outputs) = v["outputs"].as_array() {
        return view! {
            {outputs_view(outputs, &[])}
        }
        .into_any();
    }
    view! { <p class="muted">"The pipeline answered JSON; see the response below."</p> }.into_any()
}

/// What a region's own output says, as one line of text: the recognised text, else its JSON.
fn region_text(output: &Value) -> (String, Option<f64>) {
    match output["texts"].as_array().and_then(|t| t.first()) {
        Some(t) => (
            t["text"].as_str().unwrap_or("").trim().to_string(),
            t["confidence"].as_f64(),
        ),
        None => (output.to_string().chars().take(120).collect(), None),
    }
}

/// A detecting pipeline's answer: the image with each region's numbered box, and the regions'
/// text in reading order.
fn regions_view(detected: &DetectedRegions, image: Option<String>) -> AnyView {
    let regions = &detected.regions;
    let (width, height) = (detected.width.max(1) as f64, detected.height.max(1) as f64);
    // Labels in image pixels, so they stay legible whatever the image's size.
    let font = (width.max(height) / 24.0).clamp(10.0, 64.0);
    let boxes = regions.iter().enumerate().map(|(i, r)| {
        let [x1, y1, x2, y2] = r.bounds;
        let turned = r.angle == 180;
        view! {
            <g class="region" class:turned=turned>
                <rect x=format!("{x1:.1}") y=format!("{y1:.1}") width=format!("{:.1}", x2 - x1) height=format!("{:.1}", y2 - y1)></rect>
                <text x=format!("{:.1}", x2 + 2.0) y=format!("{:.1}", y1) dominant-baseline="hanging" font-size=format!("{font:.0}")>{(i + 1).to_string()}</text>
            </g>
        }
    }).collect_view();
    let lines = regions.iter().map(|r| {
        let (text, confidence) = region_text(&r.output);
        let angle = match (r.angle, r.angle_confidence) {
            (180, Some(c)) => Some(format!(" · turned 180° ({:.0}% sure)", c * 100.0)),
            _ => None,
        };
        let empty = text.is_empty();
        view! {
            <li class="recognised-line">
                <strong>{if empty { "(nothing read)".to_string() } else { text }}</strong>
                <span class="muted small">{confidence.map(|c| format!(" confidence {:.1}%", c * 100.0))}{angle}</span>
            </li>
        }
    }).collect_view();
    let summary = match regions.len() {
        0 => "No text found in the image.".to_string(),
        1 => "1 text region, read top to bottom and left to right.".to_string(),
        n => format!("{n} text regions, read top to bottom and left to right."),
    };
    view! {
        <div class="regions">
            {image.map(|src| view! {
                <svg class="region-overlay" id="pipeline-regions" viewBox=format!("0 0 {width} {height}") role="img"
                    aria-label=format!("The image with {} numbered text region boxes", regions.len())>
                    <image href=src x="0" y="0" width=width.to_string() height=height.to_string()></image>
                    {boxes}
                </svg>
            })}
            <div class="recognised">
                <p class="muted small">{summary}</p>
                <ol class="recognised-lines" id="pipeline-text">{lines}</ol>
            </div>
        </div>
    }
    .into_any()
}

#[component]
fn PipelineResult(r: PipelineRecord) -> impl IntoView {
    let response_text = r.answer.as_ref().map(|a| {
        serde_json::from_str::<Value>(&a.text)
            .map(|v| serde_json::to_string_pretty(&tensor::abbreviate(&v)).unwrap_or_default())
            .unwrap_or_else(|_| a.text.chars().take(2000).collect())
    });
    view! {
        <section class="card result" id="result">
            <div class="card-head">
                <h2>"Result"</h2>
                {outcome_badge(r.failure.as_ref(), r.client_ms)}
            </div>
            {r.failure.as_ref().map(|e| view! { <p class="error" role="alert">{e.describe()}</p> })}
            {(!r.stages.is_empty()).then(|| stages_view(&r.stages))}
            {r.answer.as_ref().map(|a| answer_view(a, r.image.clone()))}
            <Exchange request_text=r.request_text response_text curl=r.curl/>
        </section>
    }
}
