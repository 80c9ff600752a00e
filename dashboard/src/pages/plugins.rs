//! Plugins and pipelines: WebAssembly plugins (upload with progress, what each declares) and
//! pipelines (pre-plugins → model → post-plugins). Both APIs are optional on a server: the
//! page says so plainly when they answer 404.

use crate::api::{self, ApiError, Body, UploadBody};
use crate::format;
use crate::session::use_session;
use crate::types::ModelList;
use crate::widgets::{Empty, ErrorBox, PageHeader, Progress, Unavailable};
use leptos::html;
use leptos::prelude::*;
use serde_json::{json, Value};

#[derive(Clone, Copy, PartialEq)]
enum Availability {
    Checking,
    Missing,
    Present,
}

fn items(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .or(v.as_array())
        .cloned()
        .unwrap_or_default()
}

fn text(v: &Value, keys: &[&str]) -> String {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .unwrap_or("")
        .to_string()
}

#[component]
pub fn Plugins() -> impl IntoView {
    let session = use_session();
    let plugins_state = RwSignal::new(Availability::Checking);
    let pipelines_state = RwSignal::new(Availability::Checking);
    let plugins = RwSignal::new(Vec::<Value>::new());
    let pipelines = RwSignal::new(Vec::<Value>::new());
    let models = RwSignal::new(Vec::<String>::new());
    let error = RwSignal::new(None::<ApiError>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            match api::call("GET", "/api/plugins", Body::None).await {
                Ok(v) => {
                    plugins.set(items(&v, "plugins"));
                    plugins_state.set(Availability::Present);
                }
                Err(e) if e.is_missing() => plugins_state.set(Availability::Missing),
                Err(e) => error.set(Some(e)),
            }
            match api::call("GET", "/api/pipelines", Body::None).await {
                Ok(v) => {
                    pipelines.set(items(&v, "pipelines"));
                    pipelines_state.set(Availability::Present);
                }
                Err(e) if e.is_missing() => pipelines_state.set(Availability::Missing),
                Err(e) => error.set(Some(e)),
            }
            if let Ok(list) = api::get::<ModelList>("/api/models").await {
                let mut names: Vec<String> = list.models.into_iter().map(|m| m.name).collect();
                names.dedup();
                models.set(names);
            }
        })
    };
    reload();
    view! {
        <PageHeader title="Plugins & pipelines" subtitle="Sandboxed WebAssembly plugins run before and after a model; a pipeline chains them.">
            <button class="btn" on:click=move |_| reload()>"Refresh"</button>
        </PageHeader>
        <ErrorBox error=error/>
        <h2 class="section-title">"Plugins"</h2>
        {move || match plugins_state.get() {
            Availability::Checking => view! { <div class="loading">"Checking…"</div> }.into_any(),
            Availability::Missing => view! { <Unavailable what="Plugin management" endpoint="GET /api/plugins"/> }.into_any(),
            Availability::Present => view! {
                {move || session.can("upload").then(|| view! { <PluginUpload on_done=Callback::new(move |_| reload())/> })}
                {move || {
                    let list = plugins.get();
                    if list.is_empty() {
                        view! { <Empty title="No plugins yet" detail="Upload a .wasm component built with the plugin SDK."/> }.into_any()
                    } else {
                        view! { <div class="worker-grid">{list.into_iter().map(|p| view! {
                            <section class="card plugin">
                                <h3>{text(&p, &["name", "id"])}</h3>
                                <p class="muted">{text(&p, &["description", "describes"])}</p>
                                <dl class="facts">
                                    <dt>"Kind"</dt><dd>{text(&p, &["kind", "stage"])}</dd>
                                    <dt>"Size"</dt><dd>{p.get("size_bytes").and_then(Value::as_u64).map(format::bytes).unwrap_or_default()}</dd>
                                    <dt>"SHA-256"</dt><dd><code>{text(&p, &["sha256"]).chars().take(12).collect::<String>()}</code></dd>
                                </dl>
                            </section>
                        }).collect_view()}</div> }.into_any()
                    }
                }}
            }.into_any(),
        }}
        <h2 class="section-title">"Pipelines"</h2>
        {move || match pipelines_state.get() {
            Availability::Checking => view! { <div class="loading">"Checking…"</div> }.into_any(),
            Availability::Missing => view! { <Unavailable what="Pipeline management" endpoint="GET /api/pipelines"/> }.into_any(),
            Availability::Present => view! {
                {move || session.can("upload").then(|| view! {
                    <PipelineComposer
                        plugins=Signal::derive(move || plugins.get().iter().map(|p| text(p, &["name", "id"])).collect())
                        models=models.into()
                        on_done=Callback::new(move |_| reload())/>
                })}
                {move || {
                    let list = pipelines.get();
                    if list.is_empty() {
                        view! { <Empty title="No pipelines yet" detail="Compose one from plugins and a model."/> }.into_any()
                    } else {
                        view! { <div class="worker-grid">{list.into_iter().map(|p| {
                            let chain = |k: &str| p.get(k).and_then(Value::as_array).map(|a| a.iter().map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| text(x, &["name", "plugin"]))).collect::<Vec<_>>().join(" → ")).unwrap_or_default();
                            view! {
                                <section class="card plugin">
                                    <h3>{text(&p, &["name"])}</h3>
                                    <p class="pipeline-chain">
                                        <span>{chain("pre")}</span><strong>{format!(" {} ", text(&p, &["model"]))}</strong><span>{chain("post")}</span>
                                    </p>
                                </section>
                            }
                        }).collect_view()}</div> }.into_any()
                    }
                }}
            }.into_any(),
        }}
    }
}

#[component]
fn PluginUpload(on_done: Callback<()>) -> impl IntoView {
    let file_input = NodeRef::<html::Input>::new();
    let progress = RwSignal::new(None::<f64>);
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        let Some(file) = file_input
            .get()
            .and_then(|i| i.files())
            .and_then(|f| f.get(0))
        else {
            error.set(Some(ApiError::client("Choose a .wasm file.")));
            return;
        };
        busy.set(true);
        progress.set(Some(0.0));
        leptos::task::spawn_local(async move {
            // The server names the plugin from its own `describe` export.
            let result = api::upload("POST", "/api/plugins", UploadBody::File(file), move |f| {
                progress.set(Some(f))
            })
            .await;
            progress.set(None);
            busy.set(false);
            match result {
                Ok(_) => on_done.run(()),
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <form class="card" on:submit=submit>
            <h3>"Upload a plugin"</h3>
            <div class="form-grid">
                <div class="field"><label for="plugin-file">".wasm component"</label>
                    <input id="plugin-file" type="file" accept=".wasm,application/wasm" node_ref=file_input/></div>
            </div>
            <Progress fraction=progress label="Plugin upload progress"/>
            <ErrorBox error=error/>
            <div class="form-actions"><button class="btn primary" type="submit" disabled=move || busy.get()>"Upload"</button></div>
        </form>
    }
}

#[component]
fn PipelineComposer(
    plugins: Signal<Vec<String>>,
    models: Signal<Vec<String>>,
    on_done: Callback<()>,
) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let model = RwSignal::new(String::new());
    let pre = RwSignal::new(Vec::<String>::new());
    let post = RwSignal::new(Vec::<String>::new());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let chooser = move |label: &'static str, id: &'static str, list: RwSignal<Vec<String>>| {
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <div class="chain">
                    {move || list.get().into_iter().enumerate().map(|(i, p)| view! {
                        <span class="chip removable">{p}<button type="button" aria-label="Remove" on:click=move |_| list.update(|l| { l.remove(i); })>"×"</button></span>
                    }).collect_view()}
                    <select id=id on:change=move |ev| {
                        let v = event_target_value(&ev);
                        if !v.is_empty() {
                            list.update(|l| l.push(v));
                        }
                        if let Some(t) = ev.target() {
                            use wasm_bindgen::JsCast;
                            if let Ok(s) = t.dyn_into::<web_sys::HtmlSelectElement>() { s.set_value(""); }
                        }
                    }>
                        <option value="">"+ add plugin"</option>
                        {move || plugins.get().into_iter().map(|p| { let label = p.clone(); view! { <option value=p>{label}</option> } }).collect_view()}
                    </select>
                </div>
            </div>
        }
    };
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        saved.set(None);
        let n = name.get_untracked().trim().to_string();
        if n.is_empty() || model.get_untracked().is_empty() {
            error.set(Some(ApiError::client(
                "A pipeline needs a name and a model.",
            )));
            return;
        }
        let body = json!({"pre": pre.get_untracked(), "model": model.get_untracked(), "post": post.get_untracked()});
        leptos::task::spawn_local(async move {
            match api::call(
                "PUT",
                &format!("/api/pipelines/{}", api::seg(&n)),
                Body::Json(body),
            )
            .await
            {
                Ok(_) => {
                    saved.set(Some(format!("Saved pipeline {n}.")));
                    on_done.run(());
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <form class="card" on:submit=submit>
            <h3>"Compose a pipeline"</h3>
            <div class="form-grid">
                <div class="field"><label for="pipe-name">"Name"</label>
                    <input id="pipe-name" placeholder="e.g. ocr" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/></div>
                <div class="field"><label for="pipe-model">"Model"</label>
                    <select id="pipe-model" on:change=move |ev| model.set(event_target_value(&ev))>
                        <option value="">"choose…"</option>
                        {move || models.get().into_iter().map(|m| { let label = m.clone(); view! { <option value=m>{label}</option> } }).collect_view()}
                    </select></div>
                {chooser("Pre-plugins (in order)", "pipe-pre", pre)}
                {chooser("Post-plugins (in order)", "pipe-post", post)}
            </div>
            <ErrorBox error=error/>
            {move || saved.get().map(|s| view! { <p class="success" role="status">{s}</p> })}
            <div class="form-actions"><button class="btn primary" type="submit">"Save pipeline"</button></div>
        </form>
    }
}
