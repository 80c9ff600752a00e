//! Chat with a text-generation model over `POST /v1/chat/completions` (OpenAI's shape, streamed
//! as Server-Sent Events): a system prompt, the conversation so far, a Stop button, time to
//! first token and tokens/s, the raw request, and the same call as curl and as the `openai`
//! Python client.

use super::{finish_text, generation_settings, now, origin};
use crate::api::{self, ApiError};
use crate::format;
use crate::types::{ChatChunkChoice, StreamEvent};
use crate::widgets::{CopyButton, ErrorBox};
use leptos::prelude::*;
use serde_json::{json, Value};

#[derive(Clone, Debug, PartialEq)]
struct Message {
    role: &'static str,
    content: String,
}

/// What the last answer measured.
#[derive(Clone, Debug, PartialEq)]
struct Turn {
    first_ms: Option<f64>,
    total_ms: f64,
    tokens: usize,
    finish: Option<String>,
}

fn python_snippet(origin: &str, model: &str, messages: &Value, max: u32, temp: f64) -> String {
    format!(
        "from openai import OpenAI\n\nclient = OpenAI(base_url=\"{origin}/v1\", api_key=KEY)  # KEY: your API key\nstream = client.chat.completions.create(\n    model=\"{model}\",\n    messages={},\n    max_tokens={max},\n    temperature={temp},\n    stream=True,\n)\nfor chunk in stream:\n    print(chunk.choices[0].delta.content or \"\", end=\"\", flush=True)",
        serde_json::to_string(messages).unwrap_or_default()
    )
}

#[component]
pub fn ChatRun(model: String) -> impl IntoView {
    let system = RwSignal::new(String::from("You are a helpful assistant."));
    let draft = RwSignal::new(String::from("Hello! Who are you?"));
    let history = RwSignal::new(Vec::<Message>::new());
    let answer = RwSignal::new(String::new());
    let max_tokens = RwSignal::new(String::from("200"));
    let temperature = RwSignal::new(String::from("0.7"));
    let error = RwSignal::new(None::<ApiError>);
    let busy = RwSignal::new(false);
    let turn = RwSignal::new(None::<Turn>);
    let request = RwSignal::new(None::<(String, String, String)>);
    let abort: StoredValue<Option<web_sys::AbortController>, LocalStorage> =
        StoredValue::new_local(None);
    on_cleanup(move || {
        if let Some(a) = abort.try_get_value().flatten() {
            a.abort();
        }
    });
    let send = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        error.set(None);
        let Some((max, temp)) = generation_settings(max_tokens, temperature, error) else {
            return;
        };
        let text = draft.get_untracked();
        if text.trim().is_empty() {
            error.set(Some(ApiError::client("Type a message to send.")));
            return;
        }
        history.update(|h| {
            h.push(Message {
                role: "user",
                content: text,
            })
        });
        draft.set(String::new());
        let mut messages = Vec::new();
        let sys = system.get_untracked();
        if !sys.trim().is_empty() {
            messages.push(json!({"role": "system", "content": sys}));
        }
        messages.extend(
            history
                .get_untracked()
                .into_iter()
                .map(|m| json!({"role": m.role, "content": m.content})),
        );
        let messages = Value::Array(messages);
        let body = json!({"model": model, "messages": messages, "max_tokens": max, "temperature": temp, "stream": true});
        let url = format!("{}/v1/chat/completions", origin());
        request.set(Some((
            serde_json::to_string_pretty(&body).unwrap_or_default(),
            format!(
                "curl -N --cacert data/tls/cert.pem {url} \\\n  -H \"Authorization: Bearer $KEY\" \\\n  -H 'Content-Type: application/json' \\\n  -d '{}'",
                body.to_string().replace('\'', r"'\''")
            ),
            python_snippet(&origin(), &model, &messages, max, temp),
        )));
        answer.set(String::new());
        turn.set(None);
        busy.set(true);
        let controller = web_sys::AbortController::new().ok();
        abort.set_value(controller.clone());
        let start = now();
        leptos::task::spawn_local(async move {
            let (mut first, mut count, mut finish) = (None, 0usize, None);
            let signal = controller.as_ref().map(|c| c.signal());
            let result = api::stream_sse("/v1/chat/completions", body, signal.as_ref(), |data| {
                // Not JSON: `[DONE]`.
                match serde_json::from_str::<StreamEvent<ChatChunkChoice>>(data) {
                    Ok(StreamEvent::Chunk(chunk)) => {
                        // The usage chunk has no choice.
                        let Some(choice) = chunk.choices.first() else {
                            return;
                        };
                        if let Some(t) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
                            first.get_or_insert(now() - start);
                            count += 1;
                            answer.update(|a| a.push_str(t));
                        }
                        if let Some(f) = &choice.finish_reason {
                            finish = Some(f.to_string());
                        }
                    }
                    Ok(StreamEvent::Error(e)) => error.set(Some(ApiError::client(e.error.message))),
                    Err(_) => {}
                }
            })
            .await;
            abort.set_value(None);
            match result {
                Ok(()) => {}
                Err(e) if e.status == 0 && e.message == "stopped" => {
                    finish = Some("stopped".into())
                }
                Err(e) => error.set(Some(e)),
            }
            let reply = answer.get_untracked();
            if !reply.is_empty() {
                history.update(|h| {
                    h.push(Message {
                        role: "assistant",
                        content: reply,
                    })
                });
            }
            answer.set(String::new());
            turn.set(Some(Turn {
                first_ms: first,
                total_ms: now() - start,
                tokens: count,
                finish,
            }));
            busy.set(false);
        });
    };
    let stop = move |_| {
        if let Some(a) = abort.get_value() {
            a.abort();
        }
    };
    view! {
        <form class="playground" on:submit=send id="chat-form">
            <section class="card">
                <div class="card-head">
                    <h2>"Chat"</h2>
                    <span class="muted small">"POST /v1/chat/completions · streamed"</span>
                </div>
                <div class="field">
                    <label for="chat-system">"System prompt"</label>
                    <textarea id="chat-system" rows="2" prop:value=move || system.get() on:input=move |ev| system.set(event_target_value(&ev))></textarea>
                </div>
                <div class="field">
                    <label for="chat-input">"Message"</label>
                    <textarea id="chat-input" rows="3" prop:value=move || draft.get() on:input=move |ev| draft.set(event_target_value(&ev))></textarea>
                </div>
                <div class="form-grid compact">
                    <div class="field"><label for="chat-max">"Max tokens"</label>
                        <input id="chat-max" inputmode="numeric" prop:value=move || max_tokens.get() on:input=move |ev| max_tokens.set(event_target_value(&ev))/></div>
                    <div class="field"><label for="chat-temp">"Temperature"</label>
                        <input id="chat-temp" inputmode="decimal" prop:value=move || temperature.get() on:input=move |ev| temperature.set(event_target_value(&ev))/></div>
                </div>
                <ErrorBox error=error/>
                <div class="form-actions">
                    <button class="btn ghost" type="button" disabled=move || busy.get() on:click=move |_| { history.set(Vec::new()); turn.set(None); }>"New conversation"</button>
                    <Show when=move || busy.get()>
                        <button class="btn danger" type="button" id="chat-stop" on:click=stop>"Stop"</button>
                    </Show>
                    <button class="btn primary" type="submit" id="chat-send" disabled=move || busy.get()>{move || if busy.get() { "Answering…" } else { "Send" }}</button>
                </div>
            </section>
            <section class="card result">
                <div class="card-head">
                    <h2>"Conversation"</h2>
                    {move || turn.get().map(|t| view! {
                        <span class="latency" id="chat-latency">{format!(
                            "first token {} · {} tokens in {} · {:.0} tokens/s",
                            t.first_ms.map(format::ms).unwrap_or_else(|| "–".into()),
                            t.tokens,
                            format::ms(t.total_ms),
                            t.tokens as f64 / (t.total_ms / 1000.0).max(1e-3)
                        )}</span>
                    })}
                </div>
                <div class="chat-log" id="chat-log" aria-live="polite">
                    {move || history.get().into_iter().map(|m| view! {
                        <div class=format!("chat-message {}", m.role)><span class="chat-role">{m.role}</span><p>{m.content}</p></div>
                    }).collect_view()}
                    {move || busy.get().then(|| view! {
                        <div class="chat-message assistant"><span class="chat-role">"assistant"</span><p>{move || answer.get()}<span class="cursor">"▍"</span></p></div>
                    })}
                </div>
                {move || turn.get().and_then(|t| t.finish).map(|f| view! { <p class="finish-reason" id="chat-finish">{finish_text(&f)}</p> })}
                {move || request.get().map(|(raw, curl, python)| {
                    let (c, p) = (curl.clone(), python.clone());
                    view! {
                        <details class="raw"><summary>"Request"</summary><pre>{raw}</pre></details>
                        <div class="curl">
                            <div class="card-head"><h3>"curl"</h3><CopyButton text=Signal::derive(move || c.clone()) id="copy-chat-curl"/></div>
                            <pre>{curl}</pre>
                            <div class="card-head"><h3>"Python (openai)"</h3><CopyButton text=Signal::derive(move || p.clone()) id="copy-chat-python"/></div>
                            <pre>{python}</pre>
                        </div>
                    }
                })}
            </section>
        </form>
    }
}
