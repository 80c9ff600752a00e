//! The HTTP client: every call the dashboard makes goes through here, with the session's key in
//! an `Authorization` header (never in a URL). Errors carry the status and the server's message
//! so each page can show them where they happened.

use crate::session;
use js_sys::{Promise, Uint8Array};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    FormData, Headers, ProgressEvent, ReadableStreamDefaultReader, RequestInit, XmlHttpRequest,
};

#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status; 0 when the request never got an answer.
    pub status: u16,
    pub message: String,
}

impl ApiError {
    fn network(e: JsValue) -> ApiError {
        let detail = e
            .dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .unwrap_or_else(|| "no answer".into());
        ApiError {
            status: 0,
            message: format!("network error: {detail}"),
        }
    }

    pub fn client(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 0,
            message: message.into(),
        }
    }

    /// An endpoint this server does not have (yet): the page shows an "unavailable" state.
    pub fn is_missing(&self) -> bool {
        self.status == 404 && self.message.starts_with("no route for")
    }

    /// The line shown to people: status, its meaning, and the server's own words.
    pub fn describe(&self) -> String {
        let what = match self.status {
            0 => return self.message.clone(),
            400 => "Bad request",
            401 => "Not signed in (401)",
            403 => "Not allowed (403)",
            404 => "Not found (404)",
            409 => "Conflict (409)",
            413 => "Too large (413)",
            429 => "Rate limited (429)",
            503 => "Server busy (503)",
            s if s >= 500 => "Server error",
            _ => "Request failed",
        };
        if matches!(self.status, 400 | 500..=599) && !matches!(self.status, 503) {
            format!("{what} ({}): {}", self.status, self.message)
        } else {
            format!("{what}: {}", self.message)
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

fn error_from(status: u16, text: &str) -> ApiError {
    let message = serde_json::from_str::<infergate_api_types::ErrorBody>(text)
        .map(|body| body.error)
        .unwrap_or_else(|_| {
            let t = text.trim();
            if t.is_empty() {
                format!("HTTP {status}")
            } else {
                t.chars().take(300).collect()
            }
        });
    ApiError { status, message }
}

/// A request body.
pub enum Body {
    None,
    Json(Value),
    /// Triton's binary tensor extension: JSON header followed by raw bytes.
    Binary {
        header_len: usize,
        bytes: Vec<u8>,
    },
    /// A raw body (an image file, text) with its media type, as pipelines take it.
    Raw {
        content_type: String,
        blob: web_sys::Blob,
    },
}

impl Body {
    /// A shared request type (`infergate-api-types`) as a JSON body.
    pub fn typed<T: Serialize>(body: &T) -> Body {
        Body::Json(serde_json::to_value(body).expect("a request type serializes to JSON"))
    }
}

pub struct Answer {
    pub status: u16,
    pub text: String,
}

fn headers(key: Option<&str>) -> Headers {
    let h = Headers::new().expect("Headers");
    if let Some(key) = key {
        let _ = h.set("Authorization", &format!("Bearer {key}"));
    }
    h
}

async fn fetch(
    method: &str,
    path: &str,
    body: Body,
    key: Option<&str>,
) -> ApiResult<web_sys::Response> {
    fetch_with(method, path, body, key, None).await
}

async fn fetch_with(
    method: &str,
    path: &str,
    body: Body,
    key: Option<&str>,
    abort: Option<&web_sys::AbortSignal>,
) -> ApiResult<web_sys::Response> {
    let init = RequestInit::new();
    if let Some(signal) = abort {
        init.set_signal(Some(signal));
    }
    init.set_method(method);
    let h = headers(key);
    match body {
        Body::None => {}
        Body::Json(v) => {
            let _ = h.set("Content-Type", "application/json");
            init.set_body(&JsValue::from_str(&v.to_string()));
        }
        Body::Binary { header_len, bytes } => {
            let _ = h.set("Content-Type", "application/octet-stream");
            let _ = h.set("Inference-Header-Content-Length", &header_len.to_string());
            let array = Uint8Array::from(bytes.as_slice());
            init.set_body(&array);
        }
        Body::Raw { content_type, blob } => {
            let _ = h.set("Content-Type", &content_type);
            init.set_body(&blob);
        }
    }
    init.set_headers(&h);
    let window = web_sys::window().expect("window");
    let resp = JsFuture::from(window.fetch_with_str_and_init(path, &init))
        .await
        .map_err(ApiError::network)?;
    Ok(resp.unchecked_into())
}

async fn text_of(resp: &web_sys::Response) -> ApiResult<String> {
    let promise = resp.text().map_err(ApiError::network)?;
    let text = JsFuture::from(promise).await.map_err(ApiError::network)?;
    Ok(text.as_string().unwrap_or_default())
}

/// One call with an explicit key (sign-in checks a key before storing it).
pub async fn call_with(
    method: &str,
    path: &str,
    body: Body,
    key: Option<&str>,
) -> ApiResult<Answer> {
    let resp = fetch(method, path, body, key).await?;
    let status = resp.status();
    let text = text_of(&resp).await?;
    if (200..300).contains(&status) {
        Ok(Answer { status, text })
    } else {
        Err(error_from(status, &text))
    }
}

/// One call with the session's key; the answer as JSON (`null` for an empty body).
pub async fn call(method: &str, path: &str, body: Body) -> ApiResult<Value> {
    let key = session::stored_key();
    let answer = call_with(method, path, body, key.as_deref()).await?;
    if answer.text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&answer.text).map_err(|e| ApiError {
        status: answer.status,
        message: format!("the server's answer is not JSON: {e}"),
    })
}

/// A call whose answer is shown as it came: the body as text, its media type, and the
/// `Server-Timing` header (stage latencies) when the server sent one.
#[derive(Clone)]
pub struct RawAnswer {
    pub text: String,
    pub content_type: String,
    pub server_timing: Option<String>,
}

pub async fn call_raw(method: &str, path: &str, body: Body) -> ApiResult<RawAnswer> {
    let key = session::stored_key();
    let resp = fetch(method, path, body, key.as_deref()).await?;
    let status = resp.status();
    let header = |name: &str| resp.headers().get(name).ok().flatten();
    let content_type = header("content-type").unwrap_or_default();
    let server_timing = header("server-timing");
    let text = text_of(&resp).await?;
    if (200..300).contains(&status) {
        Ok(RawAnswer {
            text,
            content_type,
            server_timing,
        })
    } else {
        Err(error_from(status, &text))
    }
}

/// `Server-Timing` entries (`name;dur=1.5, ...`) as (name, milliseconds).
pub fn server_timing(header: &str) -> Vec<(String, f64)> {
    header
        .split(',')
        .filter_map(|entry| {
            let mut parts = entry.split(';').map(str::trim);
            let name = parts.next().filter(|n| !n.is_empty())?;
            let dur = parts.find_map(|p| p.strip_prefix("dur="))?.parse().ok()?;
            Some((name.to_string(), dur))
        })
        .collect()
}

pub async fn get<T: DeserializeOwned>(path: &str) -> ApiResult<T> {
    send("GET", path, Body::None).await
}

/// `call`, its answer read as the route's answer type.
pub async fn send<T: DeserializeOwned>(method: &str, path: &str, body: Body) -> ApiResult<T> {
    let v = call(method, path, body).await?;
    serde_json::from_value(v)
        .map_err(|e| ApiError::client(format!("unexpected answer from {path}: {e}")))
}

/// Whether the server lists `name` among the `extensions` of `GET /v2` (how features such as
/// the WebSocket routes are discovered without requests that would log errors).
pub async fn has_extension(name: &str) -> bool {
    match get::<crate::types::ServerMetadata>("/v2").await {
        Ok(server) => server.has_extension(name),
        Err(_) => false,
    }
}

/// Uploads with XMLHttpRequest, whose upload progress events fetch does not offer.
/// `progress` gets the fraction sent, 0.0..=1.0.
pub async fn upload(
    method: &str,
    path: &str,
    body: UploadBody,
    progress: impl Fn(f64) + 'static,
) -> ApiResult<Value> {
    let xhr = XmlHttpRequest::new().map_err(ApiError::network)?;
    xhr.open_with_async(method, path, true)
        .map_err(ApiError::network)?;
    if let Some(key) = session::stored_key() {
        xhr.set_request_header("Authorization", &format!("Bearer {key}"))
            .map_err(ApiError::network)?;
    }
    let on_progress = Closure::<dyn FnMut(ProgressEvent)>::new(move |e: ProgressEvent| {
        if e.length_computable() && e.total() > 0.0 {
            progress(e.loaded() / e.total());
        }
    });
    xhr.upload()
        .map_err(ApiError::network)?
        .set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
    let done = Promise::new(&mut |resolve, reject| {
        xhr.set_onload(Some(&resolve));
        xhr.set_onerror(Some(&reject));
        xhr.set_onabort(Some(&reject));
    });
    match &body {
        UploadBody::Form(form) => xhr.send_with_opt_form_data(Some(form)),
        UploadBody::File(file) => {
            let _ = xhr.set_request_header("Content-Type", "application/octet-stream");
            xhr.send_with_opt_blob(Some(file))
        }
    }
    .map_err(ApiError::network)?;
    let outcome = JsFuture::from(done).await;
    drop(on_progress);
    if outcome.is_err() {
        return Err(ApiError::client(
            "the upload was interrupted (connection closed or refused)",
        ));
    }
    let status = xhr.status().unwrap_or(0);
    let text = xhr.response_text().ok().flatten().unwrap_or_default();
    if (200..300).contains(&status) {
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    } else {
        Err(error_from(status, &text))
    }
}

pub enum UploadBody {
    Form(FormData),
    File(web_sys::File),
}

/// Reads a streamed answer (Server-Sent Events) chunk by chunk; `on_event` gets each `data:`
/// payload. Returns when the stream ends, or when `abort` fires (a Stop button): then with
/// the error "stopped".
pub async fn stream_sse(
    path: &str,
    body: Value,
    abort: Option<&web_sys::AbortSignal>,
    mut on_event: impl FnMut(&str),
) -> ApiResult<()> {
    let key = session::stored_key();
    let resp = match fetch_with("POST", path, Body::Json(body), key.as_deref(), abort).await {
        Err(_) if abort.is_some_and(|a| a.aborted()) => return Err(ApiError::client("stopped")),
        other => other?,
    };
    let status = resp.status();
    if !(200..300).contains(&status) {
        let text = text_of(&resp).await?;
        return Err(error_from(status, &text));
    }
    let stream = resp
        .body()
        .ok_or_else(|| ApiError::client("the answer has no body"))?;
    let reader: ReadableStreamDefaultReader = stream.get_reader().unchecked_into();
    let decoder = Decoder::default();
    let mut pending = String::new();
    let mut decoder = decoder;
    loop {
        let chunk = match JsFuture::from(reader.read()).await {
            Ok(c) => c,
            Err(_) if abort.is_some_and(|a| a.aborted()) => {
                return Err(ApiError::client("stopped"));
            }
            Err(e) => return Err(ApiError::network(e)),
        };
        let done = js_sys::Reflect::get(&chunk, &"done".into())
            .ok()
            .and_then(|v| v.as_bool())
            .unwrap_or(true);
        if done {
            break;
        }
        let value: Uint8Array = js_sys::Reflect::get(&chunk, &"value".into())
            .map_err(ApiError::network)?
            .unchecked_into();
        pending.push_str(&decoder.push(&value.to_vec()));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            for line in event.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    on_event(data.trim_start());
                }
            }
        }
    }
    Ok(())
}

/// UTF-8 decoding across chunk boundaries.
#[derive(Default)]
struct Decoder {
    carry: Vec<u8>,
}

impl Decoder {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.carry.extend_from_slice(bytes);
        match std::str::from_utf8(&self.carry) {
            Ok(s) => {
                let s = s.to_string();
                self.carry.clear();
                s
            }
            Err(e) => {
                let valid = e.valid_up_to();
                let s = String::from_utf8_lossy(&self.carry[..valid]).into_owned();
                self.carry.drain(..valid);
                s
            }
        }
    }
}

/// Path segment escaping for names typed by people.
pub fn seg(s: &str) -> String {
    String::from(js_sys::encode_uri_component(s))
}
