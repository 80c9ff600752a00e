//! An in-process gateway for handler tests: the real service (store in a temporary data
//! directory, ONNX Runtime, the plugin host) behind the real front door and routes, driven with
//! `tower::ServiceExt::oneshot`: no process, no port, no TLS. What needs those (signals,
//! several hosts, restarts, the browser) stays in the end-to-end suite (`tests/e2e`).
//!
//! Needs `scripts/setup.sh` (`source .cache/env.sh`): `ORT_DYLIB_PATH` for the engine and
//! `INFERGATE_PYTHON` to write the tiny model.

#![allow(dead_code)]

pub mod grpc;
pub mod traces;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use infergate_server::api::front::FrontService;
use infergate_service::config::Config;
use infergate_service::model_repository::{ModelRepository, ParsedConfig};
use infergate_service::phases::Policy;
use infergate_service::state::AppState;
use infergate_store::auth::Scopes;
use infergate_store::Store;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use tower::ServiceExt;

/// A peer address (`"127.0.0.1"`, `"[::1]"`, with or without a port) as the listener marks it.
pub fn peer_addr(peer: &str) -> infergate_server::client_addr::PeerAddr {
    let addr = peer
        .parse::<std::net::SocketAddr>()
        .or_else(|_| {
            peer.trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .map(|ip| std::net::SocketAddr::new(ip, 40000))
        })
        .expect("a peer address");
    infergate_server::client_addr::PeerAddr(addr)
}

/// The tiny model ([1,16] -> x + x), written once per test process.
pub fn tiny_model() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("infergate-inproc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("tiny.onnx");
        let python = std::env::var("INFERGATE_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/tiny_model.py");
        let status = std::process::Command::new(python)
            .arg(script)
            .arg(&path)
            .status()
            .expect("run python (source .cache/env.sh)");
        assert!(status.success(), "writing the tiny model failed");
        path
    })
}

/// `file` among the models `scripts/setup.sh` fetched (`INFERGATE_MODELS`).
pub fn model_file(file: &str) -> PathBuf {
    let dir = std::env::var("INFERGATE_MODELS")
        .expect("INFERGATE_MODELS is unset: run scripts/setup.sh and `source .cache/env.sh`");
    Path::new(&dir).join(file)
}

/// A plugin built by plugins/build.sh (`INFERGATE_PLUGINS`, else `plugins/dist`).
pub fn plugin_file(name: &str) -> PathBuf {
    let dir = std::env::var("INFERGATE_PLUGINS")
        .map(PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist"));
    let path = dir.join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} missing: run plugins/build.sh",
        path.display()
    );
    path
}

/// A `multipart/form-data` body as the model upload reads it: `file` (named `filename`) and,
/// when given, the `config` field. Returns the body and its content type.
pub fn model_form(file: &[u8], filename: &str, config: Option<&str>) -> (Body, String) {
    let boundary = "infergate-test-boundary";
    let mut form = Vec::new();
    form.extend(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    form.extend(file);
    if let Some(config) = config {
        form.extend(
            format!("\r\n--{boundary}\r\nContent-Disposition: form-data; name=\"config\"\r\n\r\n")
                .as_bytes(),
        );
        form.extend(config.as_bytes());
    }
    form.extend(format!("\r\n--{boundary}--\r\n").as_bytes());
    (
        Body::from(form),
        format!("multipart/form-data; boundary={boundary}"),
    )
}

/// A gateway in this process, with the tiny model registered as `tiny` and one key per scope.
pub struct App {
    pub state: Arc<AppState>,
    service: FrontService,
    /// The gRPC service, as the gRPC listener serves it ([`grpc`]).
    pub grpc: axum::Router,
    pub admin: String,
    pub upload: String,
    pub infer: String,
    _dir: tempfile::TempDir,
}

/// An answer: status, headers and the whole body.
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    /// The body as JSON; panics, naming the body, when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{}: the body is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// The `{"error": ...}` message of an error answer.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message in {}", self.json()))
            .to_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

impl App {
    pub async fn start() -> App {
        App::with_config(|_| {}).await
    }

    /// A gateway whose configuration `edit` has changed from the defaults.
    pub async fn with_config(edit: impl FnOnce(&mut Config)) -> App {
        App::build(edit, Vec::new()).await
    }

    /// A gateway with `policies` attached to the request phases, in order.
    pub async fn with_policies(policies: Vec<Arc<dyn Policy>>) -> App {
        App::build(|_| {}, policies).await
    }

    async fn build(edit: impl FnOnce(&mut Config), policies: Vec<Arc<dyn Policy>>) -> App {
        let dir = tempfile::tempdir().expect("data dir");
        let mut config = Config {
            data_dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        edit(&mut config);
        let store = Arc::new(Store::open(dir.path()).expect("store"));
        let engine = Arc::new(
            infergate_engine::Engine::new(
                infergate_service::startup::engine_config(&config).expect("engine config"),
            )
            .expect("engine (ORT_DYLIB_PATH: source .cache/env.sh)"),
        );
        ModelRepository::new(store.clone(), engine.clone())
            .register_file("tiny", tiny_model(), &ParsedConfig::empty())
            .expect("register the tiny model");
        let key = |name: &str, scopes: &str| {
            store
                .create_key(name, &Scopes::parse_list(scopes).expect("scopes"))
                .expect("key")
                .1
        };
        let (admin, upload, infer) = (
            key("admin", "admin"),
            key("upload", "upload"),
            key("infer", "infer"),
        );
        let plugin_host = Arc::new(
            infergate_service::startup::plugin_host(&config, &store).expect("plugin host"),
        );
        let mut state = AppState::new(config, store, engine, plugin_host).expect("service state");
        for policy in policies {
            state = state.with_policy(policy);
        }
        let state = Arc::new(state);
        infergate_service::traffic::spawn(&state);
        let front = Arc::new(infergate_server::api::router(state.clone()));
        App {
            grpc: infergate_server::grpc::server::router(state.clone()),
            state,
            service: FrontService(front),
            admin,
            upload,
            infer,
            _dir: dir,
        }
    }

    /// Serves the front door on a port of 127.0.0.1 (plain HTTP), as a listener does, for what
    /// needs a connection (a WebSocket); it serves until the test's runtime ends.
    pub async fn listen(&self) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(infergate_server::server::run(
            infergate_server::server::Listener {
                listener,
                tls: None,
            },
            infergate_server::api::front::Handler::Api(self.service.0.clone()),
            self.state.clone(),
            std::future::pending(),
        ));
        addr
    }

    /// Sends one request through the front door and hands back the answer as it comes (a
    /// stream read in pieces, or dropped half read).
    pub async fn raw(&self, request: Request<Body>) -> http::Response<Body> {
        let Ok(response) = self.service.clone().oneshot(request).await;
        response
    }

    /// Sends one request through the front door and reads the whole answer.
    pub async fn call(&self, request: Request<Body>) -> Reply {
        let response = self.raw(request).await;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("answer body").to_bytes();
        Reply {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    /// Sends one request as if it came from `peer` (an address, as the listener marks it).
    pub async fn call_from(&self, peer: &str, mut request: Request<Body>) -> Reply {
        request.extensions_mut().insert(peer_addr(peer));
        self.call(request).await
    }

    /// `POST path` with a JSON body from `peer`, with `key` if given.
    pub async fn post_from(&self, peer: &str, path: &str, key: Option<&str>, json: Value) -> Reply {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        self.call_from(
            peer,
            request.body(Body::from(json.to_string())).expect("request"),
        )
        .await
    }

    /// `GET path` from `peer`, with `key` if given.
    pub async fn get_from(&self, peer: &str, path: &str, key: Option<&str>) -> Reply {
        let mut request = Request::builder().uri(path);
        if let Some(key) = key {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        self.call_from(peer, request.body(Body::empty()).expect("request"))
            .await
    }

    /// `method path` with `key` (as `Authorization: Bearer`) and a JSON body, if given.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        json: Option<Value>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(key) = key {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let body = match json {
            Some(json) => {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
                Body::from(json.to_string())
            }
            None => Body::empty(),
        };
        self.call(request.body(body).expect("request")).await
    }

    pub async fn get(&self, path: &str, key: Option<&str>) -> Reply {
        self.send(Method::GET, path, key, None).await
    }

    pub async fn post(&self, path: &str, key: Option<&str>, json: Value) -> Reply {
        self.send(Method::POST, path, key, Some(json)).await
    }

    /// Registers `file` from the models `scripts/setup.sh` fetched (`INFERGATE_MODELS`) as
    /// version 1 of `name`, as `infergate models add` does, and shows it to the catalog.
    pub fn register(&self, name: &str, file: &str) {
        let record = self
            .state
            .models()
            .register_file(name, &model_file(file), &ParsedConfig::empty())
            .unwrap_or_else(|e| panic!("register {file} as {name}: {}", e.message));
        self.state.catalog().insert(record);
    }

    /// Registers the tiny model as `name` too.
    pub fn register_tiny(&self, name: &str) {
        let record = self
            .state
            .models()
            .register_file(name, tiny_model(), &ParsedConfig::empty())
            .unwrap_or_else(|e| panic!("register the tiny model as {name}: {}", e.message));
        self.state.catalog().insert(record);
    }

    /// Changes `model`'s trace settings (Triton's `/v2/models/{model}/trace/setting`, with the
    /// admin key), which must be accepted.
    pub async fn set_trace(&self, model: &str, setting: Value) {
        let path = format!("/v2/models/{model}/trace/setting");
        let reply = self.post(&path, Some(&self.admin), setting).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.json());
    }

    /// Sets the configuration of `model`'s newest version (`PUT /api/models/{model}/config`,
    /// with the upload key), which must be accepted.
    pub async fn configure(&self, model: &str, config: Value) {
        let path = format!("/api/models/{model}/config");
        let set = self
            .send(Method::PUT, &path, Some(&self.upload), Some(config))
            .await;
        assert_eq!(set.status, StatusCode::OK, "{path}: {:?}", set.body);
    }

    /// Uploads `file` from the models `scripts/setup.sh` fetched as a new version of `name`
    /// (`POST /api/models/{name}/versions`, multipart with `config`), with `key`.
    pub async fn upload_model(&self, name: &str, file: &str, config: &Value, key: &str) -> Reply {
        let bytes = std::fs::read(model_file(file)).expect("a model setup.sh fetched");
        let (body, content_type) = model_form(&bytes, file, Some(&config.to_string()));
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("/api/models/{name}/versions"))
            .header(http::header::AUTHORIZATION, format!("Bearer {key}"))
            .header(http::header::CONTENT_TYPE, content_type);
        self.call(request.body(body).expect("request")).await
    }

    /// A key created over the admin API (`POST /api/keys`) with `scopes` and the fields of
    /// `limits` beside them: the answer (`id`, `public_id`, `secret`, the limits stored).
    pub async fn create_key(&self, scopes: &[&str], limits: Value) -> Value {
        let mut body = serde_json::json!({"name": "limited", "scopes": scopes});
        if let (Some(body), Some(limits)) = (body.as_object_mut(), limits.as_object()) {
            body.extend(limits.clone());
        }
        let created = self.post("/api/keys", Some(&self.admin), body).await;
        assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
        created.json()
    }

    /// A new key with these comma-separated scopes.
    pub fn key(&self, scopes: &str) -> String {
        self.state
            .store()
            .create_key("test", &Scopes::parse_list(scopes).expect("scopes"))
            .expect("key")
            .1
    }

    /// A KServe v2 JSON request for the tiny model: sixteen FP32 values.
    pub fn tiny_request(values: &[f32]) -> Value {
        serde_json::json!({
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, values.len()], "data": values}]
        })
    }
}
