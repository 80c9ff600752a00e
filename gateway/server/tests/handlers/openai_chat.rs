//! A chat model (the demo GGUF, SmolLM2-135M-Instruct) behind `/v1/chat/completions` and
//! `/v1/embeddings`, in process: tool calling in each `tool_choice` mode (forced ones through
//! the grammar on the real model), a two-turn loop, parallel calls, streamed deltas that add up
//! to the unary answer, invalid tools and messages refused naming what is wrong; speculative
//! decoding with and without a prediction giving the same greedy answers, its counts in usage
//! and metrics, a stream cancelled while drafting, speculating and plain streams together;
//! embeddings' shapes, normalisation, batching, token ids and refusals. Generations are short
//! and greedy.

use base64::Engine as _;
use serde_json::{json, Value};
use crate::support::App;

/// A gateway with the demo GGUF registered as `smollm2`, sized for tests on shared cores.
async fn app() -> App {
    app_with(|_| {}).await
}

async fn app_with(more: impl FnOnce(&mut infergate_service::config::Config)) -> App {
    let app = App::with_config(|c| {
        c.llm.max_sequences = 4;
        c.llm.context_per_sequence = 1024;
        c.llm.batch_tokens = 256;
        // Several test processes share 2 cores: llama.cpp's threads would stall each other.
        c.llm.threads = 1;
        c.llm.embeddings.threads = 1;
        c.llm.embeddings.max_input_tokens = 128;
        c.llm.embeddings.batch_tokens = 256;
        c.llm.embeddings.batch_inputs = 4;
        more(c);
    })
    .await;
    let models =
        std::env::var("INFERGATE_MODELS").expect("INFERGATE_MODELS (source .cache/env.sh)");
    let path = std::path::Path::new(&models).join("smollm2.gguf");
    let record = infergate_service::model_repository::ModelRepository::new(
        app.state.store().clone(),
        app.state.engine().clone(),
    )
    .register_file(
        "smollm2",
        &path,
        &infergate_service::model_repository::ParsedConfig::empty(),
    )
    .expect("register the demo GGUF");
    app.state.catalog().insert(record);
    app
}

fn weather() -> Value {
    json!({"type": "function", "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}})
}

fn clock() -> Value {
    json!({"type": "function", "function": {
        "name": "get_time",
        "description": "The local time in a timezone",
        "parameters": {"type": "object",
                       "properties": {"timezone": {"type": "string"}},
                       "required": ["timezone"]}}})
}

fn ask(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

async fn chat(app: &App, body: Value) -> crate::support::Reply {
    app.post("/v1/chat/completions", Some(&app.infer), body)
        .await
}

/// The choice's calls as (name, arguments parsed), each checked to be a well-formed call.
fn calls(choice: &Value) -> Vec<(String, Value)> {
    let Some(list) = choice["message"]["tool_calls"].as_array() else {
        return vec![];
    };
    list.iter()
        .map(|c| {
            assert_eq!(c["type"], "function", "{c}");
            let id = c["id"].as_str().expect("a call id");
            assert!(id.starts_with("call_") && id.len() == 29, "{id}");
            let arguments = c["function"]["arguments"].as_str().expect("arguments text");
            let parsed: Value = serde_json::from_str(arguments).expect("arguments are JSON");
            (c["function"]["name"].as_str().unwrap().to_string(), parsed)
        })
        .collect()
}

/// The `data:` payloads of a Server-Sent Events body, `[DONE]` last.
fn events(body: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(body)
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

/// A streamed chat answer put back together: content, calls (id, name, arguments), finish.
fn reassembled(body: &[u8]) -> (String, Vec<(String, String, String)>, String, Value) {
    let events = events(body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut content = String::new();
    let mut calls: Vec<(String, String, String)> = Vec::new();
    let mut finish = String::new();
    let mut usage = Value::Null;
    for e in &events[..events.len() - 1] {
        let chunk: Value = serde_json::from_str(e).expect("a JSON chunk");
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        if !chunk["usage"].is_null() {
            usage = chunk["usage"].clone();
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(t) = delta["content"].as_str() {
            content.push_str(t);
        }
        for d in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = d["index"].as_u64().unwrap() as usize;
            if let Some(id) = d["id"].as_str() {
                assert_eq!(index, calls.len(), "calls start in order: {chunk}");
                assert_eq!(d["type"], "function");
                calls.push((
                    id.into(),
                    d["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            if let Some(a) = d["function"]["arguments"].as_str() {
                calls[index].2.push_str(a);
            }
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (content, calls, finish, usage)
}

#[tokio::test]
async fn forced_calls_through_the_grammar_and_streamed_deltas_equal_the_answer() {
    let app = app().await;
    // required: a call of one of the tools, arguments valid against its schema. One call:
    // with parallel calls allowed the grammar lets the model go on calling, and a small model
    // repeats its call until max_tokens ends the answer (finish_reason "length").
    let body = json!({"model": "smollm2", "temperature": 0, "max_tokens": 64,
                      "messages": ask("What is the weather in Paris?"),
                      "tools": [weather(), clock()], "tool_choice": "required",
                      "parallel_tool_calls": false});
    let r = chat(&app, body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let answer = r.json();
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert!(choice["message"]["content"].is_null(), "{answer}");
    let made = calls(choice);
    assert!(!made.is_empty(), "{answer}");
    for (name, args) in &made {
        let key = if name == "get_weather" {
            "city"
        } else {
            "timezone"
        };
        assert!(
            ["get_weather", "get_time"].contains(&name.as_str()),
            "{name}"
        );
        assert!(args[key].is_string(), "{args}");
    }

    // The same request streamed: the deltas add up to the same calls (ids are new ones).
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = chat(&app, streamed).await;
    assert_eq!(r.status, 200);
    let (content, deltas, finish, _) = reassembled(&r.body);
    assert_eq!(content, "");
    assert_eq!(finish, "tool_calls");
    let unary = answer["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(deltas.len(), unary.len());
    for ((_, name, arguments), u) in deltas.iter().zip(unary) {
        assert_eq!(name, u["function"]["name"].as_str().unwrap());
        assert_eq!(arguments, u["function"]["arguments"].as_str().unwrap());
    }

    // A named function: that function, whatever the question.
    let r = chat(
        &app,
        json!({"model": "smollm2", "temperature": 0, "max_tokens": 64,
               "messages": ask("What is the weather in Paris?"),
               "tools": [weather(), clock()],
               "tool_choice": {"type": "function", "function": {"name": "get_time"}}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.json());
    let made = calls(&r.json()["choices"][0]);
    assert_eq!(made.len(), 1, "{}", r.json());
    assert_eq!(made[0].0, "get_time");
    assert!(made[0].1["timezone"].is_string());

    // No parallel calls: one call at most, even where several are asked for.
    let r = chat(
        &app,
        json!({"model": "smollm2", "temperature": 0, "max_tokens": 128,
               "messages": ask("What is the weather in Paris, in Rome and in Oslo?"),
               "tools": [weather()], "tool_choice": "required", "parallel_tool_calls": false}),
    )
    .await;
    assert_eq!(calls(&r.json()["choices"][0]).len(), 1, "{}", r.json());
}

#[tokio::test]
async fn parallel_calls_have_their_own_ids_and_indexes() {
    let app = app().await;
    let body = json!({"model": "smollm2", "temperature": 0, "max_tokens": 160,
                      "messages": ask("Call get_weather for Paris and get_time for Europe/Paris, both at once."),
                      "tools": [weather(), clock()], "tool_choice": "required"});
    let r = chat(&app, body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let answer = r.json();
    let list = answer["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!list.is_empty());
    let mut ids: Vec<&str> = list.iter().map(|c| c["id"].as_str().unwrap()).collect();
    ids.dedup();
    assert_eq!(ids.len(), list.len(), "ids are unique: {answer}");
    calls(&answer["choices"][0]);
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let (_, deltas, _, _) = reassembled(&chat(&app, streamed).await.body);
    assert_eq!(deltas.len(), list.len(), "{answer}");
}

#[tokio::test]
async fn a_two_turn_loop_and_the_none_and_auto_choices() {
    let app = app().await;
    let first = chat(
        &app,
        json!({"model": "smollm2", "temperature": 0, "max_tokens": 64,
               "messages": ask("What is the weather in Paris?"),
               "tools": [weather()], "tool_choice": "required"}),
    )
    .await
    .json();
    let message = first["choices"][0]["message"].clone();
    let id = message["tool_calls"][0]["id"].as_str().unwrap().to_string();
    // The call, its result, and the model answers from it.
    let messages = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        message,
        {"role": "tool", "tool_call_id": id, "content": "{\"temperature_c\": 21, \"sky\": \"sunny\"}"},
    ]);
    for choice in ["none", "auto"] {
        let r = chat(
            &app,
            json!({"model": "smollm2", "temperature": 0, "max_tokens": 32,
                   "messages": messages, "tools": [weather()], "tool_choice": choice}),
        )
        .await;
        assert_eq!(r.status, 200, "{choice}: {}", r.json());
        let answer = r.json();
        let choice_json = &answer["choices"][0];
        let made = calls(choice_json);
        let finish = choice_json["finish_reason"].as_str().unwrap();
        if made.is_empty() {
            assert!(["stop", "length"].contains(&finish), "{answer}");
            assert!(!choice_json["message"]["content"]
                .as_str()
                .unwrap()
                .is_empty());
        } else {
            // auto may call again; a call it makes is valid and says so.
            assert_eq!(choice, "auto", "{answer}");
            assert_eq!(finish, "tool_calls");
            assert!(made
                .iter()
                .all(|(n, a)| n == "get_weather" && a["city"].is_string()));
        }
    }
    // Tools offered with `none` are not offered: the answer is text.
    let r = chat(
        &app,
        json!({"model": "smollm2", "temperature": 0, "max_tokens": 16,
               "messages": ask("What is the weather in Paris?"),
               "tools": [weather()], "tool_choice": "none"}),
    )
    .await;
    assert!(calls(&r.json()["choices"][0]).is_empty(), "{}", r.json());
}

#[tokio::test]
async fn bad_tools_and_tool_messages_are_refused_naming_what_is_wrong() {
    let app = app().await;
    let with = |tools: Value, choice: Value| {
        json!({"model": "smollm2", "max_tokens": 4, "messages": ask("hi"),
               "tools": tools, "tool_choice": choice})
    };
    let big = json!({"type": "object", "properties": {"x": {"type": "string",
                     "description": "y".repeat(20_000)}}});
    let cases = [
        (
            with(
                json!([{"type": "function", "function": {"name": "bad name!"}}]),
                Value::Null,
            ),
            "tools[0] ('bad name!')",
        ),
        (
            with(
                json!([weather(), {"type": "function", "function": {"name": "f", "parameters": 3}}]),
                Value::Null,
            ),
            "tools[1] ('f'): function.parameters",
        ),
        (
            with(
                json!([{"type": "function", "function": {"name": "f", "parameters": big}}]),
                Value::Null,
            ),
            "tools[0] ('f'): parameters is",
        ),
        (
            with(
                json!([{"type": "function", "function": {"name": "f", "parameters":
              {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}}}]),
                Value::Null,
            ),
            "tools[0] ('f'): parameters.properties.a.uniqueItems",
        ),
        (
            with(
                json!([{"type": "custom", "custom": {"name": "f"}}]),
                Value::Null,
            ),
            "tools[0]: type 'custom'",
        ),
        (
            with(json!([weather(), weather()]), Value::Null),
            "tools[1] ('get_weather'): another tool",
        ),
        (
            with(
                json!([weather()]),
                json!({"type": "function", "function": {"name": "nope"}}),
            ),
            "tool_choice: no tool is named 'nope'",
        ),
        (
            with(Value::Null, json!("required")),
            "tool_choice: forcing a call needs tools",
        ),
        (
            with(json!([weather()]), json!("sometimes")),
            "tool_choice: 'sometimes'",
        ),
    ];
    for (body, expected) in cases {
        let r = chat(&app, body.clone()).await;
        assert_eq!(r.status, 400, "{body}");
        let message = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains(expected),
            "{message:?} should name {expected:?}"
        );
        assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    }
    let call = json!({"id": "call_1", "type": "function",
                      "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}});
    let messages = [
        (
            json!([{"role": "user", "content": "hi"}, {"role": "tool", "content": "21"}]),
            "messages[1].tool_call_id",
        ),
        (
            json!([{"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_2", "content": "21"}]),
            "messages[2]: tool_call_id 'call_2' answers no earlier assistant tool call",
        ),
        (
            json!([{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "get_weather", "arguments": "[1]"}}]}]),
            "messages[1].tool_calls[0].function.arguments",
        ),
        (
            json!([{"role": "user", "content": "hi", "tool_calls": [call]}]),
            "messages[0].tool_calls: only assistant messages",
        ),
        (
            json!([{"role": "function", "content": "hi"}]),
            "messages[0].role: 'function'",
        ),
    ];
    for (messages, expected) in messages {
        let r = chat(
            &app,
            json!({"model": "smollm2", "max_tokens": 4, "messages": messages, "tools": [weather()]}),
        )
        .await;
        assert_eq!(r.status, 400, "{messages}");
        let message = r.json()["error"]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains(expected),
            "{message:?} should name {expected:?}"
        );
    }
    // A forced call cannot also follow a response format.
    let r = chat(
        &app,
        json!({"model": "smollm2", "max_tokens": 4, "messages": ask("hi"), "tools": [weather()],
               "tool_choice": "required", "response_format": {"type": "json_object"}}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("response_format"));
    // Completions take no tools.
    let r = app
        .post(
            "/v1/completions",
            Some(&app.infer),
            json!({"model": "smollm2", "prompt": "hi", "tools": [weather()]}),
        )
        .await;
    assert_eq!(r.status, 400);
}

/// The grounded prompts of the speculation set: answers that copy their input.
const COPY: &str = "Repeat this list exactly, one item per line:\napples\nbananas\ncherries\ndates\nelderberries\nfigs\ngrapes";

#[tokio::test]
async fn speculation_keeps_greedy_answers_and_reports_its_drafts() {
    let app = app().await;
    let body = |speculation: Value, prediction: Option<&str>| {
        let mut b = json!({"model": "smollm2", "temperature": 0, "max_tokens": 48,
                           "messages": ask(COPY), "speculation": speculation});
        if let Some(p) = prediction {
            b["prediction"] = json!({"type": "content", "content": [{"type": "text", "text": p}]});
        }
        b
    };
    let plain = chat(&app, body(json!({"enabled": false}), None))
        .await
        .json();
    let text = plain["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let details = &plain["usage"]["completion_tokens_details"];
    assert_eq!(details["accepted_prediction_tokens"], 0, "{plain}");
    assert_eq!(details["rejected_prediction_tokens"], 0, "{plain}");

    // n-grams alone, then the answer itself as the prediction: the same text.
    let ngrams = chat(&app, body(json!({"enabled": true}), None))
        .await
        .json();
    assert_eq!(
        ngrams["choices"][0]["message"]["content"],
        text.as_str(),
        "{ngrams}"
    );
    let predicted = chat(&app, body(Value::Null, Some(&text))).await.json();
    assert_eq!(predicted["choices"][0]["message"]["content"], text.as_str());
    let details = &predicted["usage"]["completion_tokens_details"];
    let accepted = details["accepted_prediction_tokens"].as_u64().unwrap();
    let completion = predicted["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(accepted > 0 && accepted < completion, "{predicted}");
    // A wrong prediction costs rejected drafts, never the answer.
    let wrong = chat(
        &app,
        body(Value::Null, Some("zebras\nyaks\nxerus\nwombats\nvoles")),
    )
    .await
    .json();
    assert_eq!(wrong["choices"][0]["message"]["content"], text.as_str());

    // Metrics count the drafts of the version.
    let metrics = app.get("/metrics", Some(&app.admin)).await;
    let text = String::from_utf8_lossy(&metrics.body).to_string();
    let accepted_total = text
        .lines()
        .find(|l| l.starts_with("infergate_llm_spec_decode_num_accepted_tokens_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| {
            let llm: Vec<&str> = text.lines().filter(|l| l.contains("llm_")).collect();
            panic!("no accepted-drafts counter among {llm:#?}")
        });
    assert!(accepted_total >= accepted as f64, "{accepted_total}");

    // Bad predictions and speculation settings are refused.
    for (bad, expected) in [
        (json!({"type": "text", "content": "x"}), "prediction.type"),
        (
            json!({"type": "content", "content": 3}),
            "prediction.content",
        ),
        (
            json!({"type": "content", "content": [{"type": "image_url"}]}),
            "prediction.content[0]",
        ),
    ] {
        let mut b = body(Value::Null, None);
        b["prediction"] = bad;
        let r = chat(&app, b).await;
        assert_eq!(r.status, 400);
        assert!(
            r.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains(expected),
            "{}",
            r.json()
        );
    }
    let r = chat(&app, body(json!({"max_draft": 99}), None)).await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_draft"));
}

#[tokio::test]
async fn speculating_and_plain_streams_together_answer_as_alone_and_a_cancelled_one_is_freed() {
    // With rows priced as dear as a pass over the weights (the default), drafting rarely pays
    // beside another sequence; cheap rows make the scheduler draft here, so one batch verifies
    // drafted rows next to a plain sequence's.
    let app = app_with(|c| c.llm.speculation.row_cost = 0.05).await;
    let request = |speculate: bool, stream: bool| {
        let mut b = json!({"model": "smollm2", "temperature": 0, "max_tokens": 40,
                           "messages": ask(COPY), "stream": stream,
                           "stream_options": {"include_usage": true},
                           "speculation": {"enabled": speculate}});
        if speculate {
            b["prediction"] = json!({"type": "content", "content": "apples\nbananas\ncherries"});
        }
        b
    };
    let alone = chat(&app, request(false, false)).await.json();
    let alone = alone["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let (a, b) = tokio::join!(
        chat(&app, request(true, true)),
        chat(&app, request(false, true))
    );
    let (spec_text, _, _, spec_usage) = reassembled(&a.body);
    let (plain_text, _, _, plain_usage) = reassembled(&b.body);
    assert_eq!(spec_text, alone);
    assert_eq!(plain_text, alone);
    assert!(
        spec_usage["completion_tokens_details"]["accepted_prediction_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    assert_eq!(
        plain_usage["completion_tokens_details"]["accepted_prediction_tokens"],
        0
    );

    // A stream dropped after its first chunks: its sequence is freed at the scheduler's next
    // step, drafting or not.
    let mut long = request(true, true);
    long["max_tokens"] = json!(400);
    long["messages"] = ask(&COPY.repeat(3));
    let request = http::Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header("authorization", format!("Bearer {}", app.infer))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(long.to_string()))
        .unwrap();
    let response = app.raw(request).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body().into_data_stream();
    use futures_util::StreamExt;
    let mut seen = 0;
    while seen < 4 {
        let chunk = body.next().await.expect("a chunk").expect("body");
        seen += events(&chunk).len();
    }
    drop(body);
    let model = app
        .state
        .llm()
        .loaded()
        .into_iter()
        .next()
        .expect("loaded")
        .1;
    let mut freed = false;
    for _ in 0..200 {
        let s = model.stats();
        if s.running + s.waiting == 0 {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        freed,
        "the cancelled sequence is still running: {:?}",
        model.stats()
    );
    assert!(model.stats().cancelled >= 1);
}

fn vector(item: &Value) -> Vec<f64> {
    match &item["embedding"] {
        Value::Array(v) => v.iter().map(|x| x.as_f64().unwrap()).collect(),
        Value::String(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
            .chunks_exact(4)
            .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect(),
        other => panic!("not an embedding: {other}"),
    }
}

#[tokio::test]
async fn gguf_embeddings_beside_chat() {
    let app = app().await;
    let embed = |input: Value, extra: Value| {
        let mut b = json!({"model": "smollm2", "input": input});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        app.post("/v1/embeddings", Some(&app.infer), b)
    };
    let texts = [
        "The cat sat on the mat.",
        "A dog barked twice.",
        "Paris is in France.",
    ];
    let r = embed(json!(texts), json!({})).await;
    assert_eq!(r.status, 200, "{}", r.json());
    let batch = r.json();
    assert_eq!(batch["object"], "list");
    assert_eq!(batch["model"], "smollm2");
    let data = batch["data"].as_array().unwrap();
    assert_eq!(data.len(), 3);
    let dims = vector(&data[0]).len();
    assert_eq!(dims, 576, "SmolLM2-135M's hidden size");
    for (i, item) in data.iter().enumerate() {
        assert_eq!(item["index"], i);
        let v = vector(item);
        assert_eq!(v.len(), dims);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "unit length: {norm}");
    }
    assert!(batch["usage"]["prompt_tokens"].as_u64().unwrap() >= 15);
    // Each alone: the same vectors as in the batch; base64 the same numbers.
    for (i, t) in texts.iter().enumerate() {
        let alone = embed(json!(t), json!({"encoding_format": "base64"}))
            .await
            .json();
        let a = vector(&alone["data"][0]);
        let b = vector(&data[i]);
        let most = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(most < 1e-5, "input {i}: {most}");
    }
    // Token ids embed as their text does.
    let tokens = app.state.llm().loaded()[0]
        .1
        .tokenize("Paris is in France.");
    let by_ids = embed(json!([tokens]), json!({})).await;
    assert_eq!(by_ids.status, 200, "{}", by_ids.json());
    let most = vector(&by_ids.json()["data"][0])
        .iter()
        .zip(vector(&data[2]))
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max);
    assert!(most < 1e-5, "{most}");
    // The model's own dimensions are accepted, others refused; so are empty inputs.
    assert_eq!(
        embed(json!("x"), json!({"dimensions": 576})).await.status,
        200
    );
    for (input, extra, expected) in [
        (json!("x"), json!({"dimensions": 64}), "dimensions"),
        (json!(["a", ""]), json!({}), "input[1]"),
        (json!([[1, 2], [999999]]), json!({}), "input[1]"),
        (json!([{"text": "a"}]), json!({}), "input must be"),
        (
            json!("x"),
            json!({"encoding_format": "int8"}),
            "encoding_format",
        ),
    ] {
        let r = embed(input.clone(), extra).await;
        assert_eq!(r.status, 400, "{input}");
        let text = String::from_utf8_lossy(&r.body).to_string();
        assert!(text.contains(expected), "{text}: {expected}");
    }
    // Its memory counts; the chat side still answers.
    assert!(
        app.state
            .llm()
            .embedding_bytes(&app.state.llm().loaded()[0].0)
            > 0
    );
    let r = chat(
        &app,
        json!({"model": "smollm2", "max_tokens": 4, "messages": ask("hi")}),
    )
    .await;
    assert_eq!(r.status, 200);
    let models = app.get("/v1/models", Some(&app.infer)).await.json();
    assert!(models["data"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["id"] == "smollm2"));
}
