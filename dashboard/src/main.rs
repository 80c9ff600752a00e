//! The infergate dashboard: a client-side Leptos app served by the gateway at `/`, talking only
//! to the public HTTP/WebSocket API, so everything it does can also be scripted.

mod api;
mod chart;
mod events;
mod format;
mod pages;
mod session;
mod tensor;
mod types;
mod widgets;

use leptos::prelude::*;
use pages::Page;
use session::{Identity, Session};

fn main() {
    leptos::mount::mount_to_body(App);
}

fn current_page() -> Page {
    let path = web_sys::window()
        .and_then(|w| w.location().pathname().ok())
        .unwrap_or_default();
    Page::from_path(&path)
}

/// Client-side navigation: the gateway answers every dashboard path with index.html.
pub fn navigate(route: RwSignal<Page>, page: Page) {
    if let Some(history) = web_sys::window().and_then(|w| w.history().ok()) {
        let _ = history.push_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(page.path()));
    }
    route.set(page);
}

#[component]
fn App() -> impl IntoView {
    let session = Session {
        identity: RwSignal::new(None),
    };
    provide_context(session);
    let route = RwSignal::new(current_page());
    provide_context(route);
    let _ = window_event_listener(leptos::ev::popstate, move |_| route.set(current_page()));
    // A key kept in this tab's session storage: check it is still valid.
    let checking = RwSignal::new(session::stored_key().is_some());
    if let Some(key) = session::stored_key() {
        leptos::task::spawn_local(async move {
            match api::call_with("GET", "/api/whoami", api::Body::None, Some(&key)).await {
                Ok(a) => session
                    .identity
                    .set(serde_json::from_str::<Identity>(&a.text).ok()),
                Err(_) => session::forget_key(),
            }
            checking.set(false);
        });
    }
    Effect::new(move |_| {
        let title = match session.identity.get() {
            Some(_) => format!("{} · infergate", route.get().title()),
            None => "Sign in · infergate".to_string(),
        };
        document().set_title(&title);
    });
    view! {
        {move || {
            if checking.get() {
                view! { <div class="boot" aria-busy="true">"Checking your session…"</div> }.into_any()
            } else if session.identity.with(Option::is_some) {
                view! { <Shell/> }.into_any()
            } else {
                view! { <pages::signin::SignIn/> }.into_any()
            }
        }}
    }
}

#[component]
fn Shell() -> impl IntoView {
    let session = session::use_session();
    let route = expect_context::<RwSignal<Page>>();
    let identity = move || session.identity.get();
    let nav = Page::ALL
        .iter()
        .map(|&p| {
            view! {
                <a
                    href=p.path()
                    class="nav-link"
                    class:active=move || route.get() == p
                    aria-current=move || (route.get() == p).then_some("page")
                    on:click=move |ev| {
                        if ev.ctrl_key() || ev.meta_key() || ev.shift_key() {
                            return;
                        }
                        ev.prevent_default();
                        navigate(route, p);
                    }
                >
                    <span class="nav-icon" aria-hidden="true">{p.icon()}</span>
                    <span class="nav-full">{p.title()}</span>
                    <span class="nav-short">{p.short_title()}</span>
                </a>
            }
        })
        .collect_view();
    view! {
        <div class="shell">
            <header class="topbar">
                <a class="brand" href="/" on:click=move |ev| { ev.prevent_default(); navigate(route, Page::Overview); }>
                    <span class="brand-mark" aria-hidden="true">"◆"</span>
                    "infergate"
                </a>
                <div class="who">
                    <span class="who-name" title="API key name">{move || identity().map(|i| i.name).unwrap_or_default()}</span>
                    <span class="who-scopes">
                        {move || identity().map(|i| i.scopes.iter().map(|s| view! { <span class="chip">{s.clone()}</span> }).collect_view())}
                    </span>
                    <button class="btn ghost small" id="sign-out" on:click=move |_| session.sign_out()>"Sign out"</button>
                </div>
            </header>
            <nav class="sidebar" aria-label="Sections">{nav}</nav>
            <main class="content" id="main">
                {move || match route.get() {
                    Page::Overview => view! { <pages::overview::Overview/> }.into_any(),
                    Page::Models => view! { <pages::models::Models/> }.into_any(),
                    Page::Playground => view! { <pages::playground::Playground/> }.into_any(),
                    Page::Plugins => view! { <pages::plugins::Plugins/> }.into_any(),
                    Page::Workers => view! { <pages::workers::Workers/> }.into_any(),
                    Page::Keys => view! { <pages::keys::Keys/> }.into_any(),
                }}
            </main>
        </div>
    }
}
