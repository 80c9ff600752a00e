//! Composing or editing a pipeline: a model, pre-plugins and post-plugins in order. The lists
//! offer only plugins that fit where they would go (their kind, and what they consume against
//! what the stage before produces, from the plugins' own descriptions); saving asks for a
//! confirmation that shows the chain, and says when it replaces a pipeline.

use super::parameter_text;
use crate::api::{self, ApiError, Body};
use crate::types::{PipelineSpec, PipelineView, PluginKind, PluginView};
use crate::widgets::ErrorBox;
use leptos::prelude::*;
use std::collections::BTreeMap;

/// "image/png", "text/plain", "application/json: {...}": raw bytes, not tensors.
fn is_media(notation: &str) -> bool {
    notation.split(':').next().is_some_and(|t| t.contains('/'))
}

fn takes_bytes(p: &PluginView) -> bool {
    let consumes = &p.description.consumes;
    consumes.iter().any(|c| c == "any" || is_media(c))
}

fn takes_tensors(p: &PluginView) -> bool {
    let consumes = &p.description.consumes;
    consumes.is_empty() || consumes.iter().any(|c| c == "any" || !is_media(c))
}

/// Whether anything may follow `p`: a stage that gives only JSON or bytes ends the chain.
fn gives_tensors(p: &PluginView) -> bool {
    let produces = &p.description.produces;
    produces.is_empty() || produces.iter().any(|c| !is_media(c))
}

fn find<'a>(plugins: &'a [PluginView], reference: &str) -> Option<&'a PluginView> {
    let (name, version) = match reference.split_once('@') {
        Some((n, v)) => (n, Some(v)),
        None => (reference, None),
    };
    plugins
        .iter()
        .rfind(|p| p.name == name && version.is_none_or(|v| v == p.version))
}

/// The plugin names that fit after `chain` at a pre (`pre == true`) or post position, and how
/// many were left out.
fn fitting(plugins: &[PluginView], chain: &[String], pre: bool) -> (Vec<String>, usize) {
    let kind = if pre {
        PluginKind::Pre
    } else {
        PluginKind::Post
    };
    let previous = chain.last().and_then(|r| find(plugins, r));
    let ends = previous.is_some_and(|p| !gives_tensors(p));
    let mut names: Vec<String> = Vec::new();
    let mut left_out = 0;
    for p in plugins.iter().filter(|p| p.kind == kind) {
        let fits = !ends
            && if pre && chain.is_empty() {
                takes_bytes(p) || takes_tensors(p)
            } else {
                takes_tensors(p)
            };
        if fits {
            if !names.contains(&p.name) {
                names.push(p.name.clone());
            }
        } else {
            left_out += 1;
        }
    }
    (names, left_out)
}

#[component]
pub fn PipelineComposer(
    plugins: Signal<Vec<PluginView>>,
    models: Signal<Vec<String>>,
    existing: Signal<Vec<String>>,
    editing: RwSignal<Option<PipelineView>>,
    on_done: Callback<()>,
) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let model = RwSignal::new(String::new());
    let pre = RwSignal::new(Vec::<String>::new());
    let post = RwSignal::new(Vec::<String>::new());
    let parameters = RwSignal::new(String::new());
    // Fields this form does not show (preprocess, model_version, ...) are kept from the spec.
    let base = StoredValue::new(PipelineSpec::default());
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let pending = RwSignal::new(None::<(String, PipelineSpec)>);
    Effect::new(move |_| {
        if let Some(p) = editing.get() {
            name.set(p.name.clone());
            model.set(p.spec.model.clone());
            pre.set(p.spec.pre.clone());
            post.set(p.spec.post.clone());
            parameters.set(parameter_text(&p.spec.parameters));
            base.set_value(p.spec);
            error.set(None);
            saved.set(None);
            pending.set(None);
        }
    });
    let clear = move || {
        name.set(String::new());
        model.set(String::new());
        pre.set(Vec::new());
        post.set(Vec::new());
        parameters.set(String::new());
        base.set_value(PipelineSpec::default());
        pending.set(None);
        editing.set(None);
    };
    let chooser = move |label: &'static str,
                        id: &'static str,
                        list: RwSignal<Vec<String>>,
                        is_pre: bool| {
        let offered = Memo::new(move |_| plugins.with(|p| fitting(p, &list.get(), is_pre)));
        view! {
            <div class="field">
                <label for=id>{label}</label>
                <div class="chain">
                    {move || list.get().into_iter().enumerate().map(|(i, p)| view! {
                        <span class="chip removable">{p.clone()}<button type="button" aria-label=format!("Remove {p}") on:click=move |_| list.update(|l| { l.remove(i); })>"×"</button></span>
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
                        <option value="">{move || if offered.with(|o| o.0.is_empty()) { "nothing fits here" } else { "+ add plugin" }}</option>
                        {move || offered.get().0.into_iter().map(|p| { let label = p.clone(); view! { <option value=p>{label}</option> } }).collect_view()}
                    </select>
                </div>
                <span class="hint">{move || match offered.with(|o| o.1) {
                    0 => String::new(),
                    n => format!("{n} plugin(s) not offered: another kind, or they do not take what the stage before gives"),
                }}</span>
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
        let mut spec = base.get_value();
        // A model changed away from the pinned one drops the pin.
        if spec.model != model.get_untracked() {
            spec.model_version = None;
            spec.model_outputs.clear();
        }
        spec.model = model.get_untracked();
        spec.pre = pre.get_untracked();
        spec.post = post.get_untracked();
        let mut params = BTreeMap::new();
        for pair in parameters
            .get_untracked()
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    params.insert(k.trim().to_string(), v.trim().to_string());
                }
                _ => {
                    error.set(Some(ApiError::client(format!(
                        "Parameters: '{pair}' is not key=value"
                    ))));
                    return;
                }
            }
        }
        spec.parameters = params;
        pending.set(Some((n, spec)));
    };
    let confirm = move |_| {
        let Some((n, spec)) = pending.get_untracked() else {
            return;
        };
        leptos::task::spawn_local(async move {
            match api::call(
                "PUT",
                &format!("/api/pipelines/{}", api::seg(&n)),
                Body::typed(&spec),
            )
            .await
            {
                Ok(_) => {
                    saved.set(Some(format!("Saved pipeline {n}.")));
                    clear();
                    on_done.run(());
                }
                Err(e) => {
                    pending.set(None);
                    error.set(Some(e));
                }
            }
        });
    };
    let chain_text = |spec: &PipelineSpec| {
        spec.pre
            .iter()
            .chain(std::iter::once(&spec.model))
            .chain(&spec.post)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" → ")
    };
    view! {
        <form class="card" on:submit=submit id="pipeline-composer">
            <div class="card-head">
                <h3>{move || match editing.get() { Some(p) => format!("Edit pipeline {}", p.name), None => "Compose a pipeline".to_string() }}</h3>
                {move || editing.get().is_some().then(|| view! { <button class="btn small ghost" type="button" on:click=move |_| clear()>"New pipeline instead"</button> })}
            </div>
            <div class="form-grid">
                <div class="field"><label for="pipe-name">"Name"</label>
                    <input id="pipe-name" placeholder="e.g. ocr" prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/></div>
                <div class="field"><label for="pipe-model">"Model"</label>
                    <select id="pipe-model" prop:value=move || model.get() on:change=move |ev| model.set(event_target_value(&ev))>
                        <option value="">"choose…"</option>
                        {move || models.get().into_iter().map(|m| { let label = m.clone(); let v = m.clone(); view! { <option value=m selected=move || model.get() == v>{label}</option> } }).collect_view()}
                    </select></div>
                {chooser("Pre-plugins (in order)", "pipe-pre", pre, true)}
                {chooser("Post-plugins (in order)", "pipe-post", post, false)}
                <div class="field"><label for="pipe-params">"Parameters (optional)"</label>
                    <input id="pipe-params" placeholder="e.g. top_k=5" prop:value=move || parameters.get() on:input=move |ev| parameters.set(event_target_value(&ev))/>
                    <span class="hint">"key=value, comma-separated; every plugin gets them"</span></div>
            </div>
            <ErrorBox error=error/>
            {move || saved.get().map(|s| view! { <p class="success" role="status">{s}</p> })}
            {move || match pending.get() {
                Some((n, spec)) => {
                    let replaces = existing.with(|e| e.contains(&n));
                    view! {
                        <div class="confirm-box" role="alertdialog" aria-label="Confirm saving the pipeline">
                            <p><strong>{if replaces { format!("Replace pipeline “{n}”?") } else { format!("Create pipeline “{n}”?") }}</strong></p>
                            <p class="pipeline-chain">{chain_text(&spec)}</p>
                            {replaces.then(|| view! { <p class="hint">"Requests already running finish on the old chain; new ones use this one."</p> })}
                            <div class="form-actions">
                                <button class="btn ghost" type="button" on:click=move |_| pending.set(None)>"Cancel"</button>
                                <button class="btn primary" type="button" id="confirm-pipeline" on:click=confirm>"Yes, save"</button>
                            </div>
                        </div>
                    }.into_any()
                }
                None => view! {
                    <div class="form-actions"><button class="btn primary" type="submit" id="save-pipeline">"Save pipeline…"</button></div>
                }.into_any(),
            }}
        </form>
    }
}
