//! Models: every version with its state and signature; upload with progress; load, unload,
//! delete; the traffic split between versions with each version's figures and the response
//! cache's hit rate ([`traffic`]); edit the newest version's batching and instances
//! ([`batching`]); marks for a model whose requests are payload-logged or read by chat
//! guardrails ([`policies`]). Changing anything needs the `upload` scope.

use crate::api::{self, ApiError, Body, UploadBody};
use crate::format;
use crate::session::use_session;
use crate::types::{group_models, ModelList, ModelVersion, TensorSpec, VersionState};
use crate::widgets::{Badge, Empty, ErrorBox, PageHeader, Progress};
use batching::BatchingEditor;
use leptos::html;
use leptos::prelude::*;
use policies::ModelPolicies;
use traffic::TrafficPanel;

mod batching;
mod policies;
mod traffic;

#[component]
pub fn Models() -> impl IntoView {
    let session = use_session();
    let models = RwSignal::new(None::<Vec<ModelVersion>>);
    let error = RwSignal::new(None::<ApiError>);
    // Counts the refreshes: what a card reads besides the list follows it.
    let refreshed = RwSignal::new(0u64);
    let reload = move || {
        refreshed.update(|n| *n += 1);
        leptos::task::spawn_local(async move {
            match api::get::<ModelList>("/api/models").await {
                Ok(list) => {
                    models.set(Some(list.models));
                    error.set(None);
                }
                Err(e) => error.set(Some(e)),
            }
        })
    };
    reload();
    let handle = set_interval_with_handle(reload, std::time::Duration::from_secs(5)).ok();
    on_cleanup(move || {
        if let Some(h) = handle {
            h.clear();
        }
    });
    let can_upload = move || session.can("upload");
    let listed = Memo::new(move |_| models.with(|m| m.as_ref().map(|m| !m.is_empty())));
    let names = Memo::new(move |_| {
        models.with(|m| {
            group_models(m.as_deref().unwrap_or_default())
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>()
        })
    });
    view! {
        <PageHeader title="Models" subtitle="ONNX models served over KServe v2; versions load on first request or on demand.">
            <button class="btn" on:click=move |_| reload()>"Refresh"</button>
        </PageHeader>
        <Show
            when=can_upload
            fallback=|| view! { <p class="notice">"Your key lacks the " <code>"upload"</code> " scope: uploading, loading and deleting are hidden."</p> }
        >
            <UploadForm on_done=Callback::new(move |_| reload())/>
        </Show>
        <ErrorBox error=error/>
        // Only a change between loading, empty and listed rebuilds this; the list is keyed.
        {move || match listed.get() {
            None => view! { <div class="loading">"Loading models…"</div> }.into_any(),
            Some(false) => view! {
                <Empty title="No models yet" detail="Upload an .onnx file above, or register one offline with `infergate models add`."/>
            }.into_any(),
            Some(true) => view! {
                // Keyed by name: a card (and a half-edited form in it) survives the refreshes.
                <For each=move || names.get() key=|name| name.clone() let:name>
                    <ModelCard versions=versions_of(models, name.clone()) name refresh=refreshed.into() on_change=Callback::new(move |_| reload())/>
                </For>
            }.into_any(),
        }}
    }
}

/// One model's versions, newest first, as a memo: a card re-renders only when they change.
fn versions_of(
    models: RwSignal<Option<Vec<ModelVersion>>>,
    name: String,
) -> Memo<Vec<ModelVersion>> {
    Memo::new(move |_| {
        models.with(|m| {
            group_models(m.as_deref().unwrap_or_default())
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v)
                .unwrap_or_default()
        })
    })
}

#[component]
fn UploadForm(on_done: Callback<()>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let config = RwSignal::new(String::new());
    let file_input = NodeRef::<html::Input>::new();
    let file_name = RwSignal::new(None::<String>);
    let progress = RwSignal::new(None::<f64>);
    let error = RwSignal::new(None::<ApiError>);
    let done = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        done.set(None);
        let Some(file) = file_input
            .get()
            .and_then(|i| i.files())
            .and_then(|f| f.get(0))
        else {
            error.set(Some(ApiError::client("Choose an .onnx file to upload.")));
            return;
        };
        let model = name.get_untracked().trim().to_string();
        if model.is_empty() {
            error.set(Some(ApiError::client(
                "Give the model a name (letters, digits, '-', '_', '.').",
            )));
            return;
        }
        let form = web_sys::FormData::new().expect("FormData");
        let _ = form.append_with_blob_and_filename("file", &file, &file.name());
        let cfg = config.get_untracked();
        if !cfg.trim().is_empty() {
            if let Err(e) = serde_json::from_str::<serde_json::Value>(&cfg) {
                error.set(Some(ApiError::client(format!(
                    "The configuration is not valid JSON: {e}"
                ))));
                return;
            }
            let _ = form.append_with_str("config", &cfg);
        }
        busy.set(true);
        progress.set(Some(0.0));
        leptos::task::spawn_local(async move {
            let path = format!("/api/models/{}/versions", api::seg(&model));
            let result = api::upload("POST", &path, UploadBody::Form(form), move |f| {
                progress.set(Some(f))
            })
            .await;
            progress.set(None);
            busy.set(false);
            match result {
                Ok(v) => {
                    let version = v.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
                    done.set(Some(format!("Registered {model} version {version}.")));
                    name.set(String::new());
                    config.set(String::new());
                    file_name.set(None);
                    if let Some(i) = file_input.get() {
                        i.set_value("");
                    }
                    on_done.run(());
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    view! {
        <form class="card upload" on:submit=submit id="upload-form">
            <h2>"Upload a model or a new version"</h2>
            <div class="form-grid">
                <div class="field">
                    <label for="model-name">"Model name"</label>
                    <input id="model-name" required placeholder="e.g. resnet50" pattern="[A-Za-z0-9_\\-][A-Za-z0-9_.\\-]*"
                        prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </div>
                <div class="field">
                    <label for="model-file">"ONNX file"</label>
                    <input id="model-file" type="file" accept=".onnx" node_ref=file_input
                        on:change=move |_| {
                            let f = file_input.get().and_then(|i| i.files()).and_then(|f| f.get(0));
                            if let Some(f) = &f {
                                if name.get_untracked().is_empty() {
                                    name.set(f.name().trim_end_matches(".onnx").to_string());
                                }
                            }
                            file_name.set(f.map(|f| format!("{} ({})", f.name(), format::bytes(f.size() as u64))));
                        }/>
                    <span class="hint">{move || file_name.get().unwrap_or_else(|| "An existing name gets the next version.".into())}</span>
                </div>
                <div class="field span2">
                    <label for="model-config">"Configuration (optional JSON)"</label>
                    <textarea id="model-config" rows="2" placeholder=r#"{"dynamic_batching": {"max_queue_delay_microseconds": 500}}"#
                        prop:value=move || config.get() on:input=move |ev| config.set(event_target_value(&ev))></textarea>
                </div>
            </div>
            <Progress fraction=progress label="Upload progress"/>
            <ErrorBox error=error/>
            {move || done.get().map(|d| view! { <p class="success" role="status">{d}</p> })}
            <div class="form-actions">
                <button class="btn primary" type="submit" id="upload-submit" disabled=move || busy.get()>
                    {move || if busy.get() { "Uploading…" } else { "Upload" }}
                </button>
            </div>
        </form>
    }
}

fn tensors(specs: &[TensorSpec]) -> impl IntoView {
    specs
        .iter()
        .map(|t| {
            view! {
                <div class="tensor">
                    <code class="tensor-name">{t.name.clone()}</code>
                    <span class="tensor-type">{t.datatype.clone()}</span>
                    <span class="tensor-shape">{crate::types::shape_text(t)}</span>
                </div>
            }
        })
        .collect_view()
}

#[component]
fn ModelCard(
    name: String,
    versions: Memo<Vec<ModelVersion>>,
    refresh: Signal<u64>,
    on_change: Callback<()>,
) -> impl IntoView {
    let session = use_session();
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let pending = RwSignal::new(None::<&'static str>);
    let action = {
        let name = name.clone();
        move |what: &'static str| {
            let name = name.clone();
            busy.set(true);
            pending.set(Some(what));
            error.set(None);
            leptos::task::spawn_local(async move {
                let path = format!("/v2/repository/models/{}/{what}", api::seg(&name));
                if let Err(e) = api::call("POST", &path, Body::None).await {
                    error.set(Some(e));
                }
                busy.set(false);
                pending.set(None);
                on_change.run(());
            });
        }
    };
    let (load, unload) = (action.clone(), action);
    let latest = move || versions.with(|v| v.first().cloned());
    let any_loaded = move || versions.with(|v| v.iter().any(|v| v.state == VersionState::Loaded));
    // Load acts on the newest version: nothing to do when it is loaded or loading already.
    let newest_state =
        move || versions.with(|v| v.first().map(|l| l.state.as_str()).unwrap_or_default());
    let loading =
        move || newest_state() == "loading" || (busy.get() && pending.get() == Some("load"));
    let started = RwSignal::new(None::<f64>);
    let now = RwSignal::new(format::now_ms());
    let clock = set_interval_with_handle(
        move || now.set(format::now_ms()),
        std::time::Duration::from_millis(500),
    )
    .ok();
    on_cleanup(move || {
        if let Some(c) = clock {
            c.clear();
        }
    });
    Effect::new(move |_| {
        if loading() {
            if started.get_untracked().is_none() {
                started.set(Some(format::now_ms()));
            }
        } else {
            started.set(None);
        }
    });
    // The editor starts over only when a new version arrives, not when states, in-flight
    // counts or (its own) saved configs change.
    let newest = Memo::new(move |_| versions.with(|v| v.first().map(|l| l.version)));
    let editor_name = name.clone();
    let summary = move || {
        latest().map(|l| {
            format!(
                "latest v{} · {} · added {}",
                l.version,
                format::bytes(l.size_bytes),
                format::ago(l.created_at)
            )
        })
    };
    view! {
        <section class="card model" data-model=name.clone()>
            <div class="model-head">
                <div>
                    <h2>{name.clone()}</h2>
                    <div class="muted">{summary}</div>
                    <ModelPolicies name=name.clone() refresh/>
                </div>
                <Show when=move || session.can("upload")>
                    <div class="row-actions">
                        <button class="btn small load" disabled=move || busy.get() || matches!(newest_state(), "loaded" | "loading")
                            title=move || if newest_state() == "loaded" { "The newest version is loaded" } else { "" }
                            on:click={ let load = load.clone(); move |_| load("load") }>
                            {move || if loading() { "Loading…" } else { "Load" }}
                        </button>
                        <button class="btn small" disabled=move || busy.get() || !any_loaded() on:click={ let unload = unload.clone(); move |_| unload("unload") }>"Unload"</button>
                    </div>
                </Show>
            </div>
            {move || loading().then(|| view! {
                <p class="progress-inline load-progress" role="status">{move || {
                    let secs = started.get().map_or(0.0, |s| (now.get() - s) / 1000.0).max(0.0);
                    format!("Loading the newest version: creating ONNX Runtime sessions and warming up… {secs:.0} s")
                }}</p>
            })}
            {move || latest().map(|l| view! {
                <div class="signature">
                    <div><h3>"Inputs"</h3>{tensors(&l.inputs)}</div>
                    <div><h3>"Outputs"</h3>{tensors(&l.outputs)}</div>
                </div>
            })}
            <ErrorBox error=error/>
            <div class="table-wrap">
                <table class="versions stack">
                    <thead><tr><th>"Version"</th><th>"State"</th><th>"Size"</th><th>"SHA-256"</th><th>"Configuration"</th><th>"Added"</th><th>"In flight"</th><th><span class="sr-only">"Actions"</span></th></tr></thead>
                    <tbody>
                        {move || versions.get().into_iter().map(|v| view! { <VersionRow v=v on_change error/> }).collect_view()}
                    </tbody>
                </table>
            </div>
            <TrafficPanel name=name.clone() versions/>
            <Show when=move || session.can("upload")>
                {
                    let name = editor_name.clone();
                    move || newest.get().map(|version| {
                        let (config, inputs) = versions.with_untracked(|v| v.first().map(|l| (l.config.clone(), l.inputs.clone()))).unwrap_or_default();
                        view! { <BatchingEditor name=name.clone() version initial=config inputs on_saved=on_change/> }
                    })
                }
            </Show>
        </section>
    }
}

#[component]
fn VersionRow(
    v: ModelVersion,
    on_change: Callback<()>,
    error: RwSignal<Option<ApiError>>,
) -> impl IntoView {
    let session = use_session();
    let confirm = RwSignal::new(false);
    let path = format!("/api/models/{}/versions/{}", api::seg(&v.name), v.version);
    let delete = Callback::new(move |_: ()| {
        let path = path.clone();
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &path, Body::None).await {
                Ok(_) => on_change.run(()),
                Err(e) => error.set(Some(e)),
            }
            confirm.set(false);
        });
    });
    let config = (!v.config.as_object().is_none_or(|o| o.is_empty()))
        .then(|| serde_json::to_string_pretty(&v.config).unwrap_or_default());
    let summary = config_summary(&v.config);
    view! {
        <tr data-version=v.version.to_string()>
            <td data-label="Version">{format!("v{}", v.version)}</td>
            <td data-label="State"><Badge state=v.state.as_str()/>{v.reason.clone().map(|r| view! { <div class="error-inline">{r}</div> })}</td>
            <td data-label="Size">{format::bytes(v.size_bytes)}</td>
            <td data-label="SHA-256"><code class="sha" title=v.sha256.clone()>{v.sha256.chars().take(12).collect::<String>()}</code></td>
            <td data-label="Configuration">{match config {
                Some(c) => view! { <details class="config-cell"><summary>{summary}</summary><pre>{c}</pre></details> }.into_any(),
                None => view! { <span class="muted">"defaults"</span> }.into_any(),
            }}</td>
            <td data-label="Added" title=format::date(v.created_at)>{format::ago(v.created_at)}</td>
            <td data-label="In flight">{v.in_flight}</td>
            <td class="actions">
                <Show when=move || session.can("upload")>
                    <Show when=move || confirm.get() fallback=move || view! {
                        <button class="btn small ghost danger" on:click=move |_| confirm.set(true)>"Delete"</button>
                    }>
                        <span class="confirm">"Delete?"
                            <button class="btn small danger" on:click=move |_| delete.run(())>"Yes"</button>
                            <button class="btn small ghost" on:click=move |_| confirm.set(false)>"No"</button>
                        </span>
                    </Show>
                </Show>
            </td>
        </tr>
    }
}

/// A configuration in a few words: what differs from the defaults.
fn config_summary(c: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    if let Some(n) = c["max_batch_size"].as_u64().filter(|n| *n > 0) {
        parts.push(format!("batch ≤ {n}"));
    }
    if let Some(d) = c["dynamic_batching"]["max_queue_delay_microseconds"].as_u64() {
        parts.push(format!("wait {d} µs"));
    }
    if let Some(n) = c["instance_group"][0]["count"].as_u64() {
        parts.push(format!("{n} instance(s)"));
    }
    if let Some(s) = c["unload_after_s"].as_u64() {
        parts.push(format!("idle unload {s} s"));
    }
    if c["model_warmup"].as_array().is_some_and(|w| !w.is_empty()) {
        parts.push("warm-up".into());
    }
    if parts.is_empty() {
        "custom".into()
    } else {
        parts.join(" · ")
    }
}
