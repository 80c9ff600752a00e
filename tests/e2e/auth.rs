use crate::harness::Server;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revocation_takes_effect_on_the_next_request() {
    let s = Server::with_models(&[("cls", "ocr-cls.onnx")]);
    let url = s.url("/v2/models/cls");

    // Created and revoked through the admin API.
    let created: Value = s
        .client
        .post(s.url("/api/keys"))
        .bearer_auth(&s.admin_key)
        .json(&json!({"name": "app", "scopes": ["infer"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let secret = created["secret"].as_str().unwrap().to_string();
    assert_eq!(
        s.client
            .get(&url)
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let listed: Value = s.get_json("/api/keys", &s.admin_key).await;
    assert!(
        !listed.to_string().contains(&secret),
        "secrets are never listed"
    );
    let id = created["id"].as_i64().unwrap();
    let revoked = s
        .client
        .delete(s.url(&format!("/api/keys/{id}")))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 200);
    assert_eq!(
        s.client
            .get(&url)
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    // Created and revoked offline while the server runs: the server sees it within the
    // millisecond it trusts its last look at the database (the CLI's own run takes longer), and a
    // key created offline at once.
    let offline = s.key("infer");
    assert_eq!(
        s.client
            .get(&url)
            .bearer_auth(&offline)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let public_id = offline.split('_').nth(1).unwrap();
    let out = std::process::Command::new(crate::harness::BIN)
        .args(["keys", "revoke", public_id, "--data-dir"])
        .arg(&s.data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        s.client
            .get(&url)
            .bearer_auth(&offline)
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let missing = s
        .client
        .delete(s.url("/api/keys/999999"))
        .bearer_auth(&s.admin_key)
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_key_file_is_private_and_cli_prints_only_the_secret() {
    use std::os::unix::fs::PermissionsExt;
    let s = Server::with_models(&[]);
    let mode = std::fs::metadata(s.data.join("admin.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let secret = s.key("infer,upload");
    assert!(
        secret.starts_with("ig_") && !secret.contains(char::is_whitespace),
        "{secret}"
    );
    let who: Value = s.get_json("/api/whoami", &secret).await;
    assert_eq!(who["scopes"], json!(["infer", "upload"]));

    // Online key creation through the admin API from the CLI.
    let out = std::process::Command::new(crate::harness::BIN)
        .args([
            "keys",
            "create",
            "--scope",
            "admin",
            "--url",
            &s.addr,
            "--api-key",
            &s.admin_key,
            "--ca-cert",
        ])
        .arg(s.data.join("tls/cert.pem"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let online = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert_eq!(
        s.client
            .get(s.url("/api/keys"))
            .bearer_auth(&online)
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // The other online key commands read the admin API's answers: a table and a summary.
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(crate::harness::BIN)
            .arg("keys")
            .args(args)
            .args(["--url", &s.addr, "--api-key", &s.admin_key, "--ca-cert"])
            .arg(s.data.join("tls/cert.pem"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        (String::from_utf8(out.stdout).unwrap(), stderr)
    };
    let id = online.split('_').nth(1).unwrap();
    let (table, _) = cli(&["list"]);
    let row = table
        .lines()
        .find(|l| l.contains(id))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("admin") && row.contains("active"), "{row}");
    let (_, summary) = cli(&["limits", id, "--rps", "3", "--max-concurrent", "2"]);
    assert!(
        summary.contains(r#"rate_limit {"rps":3.0,"burst":3}, max_concurrent 2"#),
        "{summary}"
    );
}
