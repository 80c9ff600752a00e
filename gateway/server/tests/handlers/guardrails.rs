//! Chat guardrails on the real chat model (the demo GGUF), in process, with the real example
//! guardrails uploaded through `POST /api/plugins` and attached in `[guardrails]`: personal
//! data masked in the prompt the model sees, a term of the model's answer masked in a stream
//! across the tokens it is split into, blocked terms refused with OpenAI's shapes (a 400 with
//! the code `content_filter` for a prompt or a whole answer, the `content_filter` finish for a
//! stream), and a hostile guardrail failing only the request it runs on; a key's own
//! guardrails run between the server's and the model's, for that key only, and the metrics
//! count every call's verdict. Generations are short and greedy.

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
        let reply = upload(&app, &name).await;
        assert_eq!(reply.json()["kind"], "guardrail", "{}", reply.json());
    }
    app
}

/// Uploads the plugin `name` built by plugins/build.sh (checked: 201).
async fn upload(app: &App, name: &str) -> crate::support::Reply {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/plugins")
        .header("authorization", format!("Bearer {}", app.upload))
        .body(Body::from(plugin_bytes(name)))
        .expect("request");
    let reply = app.call(request).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{:?}", reply.body);
    reply
}

async fn chat(app: &App, content: &str, stream: bool) -> crate::support::Reply {
    chat_as(app, &app.infer, content, stream).await
}

async fn chat_as(app: &App, key: &str, content: &str, stream: bool) -> crate::support::Reply {
    app.post(
        "/v1/chat/completions",
        Some(key),
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
    let series = |kind: &str| {
        format!(
            "infergate_guardrail_failures_total{{guardrail=\"hostile-guardrail@0.1.0\",phase=\"prompt\",kind=\"{kind}\"}}"
        )
    };
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
        assert_eq!(metric(&app, &series(attack)).await, 1, "{attack}");
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
        upload(&app, name).await;
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

/// The value of the series `name{labels}` on /metrics (0 when absent).
async fn metric(app: &App, series: &str) -> u64 {
    let reply = app.get("/metrics", Some(&app.admin)).await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.parse().expect("a count"))
}

/// `infergate_guardrail_verdicts_total` of `guardrail` in `phase` with `verdict`.
async fn verdicts(app: &App, guardrail: &str, phase: &str, verdict: &str) -> u64 {
    metric(
        app,
        &format!(
            "infergate_guardrail_verdicts_total{{guardrail=\"{guardrail}\",phase=\"{phase}\",verdict=\"{verdict}\"}}"
        ),
    )
    .await
}

/// A new infer key made over the API: its id and secret.
async fn infer_key(app: &App) -> (i64, String) {
    let created = app.create_key(&["infer"], json!({})).await;
    (
        created["id"].as_i64().expect("id"),
        created["secret"].as_str().expect("secret").to_owned(),
    )
}

#[tokio::test]
async fn a_keys_guardrails_run_between_the_servers_and_the_models_for_that_key_only() {
    // The server masks e-mail addresses; the model refuses the word "email".
    let app = app(vec![attach("pii-mask", Value::Null)]).await;
    upload(&app, "blocked-terms").await;
    let (guarded_id, guarded) = infer_key(&app).await;
    let (_, other) = infer_key(&app).await;
    let model_terms =
        json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["email"]}}]});
    let reply = app
        .send(
            Method::PUT,
            "/api/models/smollm2/guardrails",
            Some(&app.upload),
            Some(model_terms),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);

    // The key masks the word "email": it sees the server's rewrite, the model sees its own.
    let path = format!("/api/keys/{guarded_id}/guardrails");
    let masking = json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["email"], "action": "mask"}}]});
    let reply = app
        .send(Method::PUT, &path, Some(&app.admin), Some(masking))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.json()["key_id"], guarded_id);
    assert_eq!(reply.json()["guardrails"][0]["config"]["action"], "mask");
    let listed = app.get("/api/keys", Some(&app.admin)).await.json();
    let shown = listed["keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["id"] == guarded_id))
        .cloned()
        .expect("the key is listed");
    assert_eq!(shown["guardrails"][0]["plugin"], "blocked-terms", "{shown}");

    let raw = "Write one line to jane.doe@example.com to say hello.";
    let rewrites_before = verdicts(&app, "blocked-terms@1.0.0", "prompt", "rewrite").await;
    let refusals_before = verdicts(&app, "blocked-terms@1.0.0", "prompt", "refuse").await;
    // Another key: the server's mask, then the model's refusal of what it left.
    let reply = chat_as(&app, &other, raw, false).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "content_filter");
    assert_eq!(
        verdicts(&app, "blocked-terms@1.0.0", "prompt", "refuse").await,
        refusals_before + 1
    );
    // The guarded key: server, key, model, in that order; the model got the key's rewrite.
    let (guarded_answer, guarded_tokens) = answer(&chat_as(&app, &guarded, raw, false).await);
    assert_eq!(
        verdicts(&app, "blocked-terms@1.0.0", "prompt", "rewrite").await,
        rewrites_before + 1
    );
    assert!(
        verdicts(&app, "pii-mask@1.0.0", "prompt", "rewrite").await >= 2,
        "the server's guardrail rewrote both"
    );
    let masked = "Write one line to [*****] to say hello.";
    let (direct_answer, direct_tokens) = answer(&chat_as(&app, &other, masked, false).await);
    assert_eq!(guarded_tokens, direct_tokens);
    assert_eq!(guarded_answer, direct_answer);

    // A refusal of the key's is the key's alone.
    let refusing =
        json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["zebra"]}}]});
    let reply = app
        .send(Method::PUT, &path, Some(&app.admin), Some(refusing))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let reply = chat_as(&app, &guarded, "Tell me about the zebra.", false).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "content_filter");
    let message = reply.json()["error"]["message"].clone();
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.contains("blocked-terms")),
        "{message}"
    );
    answer(&chat_as(&app, &other, "Tell me about the zebra.", false).await);

    // A stored list that no longer parses fails the key's chat requests (503), never lets
    // them through unchecked; detached, the key runs the server's and the model's only.
    app.state
        .store()
        .set_key_guardrails(&guarded_id.to_string(), Some("{not json"))
        .expect("store");
    let reply = chat_as(&app, &guarded, "Say hi.", false).await;
    assert_eq!(
        reply.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        reply.body
    );
    let reply = app
        .send(Method::DELETE, &path, Some(&app.admin), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert_eq!(reply.json()["guardrails"], json!([]));
    answer(&chat_as(&app, &guarded, "Tell me about the zebra.", false).await);
    let reply = chat_as(&app, &guarded, raw, false).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
}

#[tokio::test]
async fn a_keys_guardrails_are_admins_to_set_and_checked_before_they_are_stored() {
    let app = app(vec![]).await;
    upload(&app, "blocked-terms").await;
    upload(&app, "passthrough").await;
    let (id, _) = infer_key(&app).await;
    let path = format!("/api/keys/{id}/guardrails");
    let body = json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["zebra"]}}]});
    for key in [&app.infer, &app.upload] {
        let reply = app
            .send(Method::PUT, &path, Some(key), Some(body.clone()))
            .await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{:?}", reply.body);
        assert_eq!(
            app.get(&path, Some(key)).await.status,
            StatusCode::FORBIDDEN
        );
        let reply = app.send(Method::DELETE, &path, Some(key), None).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN);
    }
    for method in [Method::PUT, Method::GET, Method::DELETE] {
        let reply = app
            .send(
                method.clone(),
                "/api/keys/999999/guardrails",
                Some(&app.admin),
                (method == Method::PUT).then(|| body.clone()),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{method}: {:?}",
            reply.body
        );
    }
    let reply = app
        .send(Method::PUT, &path, Some(&app.admin), Some(body.clone()))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    // Refused, the stored list unchanged: an unknown plugin, a pipeline plugin, a bad shape.
    for (bad, says) in [
        (json!({"guardrails": [{"plugin": "nope"}]}), "nope"),
        (
            json!({"guardrails": [{"plugin": "passthrough"}]}),
            "not a chat guardrail",
        ),
        (
            json!({"guardrails": [{"plugin": "blocked-terms", "config": 3}]}),
            "config",
        ),
    ] {
        let reply = app
            .send(Method::PUT, &path, Some(&app.admin), Some(bad))
            .await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{:?}", reply.body);
        assert!(reply.error().contains(says), "{}", reply.error());
    }
    let reply = app.get(&path, Some(&app.admin)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["guardrails"], body["guardrails"]);
}

#[tokio::test]
async fn a_keys_guardrails_mask_its_streamed_and_cached_answers_only() {
    let app = App::with_config(|c| {
        c.llm.max_sequences = 2;
        c.llm.context_per_sequence = 512;
        c.llm.batch_tokens = 256;
        c.llm.threads = 1;
        c.cache.bytes = 4 << 20;
    })
    .await;
    app.register("smollm2", "smollm2.gguf");
    upload(&app, "blocked-terms").await;
    app.configure("smollm2", json!({"response_cache": {"enable": true}}))
        .await;
    let (id, guarded) = infer_key(&app).await;
    let (_, other) = infer_key(&app).await;
    let prompt = "Describe the sea in one sentence.";
    let (pieces, _) = streamed(&chat_as(&app, &other, prompt, true).await.body);
    let text = pieces.concat();
    let term = split_term(&pieces, prompt);
    let masking = json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": [term], "action": "mask"}}]});
    let reply = app
        .send(
            Method::PUT,
            &format!("/api/keys/{id}/guardrails"),
            Some(&app.admin),
            Some(masking),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);

    let answer_rewrites = verdicts(&app, "blocked-terms@1.0.0", "answer", "rewrite").await;
    let (masked_pieces, finish) = streamed(&chat_as(&app, &guarded, prompt, true).await.body);
    assert_eq!(finish, "length");
    assert_eq!(masked_pieces.concat(), mask_term(&text, &term));
    assert!(
        verdicts(&app, "blocked-terms@1.0.0", "answer", "rewrite").await > answer_rewrites,
        "the stream's rewrite is counted"
    );
    let (again, _) = streamed(&chat_as(&app, &other, prompt, true).await.body);
    assert_eq!(again.concat(), text, "another key's stream is not masked");

    // Whole answers, cached: each key's is its own, though the prompt is the same: the masked
    // one is stored first, then asked for by a key with other guardrails (which mask a term the
    // answer lacks) and by one without, then each again.
    let (third_id, third) = infer_key(&app).await;
    let unrelated = json!({"guardrails": [{"plugin": "blocked-terms", "config": {"terms": ["zebra"], "action": "mask"}}]});
    let reply = app
        .send(
            Method::PUT,
            &format!("/api/keys/{third_id}/guardrails"),
            Some(&app.admin),
            Some(unrelated),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    assert!(!text.to_lowercase().contains("zebra"), "{text}");
    let masked = mask_term(&text, &term);
    for _ in 0..2 {
        assert_eq!(
            answer(&chat_as(&app, &guarded, prompt, false).await).0,
            masked
        );
        assert_eq!(answer(&chat_as(&app, &third, prompt, false).await).0, text);
        assert_eq!(answer(&chat_as(&app, &other, prompt, false).await).0, text);
    }
    let stats = app
        .get("/v2/models/smollm2/stats", Some(&app.infer))
        .await
        .json();
    let hits = stats["model_stats"][0]["inference_stats"]["cache_hit"]["count"].as_u64();
    assert!(hits.is_some_and(|n| n >= 3), "{stats}");
}
