//! Playground: run a model or a pipeline from the browser. Tensor inputs get a form generated
//! from the model's signature; image inputs take a dropped image (resized and normalised here,
//! sent as binary FP32 NCHW); text-generation models stream tokens over SSE or WebSocket when
//! the server offers them; pipelines take an image or a text as their raw body
//! ([`pipeline`]), and embedding pipelines compare two sentences ([`compare`]). Shows the raw
//! request and response, a curl command with the key elided, and where the time went.

use crate::api::{self, ApiError, Body};
use crate::format;
use crate::session::{self, use_session};
use crate::tensor::{self, Preprocess, Scoring, Summary};
use crate::types::{
    ModelCardList, ModelList, ModelVersion, PipelineList, PluginList, StatsList, StreamEvent,
    TensorSpec, TextChoice,
};
use crate::widgets::{CopyButton, Empty, ErrorBox, PageHeader};
use leptos::html;
use leptos::prelude::*;
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

mod chat;
mod compare;
mod pipeline;

use chat::ChatRun;

use compare::EmbeddingCompare;
use pipeline::{PipelineInfo, PipelineRun};

fn origin() -> String {
    web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default()
}

fn now() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map(|p| p.now())
        .unwrap_or(0.0)
}

/// What the playground runs: a model version, or a pipeline (value `pipeline:NAME` in the
/// picker; names cannot contain ':').
#[derive(Clone, PartialEq)]
enum Target {
    Model(ModelVersion),
    Pipeline(PipelineInfo),
}

const PIPELINE_PREFIX: &str = "pipeline:";

#[component]
pub fn Playground() -> impl IntoView {
    let session = use_session();
    let models = RwSignal::new(None::<Vec<ModelVersion>>);
    let pipelines = RwSignal::new(Vec::<PipelineInfo>::new());
    let error = RwSignal::new(None::<ApiError>);
    let selected = RwSignal::new(String::new());
    // Text-generation models the OpenAI endpoint serves, and whether /v2/stream exists.
    let completions = RwSignal::new(Vec::<String>::new());
    let has_ws = RwSignal::new(false);
    let chat_mode = RwSignal::new(false);
    leptos::task::spawn_local(async move {
        // Pipelines first, so the picker is complete when it appears.
        if api::has_extension("infergate_pipelines").await {
            let plugins = api::get::<PluginList>("/api/plugins").await;
            match (api::get::<PipelineList>("/api/pipelines").await, plugins) {
                (Ok(list), Ok(plugins)) => pipelines.set(
                    list.pipelines
                        .iter()
                        .map(|p| PipelineInfo::new(p, &plugins.plugins))
                        .collect(),
                ),
                (Err(e), _) | (_, Err(e)) => error.set(Some(e)),
            }
        }
        match api::get::<ModelList>("/api/models").await {
            Ok(list) => {
                let mut latest: Vec<ModelVersion> = Vec::new();
                for m in list.models {
                    match latest.iter_mut().find(|l| l.name == m.name) {
                        Some(l) if l.version < m.version => *l = m,
                        Some(_) => {}
                        None => latest.push(m),
                    }
                }
                latest.sort_by(|a, b| a.name.cmp(&b.name));
                if let Some(first) = latest.first() {
                    selected.set(first.name.clone());
                } else if let Some(p) = pipelines.get_untracked().first() {
                    selected.set(format!("{PIPELINE_PREFIX}{}", p.name));
                }
                models.set(Some(latest));
            }
            Err(e) => error.set(Some(e)),
        }
        if let Ok(list) = api::get::<ModelCardList>("/v1/models").await {
            completions.set(list.data.into_iter().map(|m| m.id).collect());
        }
        has_ws.set(api::has_extension("infergate_websocket_stream").await);
    });
    let current = Memo::new(move |_| {
        let value = selected.get();
        match value.strip_prefix(PIPELINE_PREFIX) {
            Some(name) => pipelines.with(|p| {
                p.iter()
                    .find(|p| p.name == name)
                    .cloned()
                    .map(Target::Pipeline)
            }),
            None => models.with(|m| {
                m.as_ref()
                    .and_then(|m| m.iter().find(|v| v.name == value).cloned())
                    .map(Target::Model)
            }),
        }
    });
    view! {
        <PageHeader title="Playground" subtitle="Run a model or a pipeline from the browser; every request here is a plain API call you can copy."/>
        <ErrorBox error=error/>
        <Show when=move || !session.can("infer")>
            <p class="notice">"Your key lacks the " <code>"infer"</code> " scope: requests will be refused (403)."</p>
        </Show>
        {move || match models.get() {
            None => view! { <div class="loading">"Loading models and pipelines…"</div> }.into_any(),
            Some(list) if list.is_empty() && pipelines.with(Vec::is_empty) => view! {
                <Empty title="Nothing to run" detail="Upload a model on the Models page, or declare a pipeline on the Plugins & pipelines page."/>
            }.into_any(),
            Some(list) => {
                let option = move |value: String, label: String| {
                    let v = value.clone();
                    view! { <option value=value selected=move || selected.get() == v>{label}</option> }
                };
                view! {
                    <div class="card picker">
                        <label for="pg-model">"Model or pipeline"</label>
                        <select id="pg-model" on:change=move |ev| selected.set(event_target_value(&ev)) prop:value=move || selected.get()>
                            <optgroup label="Models">
                                {list.iter().map(|m| option(m.name.clone(), format!("{} (v{})", m.name, m.version))).collect_view()}
                            </optgroup>
                            {move || (!pipelines.with(Vec::is_empty)).then(|| view! {
                                <optgroup label="Pipelines">
                                    {pipelines.get().into_iter().map(|p| option(format!("{PIPELINE_PREFIX}{}", p.name), format!("{} · {}", p.name, p.chain))).collect_view()}
                                </optgroup>
                            })}
                        </select>
                    </div>
                }.into_any()
            }
        }}
        {move || current.get().map(|target| match target {
            Target::Pipeline(p) if p.embeds => view! {
                <EmbeddingCompare pipeline=p.name.clone()/>
                <PipelineRun pipeline=p/>
            }.into_any(),
            Target::Pipeline(p) => view! { <PipelineRun pipeline=p/> }.into_any(),
            Target::Model(m) if completions.with(|c| c.contains(&m.name)) => view! {
                <div class="segmented mode-switch" role="group" aria-label="Text generation mode">
                    <button type="button" id="mode-completion" class:active=move || !chat_mode.get() on:click=move |_| chat_mode.set(false)>"Completion"</button>
                    <button type="button" id="mode-chat" class:active=move || chat_mode.get() on:click=move |_| chat_mode.set(true)>"Chat"</button>
                </div>
                {move || if chat_mode.get() {
                    view! { <ChatRun model=m.name.clone()/> }.into_any()
                } else {
                    view! { <TextGeneration model=m.name.clone() has_ws=has_ws.get()/> }.into_any()
                }}
            }.into_any(),
            Target::Model(m) => {
                // Pipelines that run this model name what it computes (e.g. class labels).
                let users: Vec<String> = pipelines.with(|p| p.iter().filter(|p| p.model == m.name).map(|p| p.name.clone()).collect());
                view! { <TensorRun model=m pipelines=users/> }.into_any()
            }
        })}
    }
}

/// One input's form state.
#[derive(Clone)]
struct InputField {
    spec: TensorSpec,
    shape: RwSignal<String>,
    data: RwSignal<String>,
}

/// What the last run sent and got, for display.
#[derive(Clone, Default)]
struct RunRecord {
    request_text: String,
    curl: String,
    response: Option<Value>,
    client_ms: f64,
    stages: Option<Vec<(&'static str, f64)>>,
    /// Why the server refused or failed the request (shown instead of a success badge).
    failure: Option<ApiError>,
    /// Pipelines that run this model, named where raw outputs lack labels.
    pipelines: Vec<String>,
}

async fn stats_of(name: &str, version: u64) -> Option<crate::types::InferenceStats> {
    let path = format!("/v2/models/{}/versions/{version}/stats", api::seg(name));
    api::get::<StatsList>(&path)
        .await
        .ok()?
        .model_stats
        .into_iter()
        .next()
        .map(|s| s.inference_stats)
}

#[component]
fn TensorRun(model: ModelVersion, pipelines: Vec<String>) -> impl IntoView {
    let fields: Vec<InputField> = model
        .inputs
        .iter()
        .map(|spec| {
            let shape = tensor::default_shape(spec);
            let n = tensor::element_count(&shape);
            let data = if n <= 32 {
                tensor::zeros(&spec.datatype, n).to_string()
            } else {
                String::new()
            };
            InputField {
                spec: spec.clone(),
                shape: RwSignal::new(
                    shape
                        .iter()
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
                data: RwSignal::new(data),
            }
        })
        .collect();
    let image_spec = (model.inputs.len() == 1 && tensor::is_image_input(&model.inputs[0]))
        .then(|| model.inputs[0].clone());
    let use_image = RwSignal::new(image_spec.is_some());
    let preprocess = RwSignal::new(Preprocess::for_model(&model.name));
    let image: StoredValue<Option<(Vec<f32>, u32, u32)>, LocalStorage> =
        StoredValue::new_local(None);
    let image_label = RwSignal::new(None::<String>);
    let canvas = NodeRef::<html::Canvas>::new();
    let dragging = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let run = RwSignal::new(None::<RunRecord>);
    let name = model.name.clone();
    let version = model.version;

    let take_file = {
        let image_spec = image_spec.clone();
        move |file: web_sys::File| {
            let Some(spec) = image_spec.clone() else {
                return;
            };
            let Some(canvas) = canvas.get() else { return };
            error.set(None);
            leptos::task::spawn_local(async move {
                match tensor::image_tensor(&file, &spec, preprocess.get_untracked(), &canvas).await
                {
                    Ok((data, h, w)) => {
                        image_label.set(Some(format!(
                            "{} → {w}×{h}, {}",
                            file.name(),
                            preprocess.get_untracked().label()
                        )));
                        image.set_value(Some((data, h, w)));
                    }
                    Err(e) => error.set(Some(ApiError::client(e))),
                }
            });
        }
    };
    let file_input = NodeRef::<html::Input>::new();

    let submit = {
        let name = name.clone();
        let fields = fields.clone();
        let image_spec = image_spec.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            error.set(None);
            let path = format!("/v2/models/{}/infer", api::seg(&name));
            let url = format!("{}{path}", origin());
            let (body, request_text, curl) = if let (true, Some(spec)) =
                (use_image.get_untracked(), image_spec.clone())
            {
                let Some((data, h, w)) = image.get_value() else {
                    error.set(Some(ApiError::client(
                        "Drop an image first (or switch to JSON input).",
                    )));
                    return;
                };
                let mut bytes: Vec<u8> = Vec::with_capacity(data.len() * 4);
                for v in &data {
                    bytes.extend_from_slice(&v.to_le_bytes());
                }
                let header = json!({"inputs": [{"name": spec.name, "shape": [1, 3, h, w], "datatype": "FP32",
                    "parameters": {"binary_data_size": bytes.len()}}]});
                let header_text = header.to_string();
                let header_len = header_text.len();
                let request_text = format!(
                    "{}\n\n[{} bytes of FP32 NCHW pixel data follow the JSON header]",
                    serde_json::to_string_pretty(&header).unwrap_or_default(),
                    bytes.len()
                );
                let curl = format!(
                    "# request.bin = the JSON header ({header_len} bytes) followed by the raw tensor\ncurl --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H \"Inference-Header-Content-Length: {header_len}\" \\\n  --data-binary @request.bin"
                );
                let mut all = header_text.into_bytes();
                all.extend_from_slice(&bytes);
                (
                    Body::Binary {
                        header_len,
                        bytes: all,
                    },
                    request_text,
                    curl,
                )
            } else {
                let mut inputs = Vec::new();
                for f in &fields {
                    let shape = match tensor::parse_shape(&f.shape.get_untracked()) {
                        Ok(s) => s,
                        Err(e) => {
                            error.set(Some(ApiError::client(format!(
                                "input '{}': shape: {e}",
                                f.spec.name
                            ))));
                            return;
                        }
                    };
                    match tensor::input_json(&f.spec, &shape, &f.data.get_untracked()) {
                        Ok(v) => inputs.push(v),
                        Err(e) => {
                            error.set(Some(ApiError::client(e)));
                            return;
                        }
                    }
                }
                let body = json!({ "inputs": inputs });
                let compact = body.to_string();
                let curl = if compact.len() <= 1500 {
                    format!("curl --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d '{compact}'")
                } else {
                    format!("# request.json = the request shown above, in full\ncurl --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d @request.json")
                };
                let shown =
                    serde_json::to_string_pretty(&tensor::abbreviate(&body)).unwrap_or_default();
                (Body::Json(body), shown, curl)
            };
            busy.set(true);
            let name = name.clone();
            let pipelines = pipelines.clone();
            leptos::task::spawn_local(async move {
                let before = stats_of(&name, version).await;
                let start = now();
                let result = api::call("POST", &path, body).await;
                let client_ms = now() - start;
                busy.set(false);
                match result {
                    Ok(response) => {
                        let after = stats_of(&name, version).await;
                        let stages = match (before, after) {
                            (Some(b), Some(a)) if a.success.count == b.success.count + 1 => {
                                let d = |x: crate::types::StatDuration, y: crate::types::StatDuration| (x.ns.saturating_sub(y.ns)) as f64 / 1e6;
                                Some(vec![
                                    ("Queue", d(a.queue, b.queue)),
                                    ("Input decode", d(a.compute_input, b.compute_input)),
                                    ("Model", d(a.compute_infer, b.compute_infer)),
                                    ("Output encode", d(a.compute_output, b.compute_output)),
                                    ("Server total", d(a.success, b.success)),
                                ])
                            }
                            _ => None,
                        };
                        run.set(Some(RunRecord {
                            request_text,
                            curl,
                            response: Some(response),
                            client_ms,
                            stages,
                            failure: None,
                            pipelines,
                        }));
                    }
                    Err(e) => {
                        run.set(Some(RunRecord {
                            request_text,
                            curl,
                            response: None,
                            client_ms,
                            stages: None,
                            failure: Some(e.clone()),
                            pipelines,
                        }));
                        error.set(Some(e));
                    }
                }
            });
        }
    };

    let field_views = fields
        .iter()
        .map(|f| {
            let id = format!("pg-in-{}", f.spec.name);
            let sid = format!("{id}-shape");
            let (shape, data) = (f.shape, f.data);
            view! {
                <div class="input-field">
                    <div class="input-head">
                        <code>{f.spec.name.clone()}</code>
                        <span class="tensor-type">{f.spec.datatype.clone()}</span>
                        <span class="tensor-shape">{crate::types::shape_text(&f.spec)}</span>
                    </div>
                    <div class="form-grid">
                        <div class="field">
                            <label for=sid.clone()>"Shape"</label>
                            <input id=sid class="shape-input" prop:value=move || shape.get() on:input=move |ev| shape.set(event_target_value(&ev))/>
                        </div>
                        <div class="field span2">
                            <label for=id.clone()>"Data (JSON array, flat or nested; empty sends zeros)"</label>
                            <textarea id=id class="data-input" rows="3" spellcheck="false" prop:value=move || data.get() on:input=move |ev| data.set(event_target_value(&ev))></textarea>
                        </div>
                    </div>
                </div>
            }
        })
        .collect_view();

    let take_drop = take_file.clone();
    let take_pick = take_file.clone();
    let has_image_input = image_spec.is_some();
    let image_hint = image_spec
        .as_ref()
        .map(|s| {
            format!(
                "Input '{}' {}: the image is resized here to fit.",
                s.name,
                crate::types::shape_text(s)
            )
        })
        .unwrap_or_default();
    view! {
        <form class="playground" on:submit=submit id="playground-form">
            <section class="card">
                <div class="card-head">
                    <h2>"Input"</h2>
                    {has_image_input.then(|| view! {
                        <div class="segmented" role="group" aria-label="Input mode">
                            <button type="button" class:active=move || use_image.get() on:click=move |_| use_image.set(true)>"Image"</button>
                            <button type="button" class:active=move || !use_image.get() on:click=move |_| use_image.set(false)>"JSON"</button>
                        </div>
                    })}
                </div>
                <div class="image-input" class:hidden=move || !use_image.get()>
                    <div class="field">
                        <label for="pg-pre">"Preprocessing"</label>
                        <select id="pg-pre" on:change=move |ev| preprocess.set(if event_target_value(&ev) == "paddle" { Preprocess::Paddle } else { Preprocess::Imagenet })>
                            <option value="imagenet" selected=move || preprocess.get() == Preprocess::Imagenet>{Preprocess::Imagenet.label()}</option>
                            <option value="paddle" selected=move || preprocess.get() == Preprocess::Paddle>{Preprocess::Paddle.label()}</option>
                        </select>
                    </div>
                    <label
                        class="dropzone"
                        class:dragging=move || dragging.get()
                        for="pg-image"
                        on:dragover=move |ev: web_sys::DragEvent| { ev.prevent_default(); dragging.set(true); }
                        on:dragleave=move |_| dragging.set(false)
                        on:drop=move |ev: web_sys::DragEvent| {
                            ev.prevent_default();
                            dragging.set(false);
                            if let Some(f) = ev.data_transfer().and_then(|d| d.files()).and_then(|f| f.get(0)) {
                                take_drop(f);
                            }
                        }
                    >
                        <canvas node_ref=canvas class="preview" class:hidden=move || image_label.get().is_none()></canvas>
                        <span class="drop-text">{move || image_label.get().unwrap_or_else(|| "Drop an image here, or click to choose one".into())}</span>
                        <span class="hint">{image_hint}</span>
                    </label>
                    <input id="pg-image" type="file" accept="image/*" class="visually-hidden" node_ref=file_input
                        on:change=move |_| {
                            if let Some(f) = file_input.get().and_then(|i| i.files()).and_then(|f| f.get(0)) {
                                take_pick(f);
                            }
                        }/>
                </div>
                <div class:hidden=move || use_image.get()>{field_views}</div>
                <ErrorBox error=error/>
                <div class="form-actions">
                    <button class="btn primary" type="submit" id="run" disabled=move || busy.get()>
                        {move || if busy.get() { "Running…" } else { "Run inference" }}
                    </button>
                </div>
            </section>
            {move || run.get().map(|r| view! { <RunResult r/> })}
        </form>
    }
}

#[component]
fn RunResult(r: RunRecord) -> impl IntoView {
    let outputs = r
        .response
        .as_ref()
        .and_then(|v| v["outputs"].as_array().cloned())
        .unwrap_or_default();
    let response_text = r
        .response
        .as_ref()
        .map(|v| serde_json::to_string_pretty(&tensor::abbreviate(v)).unwrap_or_default());
    view! {
        <section class="card result" id="result">
            <div class="card-head">
                <h2>"Result"</h2>
                {outcome_badge(r.failure.as_ref(), r.client_ms)}
            </div>
            {r.failure.as_ref().map(|e| view! { <p class="error" role="alert">{e.describe()}</p> })}
            {r.stages.map(|stages| stages_view(&stages))}
            {outputs_view(&outputs, &r.pipelines)}
            <Exchange request_text=r.request_text response_text curl=r.curl/>
        </section>
    }
}

/// The green round-trip badge of a success, or a red one that says the request failed.
pub(crate) fn outcome_badge(failure: Option<&ApiError>, client_ms: f64) -> AnyView {
    match failure {
        None => view! { <span class="latency" id="latency">{format!("{} round trip", format::ms(client_ms))}</span> }.into_any(),
        Some(e) => {
            let what = match e.status {
                0 => "failed".to_string(),
                s if s < 500 => format!("refused ({s})"),
                s => format!("failed ({s})"),
            };
            view! { <span class="latency failed" id="latency">{format!("{what} · {}", format::ms(client_ms))}</span> }.into_any()
        }
    }
}

/// The output tensors of a KServe v2 answer, each with its name, type, shape and a summary.
/// `pipelines` (those running this model) are named where outputs lack class names.
fn outputs_view(outputs: &[Value], pipelines: &[String]) -> impl IntoView {
    view! {
        <div class="outputs" id="outputs">
            {outputs.iter().map(|o| {
                let name = o["name"].as_str().unwrap_or("output").to_string();
                view! {
                    <div class="output" data-output=name.clone()>
                        <div class="input-head"><code>{name.clone()}</code><span class="tensor-type">{o["datatype"].as_str().unwrap_or("").to_string()}</span><span class="tensor-shape">{o["shape"].to_string()}</span></div>
                        {summary_view(tensor::summarize(o), pipelines)}
                    </div>
                }
            }).collect_view()}
        </div>
    }
}

/// Per-stage latencies of a run (pre-plugins, queue, model, post-plugins).
fn stages_view(stages: &[(&'static str, f64)]) -> impl IntoView {
    view! {
        <div class="stages" id="stages">
            {stages.iter().map(|(label, ms)| view! {
                <div class="stage"><span class="muted">{*label}</span><strong>{format::ms(*ms)}</strong></div>
            }).collect_view()}
        </div>
    }
}

/// The raw request and response of a run and the curl command that repeats it (key elided).
#[component]
fn Exchange(request_text: String, response_text: Option<String>, curl: String) -> impl IntoView {
    let copied = curl.clone();
    view! {
        <details class="raw">
            <summary>"Request"</summary>
            <pre id="raw-request">{request_text}</pre>
        </details>
        {response_text.map(|t| view! {
            <details class="raw" open>
                <summary>"Response"</summary>
                <pre id="raw-response">{t}</pre>
            </details>
        })}
        <div class="curl">
            <div class="card-head"><h3>"curl"</h3><CopyButton text=Signal::derive(move || copied.clone()) id="copy-curl"/></div>
            <pre id="curl">{curl}</pre>
            <p class="hint">"$KEY stands for your API key; it is never put into commands or URLs."</p>
        </div>
    }
}

fn summary_view(s: Summary, pipelines: &[String]) -> AnyView {
    match s {
        Summary::TopK { top, classes, scoring } => {
            let how = match scoring {
                Scoring::Probabilities => format!("Top classes of {classes}: the model's own probabilities."),
                Scoring::Softmax => format!("Top classes of {classes}: the model gave raw scores (logits); these probabilities are their softmax, computed here."),
            };
            let names = if pipelines.is_empty() {
                "The model carries no class names, so classes are numbered (0-based). A pipeline with a labelling post-plugin (e.g. imagenet-topk) names them.".to_string()
            } else {
                format!("The model carries no class names, so classes are numbered (0-based); the pipeline {} names them.", pipelines.join(", "))
            };
            view! {
                <p class="hint scoring">{how}</p>
                <ol class="topk">
                    {top.into_iter().map(|(class, p)| view! {
                        <li>
                            <span class="topk-label">{format!("class {class}")}</span>
                            <span class="topk-bar"><span style:width=format!("{:.1}%", p * 100.0)></span></span>
                            <span class="topk-score">{format!("{:.1}%", p * 100.0)}</span>
                        </li>
                    }).collect_view()}
                </ol>
                <p class="hint">{names}</p>
            }.into_any()
        }
        Summary::Vector { values, norm } => {
            let n = values.len();
            let peak = values.iter().fold(0.0_f64, |m, v| m.max(v.abs())).max(1e-12);
            let shown = n.min(128);
            let bars = values.iter().take(shown).enumerate().map(|(i, v)| {
                let h = v.abs() / peak * 30.0;
                let y = if *v >= 0.0 { 32.0 - h } else { 32.0 };
                view! { <rect x=i.to_string() y=format!("{y:.2}") width="0.8" height=format!("{h:.2}") class:neg={*v < 0.0}></rect> }
            }).collect_view();
            let (min, max) = values.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(*v), b.max(*v)));
            view! {
                <div class="vector">
                    <p><strong class="vector-dims">{format!("vector of {n} values")}</strong>{format!(" · L2 norm {norm:.4} · min {min:.4} · max {max:.4}")}</p>
                    <svg class="vector-bars" viewBox=format!("0 0 {shown} 64") preserveAspectRatio="none" role="img"
                        aria-label=format!("The first {shown} of {n} values as bars around zero, largest magnitude {peak:.4}")>
                        <line x1="0" y1="32" x2=shown.to_string() y2="32" class="axis"></line>
                        {bars}
                    </svg>
                    <code>{values.iter().take(8).map(|v| format!("{v:.4}")).collect::<Vec<_>>().join(", ")}{if n > 8 { ", …" } else { "" }}</code>
                    <p class="hint">"An embedding or feature vector: compare vectors by cosine similarity, not by their largest entries."</p>
                </div>
            }.into_any()
        }
        Summary::Ctc { steps, classes, indices, confidence } => view! {
            <div class="ctc">
                <p>{format!("CTC greedy decoding over {steps} steps × {classes} classes: {} symbols, mean confidence {:.1}%", indices.len(), confidence * 100.0)}</p>
                <code class="ctc-indices">{indices.iter().map(|i| i.to_string()).collect::<Vec<_>>().join(" ")}</code>
                <p class="hint">"Symbol indices into the model's character set (the OCR pipeline turns them into text)."</p>
            </div>
        }.into_any(),
        Summary::Text(items) => view! { <ul class="texts">{items.into_iter().map(|t| view! { <li>{t}</li> }).collect_view()}</ul> }.into_any(),
        Summary::Values { count, first, min, max, mean } => view! {
            <div class="values">
                <span>{format!("{count} values")}</span>
                <span>{format!("min {min:.4}")}</span><span>{format!("max {max:.4}")}</span><span>{format!("mean {mean:.4}")}</span>
                <code>{first.iter().map(|v| format!("{v:.4}")).collect::<Vec<_>>().join(", ")}{if count > first.len() { ", …" } else { "" }}</code>
            </div>
        }.into_any(),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Transport {
    Sse,
    WebSocket,
}

/// How a generation ended, as people read it.
fn finish_text(reason: &str) -> String {
    match reason {
        "length" => "finished: length (max tokens reached)".into(),
        "stop" => "finished: stop (end of text or a stop sequence)".into(),
        "stopped" => "stopped by you".into(),
        other => format!("finished: {other}"),
    }
}

/// What a finished generation measured: time to first token, total time, tokens, and why it
/// ended.
#[derive(Clone, Debug, PartialEq)]
struct Generated {
    first_ms: Option<f64>,
    total_ms: f64,
    tokens: usize,
    finish: Option<String>,
}

/// The form's numbers, checked before anything is sent.
fn parse_settings(max_tokens: &str, temperature: &str) -> Result<(u32, f64), String> {
    let max = max_tokens
        .trim()
        .parse::<u32>()
        .ok()
        .filter(|m| (1..=4096).contains(m))
        .ok_or_else(|| {
            format!(
                "Max tokens: '{}' is not a whole number between 1 and 4096",
                max_tokens.trim()
            )
        })?;
    let temp = temperature
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && (0.0..=2.0).contains(t))
        .ok_or_else(|| {
            format!(
                "Temperature: '{}' is not a number between 0 and 2",
                temperature.trim()
            )
        })?;
    Ok((max, temp))
}

/// The form's numbers, or `None` with the reason shown in `error`.
fn generation_settings(
    max_tokens: RwSignal<String>,
    temperature: RwSignal<String>,
    error: RwSignal<Option<ApiError>>,
) -> Option<(u32, f64)> {
    parse_settings(&max_tokens.get_untracked(), &temperature.get_untracked())
        .map_err(|e| error.set(Some(ApiError::client(e))))
        .ok()
}

#[component]
fn TextGeneration(model: String, has_ws: bool) -> impl IntoView {
    let prompt = RwSignal::new(String::from("The meaning of life is"));
    let max_tokens = RwSignal::new(String::from("120"));
    let temperature = RwSignal::new(String::from("0.7"));
    let transport = RwSignal::new(Transport::Sse);
    let output = RwSignal::new(String::new());
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let done = RwSignal::new(None::<Generated>);
    let failed = RwSignal::new(false);
    let curl = RwSignal::new(String::new());
    let socket: StoredValue<Option<web_sys::WebSocket>, LocalStorage> =
        StoredValue::new_local(None);
    let abort: StoredValue<Option<web_sys::AbortController>, LocalStorage> =
        StoredValue::new_local(None);
    on_cleanup(move || {
        if let Some(ws) = socket.try_get_value().flatten() {
            let _ = ws.close();
        }
        if let Some(a) = abort.try_get_value().flatten() {
            a.abort();
        }
    });
    let stop = move |_| {
        if let Some(a) = abort.get_value() {
            a.abort();
        }
        if let Some(ws) = socket.get_value() {
            // The server stops generating when the socket goes.
            let _ = ws.close();
            socket.set_value(None);
            busy.set(false);
            done.update(|d| {
                if let Some(d) = d {
                    d.finish = Some("stopped".into());
                }
            });
        }
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        failed.set(false);
        let Some((max, temp)) = generation_settings(max_tokens, temperature, error) else {
            return;
        };
        output.set(String::new());
        done.set(None);
        let text = prompt.get_untracked();
        let model = model.clone();
        let start = now();
        busy.set(true);
        match transport.get_untracked() {
            Transport::Sse => {
                let body = json!({"model": model, "prompt": text, "max_tokens": max, "temperature": temp, "stream": true});
                curl.set(format!("curl -N --cacert data/tls/cert.pem {}/v1/completions \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d '{}'", origin(), body.to_string().replace('\'', r"'\''")));
                let controller = web_sys::AbortController::new().ok();
                abort.set_value(controller.clone());
                leptos::task::spawn_local(async move {
                    let mut first = None;
                    let mut count = 0usize;
                    let mut finish = None;
                    let signal = controller.as_ref().map(|c| c.signal());
                    let result =
                        api::stream_sse("/v1/completions", body, signal.as_ref(), |data| {
                            if data == "[DONE]" {
                                return;
                            }
                            // Not JSON: `[DONE]`.
                            match serde_json::from_str::<StreamEvent<TextChoice>>(data) {
                                Ok(StreamEvent::Chunk(chunk)) => {
                                    // The usage chunk has no choice.
                                    let Some(choice) = chunk.choices.first() else {
                                        return;
                                    };
                                    if !choice.text.is_empty() {
                                        first.get_or_insert(now() - start);
                                        count += 1;
                                        output.update(|o| o.push_str(&choice.text));
                                    }
                                    if let Some(f) = &choice.finish_reason {
                                        finish = Some(f.to_string());
                                    }
                                }
                                Ok(StreamEvent::Error(e)) => {
                                    error.set(Some(ApiError::client(e.error.message)));
                                    failed.set(true);
                                }
                                Err(_) => {}
                            }
                        })
                        .await;
                    abort.set_value(None);
                    match result {
                        Ok(()) => {}
                        Err(e) if e.status == 0 && e.message == "stopped" => {
                            finish = Some("stopped".into())
                        }
                        Err(e) => {
                            failed.set(true);
                            error.set(Some(e));
                        }
                    }
                    if !failed.get_untracked() {
                        done.set(Some(Generated {
                            first_ms: first,
                            total_ms: now() - start,
                            tokens: count,
                            finish,
                        }));
                    }
                    busy.set(false);
                });
            }
            Transport::WebSocket => {
                let msg = json!({"id": 1, "model": model, "generate": {"prompt": text, "max_tokens": max, "temperature": temp}});
                curl.set(format!("# WebSocket: connect to {}/v2/stream offering the subprotocols \"infergate.v1\" and $KEY, then send:\n{}", origin().replacen("http", "ws", 1), msg));
                open_stream(msg, socket, output, error, busy, done, failed, start);
            }
        }
    };
    let badge = move || {
        if failed.get() {
            return Some(
                view! { <span class="latency failed" id="latency">"failed: no answer"</span> }
                    .into_any(),
            );
        }
        done.get().map(|d| {
            let rate = d.tokens as f64 / (d.total_ms / 1000.0).max(1e-3);
            view! {
                <span class="latency" id="latency">{format!(
                    "first token {} · {} tokens in {} · {rate:.0} tokens/s",
                    d.first_ms.map(format::ms).unwrap_or_else(|| "–".into()),
                    d.tokens,
                    format::ms(d.total_ms)
                )}</span>
            }
            .into_any()
        })
    };
    view! {
        <form class="playground" on:submit=submit id="textgen-form">
            <section class="card">
                <h2>"Prompt"</h2>
                <textarea id="pg-prompt" rows="3" prop:value=move || prompt.get() on:input=move |ev| prompt.set(event_target_value(&ev))></textarea>
                <div class="form-grid">
                    <div class="field"><label for="pg-max">"Max tokens"</label>
                        <input id="pg-max" inputmode="numeric" aria-describedby="pg-max-hint" prop:value=move || max_tokens.get() on:input=move |ev| max_tokens.set(event_target_value(&ev))/>
                        <span class="hint" id="pg-max-hint">"1 to 4096"</span></div>
                    <div class="field"><label for="pg-temp">"Temperature"</label>
                        <input id="pg-temp" inputmode="decimal" aria-describedby="pg-temp-hint" prop:value=move || temperature.get() on:input=move |ev| temperature.set(event_target_value(&ev))/>
                        <span class="hint" id="pg-temp-hint">"0 (always the likeliest) to 2"</span></div>
                    <div class="field"><label for="pg-transport">"Transport"</label>
                        <select id="pg-transport" on:change=move |ev| transport.set(if event_target_value(&ev) == "ws" { Transport::WebSocket } else { Transport::Sse })>
                            <option value="sse">"Server-Sent Events (/v1/completions)"</option>
                            {has_ws.then(|| view! { <option value="ws">"WebSocket (/v2/stream)"</option> })}
                        </select></div>
                </div>
                <ErrorBox error=error/>
                <div class="form-actions">
                    <Show when=move || busy.get()>
                        <button class="btn danger" type="button" id="stop" on:click=stop>"Stop"</button>
                    </Show>
                    <button class="btn primary" type="submit" id="generate" disabled=move || busy.get()>{move || if busy.get() { "Streaming…" } else { "Generate" }}</button>
                </div>
            </section>
            <section class="card result">
                <div class="card-head">
                    <h2>"Output"</h2>
                    {badge}
                </div>
                <pre class="stream-output" id="stream-output" aria-live="polite">
                    <span class="prompt-echo">{move || prompt.get()}</span>{move || output.get()}{move || busy.get().then(|| view! { <span class="cursor">"▍"</span> })}
                </pre>
                {move || done.get().and_then(|d| d.finish).map(|f| view! { <p class="finish-reason" id="finish-reason">{finish_text(&f)}</p> })}
                <Show when=move || !curl.get().is_empty()>
                    <div class="curl">
                        <div class="card-head"><h3>"Request"</h3><CopyButton text=Signal::derive(move || curl.get()) id="copy-curl"/></div>
                        <pre id="curl">{move || curl.get()}</pre>
                    </div>
                </Show>
            </section>
        </form>
    }
}

/// Streams one generation over `/v2/stream`, authenticating with the key offered as a
/// subprotocol next to `infergate.v1` (browsers cannot set headers on WebSockets).
#[allow(clippy::too_many_arguments)]
fn open_stream(
    msg: Value,
    socket: StoredValue<Option<web_sys::WebSocket>, LocalStorage>,
    output: RwSignal<String>,
    error: RwSignal<Option<ApiError>>,
    busy: RwSignal<bool>,
    done: RwSignal<Option<Generated>>,
    failed: RwSignal<bool>,
    start: f64,
) {
    let url = format!("{}/v2/stream", origin().replacen("http", "ws", 1));
    let key = session::stored_key().unwrap_or_default();
    let protocols = js_sys::Array::of2(&"infergate.v1".into(), &key.into());
    let ws = match web_sys::WebSocket::new_with_str_sequence(&url, &protocols) {
        Ok(ws) => ws,
        Err(_) => {
            error.set(Some(ApiError::client(
                "cannot open a WebSocket to /v2/stream",
            )));
            failed.set(true);
            busy.set(false);
            return;
        }
    };
    let first = std::rc::Rc::new(std::cell::Cell::new(None::<f64>));
    let count = std::rc::Rc::new(std::cell::Cell::new(0usize));
    let text = msg.to_string();
    let ws_open = ws.clone();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        let _ = ws_open.send_with_str(&text);
    });
    let ws_msg = ws.clone();
    let (first_seen, counted) = (first.clone(), count.clone());
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            let Some(data) = e.data().as_string() else {
                return;
            };
            let Ok(v) = serde_json::from_str::<Value>(&data) else {
                return;
            };
            if let Some(t) = v["token"].as_str() {
                if first_seen.get().is_none() {
                    first_seen.set(Some(now() - start));
                }
                counted.set(counted.get() + 1);
                output.update(|o| o.push_str(t));
                // Kept current so that Stop can report what came.
                done.set(Some(Generated {
                    first_ms: first_seen.get(),
                    total_ms: now() - start,
                    tokens: counted.get(),
                    finish: None,
                }));
            } else if v["done"].as_bool() == Some(true) {
                done.set(Some(Generated {
                    first_ms: first_seen.get(),
                    total_ms: now() - start,
                    tokens: counted.get(),
                    finish: v["finish_reason"].as_str().map(str::to_string),
                }));
                busy.set(false);
                let _ = ws_msg.close();
            } else if let Some(err) = v["error"].as_str() {
                let status = v["status"].as_u64().unwrap_or(0) as u16;
                error.set(Some(ApiError {
                    status,
                    message: err.to_string(),
                }));
                failed.set(true);
                done.set(None);
                busy.set(false);
                let _ = ws_msg.close();
            }
        });
    let on_close = Closure::<dyn FnMut(web_sys::CloseEvent)>::new(move |e: web_sys::CloseEvent| {
        if busy.try_get_untracked().unwrap_or(false) {
            let reason = if e.reason().is_empty() {
                format!("connection closed (code {})", e.code())
            } else {
                e.reason()
            };
            error.set(Some(ApiError::client(format!("WebSocket: {reason}"))));
            failed.set(true);
            busy.set(false);
        }
    });
    ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    // The socket owns its handlers for its lifetime; they are dropped with the page.
    on_open.forget();
    on_message.forget();
    on_close.forget();
    if let Some(old) = socket.try_get_value().flatten() {
        let _ = old.close();
    }
    socket.set_value(Some(ws));
}
