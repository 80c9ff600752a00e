//! Sign in with an API key: checked with `/api/whoami`, then kept in session storage.

use crate::api::{self, Body};
use crate::session::{self, use_session, Identity};
use leptos::prelude::*;

#[component]
pub fn SignIn() -> impl IntoView {
    let session = use_session();
    let key = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let k = key.get_untracked().trim().to_string();
        if k.is_empty() {
            error.set(Some("Enter an API key.".into()));
            return;
        }
        busy.set(true);
        error.set(None);
        leptos::task::spawn_local(async move {
            match api::call_with("GET", "/api/whoami", Body::None, Some(&k)).await {
                Ok(answer) => match serde_json::from_str::<Identity>(&answer.text) {
                    Ok(identity) => {
                        session::store_key(&k);
                        session.identity.set(Some(identity));
                    }
                    Err(e) => error.set(Some(format!("Unexpected answer from /api/whoami: {e}"))),
                },
                Err(e) => error.set(Some(e.describe())),
            }
            busy.set(false);
        });
    };
    view! {
        <main class="signin">
            <form class="card signin-card" on:submit=submit>
                <div class="brand big"><span class="brand-mark" aria-hidden="true">"◆"</span>"infergate"</div>
                <h1>"Sign in"</h1>
                <p class="muted">
                    "Use an API key. The first start of the server prints the admin key and saves it to "
                    <code>"data/admin.key"</code>"."
                </p>
                <label for="api-key">"API key"</label>
                <input
                    id="api-key"
                    type="password"
                    autocomplete="off"
                    spellcheck="false"
                    placeholder="ig_…"
                    prop:value=move || key.get()
                    on:input=move |ev| key.set(event_target_value(&ev))
                />
                <p class="hint">"Kept in this tab's session storage only; closing the tab signs you out."</p>
                {move || error.get().map(|e| view! { <p class="error" role="alert" id="signin-error">{e}</p> })}
                <button class="btn primary wide" id="sign-in" type="submit" disabled=move || busy.get()>
                    {move || if busy.get() { "Checking…" } else { "Sign in" }}
                </button>
            </form>
        </main>
    }
}
