//! Small pieces every page uses: headers, errors, empty states, progress, copy buttons.

use crate::api::ApiError;
use leptos::prelude::*;

#[component]
pub fn PageHeader(
    title: &'static str,
    #[prop(into)] subtitle: String,
    #[prop(optional)] children: Option<Children>,
) -> impl IntoView {
    view! {
        <header class="page-header">
            <div>
                <h1>{title}</h1>
                <p class="muted">{subtitle}</p>
            </div>
            <div class="page-actions">{children.map(|c| c())}</div>
        </header>
    }
}

/// An error shown where it happened, with the status and the server's message.
#[component]
pub fn ErrorBox(#[prop(into)] error: Signal<Option<ApiError>>) -> impl IntoView {
    move || {
        error.get().map(|e| {
            view! {
                <div class="error" role="alert">
                    {e.describe()}
                </div>
            }
        })
    }
}

#[component]
pub fn Empty(title: &'static str, #[prop(into)] detail: String) -> impl IntoView {
    view! {
        <div class="empty">
            <div class="empty-title">{title}</div>
            <p class="muted">{detail}</p>
        </div>
    }
}

/// The state for an endpoint that this server does not have.
#[component]
pub fn Unavailable(what: &'static str, endpoint: &'static str) -> impl IntoView {
    view! {
        <div class="empty unavailable">
            <div class="empty-title">{what}" is not available on this server"</div>
            <p class="muted">
                <code>{endpoint}</code>" answered 404: this gateway version does not serve it. "
                "The page will use it as soon as the server does."
            </p>
        </div>
    }
}

#[component]
pub fn Progress(#[prop(into)] fraction: Signal<Option<f64>>, label: &'static str) -> impl IntoView {
    move || {
        fraction.get().map(|f| {
            let pct = (f * 100.0).clamp(0.0, 100.0);
            view! {
                <div class="progress" role="progressbar" aria-label=label aria-valuemin="0" aria-valuemax="100" aria-valuenow=format!("{pct:.0}")>
                    <div class="progress-bar" style:width=format!("{pct:.1}%")></div>
                    <span class="progress-text">{if pct >= 100.0 { "Sent; the server is checking the file…".to_string() } else { format!("{pct:.0}%") }}</span>
                </div>
            }
        })
    }
}

pub fn copy_to_clipboard(text: &str) {
    if let Some(w) = web_sys::window() {
        let _ = w.navigator().clipboard().write_text(text);
    }
}

#[component]
pub fn CopyButton(
    #[prop(into)] text: Signal<String>,
    #[prop(optional)] id: &'static str,
) -> impl IntoView {
    let copied = RwSignal::new(false);
    view! {
        <button
            class="btn small"
            type="button"
            id=id
            on:click=move |_| {
                copy_to_clipboard(&text.get_untracked());
                copied.set(true);
                set_timeout(move || copied.set(false), std::time::Duration::from_millis(1500));
            }
        >
            {move || if copied.get() { "Copied" } else { "Copy" }}
        </button>
    }
}

/// A state badge: loaded, unloaded, loading, failed, revoked, active.
#[component]
pub fn Badge(#[prop(into)] state: String) -> impl IntoView {
    let class = format!("badge badge-{}", state.to_lowercase());
    view! { <span class=class>{state}</span> }
}
