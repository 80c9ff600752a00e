//! API keys (admin scope): create with scopes, rate limit, burst, concurrency cap and token
//! limits (the secret shown once with a copy button; the form starts over), list with each key's limits
//! (token limits included), traffic since the server started and tokens used today and in the
//! budget's period per model, edit limits, revoke.

use crate::api::{self, ApiError, Body};
use crate::format;
use crate::session::use_session;
use crate::types::{
    ApiKey, KeyCreated, KeyList, KeyTokens, KeyUsageReport, ModelTokens, RateLimit,
};
use crate::widgets::{Badge, CopyButton, Empty, ErrorBox, PageHeader};
use leptos::prelude::*;
use serde_json::{json, Map, Value};
use std::collections::HashMap;

#[component]
pub fn Keys() -> impl IntoView {
    let session = use_session();
    view! {
        <Show
            when=move || session.can("admin")
            fallback=|| view! {
                <PageHeader title="API keys" subtitle="Create, list and revoke keys."/>
                <div class="empty"><div class="empty-title">"Admin only"</div>
                <p class="muted">"Managing keys needs a key with the " <code>"admin"</code> " scope."</p></div>
            }
        >
            <KeysAdmin/>
        </Show>
    }
}

/// The token limit fields as typed; empty means "the server's default".
#[derive(Clone, Debug, Default, PartialEq)]
struct TokenFields {
    per_minute: String,
    budget: String,
    /// `day` or `month`.
    period: String,
}

impl TokenFields {
    /// Adds `tokens_per_minute` and `token_budget` to a limits body (`null`: the default).
    fn apply(&self, body: &mut Map<String, Value>) -> Result<(), String> {
        let whole = |label: &str, s: &str| -> Result<Option<u64>, String> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            s.parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| format!("{label}: '{s}' is not a positive whole number"))
        };
        let per_minute = whole("Tokens per minute", &self.per_minute)?;
        body.insert("tokens_per_minute".into(), json!(per_minute));
        let budget = whole("Token budget", &self.budget)?.map(|tokens| {
            let period = if self.period == "month" {
                "month"
            } else {
                "day"
            };
            json!({"tokens": tokens, "period": period})
        });
        body.insert("token_budget".into(), budget.unwrap_or(Value::Null));
        Ok(())
    }
}

/// A token count in few characters: 950, 12.3k, 4.5M.
fn tokens_text(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{}k", trim_number(n as f64 / 1e3)),
        _ => format!("{}M", trim_number(n as f64 / 1e6)),
    }
}

/// Tokens used per model: "12.3k (chat 12k, emb 300)"; one model needs no breakdown.
fn used_text(models: &[ModelTokens]) -> String {
    let total = |m: &ModelTokens| m.prompt_tokens + m.completion_tokens;
    let sum: u64 = models.iter().map(total).sum();
    match models {
        [] => "0".into(),
        [one] => format!("{} ({})", tokens_text(sum), one.model),
        many => format!(
            "{} ({})",
            tokens_text(sum),
            many.iter()
                .map(|m| format!("{} {}", m.model, tokens_text(total(m))))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The token cell: the limits in force (own or default) and what the key used.
fn token_text(k: &ApiKey, tokens: Option<&KeyTokens>) -> String {
    let limits = &k.effective_limits;
    let mut parts = Vec::new();
    if let Some(n) = limits.tokens_per_minute {
        parts.push(format!(
            "{}/min{}",
            tokens_text(n),
            source(k.key.tokens_per_minute.is_some(), true)
        ));
    }
    if let Some(b) = &limits.token_budget {
        let used = tokens
            .and_then(|t| t.budget.as_ref())
            .map(|now| format!("{} left of ", tokens_text(now.remaining)))
            .unwrap_or_default();
        parts.push(format!(
            "{used}{}/{}{}",
            tokens_text(b.tokens),
            b.period,
            source(k.key.token_budget.is_some(), true)
        ));
    }
    if parts.is_empty() {
        parts.push("unlimited".into());
    }
    if let Some(t) = tokens {
        if !t.today.is_empty() || !t.period.is_empty() {
            parts.push(format!("today {}", used_text(&t.today)));
            let period = match &limits.token_budget {
                Some(b) if b.period == "day" => None,
                _ => Some("this month"),
            };
            if let Some(label) = period {
                parts.push(format!("{label} {}", used_text(&t.period)));
            }
        }
    }
    parts.join(" · ")
}

/// The limit fields as typed; empty means "the server's default".
fn limits_body(rps: &str, burst: &str, concurrent: &str) -> Result<Map<String, Value>, String> {
    let mut body = Map::new();
    let (rps, burst, concurrent) = (rps.trim(), burst.trim(), concurrent.trim());
    if rps.is_empty() {
        if !burst.is_empty() {
            return Err("A burst needs a rate limit (requests per second).".into());
        }
        body.insert("rate_limit".into(), Value::Null);
    } else {
        let r = rps
            .parse::<f64>()
            .ok()
            .filter(|r| r.is_finite() && *r > 0.0)
            .ok_or_else(|| {
                format!("Rate limit: '{rps}' is not a positive number of requests per second")
            })?;
        let mut limit = json!({"rps": r});
        if !burst.is_empty() {
            let b = burst
                .parse::<u32>()
                .ok()
                .filter(|b| *b > 0)
                .ok_or_else(|| format!("Burst: '{burst}' is not a positive whole number"))?;
            limit["burst"] = json!(b);
        }
        body.insert("rate_limit".into(), limit);
    }
    if concurrent.is_empty() {
        body.insert("max_concurrent".into(), Value::Null);
    } else {
        let c = concurrent
            .parse::<u32>()
            .ok()
            .filter(|c| *c > 0)
            .ok_or_else(|| {
                format!("Concurrent requests: '{concurrent}' is not a positive whole number")
            })?;
        body.insert("max_concurrent".into(), json!(c));
    }
    Ok(body)
}

fn rate_text(limit: Option<RateLimit>) -> String {
    match limit {
        Some(l) => format!("{} /s", trim_number(l.rps)),
        None => "unlimited".into(),
    }
}

/// Marks a limit that comes from the server's defaults rather than the key itself.
fn source(own: bool, effective: bool) -> &'static str {
    if !own && effective {
        " (default)"
    } else {
        ""
    }
}

fn trim_number(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[component]
fn KeysAdmin() -> impl IntoView {
    let session = use_session();
    let keys = RwSignal::new(None::<Vec<ApiKey>>);
    let error = RwSignal::new(None::<ApiError>);
    let show_revoked = RwSignal::new(false);
    let tokens = RwSignal::new(HashMap::<i64, KeyTokens>::new());
    let reload = move || {
        leptos::task::spawn_local(async move {
            match api::get::<KeyList>("/api/keys").await {
                Ok(list) => {
                    let active: Vec<i64> = list
                        .keys
                        .iter()
                        .filter(|k| k.key.revoked_at.is_none())
                        .map(|k| k.key.id)
                        .collect();
                    keys.set(Some(list.keys));
                    error.set(None);
                    // Tokens used per model are in each key's usage report only.
                    for id in active {
                        match api::get::<KeyUsageReport>(&format!("/api/keys/{id}/usage")).await {
                            Ok(report) => tokens.update(|t| {
                                t.insert(id, report.tokens);
                            }),
                            Err(e) => {
                                error.set(Some(e));
                                break;
                            }
                        }
                    }
                }
                Err(e) => error.set(Some(e)),
            }
        })
    };
    reload();
    // Usage counters move with traffic.
    let timer = set_interval_with_handle(reload, std::time::Duration::from_secs(5)).ok();
    on_cleanup(move || {
        if let Some(t) = timer {
            t.clear();
        }
    });
    let own_id = move || session.identity.with(|i| i.as_ref().map(|i| i.id));
    let ids = Memo::new(move |_| {
        keys.with(|k| {
            k.as_ref().map(|list| {
                list.iter()
                    .filter(|k| show_revoked.get() || k.key.revoked_at.is_none())
                    .map(|k| (k.key.id, k.key.revoked_at.is_some()))
                    .collect::<Vec<_>>()
            })
        })
    });
    view! {
        <PageHeader title="API keys" subtitle="Keys are shown once when created; only a hash is stored. Limits apply per key; empty fields mean the server's default."/>
        <CreateKey on_created=Callback::new(move |_| reload())/>
        <ErrorBox error=error/>
        <section class="card">
            <div class="card-head">
                <h2>"Keys"</h2>
                <label class="check">
                    <input type="checkbox" prop:checked=move || show_revoked.get() on:change=move |ev| show_revoked.set(event_target_checked(&ev))/>
                    "Show revoked"
                </label>
            </div>
            {move || match ids.get() {
                None => view! { <div class="loading">"Loading keys…"</div> }.into_any(),
                Some(list) if list.is_empty() => view! { <Empty title="No keys to show" detail="Create one above."/> }.into_any(),
                Some(_) => view! {
                    <div class="table-wrap">
                        <table class="keys stack" id="keys-table">
                            <thead><tr><th>"Name"</th><th>"Public id"</th><th>"Scopes"</th><th>"Rate limit"</th><th>"Burst"</th><th>"Concurrent"</th><th>"Tokens"</th><th>"Traffic since start"</th><th>"Last used"</th><th>"Created"</th><th>"Status"</th><th><span class="sr-only">"Actions"</span></th></tr></thead>
                            <tbody>
                                // Keyed by id (and revocation): a row being edited survives the refreshes.
                                <For each=move || ids.get().unwrap_or_default() key=|entry| *entry let:entry>
                                    <KeyRow
                                        k=Signal::derive(move || keys.with(|k| k.as_ref().and_then(|k| k.iter().find(|k| k.key.id == entry.0).cloned())))
                                        own=own_id() == Some(entry.0)
                                        tokens=Signal::derive(move || tokens.with(|t| t.get(&entry.0).cloned()))
                                        on_change=Callback::new(move |_| reload())
                                        error/>
                                </For>
                            </tbody>
                        </table>
                    </div>
                }.into_any(),
            }}
        </section>
    }
}

#[component]
fn KeyRow(
    k: Signal<Option<ApiKey>>,
    own: bool,
    tokens: Signal<Option<KeyTokens>>,
    on_change: Callback<()>,
    error: RwSignal<Option<ApiError>>,
) -> impl IntoView {
    let confirm = RwSignal::new(false);
    let editing = RwSignal::new(false);
    let row_error = RwSignal::new(None::<ApiError>);
    let rps = RwSignal::new(String::new());
    let burst = RwSignal::new(String::new());
    let concurrent = RwSignal::new(String::new());
    let token_fields = RwSignal::new(TokenFields::default());
    let Some(first) = k.get_untracked() else {
        return ().into_any();
    };
    let id = first.key.id;
    let revoke = move |_| {
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &format!("/api/keys/{id}"), Body::None).await {
                Ok(_) => on_change.run(()),
                Err(e) => error.set(Some(e)),
            }
            confirm.set(false);
        });
    };
    let start_edit = move |_| {
        if let Some(k) = k.get_untracked() {
            rps.set(
                k.key
                    .rate_limit
                    .map(|l| trim_number(l.rps))
                    .unwrap_or_default(),
            );
            burst.set(
                k.key
                    .rate_limit
                    .map(|l| l.burst.to_string())
                    .unwrap_or_default(),
            );
            concurrent.set(
                k.key
                    .max_concurrent
                    .map(|c| c.to_string())
                    .unwrap_or_default(),
            );
            token_fields.set(TokenFields {
                per_minute: k
                    .key
                    .tokens_per_minute
                    .map(|n| n.to_string())
                    .unwrap_or_default(),
                budget: k
                    .key
                    .token_budget
                    .as_ref()
                    .map(|b| b.tokens.to_string())
                    .unwrap_or_default(),
                period: k
                    .key
                    .token_budget
                    .as_ref()
                    .map_or_else(|| "day".into(), |b| b.period.clone()),
            });
        }
        row_error.set(None);
        editing.set(true);
    };
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        row_error.set(None);
        let body = limits_body(
            &rps.get_untracked(),
            &burst.get_untracked(),
            &concurrent.get_untracked(),
        )
        .and_then(|mut b| token_fields.with_untracked(|t| t.apply(&mut b)).map(|()| b));
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                row_error.set(Some(ApiError::client(e)));
                return;
            }
        };
        leptos::task::spawn_local(async move {
            match api::call(
                "PATCH",
                &format!("/api/keys/{id}"),
                Body::Json(Value::Object(body)),
            )
            .await
            {
                Ok(_) => {
                    editing.set(false);
                    on_change.run(());
                }
                Err(e) => row_error.set(Some(e)),
            }
        });
    };
    let field =
        move |f: fn(&ApiKey) -> String| move || k.with(|k| k.as_ref().map(f).unwrap_or_default());
    let revoked = first.key.revoked_at.is_some();
    view! {
        <tr data-key-name=first.key.name.clone() class:revoked=revoked>
            <td data-label="Name">{first.key.name.clone()}{own.then(|| view! { <span class="chip you">"this session"</span> })}</td>
            <td data-label="Public id"><code>{first.key.public_id.clone()}</code></td>
            <td data-label="Scopes">{first.key.scopes.iter().map(|s| view! { <span class="chip">{s.clone()}</span> }).collect_view()}</td>
            <td data-label="Rate limit" class="key-rate">{field(|k| format!("{}{}", rate_text(k.effective_limits.rate_limit), source(k.key.rate_limit.is_some(), k.effective_limits.rate_limit.is_some())))}</td>
            <td data-label="Burst" class="key-burst">{field(|k| k.effective_limits.rate_limit.map(|l| l.burst.to_string()).unwrap_or_else(|| "–".into()))}</td>
            <td data-label="Concurrent" class="key-concurrent">{field(|k| match k.effective_limits.max_concurrent {
                Some(c) => format!("{c}{}", source(k.key.max_concurrent.is_some(), true)),
                None => "unlimited".into(),
            })}</td>
            <td data-label="Tokens" class="key-tokens">{move || k.with(|k| k.as_ref().map(|k| tokens.with(|t| token_text(k, t.as_ref()))).unwrap_or_default())}</td>
            <td data-label="Traffic" class="key-usage">{field(|k| {
                let (a, u) = (k.activity, k.usage);
                let mut t = format!("{} allowed", a.admitted);
                if a.refused > 0 {
                    t.push_str(&format!(" · {} refused ({} rate, {} concurrency)", a.refused, u.rejected_rate_total, u.rejected_concurrency_total));
                }
                if u.in_flight > 0 {
                    t.push_str(&format!(" · {} in flight", u.in_flight));
                }
                t
            })}</td>
            <td data-label="Last used" class="key-last-used" title=field(|k| k.activity.last_used_ms.map(|t| format::date((t / 1000) as i64)).unwrap_or_default())>
                {field(|k| match k.activity.last_used_ms {
                    Some(t) => format::ago((t / 1000) as i64),
                    None => "not since start".to_string(),
                })}
            </td>
            <td data-label="Created" title=format::date(first.key.created_at)>{format::ago(first.key.created_at)}</td>
            <td data-label="Status">{match first.key.revoked_at {
                Some(t) => view! { <span title=format::date(t)><Badge state="revoked"/></span> }.into_any(),
                None => view! { <Badge state="active"/> }.into_any(),
            }}</td>
            <td class="actions">
                {(!revoked).then(|| view! {
                    <Show when=move || confirm.get() fallback=move || view! {
                        <button class="btn small edit-limits" on:click=start_edit>"Edit limits"</button>
                        <button class="btn small ghost danger revoke" on:click=move |_| confirm.set(true)>"Revoke"</button>
                    }>
                        <span class="confirm">{if own { "Revoke the key you are using?" } else { "Revoke?" }}
                            <button class="btn small danger confirm-revoke" on:click=revoke>"Yes, revoke"</button>
                            <button class="btn small ghost" on:click=move |_| confirm.set(false)>"Cancel"</button>
                        </span>
                    </Show>
                    <Show when=move || editing.get()>
                        <form class="limits-form key-limits-form" on:submit=save>
                            <div class="form-grid compact">
                                <div class="field"><label for=format!("rps-{id}")>"Requests/s"</label>
                                    <input id=format!("rps-{id}") class="edit-rps" inputmode="decimal" placeholder="default" prop:value=move || rps.get() on:input=move |ev| rps.set(event_target_value(&ev))/></div>
                                <div class="field"><label for=format!("burst-{id}")>"Burst"</label>
                                    <input id=format!("burst-{id}") class="edit-burst" inputmode="numeric" placeholder="= rate" prop:value=move || burst.get() on:input=move |ev| burst.set(event_target_value(&ev))/></div>
                                <div class="field"><label for=format!("conc-{id}")>"Concurrent"</label>
                                    <input id=format!("conc-{id}") class="edit-concurrent" inputmode="numeric" placeholder="default" prop:value=move || concurrent.get() on:input=move |ev| concurrent.set(event_target_value(&ev))/></div>
                                <div class="field"><label for=format!("tpm-{id}")>"Tokens/min"</label>
                                    <input id=format!("tpm-{id}") class="edit-tpm" inputmode="numeric" placeholder="default" prop:value=move || token_fields.with(|t| t.per_minute.clone()) on:input=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.per_minute = v); }/></div>
                                <div class="field"><label for=format!("budget-{id}")>"Token budget"</label>
                                    <input id=format!("budget-{id}") class="edit-budget" inputmode="numeric" placeholder="default" prop:value=move || token_fields.with(|t| t.budget.clone()) on:input=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.budget = v); }/></div>
                                <div class="field"><label for=format!("period-{id}")>"Budget per"</label>
                                    <select id=format!("period-{id}") class="edit-period" prop:value=move || token_fields.with(|t| t.period.clone()) on:change=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.period = v); }>
                                        <option value="day">"day (UTC)"</option>
                                        <option value="month">"month (UTC)"</option>
                                    </select></div>
                            </div>
                            <ErrorBox error=row_error/>
                            <div class="form-actions">
                                <button class="btn small ghost" type="button" on:click=move |_| editing.set(false)>"Cancel"</button>
                                <button class="btn small primary save-limits" type="submit">"Save limits"</button>
                            </div>
                        </form>
                    </Show>
                })}
            </td>
        </tr>
    }
    .into_any()
}

#[component]
fn CreateKey(on_created: Callback<()>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let infer = RwSignal::new(true);
    let upload = RwSignal::new(false);
    let admin = RwSignal::new(false);
    let rps = RwSignal::new(String::new());
    let burst = RwSignal::new(String::new());
    let concurrent = RwSignal::new(String::new());
    let token_fields = RwSignal::new(TokenFields {
        period: "day".into(),
        ..TokenFields::default()
    });
    let error = RwSignal::new(None::<ApiError>);
    let secret = RwSignal::new(None::<(String, String)>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        let mut scopes = Vec::new();
        for (on, s) in [(infer, "infer"), (upload, "upload"), (admin, "admin")] {
            if on.get_untracked() {
                scopes.push(s);
            }
        }
        if scopes.is_empty() {
            error.set(Some(ApiError::client("Pick at least one scope.")));
            return;
        }
        let limits = limits_body(
            &rps.get_untracked(),
            &burst.get_untracked(),
            &concurrent.get_untracked(),
        )
        .and_then(|mut b| token_fields.with_untracked(|t| t.apply(&mut b)).map(|()| b));
        let limits = match limits {
            Ok(l) => l,
            Err(e) => {
                error.set(Some(ApiError::client(e)));
                return;
            }
        };
        let key_name = name.get_untracked().trim().to_string();
        let mut body = json!({"name": if key_name.is_empty() { "unnamed".to_string() } else { key_name }, "scopes": scopes});
        // Nulls (the server's defaults) are left out of a new key.
        for (k, v) in limits {
            if !v.is_null() {
                body[k] = v;
            }
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            match api::send::<KeyCreated>("POST", "/api/keys", Body::Json(body)).await {
                Ok(created) => {
                    secret.set(Some((created.key.name, created.secret)));
                    // The next key starts from a clean form.
                    name.set(String::new());
                    infer.set(true);
                    upload.set(false);
                    admin.set(false);
                    rps.set(String::new());
                    burst.set(String::new());
                    concurrent.set(String::new());
                    token_fields.update(|t| {
                        t.per_minute.clear();
                        t.budget.clear();
                    });
                    on_created.run(());
                }
                Err(e) => error.set(Some(e)),
            }
            busy.set(false);
        });
    };
    view! {
        <form class="card" on:submit=submit id="create-key-form">
            <h2>"Create a key"</h2>
            <div class="form-grid">
                <div class="field">
                    <label for="key-name">"Name"</label>
                    <input id="key-name" placeholder="e.g. my-app" maxlength="128"
                        prop:value=move || name.get() on:input=move |ev| name.set(event_target_value(&ev))/>
                </div>
                <fieldset class="field scopes">
                    <legend>"Scopes"</legend>
                    <label class="check"><input type="checkbox" id="scope-infer" prop:checked=move || infer.get() on:change=move |ev| infer.set(event_target_checked(&ev))/>"infer"</label>
                    <label class="check"><input type="checkbox" id="scope-upload" prop:checked=move || upload.get() on:change=move |ev| upload.set(event_target_checked(&ev))/>"upload"</label>
                    <label class="check"><input type="checkbox" id="scope-admin" prop:checked=move || admin.get() on:change=move |ev| admin.set(event_target_checked(&ev))/>"admin"</label>
                </fieldset>
                <div class="field">
                    <label for="key-rps">"Rate limit (requests/s, optional)"</label>
                    <input id="key-rps" inputmode="decimal" placeholder="server default"
                        prop:value=move || rps.get() on:input=move |ev| rps.set(event_target_value(&ev))/>
                </div>
                <div class="field">
                    <label for="key-burst">"Burst (optional)"</label>
                    <input id="key-burst" inputmode="numeric" placeholder="= rate"
                        prop:value=move || burst.get() on:input=move |ev| burst.set(event_target_value(&ev))/>
                </div>
                <div class="field">
                    <label for="key-concurrent">"Concurrent requests (optional)"</label>
                    <input id="key-concurrent" inputmode="numeric" placeholder="server default"
                        prop:value=move || concurrent.get() on:input=move |ev| concurrent.set(event_target_value(&ev))/>
                </div>
                <div class="field">
                    <label for="key-tpm">"Tokens per minute (LLM requests, optional)"</label>
                    <input id="key-tpm" inputmode="numeric" placeholder="server default"
                        prop:value=move || token_fields.with(|t| t.per_minute.clone()) on:input=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.per_minute = v); }/>
                </div>
                <div class="field">
                    <label for="key-budget">"Token budget (optional)"</label>
                    <div class="budget-row">
                        <input id="key-budget" inputmode="numeric" placeholder="server default"
                            prop:value=move || token_fields.with(|t| t.budget.clone()) on:input=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.budget = v); }/>
                        <select id="key-budget-period" aria-label="Budget period" prop:value=move || token_fields.with(|t| t.period.clone())
                            on:change=move |ev| { let v = event_target_value(&ev); token_fields.update(|t| t.period = v); }>
                            <option value="day">"per day (UTC)"</option>
                            <option value="month">"per month (UTC)"</option>
                        </select>
                    </div>
                </div>
            </div>
            <ErrorBox error=error/>
            <div class="form-actions">
                <button class="btn primary" type="submit" id="create-key" disabled=move || busy.get()>"Create key"</button>
            </div>
            {move || secret.get().map(|(n, s)| {
                let text = Signal::derive({ let s = s.clone(); move || s.clone() });
                view! {
                    <div class="secret" role="status">
                        <div class="secret-title">"Key “"{n}"” created. Copy the secret now: it is not shown again."</div>
                        <div class="secret-row">
                            <code id="new-key-secret">{s}</code>
                            <CopyButton text id="copy-secret"/>
                        </div>
                        <button class="btn ghost small" type="button" on:click=move |_| secret.set(None)>"Done"</button>
                    </div>
                }
            })}
        </form>
    }
}
