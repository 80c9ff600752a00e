//! API keys (admin scope): create with scopes (and rate limits where the server supports them),
//! the secret shown once with a copy button, list, revoke.

use crate::api::{self, ApiError, Body};
use crate::format;
use crate::session::use_session;
use crate::types::{ApiKey, KeyList};
use crate::widgets::{Badge, CopyButton, Empty, ErrorBox, PageHeader};
use leptos::prelude::*;
use serde_json::json;

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

#[component]
fn KeysAdmin() -> impl IntoView {
    let session = use_session();
    let keys = RwSignal::new(None::<Vec<ApiKey>>);
    let error = RwSignal::new(None::<ApiError>);
    let show_revoked = RwSignal::new(false);
    let reload = move || {
        leptos::task::spawn_local(async move {
            match api::get::<KeyList>("/api/keys").await {
                Ok(list) => {
                    keys.set(Some(list.keys));
                    error.set(None);
                }
                Err(e) => error.set(Some(e)),
            }
        })
    };
    reload();
    let own_id = move || session.identity.with(|i| i.as_ref().map(|i| i.id));
    view! {
        <PageHeader title="API keys" subtitle="Keys are shown once when created; only a hash is stored."/>
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
            {move || match keys.get() {
                None => view! { <div class="loading">"Loading keys…"</div> }.into_any(),
                Some(list) => {
                    let list: Vec<ApiKey> = list.into_iter().filter(|k| show_revoked.get() || k.revoked_at.is_none()).collect();
                    if list.is_empty() {
                        view! { <Empty title="No keys to show" detail="Create one above."/> }.into_any()
                    } else {
                        view! {
                            <div class="table-wrap">
                                <table class="keys" id="keys-table">
                                    <thead><tr><th>"Name"</th><th>"Public id"</th><th>"Scopes"</th><th>"Created"</th><th>"Status"</th><th><span class="sr-only">"Actions"</span></th></tr></thead>
                                    <tbody>
                                        {list.into_iter().map(|k| {
                                            let own = own_id() == Some(k.id);
                                            view! { <KeyRow k own on_change=Callback::new(move |_| reload()) error/> }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            </div>
                        }.into_any()
                    }
                }
            }}
        </section>
    }
}

#[component]
fn KeyRow(
    k: ApiKey,
    own: bool,
    on_change: Callback<()>,
    error: RwSignal<Option<ApiError>>,
) -> impl IntoView {
    let confirm = RwSignal::new(false);
    let id = k.id;
    let revoke = move |_| {
        leptos::task::spawn_local(async move {
            match api::call("DELETE", &format!("/api/keys/{id}"), Body::None).await {
                Ok(_) => on_change.run(()),
                Err(e) => error.set(Some(e)),
            }
            confirm.set(false);
        });
    };
    let revoked = k.revoked_at.is_some();
    view! {
        <tr data-key-name=k.name.clone() class:revoked=revoked>
            <td>{k.name.clone()}{own.then(|| view! { <span class="chip you">"this session"</span> })}</td>
            <td><code>{k.public_id.clone()}</code></td>
            <td>{k.scopes.iter().map(|s| view! { <span class="chip">{s.clone()}</span> }).collect_view()}</td>
            <td title=format::date(k.created_at)>{format::ago(k.created_at)}</td>
            <td>{match k.revoked_at {
                Some(t) => view! { <span title=format::date(t)><Badge state="revoked"/></span> }.into_any(),
                None => view! { <Badge state="active"/> }.into_any(),
            }}</td>
            <td class="actions">
                {(!revoked).then(|| view! {
                    <Show when=move || confirm.get() fallback=move || view! {
                        <button class="btn small ghost danger revoke" on:click=move |_| confirm.set(true)>"Revoke"</button>
                    }>
                        <span class="confirm">{if own { "Revoke the key you are using?" } else { "Revoke?" }}
                            <button class="btn small danger confirm-revoke" on:click=revoke>"Yes, revoke"</button>
                            <button class="btn small ghost" on:click=move |_| confirm.set(false)>"Cancel"</button>
                        </span>
                    </Show>
                })}
            </td>
        </tr>
    }
}

#[component]
fn CreateKey(on_created: Callback<()>) -> impl IntoView {
    let name = RwSignal::new(String::new());
    let infer = RwSignal::new(true);
    let upload = RwSignal::new(false);
    let admin = RwSignal::new(false);
    let rps = RwSignal::new(String::new());
    let burst = RwSignal::new(String::new());
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
        let key_name = name.get_untracked().trim().to_string();
        let mut body = json!({"name": if key_name.is_empty() { "unnamed".to_string() } else { key_name.clone() }, "scopes": scopes});
        let (r, b) = (rps.get_untracked(), burst.get_untracked());
        if !r.trim().is_empty() {
            match (r.trim().parse::<f64>(), b.trim().parse::<u64>().ok()) {
                (Ok(r), burst) if r > 0.0 => {
                    body["rate_limit"] =
                        json!({"rps": r, "burst": burst.unwrap_or(r.ceil() as u64)})
                }
                _ => {
                    error.set(Some(ApiError::client(
                        "Requests per second must be a positive number.",
                    )));
                    return;
                }
            }
        }
        busy.set(true);
        leptos::task::spawn_local(async move {
            match api::call("POST", "/api/keys", Body::Json(body)).await {
                Ok(v) => {
                    let s = v
                        .get("secret")
                        .and_then(|s| s.as_str())
                        .unwrap_or_default()
                        .to_string();
                    let n = v
                        .get("name")
                        .and_then(|s| s.as_str())
                        .unwrap_or_default()
                        .to_string();
                    secret.set(Some((n, s)));
                    name.set(String::new());
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
