//! Chat guardrails on the real chat model (the demo GGUF), in process, with the real example
//! guardrails uploaded through `POST /api/plugins` and attached in `[guardrails]`: personal
//! data masked in the prompt the model sees, a term of the model's answer masked in a stream
//! across the tokens it is split into, blocked terms refused with OpenAI's shapes (a 400 with
//! the code `content_filter` for a prompt or a whole answer, the `content_filter` finish for a
//! stream), and a hostile guardrail failing only the request it runs on. Generations are short
//! and greedy.

use crate::support::App;
use axum::body::Body;
use http::{Method, Request, StatusCode};
use infergate_service::guardrails::Attachment;
use serde_json::{json, Value};

/// A component built by plugins/build.sh (`plugins/dist`, or `INFERGATE_PLUGIN_DIST`).
fn plugin_bytes(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("INFERGATE_PLUGIN_DIST")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist")
        });
    let path = dir.join(format!("{name}.wasm"));
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}\nrun plugins/build.sh", path.display()))
}

fn attach(plugin: &str, config: Value) -> Attachment {
    Attachment {
        plugin: plugin.into(),
        config,
    }
}

/// A gateway with the demo GGUF as `smollm2`, `guardrails` attached server-wide and the
/// guardrails they name uploaded as any plugin is.
async fn app(guardrails: Vec<Attachment>) -> App {
    let names: Vec<String> = guardrails.iter().map(|a| a.plugin.clone()).collect();
    let app = App::with_config(|c| {
        c.llm.max_sequences = 2;
        c.llm.context_per_sequence = 512;
        c.llm.batch_tokens = 256;
        // Several test processes share 2 cores: llama.cpp's threads would stall each other.
        c.llm.threads = 1;
        c.guardrails.chat = guardrails;
    })
    .await;
    app.register("smollm2", "smollm2.gguf");
    for name in names {
        let request = Request::builder()
            .method(Method::POST)
            .uri("/api/plugins")
            .header("authorization", format!("Bearer {}", app.upload))
            .body(Body::from(plugin_bytes(&name)))
            .expect("request");
        let reply = app.call(request).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
        assert_eq!(reply.json()["kind"], "guardrail", "{}", reply.json());
    }
    app
}

async fn chat(app: &App, content: &str, stream: bool) -> crate::support::Reply {
    app.post(
        "/v1/chat/completions",
        Some(&app.infer),
        json!({
            "model": "smollm2",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": 24,
            "temperature": 0,
            "stream": stream,
            "stream_options": {"include_usage": true},
        }),
    )
    .await
}

/// The `data:` payloads of a Server-Sent Events body as JSON, `[DONE]` left out (checked).
fn events(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let payloads: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(payloads.last(), Some(&"[DONE]"), "{text}");
    payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).expect("a JSON chunk"))
        .collect()
}

/// A stream's text pieces (non-empty contents, in order) and its finish reason.
fn streamed(body: &[u8]) -> (Vec<String>, String) {
    let mut pieces = Vec::new();
    let mut finish = String::new();
    for event in events(body) {
        let Some(choice) = event["choices"].get(0) else {
            continue;
        };
        if let Some(text) = choice["delta"]["content"]
            .as_str()
            .filter(|t| !t.is_empty())
        {
            pieces.push(text.to_owned());
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish = reason.to_owned();
        }
    }
    (pieces, finish)
}

fn answer(reply: &crate::support::Reply) -> (String, u64) {
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let json = reply.json();
    (
        json["choices"][0]["message"]["content"]
            .as_str()
            .expect("content")
            .to_owned(),
        json["usage"]["prompt_tokens"].as_u64().expect("usage"),
    )
}

#[tokio::test]
async fn personal_data_is_masked_in_the_prompt_the_model_sees() {
    let raw = "My e-mail is jane.doe@example.com and my card is 4111 1111 1111 1111. Say hello.";
    let masked = "My e-mail is [EMAIL] and my card is [CARD]. Say hello.";
    let plain = app(vec![]).await;
    let (_, raw_tokens) = answer(&chat(&plain, raw, false).await);
    let (masked_answer, masked_tokens) = answer(&chat(&plain, masked, false).await);
    assert_ne!(
        raw_tokens, masked_tokens,
        "the test needs prompts that differ"
    );
    drop(plain);

    let guarded = app(vec![attach("pii-mask", Value::Null)]).await;
    // The model got the masked text: the same tokens, the same greedy answer.
    let (answer_text, tokens) = answer(&chat(&guarded, raw, false).await);
    assert_eq!(tokens, masked_tokens);
    assert_eq!(answer_text, masked_answer);
    assert!(!masked_answer.is_empty(), "the model answers");
}

/// Three pieces of a streamed answer as one term (from the start of a word to the end of
/// another, such as `vast, mysterious`): a term the model's tokens split, which `prompt` does
/// not contain.
fn split_term(pieces: &[String], prompt: &str) -> String {
    let letter_at = |s: &str, start: bool| {
        let c = if start {
            s.chars().nth(1)
        } else {
            s.chars().last()
        };
        c.is_some_and(|c| c.is_ascii_alphabetic())
    };
    pieces
        .windows(3)
        .find(|w| {
            w[0].starts_with(' ')
                && letter_at(&w[0], true)
                && letter_at(&w[2], false)
                && !prompt
                    .to_lowercase()
                    .contains(&w.concat().trim().to_lowercase())
        })
        .map(|w| w.concat().trim().to_owned())
        .unwrap_or_else(|| panic!("no three pieces make a term in {pieces:?}"))
}

/// `text` with every whole-word, ASCII-case-insensitive match of `term` starred, as
/// blocked-terms masks.
fn mask_term(text: &str, term: &str) -> String {
    let word_char = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80;
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let end = i + term.len();
        let starts = i == 0 || !word_char(bytes[i - 1]);
        if starts
            && end <= bytes.len()
            && bytes[i..end].eq_ignore_ascii_case(term.as_bytes())
            && (end == bytes.len() || !word_char(bytes[end]))
        {
            out.push_str(&"*".repeat(term.len()));
            i = end;
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

#[tokio::test]
async fn a_streamed_answer_is_masked_and_refused_across_pieces() {
    let prompt = "Describe the sea in one sentence.";
    let plain = app(vec![]).await;
    let reply = chat(&plain, prompt, true).await;
    let (pieces, finish) = streamed(&reply.body);
    assert_eq!(finish, "length");
    let text = pieces.concat();
    let term = split_term(&pieces, prompt);
    drop(plain);

    // Masked: the term never goes out, however the model's tokens split it.
    let masker = app(vec![attach(
        "blocked-terms",
        json!({"terms": [term], "action": "mask"}),
    )])
    .await;
    let reply = chat(&masker, prompt, true).await;
    let (masked_pieces, finish) = streamed(&reply.body);
    assert_eq!(finish, "length");
    let masked = masked_pieces.concat();
    assert_eq!(masked, mask_term(&text, &term), "{masked_pieces:?}");
    assert!(
        masked_pieces.iter().all(|p| !p.contains(&term)),
        "{masked_pieces:?}"
    );
    // The whole answer, unary, is masked the same.
    let (whole, _) = answer(&chat(&masker, prompt, false).await);
    assert_eq!(whole, masked);
    drop(masker);

    // Refused: a stream ends with content_filter; what was sent before the term stays sent,
    // the term never; a whole answer is a 400.
    let refuser = app(vec![attach("blocked-terms", json!({"terms": [term]}))]).await;
    let reply = chat(&refuser, prompt, true).await;
    assert_eq!(reply.status, StatusCode::OK);
    let (sent, finish) = streamed(&reply.body);
    assert_eq!(finish, "content_filter", "{:?}", reply.body);
    let sent = sent.concat();
    assert!(!sent.contains(&term), "{sent}");
    assert!(
        text.starts_with(&sent),
        "{sent:?} is not the start of {text:?}"
    );
    let reply = chat(&refuser, prompt, false).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    let error = &reply.json()["error"];
    assert_eq!(error["code"], "content_filter", "{error}");
    assert_eq!(error["type"], "invalid_request_error", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("blocked-terms")),
        "{error}"
    );
    // A prompt with the term is refused before the model runs.
    let reply = chat(&refuser, &format!("Say {term}."), true).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "content_filter");
}

#[tokio::test]
async fn a_hostile_or_missing_guardrail_fails_only_its_request() {
    let app = app(vec![attach("hostile-guardrail", Value::Null)]).await;
    for attack in ["trap", "memory"] {
        let reply = chat(&app, &format!("please {attack}"), false).await;
        assert_eq!(
            reply.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{attack}: {:?}",
            reply.body
        );
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.contains("hostile-guardrail"), "{attack}: {message}");
    }
    // The server and the guardrail go on.
    let (text, _) = answer(&chat(&app, "Say hi.", false).await);
    assert!(!text.is_empty());

    // Attached but not uploaded: refused (503), never let through unchecked.
    let missing = App::with_config(|c| {
        c.llm.threads = 1;
        c.guardrails.chat = vec![attach("pii-mask", Value::Null)];
    })
    .await;
    missing.register("smollm2", "smollm2.gguf");
    let reply = chat(&missing, "Say hi.", false).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        reply.body
    );
}

#[tokio::test]
async fn a_models_own_guardrails_are_checked_set_and_removed() {
    let app = app(vec![]).await;
    for name in ["blocked-terms", "passthrough"] {
        let request = Request::builder()
            .method(Method::POST)
            .uri("/api/plugins")
            .header("authorization", format!("Bearer {}", app.upload))
            .body(Body::from(plugin_bytes(name)))
            .expect("request");
        assert_eq!(app.call(request).await.status, StatusCode::CREATED);
    }
    let path = "/api/models/smollm2/guardrails";
    let put = |body: Value| app.send(Method::PUT, path, Some(&app.upload), Some(body));
    // Refused, nothing stored: a pipeline plugin, an unknown one, a bad shape, an infer key.
    for (body, says) in [
        (
            json!({"guardrails": [{"plugin": "passthrough"}]}),
            "not a chat guardrail",
        ),
        (json!({"guardrails": [{"plugin": "nope"}]}), "nope"),
        (
            json!({"guardrails": {"plugin": "blocked-terms"}}),
            "guardrails",
        ),
    ] {
        let reply = put(body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
        assert!(reply.error().contains(says), "{}", reply.error());
    }
    let body = json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["zebra"]}}]});
    let reply = app
        .send(Method::PUT, path, Some(&app.infer), Some(body.clone()))
        .await;
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    let reply = app.get(path, Some(&app.infer)).await;
    assert_eq!(reply.json()["guardrails"], json!([]));

    let reply = put(body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.json()["guardrails"][0]["plugin"], "blocked-terms");
    let reply = chat(&app, "Tell me about the zebra.", false).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "content_filter");

    let reply = app
        .send(Method::DELETE, path, Some(&app.upload), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["guardrails"], json!([]));
    answer(&chat(&app, "Tell me about the zebra.", false).await);
}
