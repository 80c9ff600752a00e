//! The dashboard's traffic policy at the edge, in a real browser against the real gateway: a
//! key's token limits edited and a key created with them from the keys page, each stored by
//! the server; a model's split edited, promoted and rolled back from the models page (each
//! checked in the server's answer), each version's figures beside the split, the response
//! cache's hit rate, and the mark of a model whose requests are payload-logged.

use crate::dashboard::{dist, screenshots, unexpected};
use crate::harness::{file_sink_config, model, register, Options, Server};
use crate::webdriver::{browser_binaries, spki_sha256, Driver};
use serde_json::{json, Value};

/// The model's policy as the server stores it.
async fn policy(s: &Server) -> Value {
    s.get_json("/api/models/cls/traffic", &s.admin_key).await["policy"].clone()
}

/// Sets a weight input as a person would (WebDriver's clear sends no input event).
const SET_VALUE: &str = "const e = document.querySelector(arguments[0]); e.value = arguments[1]; \
    e.dispatchEvent(new Event('input', {bubbles: true}));";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_limits_splits_and_the_cache_from_the_dashboard() {
    let (chromium, chromedriver) = browser_binaries();
    let dist = dist();
    let tmp = tempfile::tempdir().unwrap();
    // Two versions of one model, the same file: a split between them.
    register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    register(tmp.path(), "cls", &model("ocr-cls.onnx"));
    let config = file_sink_config(tmp.path(), "audit", "payload.jsonl");
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: vec![
                "--dashboard-dir".into(),
                dist.display().to_string(),
                "--cache-bytes".into(),
                "1000000".into(),
                "--config".into(),
                config.display().to_string(),
            ],
            ..Options::default()
        },
    );
    let admin = s.admin_key.clone();
    let send = |method: reqwest::Method, path: &str, body: Value| {
        s.client
            .request(method, s.url(path))
            .bearer_auth(&admin)
            .json(&body)
            .send()
    };
    let r = send(
        reqwest::Method::POST,
        "/api/keys",
        json!({"name": "metered", "scopes": ["infer"]}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 201);
    // The response cache on for the newest version; the same request twice: a miss, a hit.
    let r = send(
        reqwest::Method::PUT,
        "/api/models/cls/config",
        json!({"response_cache": {"enable": true}}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let body = json!({"inputs": [{"name": "x", "shape": [1, 3, 48, 192], "datatype": "FP32",
                                  "data": vec![0.5f32; 3 * 48 * 192]}]});
    for _ in 0..2 {
        let r = s.post_json("/v2/models/cls/infer", &admin, &body).await;
        assert_eq!(r.status(), 200);
    }

    let cert = std::fs::read_to_string(s.data.join("tls/cert.pem")).unwrap();
    let driver = Driver::start(&chromedriver).await;
    let b = driver.session(&chromium, &spki_sha256(&cert)).await;
    let shots = screenshots();
    let base = s.addr.clone();
    b.set_viewport(1400, 900).await;
    b.goto(&format!("{base}/")).await;
    b.type_into("#api-key", &admin).await;
    b.click("#sign-in").await;
    b.find(".topbar .who").await;

    // Token limits from the keys page; the server stores them.
    b.click("a[href='/keys']").await;
    let row = "tr[data-key-name='metered']";
    b.click(&format!("{row} .edit-limits")).await;
    b.type_into(&format!("{row} .edit-tpm"), "1200").await;
    b.type_into(&format!("{row} .edit-budget"), "50000").await;
    b.script(
        "const e = document.querySelector(arguments[0]); e.value = 'month'; \
         e.dispatchEvent(new Event('change', {bubbles: true}));",
        json!([format!("{row} .edit-period")]),
    )
    .await;
    b.click(&format!("{row} .save-limits")).await;
    let shown = b
        .wait_text(&format!("{row} .key-tokens"), |t| t.contains("1.2k/min"))
        .await;
    assert!(shown.contains("50k/month"), "{shown}");
    let keys = s.get_json("/api/keys", &admin).await;
    let metered = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "metered")
        .cloned()
        .unwrap();
    assert_eq!(metered["tokens_per_minute"], 1200, "{metered}");
    assert_eq!(
        metered["token_budget"],
        json!({"tokens": 50000, "period": "month"}),
        "{metered}"
    );
    // A new key with its token limits from the create form.
    b.type_into("#key-name", "form-made").await;
    b.type_into("#key-tpm", "500").await;
    b.type_into("#key-budget", "1000").await;
    b.click("#create-key").await;
    b.find("#new-key-secret").await;
    let keys = s.get_json("/api/keys", &admin).await;
    let made = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "form-made")
        .cloned()
        .unwrap_or_else(|| panic!("no key made by the form: {keys}"));
    assert_eq!(made["tokens_per_minute"], 500, "{made}");
    assert_eq!(
        made["token_budget"],
        json!({"tokens": 1000, "period": "day"}),
        "{made}"
    );
    b.screenshot(&shots.join("traffic-01-key-tokens.png")).await;

    // The split from the models page: 90/10, then promote version 2, then roll back.
    b.click("a[href='/models']").await;
    let panel = "section.model[data-model='cls'] details.traffic";
    let cache = b
        // Before the page has read the statistics the line says "no lookups yet".
        .wait_text(&format!("{panel} .cache-rate"), |t| t.contains("hits"))
        .await;
    assert!(cache.contains("50.0% hits (1 of 2 lookups)"), "{cache}");
    // A weight the server would refuse is refused here, in the panel's error box.
    let weight = |v: u64| format!("{panel} input.split-weight[data-version='{v}']");
    b.script(SET_VALUE, json!([weight(1), "0"])).await;
    b.click(&format!("{panel} .save-split")).await;
    let refused = b
        .wait_text(&format!("{panel} .error"), |t| !t.is_empty())
        .await;
    assert!(refused.contains("Version 1"), "{refused}");
    assert_eq!(policy(&s).await, Value::Null);
    b.script(SET_VALUE, json!([weight(1), "90"])).await;
    b.script(SET_VALUE, json!([weight(2), "10"])).await;
    b.wait_text(&format!("{panel} tr[data-version='1'] .split-share"), |t| {
        t == "90.0%"
    })
    .await;
    b.click(&format!("{panel} .save-split")).await;
    b.wait_text(&format!("{panel} .success"), |t| t.starts_with("Saved"))
        .await;
    let split = json!([{"version": 1, "weight": 90}, {"version": 2, "weight": 10}]);
    assert_eq!(policy(&s).await, json!({ "split": split }));

    // Requests without a version follow the split; each version's figures show beside it.
    for _ in 0..4 {
        let r = s.post_json("/v2/models/cls/infer", &admin, &body).await;
        assert_eq!(r.status(), 200);
    }
    b.click(&format!("{panel} .promote[data-version='2']"))
        .await;
    b.wait_text(&format!("{panel} .success"), |t| t.starts_with("Promoted"))
        .await;
    assert_eq!(
        policy(&s).await,
        json!({"split": [{"version": 2, "weight": 100}]})
    );
    let figures = s.get_json("/api/models/cls/traffic", &admin).await["figures"].clone();
    let served: u64 = figures["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["requests"].as_u64().unwrap())
        .sum();
    // Two before the split, four under it.
    assert_eq!(served, 6, "{figures}");
    let v1 = figures["versions"][0]["requests"].as_u64().unwrap();
    b.wait_text(
        &format!("{panel} tr[data-version='1'] .version-requests"),
        |t| t == v1.to_string(),
    )
    .await;
    b.screenshot(&shots.join("traffic-02-promoted.png")).await;

    b.click(&format!("{panel} .rollback")).await;
    b.wait_text(&format!("{panel} .success"), |t| {
        t.starts_with("Rolled back")
    })
    .await;
    assert_eq!(policy(&s).await, json!({ "split": split }));
    let weights = b
        .script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.value)",
            json!([format!("{panel} input.split-weight")]),
        )
        .await;
    assert_eq!(weights, json!(["90", "10"]));

    // A payload log set over the API shows on the model's card at the next refresh, and goes
    // when it is removed.
    let logged = "section.model[data-model='cls'] .badge-logged";
    assert!(b.find_now(logged).await.is_none());
    let r = send(
        reqwest::Method::PUT,
        "/api/models/cls/payload-log",
        json!({"mode": "all", "sample": 0.1, "sink": "audit"}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let mark = b.wait_text(logged, |t| !t.is_empty()).await;
    assert_eq!(mark, "payload log: all, 10% → audit");
    let r = send(
        reqwest::Method::DELETE,
        "/api/models/cls/payload-log",
        json!({}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while b.find_now(logged).await.is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the mark stays after DELETE"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }

    let errors = unexpected(b.severe_logs().await);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    b.close().await;
}
