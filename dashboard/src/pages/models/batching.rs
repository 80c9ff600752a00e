//! Editing a model's configuration: a form over the fields people tune (Triton's names) —
//! batching, instances, queue timeouts, priorities, warm-up, version policy, idle unload —
//! merged into the newest version's stored configuration (other fields are kept) and sent with
//! `PUT /api/models/{name}/config`. The server checks the result against the model; its refusal
//! is shown in the form.

use crate::api::{self, ApiError, Body};
use crate::types::TensorSpec;
use crate::widgets::ErrorBox;
use leptos::prelude::*;
use serde_json::{json, Map, Value};

/// The form's fields as typed; empty means "not set" (the server's default).
#[derive(Clone, Debug, Default, PartialEq)]
struct Fields {
    max_batch_size: String,
    preferred: String,
    delay_us: String,
    max_queue_size: String,
    instances: String,
    kind: String,
    timeout_us: String,
    /// REJECT or DELAY: what a request that waited past its timeout gets.
    timeout_action: String,
    priority_levels: String,
    default_priority: String,
    version_policy: String,
    unload_after_s: String,
    warmup: bool,
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Array(items) => items
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        v => v.to_string(),
    }
}

impl Fields {
    fn from_config(c: &Value) -> Fields {
        let batching = &c["dynamic_batching"];
        let group = &c["instance_group"][0];
        Fields {
            max_batch_size: text(&c["max_batch_size"]),
            preferred: text(&batching["preferred_batch_size"]),
            delay_us: text(&batching["max_queue_delay_microseconds"]),
            max_queue_size: text(&batching["default_queue_policy"]["max_queue_size"]),
            instances: text(&group["count"]),
            kind: group["kind"].as_str().unwrap_or("KIND_AUTO").to_string(),
            timeout_us: text(&batching["default_queue_policy"]["default_timeout_microseconds"]),
            timeout_action: batching["default_queue_policy"]["timeout_action"]
                .as_str()
                .unwrap_or("REJECT")
                .to_string(),
            priority_levels: text(&batching["priority_levels"]),
            default_priority: text(&batching["default_priority_level"]),
            version_policy: match &c["version_policy"] {
                Value::String(s) => s.clone(),
                Value::Array(v) => text(&Value::Array(v.clone())),
                Value::Object(o) => match (o.get("latest"), o.get("all"), o.get("specific")) {
                    (Some(l), _, _) => format!("latest:{}", l["num_versions"]),
                    (_, Some(_), _) => "all".into(),
                    (_, _, Some(s)) => text(&s["versions"]),
                    _ => String::new(),
                },
                _ => String::new(),
            },
            unload_after_s: text(&c["unload_after_s"]),
            warmup: c["model_warmup"].as_array().is_some_and(|w| !w.is_empty())
                || c["warmup"].as_array().is_some_and(|w| !w.is_empty()),
        }
    }
}

fn number(label: &str, s: &str) -> Result<Option<u64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| format!("{label}: '{s}' is not a whole number"))
}

/// Sets `key` to `value`, or removes it when the field was left empty.
fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(v) => {
            map.insert(key.into(), v);
        }
        None => {
            map.remove(key);
        }
    }
}

/// Triton's type name for a KServe datatype.
fn triton_type(datatype: &str) -> String {
    match datatype {
        "BYTES" => "TYPE_STRING".into(),
        other => format!("TYPE_{other}"),
    }
}

/// One warm-up request of zeros for every input; dynamic dimensions become 1, and the batch
/// dimension is left out when the model batches (Triton's `model_warmup`).
fn zeros_warmup(inputs: &[TensorSpec], batching: bool) -> Value {
    let mut all = Map::new();
    for spec in inputs {
        let dims: Vec<i64> = spec
            .shape
            .iter()
            .skip(usize::from(batching))
            .map(|d| if *d < 0 { 1 } else { *d })
            .collect();
        all.insert(
            spec.name.clone(),
            json!({"data_type": triton_type(&spec.datatype), "dims": dims, "zero_data": true}),
        );
    }
    json!([{"name": "zeros", "batch_size": 1, "inputs": all, "count": 1}])
}

/// "latest", "latest:2", "all", or versions "1, 3".
fn version_policy(text: &str) -> Result<Option<Value>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    if t == "latest" || t == "all" || t.starts_with("latest:") {
        return Ok(Some(json!(t)));
    }
    let versions: Vec<u64> = t
        .split(',')
        .map(str::trim)
        .map(|v| {
            v.trim_start_matches('v').parse().map_err(|_| {
                format!("Version policy: '{t}' is not latest, latest:N, all or a list of versions")
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(Some(json!(versions)))
}

/// The configuration to send: `initial` with the form's fields applied.
fn merged(initial: &Value, f: &Fields, inputs: &[TensorSpec]) -> Result<Value, String> {
    let mut config = initial.as_object().cloned().unwrap_or_default();
    let max = number("Max batch size", &f.max_batch_size)?;
    put(&mut config, "max_batch_size", max.map(Value::from));

    let preferred: Vec<u64> = f
        .preferred
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| number("Preferred batch sizes", p).map(|n| n.unwrap_or(0)))
        .collect::<Result<_, _>>()?;
    let delay = number("Max queue delay", &f.delay_us)?;
    let queue = number("Max queue size", &f.max_queue_size)?;
    let had_batching = config.contains_key("dynamic_batching");
    let mut batching = config
        .get("dynamic_batching")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    put(
        &mut batching,
        "preferred_batch_size",
        (!preferred.is_empty()).then(|| json!(preferred)),
    );
    put(
        &mut batching,
        "max_queue_delay_microseconds",
        delay.map(Value::from),
    );
    let mut policy = batching
        .get("default_queue_policy")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    put(&mut policy, "max_queue_size", queue.map(Value::from));
    let timeout = number("Queue timeout", &f.timeout_us)?;
    put(
        &mut policy,
        "default_timeout_microseconds",
        timeout.map(Value::from),
    );
    put(
        &mut policy,
        "timeout_action",
        (timeout.is_some() && f.timeout_action == "DELAY").then(|| json!("DELAY")),
    );
    let levels = number("Priority levels", &f.priority_levels)?;
    put(&mut batching, "priority_levels", levels.map(Value::from));
    let default_level = number("Default priority", &f.default_priority)?;
    put(
        &mut batching,
        "default_priority_level",
        default_level.map(Value::from),
    );
    put(
        &mut batching,
        "default_queue_policy",
        (!policy.is_empty()).then_some(Value::Object(policy)),
    );
    // An empty object still turns the dynamic batcher on; add one only when a field asks.
    put(
        &mut config,
        "dynamic_batching",
        (had_batching || !batching.is_empty()).then_some(Value::Object(batching)),
    );

    let instances = number("Instances", &f.instances)?;
    let group = instances.map(|count| {
        let mut g = config
            .get("instance_group")
            .and_then(|g| g.get(0))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        g.insert("count".into(), json!(count));
        g.insert("kind".into(), json!(f.kind));
        json!([g])
    });
    put(&mut config, "instance_group", group);
    put(
        &mut config,
        "version_policy",
        version_policy(&f.version_policy)?,
    );
    let idle = number("Unload when idle", &f.unload_after_s)?;
    put(&mut config, "unload_after_s", idle.map(Value::from));
    let warmup = match (
        f.warmup,
        config.get("model_warmup").or(config.get("warmup")),
    ) {
        (false, _) => None,
        // A warm-up written by hand (other shapes, random data) is kept as it is.
        (true, Some(existing)) if existing.as_array().is_some_and(|w| !w.is_empty()) => {
            Some(existing.clone())
        }
        (true, _) => Some(zeros_warmup(inputs, max.is_some_and(|m| m > 0))),
    };
    config.remove("warmup");
    put(&mut config, "model_warmup", warmup);
    Ok(Value::Object(config))
}

#[component]
pub fn BatchingEditor(
    name: String,
    version: u64,
    initial: Value,
    inputs: Vec<TensorSpec>,
    on_saved: Callback<()>,
) -> impl IntoView {
    let inputs = StoredValue::new(inputs);
    let start = Fields::from_config(&initial);
    let f = RwSignal::new(start);
    let error = RwSignal::new(None::<ApiError>);
    let saved = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let initial = StoredValue::new(initial);
    let preview = move || match merged(&initial.get_value(), &f.get(), &inputs.get_value()) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(e) => e,
    };
    let submit = {
        let name = name.clone();
        move |ev: leptos::ev::SubmitEvent| {
            ev.prevent_default();
            error.set(None);
            saved.set(None);
            let config = match merged(
                &initial.get_value(),
                &f.get_untracked(),
                &inputs.get_value(),
            ) {
                Ok(c) => c,
                Err(e) => {
                    error.set(Some(ApiError::client(e)));
                    return;
                }
            };
            busy.set(true);
            let path = format!("/api/models/{}/config", api::seg(&name));
            leptos::task::spawn_local(async move {
                let result = api::call("PUT", &path, Body::Json(config.clone())).await;
                busy.set(false);
                match result {
                    Ok(answer) => {
                        // The next edit starts from what the server now stores.
                        let stored = answer.get("config").cloned().unwrap_or(config);
                        f.set(Fields::from_config(&stored));
                        initial.set_value(stored);
                        saved.set(Some(format!(
                            "Saved: version {version} uses it for new batches."
                        )));
                        on_saved.run(());
                    }
                    Err(e) => error.set(Some(e)),
                }
            });
        }
    };
    let kind_id = format!("cfg-kind-{name}");
    let action_id = format!("cfg-timeout-action-{name}");
    let warmup_id = format!("cfg-warmup-{name}");
    // One labelled input per field, bound to the form state.
    let field = move |id: &'static str,
                      label: &'static str,
                      hint: &'static str,
                      get: fn(&Fields) -> &String,
                      set: fn(&mut Fields, String)| {
        let id_full = format!("cfg-{id}-{name}");
        view! {
            <div class="field">
                <label for=id_full.clone()>{label}</label>
                <input id=id_full class=format!("cfg-{id}") inputmode=if id == "versions" { "text" } else { "numeric" } autocomplete="off"
                    prop:value=move || f.with(|f| get(f).clone())
                    on:input=move |ev| { let v = event_target_value(&ev); f.update(|f| set(f, v)); }/>
                <span class="hint">{hint}</span>
            </div>
        }
    };
    view! {
        <details class="batching">
            <summary>"Configuration: batching, instances, timeouts, warm-up"<span class="muted small">{format!(" · version {version}")}</span></summary>
            <form class="batching-form" on:submit=submit>
                <h3>"Batching and instances"</h3>
                <div class="form-grid">
                    {field.clone()("max-batch", "Max batch size", "0 or empty: no batch dimension", |f| &f.max_batch_size, |f, v| f.max_batch_size = v)}
                    {field.clone()("preferred", "Preferred batch sizes", "e.g. 4, 8", |f| &f.preferred, |f, v| f.preferred = v)}
                    {field.clone()("delay", "Max queue delay (µs)", "how long a batch may wait to fill", |f| &f.delay_us, |f, v| f.delay_us = v)}
                    {field.clone()("queue", "Max queue size", "empty: the engine's bound", |f| &f.max_queue_size, |f, v| f.max_queue_size = v)}
                    {field.clone()("instances", "Instances", "empty: the engine's default", |f| &f.instances, |f, v| f.instances = v)}
                    <div class="field">
                        <label for=kind_id.clone()>"Instance kind"</label>
                        <select id=kind_id class="cfg-kind" prop:value=move || f.with(|f| f.kind.clone())
                            on:change=move |ev| { let v = event_target_value(&ev); f.update(|f| f.kind = v); }>
                            <option value="KIND_AUTO">"Auto (GPU when usable)"</option>
                            <option value="KIND_CPU">"CPU"</option>
                            <option value="KIND_GPU">"GPU"</option>
                        </select>
                        <span class="hint">"applies with an instance count"</span>
                    </div>
                </div>
                <h3>"Queue: timeouts and priorities"</h3>
                <div class="form-grid">
                    {field.clone()("timeout", "Queue timeout (µs)", "empty: wait as long as it takes", |f| &f.timeout_us, |f, v| f.timeout_us = v)}
                    <div class="field">
                        <label for=action_id.clone()>"After the timeout"</label>
                        <select id=action_id class="cfg-timeout-action" prop:value=move || f.with(|f| f.timeout_action.clone())
                            on:change=move |ev| { let v = event_target_value(&ev); f.update(|f| f.timeout_action = v); }>
                            <option value="REJECT">"Reject (the client gets 504)"</option>
                            <option value="DELAY">"Delay (run it after the others)"</option>
                        </select>
                        <span class="hint">"applies with a timeout"</span>
                    </div>
                    {field.clone()("priorities", "Priority levels", "0 or empty: one queue", |f| &f.priority_levels, |f, v| f.priority_levels = v)}
                    {field.clone()("default-priority", "Default priority", "1 = highest; for requests that name none", |f| &f.default_priority, |f, v| f.default_priority = v)}
                </div>
                <h3>"Versions, idle unload and warm-up"</h3>
                <div class="form-grid">
                    {field.clone()("versions", "Version policy", "latest, latest:N, all, or versions 1, 3", |f| &f.version_policy, |f, v| f.version_policy = v)}
                    {field.clone()("idle", "Unload when idle (s)", "empty: stay loaded", |f| &f.unload_after_s, |f, v| f.unload_after_s = v)}
                    <div class="field">
                        <label class="check">
                            <input type="checkbox" id=warmup_id class="cfg-warmup" prop:checked=move || f.with(|f| f.warmup)
                                on:change=move |ev| { let on = event_target_checked(&ev); f.update(|f| f.warmup = on); }/>
                            "Warm up on load"
                        </label>
                        <span class="hint">"one request of zeros per instance before traffic; dynamic dimensions use 1 (edit the JSON for other sizes)"</span>
                    </div>
                </div>
                <details class="raw">
                    <summary>"Configuration to send"</summary>
                    <pre class="cfg-preview">{preview}</pre>
                </details>
                <ErrorBox error=error/>
                {move || saved.get().map(|s| view! { <p class="success" role="status">{s}</p> })}
                <div class="form-actions">
                    <button class="btn primary" type="submit" disabled=move || busy.get()>
                        {move || if busy.get() { "Saving…" } else { "Save configuration" }}
                    </button>
                </div>
            </form>
        </details>
    }
}
