//! Limits set from the command line: `serve`'s default limits and `keys create`/`keys limits`
//! on the data directory, as the running server reads them. The limits' behaviour under load
//! is tested in process (`gateway/server/tests/handlers/limits.rs`, `tokens.rs`).

use crate::harness::{Options, Server, BIN};
use serde_json::{json, Value};

async fn usage(s: &Server, id: &str) -> Value {
    let r = s
        .client
        .get(s.url(&format!("/api/keys/{id}/usage")))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_from_the_command_line_reach_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let defaults = [
        "--default-max-concurrent",
        "1",
        "--default-tokens-per-minute",
        "500",
        "--default-token-budget",
        "9000/day",
    ];
    let s = Server::start_in(
        tmp.path(),
        Options {
            extra_args: defaults.iter().map(|a| a.to_string()).collect(),
            ..Options::default()
        },
    );
    let plain = s.key_with("infer", &[]);
    let own = s.key_with(
        "infer",
        &[
            "--rps",
            "2.5",
            "--max-concurrent",
            "4",
            "--tokens-per-minute",
            "20000",
            "--token-budget",
            "1000000/month",
        ],
    );
    let public_id = |secret: &str| secret.split('_').nth(1).unwrap().to_owned();

    let u = usage(&s, &public_id(&plain)).await;
    assert_eq!(
        (
            &u["limits"]["max_concurrent"],
            &u["limits"]["max_concurrent_source"]
        ),
        (&json!(1), &json!("default"))
    );
    assert_eq!(u["limits"]["tokens_per_minute"], 500);
    assert_eq!(u["limits"]["tokens_per_minute_source"], "default");
    assert_eq!(
        u["limits"]["token_budget"],
        json!({"tokens": 9000, "period": "day"})
    );
    assert_eq!(u["limits"]["rate_limit_source"], "unlimited");

    let u = usage(&s, &public_id(&own)).await;
    assert_eq!(u["limits"]["rate_limit"], json!({"rps": 2.5, "burst": 3}));
    assert_eq!(u["limits"]["max_concurrent"], 4);
    assert_eq!(u["limits"]["tokens_per_minute"], 20000);
    assert_eq!(u["limits"]["token_budget_source"], "key");

    // `keys limits --clear` on the data directory returns the key to the server's defaults.
    let out = std::process::Command::new(BIN)
        .args(["keys", "limits", "--clear", "--data-dir"])
        .arg(&s.data)
        .arg(public_id(&own))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let u = usage(&s, &public_id(&own)).await;
    assert_eq!(
        u["limits"]["max_concurrent"], 1,
        "back to the server default"
    );
    assert_eq!(u["limits"]["rate_limit"], Value::Null);
    assert_eq!(u["limits"]["tokens_per_minute_source"], "default");

    // A malformed default is refused at start, naming the flag.
    let out = std::process::Command::new(BIN)
        .args(["serve", "--default-token-budget", "9000/week", "--data-dir"])
        .arg(tmp.path().join("other"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--default-token-budget") && stderr.contains("week"),
        "{stderr}"
    );
}
