//! What a model's requests pass through besides the model, as marks in its card's head: a
//! payload log (mode, share and sink, from `GET /api/models/{name}/payload-log`, which needs
//! the `upload` scope) and chat guardrails (`GET /api/models/{name}/guardrails`). Read again on
//! the page's refresh, so a change made elsewhere (the API, another replica) shows within it.

use crate::api;
use crate::session::use_session;
use leptos::prelude::*;
use serde_json::Value;

/// `mode, share → sink` of a payload-log answer; None when the model is not logged.
fn logged(answer: &Value) -> Option<String> {
    let setting = answer.get("payload_log").filter(|s| !s.is_null())?;
    let mode = setting.get("mode").and_then(Value::as_str).unwrap_or("all");
    let sample = setting.get("sample").and_then(Value::as_f64).unwrap_or(1.0);
    let sink = setting.get("sink").and_then(Value::as_str).unwrap_or("?");
    Some(format!(
        "{mode}, {}% → {sink}",
        (sample * 1000.0).round() / 10.0
    ))
}

/// The guardrails' plugin names of a guardrails answer, joined; None when there are none.
fn guarded(answer: &Value) -> Option<String> {
    let names: Vec<&str> = answer
        .get("guardrails")?
        .as_array()?
        .iter()
        .filter_map(|g| g.get("plugin").and_then(Value::as_str))
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

#[component]
pub fn ModelPolicies(name: String, refresh: Signal<u64>) -> impl IntoView {
    let session = use_session();
    let log = RwSignal::new(None::<String>);
    let guards = RwSignal::new(None::<String>);
    Effect::new(move |_| {
        refresh.track();
        let name = name.clone();
        let may_read_log = session.can("upload");
        leptos::task::spawn_local(async move {
            let model = api::seg(&name);
            if may_read_log {
                if let Ok(answer) =
                    api::get::<Value>(&format!("/api/models/{model}/payload-log")).await
                {
                    log.set(logged(&answer));
                }
            }
            if let Ok(answer) = api::get::<Value>(&format!("/api/models/{model}/guardrails")).await
            {
                guards.set(guarded(&answer));
            }
        });
    });
    view! {
        <div class="policies">
            {move || log.get().map(|l| view! {
                <span class="badge badge-logged" title="Requests and answers of this model are written to a payload log">{format!("payload log: {l}")}</span>
            })}
            {move || guards.get().map(|g| view! {
                <span class="badge badge-guarded" title="Chat guardrails read this model's prompts and answers">{format!("guardrails: {g}")}</span>
            })}
        </div>
    }
}
