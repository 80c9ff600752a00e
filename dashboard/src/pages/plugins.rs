//! Plugins and pipelines: WebAssembly plugins (upload with progress, what each consumes and
//! produces, per-call limits to edit, delete) and pipelines (pre-plugins → model →
//! post-plugins: compose, edit, delete). Both APIs are optional on a server: the page says so
//! plainly when they answer 404.

use crate::api::{self, ApiError, Body, UploadBody};
use crate::format;
use crate::session::use_session;
use crate::types::{
    EffectiveLimits, ModelList, PipelineList, PipelineView, PluginLimits, PluginList, PluginView,
};
use crate::widgets::{Empty, ErrorBox, PageHeader, Progress, Unavailable};
use composer::PipelineComposer;
use leptos::html;
use leptos::prelude::*;

mod composer;

#[derive(Clone, Copy, PartialEq)]
enum Availability {
    Checking,
    Missing,
    Present,
}

#[component]
pub fn Plugins() -> impl IntoView {
    let session = use_session();
    let plugins_state = RwSignal::new(Availability::Checking);
    let pipelines_state = RwSignal::new(Availability::Checking);
    let plugins = RwSignal::new(Vec::<PluginView>::new());
    let pipelines = RwSignal::new(Vec::<PipelineView>::new());
    let models = RwSignal::new(Vec::<String>::new());
    let error = RwSignal::new(None::<ApiError>);
    // The pipeline being edited in the composer (its name and spec), or a new one.
    let editing = RwSignal::new(None::<PipelineView>);
    let reload = move || {
        leptos::task::spawn_local(async move {
            match api::get::<PluginList>("/api/plugins").await {
                Ok(list) => {
                    plugins.set(list.plugins);
                    // Set only on a change: setting it re-renders the section (and the composer).
                    if plugins_state.get_untracked() != Availability::Present {
                        plugins_state.set(Availability::Present);
                    }
                }
                Err(e) if e.is_missing() => plugins_state.set(Availability::Missing),
                Err(e) => error.set(Some(e)),
            }
            match api::get::<PipelineList>("/api/pipelines").await {
                Ok(list) => {
                    pipelines.set(list.pipelines);
                    if pipelines_state.get_untracked() != Availability::Present {
                        pipelines_state.set(Availability::Present);
                    }
                }
                Err(e) if e.is_missing() => pipelines_state.set(Availability::Missing),
                Err(e) => error.set(Some(e)),
            }
            if let Ok(list) = api::get::<ModelList>("/api/models").await {
                let mut names: Vec<String> = list.models.into_iter().map(|m| m.name).collect();
                names.sort();
                names.dedup();
                models.set(names);
            }
        })
    };
    reload();
    let can_change = move || session.can("upload");
    view! {
        <PageHeader title="Plugins & pipelines" subtitle="Sandboxed WebAssembly plugins run before and after a model; a pipeline chains them.">
            <button class="btn" on:click=move |_| reload()>"Refresh"</button>
        </PageHeader>
        <ErrorBox error=error/>
        <h2 class="section-title">"Pipelines"</h2>
        {move || match pipelines_state.get() {
            Availability::Checking => view! { <div class="loading">"Checking…"</div> }.into_any(),
            Availability::Missing => view! { <Unavailable what="Pipeline management" endpoint="GET /api/pipelines"/> }.into_any(),
            Availability::Present => view! {
                {move || {
                    let list = pipelines.get();
                    if list.is_empty() {
                        view! { <Empty title="No pipelines yet" detail="Compose one from plugins and a model below."/> }.into_any()
                    } else {
                        view! { <div class="worker-grid" id="pipeline-cards">{list.into_iter().map(|p| view! {
                            <PipelineCard p editing can_change=can_change() on_change=Callback::new(move |_| reload())/>
                        }).collect_view()}</div> }.into_any()
                    }
                }}
                {move || can_change().then(|| view! {
                    <PipelineComposer
                        plugins=plugins.into()
                        models=models.into()
                        existing=Signal::derive(move || pipelines.get().into_iter().map(|p| p.name).collect())
                        editing
                        on_done=Callback::new(move |_| reload())/>
                })}
            }.into_any(),
        }}
        <h2 class="section-title">"Plugins"</h2>
        {move || match plugins_state.get() {
            Availability::Checking => view! { <div class="loading">"Checking…"</div> }.into_any(),
            Availability::Missing => view! { <Unavailable what="Plugin management" endpoint="GET /api/plugins"/> }.into_any(),
            Availability::Present => view! {
                {move || can_change().then(|| view! { <PluginUpload on_done=Callback::new(move |_| reload())/> })}
                {move || {
                    let list = plugins.get();
                    if list.is_empty() {
                        view! { <Empty title="No plugins yet" detail="Upload a .wasm component built with the plugin SDK."/> }.into_any()
                    } else {
                        view! { <div class="worker-grid" id="plugin-cards">{list.into_iter().map(|p| view! {
                            <PluginCard p can_change=can_change() on_change=Callback::new(move |_| reload())/>
                        }).collect_view()}</div> }.into_any()
                    }
                }}
            }.into_any(),
        }}
    }
}

/// One pipeline: its stages in order, what it was given, and edit/delete.
#[component]
fn PipelineCard(
    p: PipelineView,
    editing: RwSignal<Option<PipelineView>>,
    can_change: bool,
    on_change: Callback<()>,
) -> impl IntoView {
    let confirm = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let spec = &p.spec;
    let model = match spec.model_version {
        Some(v) => format!("{} v{v}", spec.model),
        None => spec.model.clone(),
    };
    let pre_chips = spec
        .pre
        .iter()
        .cloned()
        .map(|x| view! { <span class="stage-chip pre">{x}</span><span class="arrow" aria-hidden="true">"→"</span> })
        .collect_view();
    let post = spec.post.clone();
    // Text detection runs between the pre-plugins and the model, which then reads each region.
    let detect_chips = spec.detect.as_ref().map(|d| {
        let angle = d.angle_model.clone().map(|m| {
            view! { <span class="stage-chip model" title="0°/180° angle classification">{format!("{m} (angle)")}</span><span class="arrow" aria-hidden="true">"→"</span> }
        });
        view! {
            <span class="stage-chip model" title="Text detection: the rest runs once per region">{format!("{} (text regions)", d.model)}</span>
            <span class="arrow" aria-hidden="true">"→"</span>
            {angle}
        }
    });
    let preprocess = spec.preprocess.as_ref().map(|o| {
        format!(
            "native resize {}×{} ({}) → '{}'",
            o.width,
            o.height,
            o.mode.as_str(),
            o.output
        )
    });
    let parameters = (!spec.parameters.is_empty()).then(|| parameter_text(&spec.parameters));
    let name = p.name.clone();
    let delete = move |_| {
        let name = name.clone();
        leptos::task::spawn_local(async move {
            match api::call(
                "DELETE",
                &format!("/api/pipelines/{}", api::seg(&name)),
                Body::None,
            )
            .await
            {
                Ok(_) => on_change.run(()),
                Err(e) => error.set(Some(e)),
            }
            confirm.set(false);
        });
    };
    let edit_target = p.clone();
    let post_chips = post
        .into_iter()
        .map(|x| view! { <span class="arrow" aria-hidden="true">"→"</span><span class="stage-chip post">{x}</span> })
        .collect_view();
    view! {
        <section class="card pipeline" data-pipeline=p.name.clone()>
            <div class="card-head">
                <h3 class="card-title">{p.name.clone()}</h3>
                <span class="muted small">{format!("changed {}", format::ago(p.updated_at))}</span>
            </div>
            <p class="pipeline-chain" aria-label="Stages in order">
                {pre_chips}
                {detect_chips}
                <span class="stage-chip model">{model}</span>
                {post_chips}
            </p>
            {preprocess.map(|t| view! { <p class="muted small">{t}</p> })}
            {parameters.map(|t| view! { <p class="muted small">"parameters: "{t}</p> })}
            <ErrorBox error=error/>
            {can_change.then(|| view! {
                <div class="form-actions">
                    <Show when=move || confirm.get() fallback=move || {
                        let target = edit_target.clone();
                        view! {
                            <button class="btn small edit-pipeline" on:click=move |_| {
                                editing.set(Some(target.clone()));
                                if let Some(e) = document().get_element_by_id("pipe-name") {
                                    e.scroll_into_view();
                                }
                            }>"Edit"</button>
                            <button class="btn small ghost danger delete-pipeline" on:click=move |_| confirm.set(true)>"Delete"</button>
                        }
                    }>
                        <span class="confirm">"Delete this pipeline?"
                            <button class="btn small danger confirm-delete" on:click=delete.clone()>"Yes, delete"</button>
                            <button class="btn small ghost" on:click=move |_| confirm.set(false)>"Cancel"</button>
                        </span>
                    </Show>
                </div>
            })}
        </section>
    }
}

/// A pipeline's parameters as shown and edited: `top_k=5, lang=en`.
pub fn parameter_text(parameters: &std::collections::BTreeMap<String, String>) -> String {
    parameters
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A limit as shown: the effective value, marked when it is the server's default.
fn limit_text(own: Option<u64>, effective: u64, unit: &str) -> String {
    let value = format!("{effective} {unit}");
    if own.is_none() {
        format!("{value} (default)")
    } else {
        value
    }
}

/// One plugin version: what it takes and gives, its limits (editable), delete.
#[component]
fn PluginCard(p: PluginView, can_change: bool, on_change: Callback<()>) -> impl IntoView {
    let own: PluginLimits = p.limits.clone();
    let effective: EffectiveLimits = p.effective_limits;
    let editing = RwSignal::new(false);
    let confirm = RwSignal::new(false);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let field = |own: Option<u64>| own.map(|v| v.to_string()).unwrap_or_default();
    let deadline = RwSignal::new(field(own.deadline_ms));
    let memory = RwSignal::new(field(own.memory_mib));
    let output = RwSignal::new(field(own.max_output_mib));
    let path = format!(
        "/api/plugins/{}/versions/{}",
        api::seg(&p.name),
        api::seg(&p.version)
    );
    let limits_path = format!("{path}/limits");
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        saved.set(None);
        let mut body = PluginLimits::default();
        for (field, label, signal) in [
            (&mut body.deadline_ms, "Deadline", deadline),
            (&mut body.memory_mib, "Memory", memory),
            (&mut body.max_output_mib, "Output", output),
        ] {
            let t = signal.get_untracked();
            let t = t.trim();
            if t.is_empty() {
                continue;
            }
            match t.parse::<u64>() {
                Ok(n) if n > 0 => {
                    *field = Some(n);
                }
                _ => {
                    error.set(Some(ApiError::client(format!(
                        "{label}: '{t}' is not a positive whole number (leave it empty for the server's default)"
                    ))));
                    return;
                }
            }
        }
        let path = limits_path.clone();
        leptos::task::spawn_local(async move {
            match api::call("PUT", &path, Body::typed(&body)).await {
                Ok(_) => {
                    saved.set(Some("Limits saved; new calls use them.".into()));
                    editing.set(false);
                    on_change.run(());
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    let delete = move |_| {
        let path = path.clone();
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &path, Body::None).await {
                Ok(_) => on_change.run(()),
                Err(e) => error.set(Some(e)),
            }
            confirm.set(false);
        });
    };
    let input = |id: String, label: &'static str, signal: RwSignal<String>| {
        view! {
            <div class="field">
                <label for=id.clone()>{label}</label>
                <input id=id inputmode="numeric" placeholder="default" prop:value=move || signal.get() on:input=move |ev| signal.set(event_target_value(&ev))/>
            </div>
        }
    };
    let id = {
        let slug = format!("{}-{}", p.name, p.version).replace('.', "_");
        move |what: &str| format!("plugin-{what}-{slug}")
    };
    view! {
        <section class="card plugin" data-plugin=p.name.clone()>
            <div class="card-head">
                <h3 class="card-title">{format!("{}@{}", p.name, p.version)}</h3>
                <span class=format!("badge badge-{}", p.kind.as_str())>{format!("{}-plugin", p.kind.as_str())}</span>
            </div>
            <dl class="facts wide-facts">
                <dt>"Consumes"</dt><dd class="plugin-consumes">{p.description.consumes.join("; ")}</dd>
                <dt>"Produces"</dt><dd class="plugin-produces">{p.description.produces.join("; ")}</dd>
                <dt>"Size"</dt><dd>{format::bytes(p.size_bytes)}</dd>
                <dt>"SHA-256"</dt><dd><code title=p.sha256.clone()>{p.sha256.chars().take(12).collect::<String>()}</code></dd>
                <dt>"Deadline"</dt><dd class="plugin-deadline">{limit_text(own.deadline_ms, effective.deadline_ms, "ms")}</dd>
                <dt>"Memory"</dt><dd>{limit_text(own.memory_mib, effective.memory_mib, "MiB")}</dd>
                <dt>"Max output"</dt><dd>{limit_text(own.max_output_mib, effective.max_output_mib, "MiB")}</dd>
            </dl>
            <ErrorBox error=error/>
            {move || saved.get().map(|s| view! { <p class="success" role="status">{s}</p> })}
            {can_change.then(|| view! {
                <Show when=move || editing.get()>
                    <form class="limits-form" on:submit=save.clone()>
                        <div class="form-grid compact">
                            {input(id("deadline"), "Deadline (ms)", deadline)}
                            {input(id("memory"), "Memory (MiB)", memory)}
                            {input(id("output"), "Max output (MiB)", output)}
                        </div>
                        <p class="hint">"Empty: the server's default. The host caps every value."</p>
                        <div class="form-actions">
                            <button class="btn small ghost" type="button" on:click=move |_| editing.set(false)>"Cancel"</button>
                            <button class="btn small primary save-limits" type="submit">"Save limits"</button>
                        </div>
                    </form>
                </Show>
                <div class="form-actions">
                    <Show when=move || confirm.get() fallback=move || view! {
                        <button class="btn small edit-limits" on:click=move |_| editing.update(|e| *e = !*e)>"Edit limits"</button>
                        <button class="btn small ghost danger delete-plugin" on:click=move |_| confirm.set(true)>"Delete"</button>
                    }>
                        <span class="confirm">"Delete this plugin version?"
                            <button class="btn small danger confirm-delete" on:click=delete.clone()>"Yes, delete"</button>
                            <button class="btn small ghost" on:click=move |_| confirm.set(false)>"Cancel"</button>
                        </span>
                    </Show>
                </div>
            })}
        </section>
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
                Ok(_) => {
                    if let Some(i) = file_input.get() {
                        i.set_value("");
                    }
                    on_done.run(())
                }
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
