//! A minimal W3C WebDriver client over reqwest, driving Debian's headless Chromium through
//! chromedriver: just what the dashboard tests use.

use base64::Engine;
use serde_json::{json, Value};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

/// The browser and its driver, or a failure that names the setup step.
pub fn browser_binaries() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path("chromium"));
    let driver = std::env::var_os("CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| on_path("chromedriver"));
    match (chromium, driver) {
        (Some(c), Some(d)) => (c, d),
        _ => panic!(
            "the dashboard browser tests need Debian's chromium and chromium-driver: \
             run `apt-get install -y chromium chromium-driver` (scripts/setup.sh does)"
        ),
    }
}

/// SHA-256 of the certificate's SubjectPublicKeyInfo, base64: Chromium trusts exactly this key
/// with `--ignore-certificate-errors-spki-list` (the test's own self-signed server, nothing else).
pub fn spki_sha256(cert_pem: &str) -> String {
    let b64: String = cert_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("certificate PEM");
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version, serial, signature,
    // issuer, validity, subject, subjectPublicKeyInfo, ... } ... }
    fn tlv(d: &[u8]) -> (usize, usize) {
        // (header length, content length)
        let first = d[1] as usize;
        if first < 0x80 {
            (2, first)
        } else {
            let n = first & 0x7f;
            let len = d[2..2 + n]
                .iter()
                .fold(0usize, |a, b| (a << 8) | *b as usize);
            (2 + n, len)
        }
    }
    let (h, _) = tlv(&der);
    let tbs = &der[h..];
    let (h, _) = tlv(tbs);
    let mut rest = &tbs[h..];
    let mut skip = if rest[0] == 0xa0 { 6 } else { 5 };
    while skip > 0 {
        let (h, l) = tlv(rest);
        rest = &rest[h + l..];
        skip -= 1;
    }
    let (h, l) = tlv(rest);
    let spki = &rest[..h + l];
    use sha2::Digest;
    base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(spki))
}

pub struct Driver {
    process: Child,
    http: reqwest::Client,
    base: String,
    _profile: tempfile::TempDir,
}

pub struct Session<'a> {
    driver: &'a Driver,
    id: String,
}

impl Driver {
    pub async fn start(driver: &Path) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not start within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Driver {
            process,
            http,
            base,
            _profile: tempfile::tempdir().unwrap(),
        }
    }

    pub async fn session(&self, chromium: &Path, spki: &str) -> Session<'_> {
        let args = vec![
            "--headless".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1280,800".into(),
            format!("--user-data-dir={}", self._profile.path().display()),
            format!("--ignore-certificate-errors-spki-list={spki}"),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let v = self
            .send(reqwest::Method::POST, "/session", Some(caps))
            .await;
        Session {
            driver: self,
            id: v["sessionId"].as_str().expect("session id").to_string(),
        }
    }

    async fn send(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method.clone(), format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = resp.status();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(
            status.is_success(),
            "WebDriver {method} {path}: {status} {v}"
        );
        v["value"].clone()
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

#[derive(Clone)]
pub struct Element(String);

impl Session<'_> {
    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.driver
            .send(method, &format!("/session/{}{path}", self.id), body)
            .await
    }

    async fn try_cmd(&self, path: &str, body: Value) -> Option<Value> {
        let resp = self
            .driver
            .http
            .post(format!("{}/session/{}{path}", self.driver.base, self.id))
            .json(&body)
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        Some(resp.json::<Value>().await.ok()?["value"].clone())
    }

    pub async fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Sizes the window so the page's viewport is `width`×`height` CSS pixels.
    pub async fn set_viewport(&self, width: u32, height: u32) {
        self.cmd(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
        let inner = self
            .script("return [window.innerWidth, window.innerHeight]", json!([]))
            .await;
        let (iw, ih) = (
            inner[0].as_u64().unwrap_or(0) as u32,
            inner[1].as_u64().unwrap_or(0) as u32,
        );
        let (w, h) = (
            width + width.saturating_sub(iw),
            height + height.saturating_sub(ih),
        );
        self.cmd(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": w, "height": h})),
        )
        .await;
    }

    pub async fn find_now(&self, css: &str) -> Option<Element> {
        let v = self
            .try_cmd("/element", json!({"using": "css selector", "value": css}))
            .await?;
        Some(Element(v[ELEMENT].as_str()?.to_string()))
    }

    /// Waits up to 30 s for an element.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(e) = self.find_now(css).await {
                return e;
            }
            if Instant::now() > deadline {
                self.fail(&format!("no element '{css}' within 30 s")).await;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    /// Panics with what the page shows and logged, after saving a screenshot of it.
    async fn fail(&self, what: &str) -> ! {
        let body = self.text_of("body").await.unwrap_or_default();
        let logs = self.severe_logs().await;
        let shot = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/dashboard-screenshots/failure.png");
        let _ = std::fs::create_dir_all(shot.parent().unwrap());
        self.screenshot(&shot).await;
        panic!(
            "{what}; the page says:\n{body}\nconsole errors: {logs:#?}\nscreenshot: {}",
            shot.display()
        );
    }

    /// Waits until the element's text satisfies `ok`; returns the text.
    pub async fn wait_text(&self, css: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(t) = self.text_of(css).await {
                if ok(&t) {
                    return t;
                }
                if Instant::now() > deadline {
                    self.fail(&format!("'{css}' never had the expected text; last: {t}"))
                        .await;
                }
            } else if Instant::now() > deadline {
                self.fail(&format!("no element '{css}' within 30 s")).await;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    }

    pub async fn text_of(&self, css: &str) -> Option<String> {
        let e = self.find_now(css).await?;
        let v = self.try_cmd_get(&format!("/element/{}/text", e.0)).await?;
        v.as_str().map(str::to_string)
    }

    async fn try_cmd_get(&self, path: &str) -> Option<Value> {
        let resp = self
            .driver
            .http
            .get(format!("{}/session/{}{path}", self.driver.base, self.id))
            .send()
            .await
            .ok()?;
        if !resp.status().is_success() {
            return None;
        }
        Some(resp.json::<Value>().await.ok()?["value"].clone())
    }

    pub async fn click(&self, css: &str) {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/click", e.0),
            Some(json!({})),
        )
        .await;
    }

    pub async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/clear", e.0),
            Some(json!({})),
        )
        .await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/value", e.0),
            Some(json!({"text": text})),
        )
        .await;
    }

    /// Sets a file input to a local file (chromedriver reads it).
    pub async fn choose_file(&self, css: &str, path: &Path) {
        let e = self.find(css).await;
        let text = path.to_str().unwrap();
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{}/value", e.0),
            Some(json!({"text": text})),
        )
        .await;
    }

    pub async fn script(&self, script: &str, args: Value) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    pub async fn screenshot(&self, file: &Path) {
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("screenshot"))
            .expect("base64 png");
        std::fs::write(file, png).expect("write screenshot");
    }

    /// Browser console entries at SEVERE level since the last call.
    pub async fn severe_logs(&self) -> Vec<String> {
        let v = self
            .try_cmd("/se/log", json!({"type": "browser"}))
            .await
            .unwrap_or(Value::Null);
        v.as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub async fn close(self) {
        self.cmd(reqwest::Method::DELETE, "", None).await;
    }
}
