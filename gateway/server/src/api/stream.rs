//! `GET /v2/stream`: inference over one WebSocket.
//!
//! Authentication, checked before any work: `Authorization: Bearer KEY` / `X-API-Key` on the
//! upgrade request (refused with 401/403 before upgrading), or, for browsers that cannot set
//! headers, the key offered as a subprotocol next to `infergate.v1`
//! (`new WebSocket(url, ["infergate.v1", KEY])`; the server selects `infergate.v1` and never
//! echoes the key), or a first message `{"api_key": KEY}` within the header timeout. Without a
//! key, a client from a network granted anonymous access (`[auth] anonymous_scopes`) is served
//! at once as the anonymous caller of its address; it may still send `{"api_key": KEY}` at any
//! point to be served under that key from then on.
//!
//! Each text message is a KServe v2 inference body plus `"id"` (string or number, echoed in every
//! frame of its answer) and `"model"` (a model or a pipeline, and optionally `"model_version"`);
//! the parameters `priority` and `timeout` (microseconds in the queue) apply as over HTTP and gRPC.
//! Answers may arrive out of order. With `"generate": {"prompt": ..., "max_tokens": ...,
//! "temperature": ..., "top_p": ..., "seed": ..., "stop": ...}` on a text-generation model, one
//! frame `{"id", "token"}` per generated piece of text follows, then `{"id", "done": true,
//! "finish_reason", "text", "usage"}` (a pipeline does not generate). Errors are `{"id", "error",
//! "status"}` frames and the connection stays open. The key is re-checked (revocation, scope) and
//! the key's limits applied per message. An id must be unique among the connection's requests in
//! flight (409 frame otherwise). `{"cancel": ID}` stops that request: it leaves the model's queue
//! if it has not run, a generation stops before its next token, and `{"id", "cancelled": true}` is
//! its last frame, unless its answer was already finished (a 404 frame answers a cancel when no
//! such request is in flight). Cancelling takes no in-flight slot.
//!
//! Backpressure: at most `[websocket] max_in_flight` requests run per connection; beyond that
//! the server stops reading, and answers wait in a small bounded queue for the writer, so a slow
//! reader slows its own requests instead of growing memory. The server pings every
//! `ping_interval_s`; a connection with nothing in flight and no message for `idle_timeout_s`
//! is closed with 4408.
//!
//! What a client costs before and beside its requests is bounded: the first-message key must
//! arrive within `[limits] header_timeout_s` of the upgrade (once, not per frame: pings do not
//! extend it); control frames (pings and pongs, each of which the server answers or records)
//! are limited to [`CONTROL_FRAMES_BURST`] at once and [`CONTROL_FRAMES_PER_S`] per second
//! after that, beyond which the connection is closed with 1008; a client that stops reading
//! is disconnected when a write makes no progress for `[limits] send_timeout_s`; a frame over
//! `max_message_bytes` is refused before its payload is read, with 1009.
//!
//! Traces: while traces are exported, each message is a trace of its own (a `websocket message`
//! span), continuing the trace its optional `"traceparent"` and `"tracestate"` fields name (read
//! as a request's headers are, the caller's sampled flag trusted as over HTTP), recorded by the
//! trace settings of the model it names, and linked to the span of the connection's upgrade
//! request.
//!
//! Close codes: 1000 normal, 1001 server shutting down, 1003 binary message, 1008
//! authentication failed or too many control frames, 1009 message too large, 4408 idle
//! timeout.

use super::ws_frame::{encoded, frame};
use crate::client_addr::PeerAddr;
use crate::coalesce::Coalescer;
use axum::extract::ws::{close_code, CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::response::Response;
use axum::Extension;
use futures_util::{SinkExt, StreamExt};
use http::HeaderMap;
use infergate_api_types::openai::Usage;
use infergate_api_types::stream::{
    Authenticated, Cancelled, GeneratedToken, GenerationDone, StreamError,
};
use infergate_kserve::http_error::HttpResult;
use infergate_protocol::kserve;
use infergate_protocol::message::Incoming;
use infergate_service::caller::Caller;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::infer::{self, Target};
use infergate_service::phases::Outcome;
use infergate_service::state::AppState;
use infergate_service::textgen::Sampling;
use infergate_store::auth::Scope;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

pub const SUBPROTOCOL: &str = "infergate.v1";
const PROTOCOL_LABEL: &str = "websocket";
pub const CLOSE_IDLE: u16 = 4408;
/// Control frames a client may send at once.
pub const CONTROL_FRAMES_BURST: f64 = 16.0;
/// Control frames per second a client may send after its burst (a keep-alive ping every few
/// seconds is far below it).
pub const CONTROL_FRAMES_PER_S: f64 = 2.0;

/// The connection's allowance of control frames: a token bucket (`/v2/events` spends it too).
pub(super) struct ControlBudget {
    tokens: f64,
    refilled: Instant,
}

impl ControlBudget {
    pub(super) fn new() -> ControlBudget {
        ControlBudget {
            tokens: CONTROL_FRAMES_BURST,
            refilled: Instant::now(),
        }
    }

    /// Takes one frame's worth; false when the client is over its allowance.
    pub(super) fn take(&mut self) -> bool {
        let now = Instant::now();
        let earned = now.duration_since(self.refilled).as_secs_f64() * CONTROL_FRAMES_PER_S;
        self.tokens = (self.tokens + earned).min(CONTROL_FRAMES_BURST);
        self.refilled = now;
        if self.tokens < 1.0 {
            return false;
        }
        self.tokens -= 1.0;
        true
    }
}

pub(super) fn too_many_control_frames() -> Message {
    close(close_code::POLICY, "too many control frames (pings/pongs)")
}

/// The close that answers a failed read: 1009 for a frame or message over the size limit
/// (refused by tungstenite before reading its payload); None when the client is gone.
pub(super) fn read_failure_close(error: &axum::Error, limit: usize) -> Option<Message> {
    use tokio_tungstenite::tungstenite::Error as WsError;
    let cause = std::error::Error::source(error)?.downcast_ref::<WsError>()?;
    matches!(cause, WsError::Capacity(_)).then(|| {
        close(
            close_code::SIZE,
            &format!("message over the {limit}-byte limit"),
        )
    })
}

/// Checks a key for `scope` the way HTTP requests are checked.
pub fn check_key(state: &AppState, secret: &str, scope: Scope) -> ApiResult<Caller> {
    crate::api::authorized::authorize(state, Some(secret), None, scope)
}

/// Who a connection's messages run as: a key (checked again per message: revocation, scope), or
/// the anonymous caller of the client's address.
enum Credential {
    Key(Arc<str>),
    Anonymous(IpAddr),
}

impl Credential {
    fn authorize(&self, state: &AppState, scope: Scope) -> ApiResult<Caller> {
        match self {
            Credential::Key(key) => check_key(state, key, scope),
            Credential::Anonymous(addr) => {
                crate::api::authorized::authorize(state, None, Some(*addr), scope)
            }
        }
    }
}

/// The key of an `{"api_key": KEY}` message, when that is all the message holds.
fn key_message(text: &str) -> Option<String> {
    if !text.contains("\"api_key\"") {
        return None;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(mut body)) if body.len() == 1 => match body.remove("api_key") {
            Some(Value::String(key)) => Some(key),
            _ => None,
        },
        _ => None,
    }
}

/// The key of an upgrade request: from the headers, or offered as a subprotocol. None when the
/// client will send it as its first message.
pub fn upgrade_key(
    state: &AppState,
    headers: &HeaderMap,
    ws: &WebSocketUpgrade,
    scope: Scope,
) -> ApiResult<Option<String>> {
    if let Some(key) = infergate_kserve::credentials::presented_key(headers) {
        check_key(state, key, scope)?;
        return Ok(Some(key.to_string()));
    }
    let offered: Vec<&str> = ws
        .requested_protocols()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    match offered.iter().find(|p| p.starts_with("ig_")) {
        Some(key) => {
            if !offered.contains(&SUBPROTOCOL) {
                return Err(ApiError::bad_request(format!(
                    "offer the '{SUBPROTOCOL}' subprotocol together with the key"
                )));
            }
            check_key(state, key, scope)?;
            Ok(Some(key.to_string()))
        }
        None => Ok(None),
    }
}

pub async fn upgrade(
    State(state): State<Arc<AppState>>,
    peer: Option<Extension<PeerAddr>>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> HttpResult<Response> {
    let key = upgrade_key(&state, &headers, &ws, Scope::Infer)?;
    // Without a key, a client anonymous access covers is served at once.
    let anonymous = match (&key, state.anonymous(), peer) {
        (None, Some(_), Some(Extension(peer))) => {
            let mut extensions = http::Extensions::new();
            extensions.insert(peer);
            crate::client_addr::of(&state, &extensions, &headers)
                .filter(|&addr| state.authorize_from(None, Some(addr), Scope::Infer).is_ok())
        }
        _ => None,
    };
    if state.drain().is_draining() {
        return Err(ApiError::unavailable("the server is shutting down").into());
    }
    let credential = match (key, anonymous) {
        (Some(key), _) => Some(Credential::Key(Arc::from(key))),
        (None, Some(addr)) => Some(Credential::Anonymous(addr)),
        (None, None) => None,
    };
    // A key offered as the first message leaves the per-address cap of unauthenticated
    // connections once it checks out.
    let client = crate::connection::current();
    if credential.is_some() {
        if let Some(client) = &client {
            client.mark_authenticated();
        }
    }
    let link = infergate_telemetry::w3c::link_to(&tracing::Span::current());
    Ok(limited(ws, &state)
        .on_upgrade(move |socket| connection(state, socket, credential, client, link)))
}

/// The upgrade as every WebSocket endpoint accepts it: the `infergate.v1` subprotocol, and a
/// frame or message over `[websocket] max_message_bytes` refused before its payload is read
/// (see [`read_failure_close`]).
pub(super) fn limited(ws: WebSocketUpgrade, state: &AppState) -> WebSocketUpgrade {
    let limit = state.config().websocket.max_message_bytes;
    ws.protocols([SUBPROTOCOL])
        .max_message_size(limit)
        .max_frame_size(limit)
}

fn close(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: Utf8Bytes::from(reason.to_string()),
    }))
}

fn error_frame(id: &Value, e: &ApiError) -> Message {
    e.log("websocket");
    frame(&StreamError {
        id: Cow::Borrowed(id),
        error: Cow::Borrowed(&e.message),
        status: infergate_kserve::http_error::status(e).as_u16(),
        retry_after: e.retry_after,
    })
}

/// Waits for `{"api_key": KEY}` as the first message, for at most the header timeout from the
/// upgrade.
async fn first_message_key(
    state: &AppState,
    socket: &mut futures_util::stream::SplitStream<WebSocket>,
    control: &mut ControlBudget,
) -> Result<String, Message> {
    let deadline = tokio::time::Instant::now()
        + Duration::from_secs(state.config().limits.header_timeout_s.max(1));
    let limit = state.config().websocket.max_message_bytes;
    let first = loop {
        match tokio::time::timeout_at(deadline, socket.next()).await {
            Err(_) => {
                return Err(close(
                    close_code::POLICY,
                    "no API key: send {\"api_key\": KEY} first",
                ))
            }
            Ok(Some(Err(e))) => {
                return Err(
                    read_failure_close(&e, limit).unwrap_or_else(|| close(close_code::NORMAL, ""))
                )
            }
            Ok(None) => return Err(close(close_code::NORMAL, "")),
            Ok(Some(Ok(Message::Text(t)))) => break t,
            Ok(Some(Ok(Message::Ping(_) | Message::Pong(_)))) => {
                if !control.take() {
                    return Err(too_many_control_frames());
                }
            }
            Ok(Some(Ok(_))) => {
                return Err(close(
                    close_code::POLICY,
                    "the first message must be {\"api_key\": KEY}",
                ))
            }
        }
    };
    let key = serde_json::from_str::<Value>(first.as_str())
        .ok()
        .and_then(|v| v.get("api_key").and_then(Value::as_str).map(str::to_string))
        .ok_or_else(|| {
            close(
                close_code::POLICY,
                "the first message must be {\"api_key\": KEY}",
            )
        })?;
    match check_key(state, &key, Scope::Infer) {
        Ok(_) => Ok(key),
        Err(e) => Err(close(close_code::POLICY, &e.message)),
    }
}

async fn connection(
    state: Arc<AppState>,
    socket: WebSocket,
    credential: Option<Credential>,
    client: Option<Arc<crate::connection::Connection>>,
    link: Option<infergate_telemetry::w3c::Link>,
) {
    let _open = state.metrics().websocket_opened();
    let _stream = state.drain().stream_opened();
    let config = state.config().websocket.clone();
    let in_flight = config.max_in_flight.get();
    let (mut sink, mut incoming) = socket.split();
    // Answers queue here for the writer; bounded, so a slow reader blocks its own requests.
    let (out, mut outgoing) = mpsc::channel::<Message>(in_flight * 2);
    // Frames already queued are written together and flushed once: one TLS record and one
    // syscall for a burst of tokens (see `websocket.coalesce_us`) instead of one per frame.
    let writer = tokio::spawn(async move {
        while let Some(mut message) = outgoing.recv().await {
            loop {
                let is_close = matches!(message, Message::Close(_));
                if sink.feed(message).await.is_err() {
                    return;
                }
                if is_close {
                    let _ = sink.flush().await;
                    return;
                }
                match outgoing.try_recv() {
                    Ok(next) => message = next,
                    Err(_) => break,
                }
            }
            if sink.flush().await.is_err() {
                return;
            }
        }
    });
    let mut control = ControlBudget::new();
    let mut credential = match credential {
        Some(credential) => credential,
        None => match first_message_key(&state, &mut incoming, &mut control).await {
            Ok(key) => {
                if let Some(client) = &client {
                    client.mark_authenticated();
                }
                let _ = out
                    .send(frame(&Authenticated {
                        authenticated: true,
                    }))
                    .await;
                Credential::Key(Arc::from(key))
            }
            Err(close_message) => {
                let _ = out.send(close_message).await;
                drop(out);
                let _ = writer.await;
                return;
            }
        },
    };
    let permits = Arc::new(Semaphore::new(in_flight));
    let mut permit: Option<OwnedSemaphorePermit> = None;
    let mut tasks = JoinSet::new();
    let mut in_flight_ids = InFlightIds::default();
    // A sequence's requests run in the order they came.
    let mut order = crate::sequence_order::SequenceOrder::default();
    let mut ping = tokio::time::interval(Duration::from_secs(config.ping_interval_s.max(1)));
    ping.tick().await;
    let idle = Duration::from_secs(config.idle_timeout_s.max(1));
    let mut last_seen = tokio::time::Instant::now();
    let draining = state.drain().signal();
    tokio::pin!(draining);
    // Some(close frame) to close politely once in-flight work is done; None when the client left.
    let ending: Option<Message> = loop {
        tokio::select! {
            p = permits.clone().acquire_owned(), if permit.is_none() => permit = p.ok(),
            message = incoming.next(), if permit.is_some() => match message {
                None => break None,
                Some(Err(e)) => break read_failure_close(&e, config.max_message_bytes),
                Some(Ok(Message::Close(_))) => break None,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {
                    if !control.take() {
                        break Some(too_many_control_frames());
                    }
                    last_seen = tokio::time::Instant::now();
                }
                Some(Ok(Message::Binary(_))) => {
                    break Some(close(close_code::UNSUPPORTED, "binary messages are not supported: send JSON text"));
                }
                Some(Ok(Message::Text(text))) => {
                    last_seen = tokio::time::Instant::now();
                    // An anonymous connection may present a key later: its messages run as
                    // that key from then on.
                    if let (Credential::Anonymous(_), Some(key)) = (&credential, key_message(&text)) {
                        match check_key(&state, &key, Scope::Infer) {
                            Ok(_) => {
                                credential = Credential::Key(Arc::from(key));
                                let _ = out.send(frame(&Authenticated { authenticated: true })).await;
                            }
                            Err(e) => break Some(close(close_code::POLICY, &e.message)),
                        }
                        continue;
                    }
                    match Incoming::parse(&text) {
                        Incoming::Cancel(id) => {
                            // Handled here, without a permit: cancelling must work when every
                            // slot is taken.
                            if let Err(e) = in_flight_ids.cancel(&id) {
                                let _ = out.send(error_frame(&id, &e)).await;
                            }
                        }
                        Incoming::Request(id, body) => {
                            if let Err(e) = in_flight_ids.check_unique(&id) {
                                let _ = out.send(error_frame(&id, &e)).await;
                            } else if let Some(p) = permit.take() {
                                let (cancel, cancelled) = oneshot::channel();
                                let turn = order.turn(
                                    body.get("parameters")
                                        .and_then(|p| p.get(infergate_service::infer::request::SEQUENCE_ID))
                                        .and_then(crate::sequence_order::key_of_json),
                                );
                                let caller = credential.authorize(&state, Scope::Infer);
                                let span = message_span(&state, &caller, &id, &body, link.as_ref());
                                let task = tasks.spawn(handle(state.clone(), caller, id.clone(), body, out.clone(), (p, turn), cancelled).instrument(span));
                                in_flight_ids.insert(id, task.id(), cancel);
                            }
                        }
                        Incoming::Invalid(id, e) => {
                            let _ = out.send(error_frame(&id, &e.into())).await;
                        }
                    }
                }
            },
            _ = ping.tick() => {
                // Skipped when answers are queued: the client is behind anyway.
                let _ = out.try_send(Message::Ping(Vec::new().into()));
            }
            _ = tokio::time::sleep_until(last_seen + idle), if tasks.is_empty() => {
                break Some(close(CLOSE_IDLE, "idle timeout"));
            }
            _ = &mut draining => break Some(close(close_code::AWAY, "server shutting down")),
            Some(done) = tasks.join_next_with_id(), if !tasks.is_empty() => {
                let task = match done {
                    Ok((task, ())) => task,
                    Err(e) => e.id(),
                };
                in_flight_ids.finished(task);
            }
        }
    };
    match ending {
        Some(close_message) => {
            // Requests already accepted are answered before the close frame.
            while tasks.join_next().await.is_some() {}
            let _ = out.send(close_message).await;
            drop(out);
            let _ = writer.await;
        }
        None => {
            tasks.abort_all();
            drop(out);
            writer.abort();
        }
    }
}

/// The ids of this connection's requests in flight, so that a client can cancel one by id.
#[derive(Default)]
struct InFlightIds {
    /// Keyed by the id's JSON text, so `1` and `"1"` are different ids, as they are on the wire.
    by_id: HashMap<String, (tokio::task::Id, oneshot::Sender<()>)>,
    by_task: HashMap<tokio::task::Id, String>,
}

impl InFlightIds {
    fn check_unique(&self, id: &Value) -> ApiResult<()> {
        if self.by_id.contains_key(&id.to_string()) {
            return Err(ApiError::conflict(format!(
                "a request with id {id} is already in flight on this connection"
            )));
        }
        Ok(())
    }

    fn insert(&mut self, id: Value, task: tokio::task::Id, cancel: oneshot::Sender<()>) {
        let id = id.to_string();
        self.by_task.insert(task, id.clone());
        self.by_id.insert(id, (task, cancel));
    }

    fn finished(&mut self, task: tokio::task::Id) {
        if let Some(id) = self.by_task.remove(&task) {
            self.by_id.remove(&id);
        }
    }

    /// Signals the request's task, which drops the request and sends the `cancelled` frame
    /// itself, so no frame of that request can follow it.
    fn cancel(&mut self, id: &Value) -> ApiResult<()> {
        let not_in_flight = || ApiError::not_found(format!("no request with id {id} is in flight"));
        let (task, cancel) = self
            .by_id
            .remove(&id.to_string())
            .ok_or_else(not_in_flight)?;
        self.by_task.remove(&task);
        // A closed channel: the task finished and its answer is already on its way.
        cancel.send(()).map_err(|()| not_in_flight())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Generate {
    prompt: String,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stop: Vec<String>,
}

/// Model labels for the metrics, filled in as far as the request got.
#[derive(Default)]
struct Labels {
    model: String,
    version: String,
}

/// The span of one message while traces are exported (else none): a root of its own,
/// continuing the trace its `traceparent`/`tracestate` fields name, recorded by the trace
/// settings of the model it names, and linked to the connection's span.
fn message_span(
    state: &AppState,
    caller: &ApiResult<Caller>,
    id: &Value,
    body: &Map<String, Value>,
    connection: Option<&infergate_telemetry::w3c::Link>,
) -> tracing::Span {
    if !infergate_telemetry::exporting() {
        return tracing::Span::none();
    }
    let field = |name: &str| body.get(name).and_then(Value::as_str);
    let model = field("model");
    let span = tracing::info_span!(
        target: infergate_telemetry::TARGET,
        parent: None,
        "websocket message",
        id = %id,
        model = model.unwrap_or_default()
    );
    let presents_key = caller.as_ref().is_ok_and(|c| c.key().is_some());
    infergate_telemetry::w3c::continue_message(
        &span,
        field("traceparent"),
        field("tracestate"),
        state
            .config()
            .tracing
            .honour_caller_sampling
            .trusts(presents_key),
        model,
        connection,
    );
    span
}

async fn handle(
    state: Arc<AppState>,
    caller: ApiResult<Caller>,
    id: Value,
    body: Map<String, Value>,
    out: mpsc::Sender<Message>,
    (_permit, turn): (OwnedSemaphorePermit, crate::sequence_order::Turn),
    cancelled: oneshot::Receiver<()>,
) {
    let started = Instant::now();
    let mut labels = Labels::default();
    // The request's frames pass through a channel of its own, forwarded inside this task: a
    // generation runs on its own thread and may still send a token after the cancel, and with
    // the forwarder dropped that token goes nowhere, so `cancelled` is truly the last frame.
    let (request_out, mut request_frames) = mpsc::channel::<Message>(8);
    let forward = async {
        while let Some(message) = request_frames.recv().await {
            if out.send(message).await.is_err() {
                break;
            }
        }
    };
    let work = async {
        // A sequence's requests run in the order they came (cancelling one still works).
        let _done = turn.wait().await;
        let result = run(&state, caller, body, &id, &request_out, &mut labels).await;
        drop(request_out);
        result
    };
    let result = tokio::select! {
        (result, ()) = async { tokio::join!(work, forward) } => result,
        // Dropping `run` takes the request out of the model's queue if it has not run yet, and
        // stops a generation before its next token.
        Ok(()) = cancelled => {
            let _ = out.send(frame(&Cancelled {
                id: Cow::Borrowed(&id),
                cancelled: true,
            })).await;
            return;
        }
    };
    let status = match &result {
        Ok(()) => 200,
        Err(e) => infergate_kserve::http_error::status(e).as_u16(),
    };
    if let Err(e) = result {
        let _ = out.send(error_frame(&id, &e)).await;
    }
    // A pipeline is recorded without a model label, as over HTTP and gRPC.
    state.metrics().inference(
        &labels.model,
        &labels.version,
        PROTOCOL_LABEL,
        status,
        started.elapsed(),
    );
}

async fn run(
    state: &Arc<AppState>,
    caller: ApiResult<Caller>,
    mut body: Map<String, Value>,
    id: &Value,
    out: &mpsc::Sender<Message>,
    labels: &mut Labels,
) -> ApiResult<()> {
    // Checked per message: the key may have been revoked, and its limits apply.
    let caller = caller?;
    // Read by the message's span (`message_span`); not part of the inference body.
    body.remove("traceparent");
    body.remove("tracestate");
    let _admission = infergate_service::admission::admit(state, &caller)
        .await
        .map_err(|r| infergate_service::admission::rejection_error(&r))?;
    let model = match body.remove("model") {
        Some(Value::String(m)) => m,
        _ => return Err(ApiError::bad_request("\"model\" (a string) is required")),
    };
    let version = match body.remove("model_version") {
        None | Some(Value::Null) => None,
        Some(Value::String(v)) => Some(infergate_service::names::parse_version(&v)?),
        Some(Value::Number(n)) => Some(
            n.as_u64()
                .ok_or_else(|| ApiError::bad_request("model_version must be a positive integer"))?,
        ),
        Some(_) => {
            return Err(ApiError::bad_request(
                "model_version must be a positive integer",
            ))
        }
    };
    let target = infer::resolve(state, &model, version)?;
    if let Target::Model(record) = &target {
        labels.model = record.name.clone();
        labels.version = record.version.to_string();
    }
    if let Some(generate) = body.remove("generate") {
        let Target::Model(record) = target else {
            return Err(ApiError::bad_request(format!(
                "'{model}' is a pipeline: \"generate\" runs on a text-generation model"
            )));
        };
        if infergate_service::chat_models::is_gguf(&record) {
            return super::openai_llm::websocket_generate(
                state, &caller, record, generate, id, out,
            )
            .await;
        }
        let generate: Generate = serde_json::from_value(generate)
            .map_err(|e| ApiError::bad_request(format!("generate: {e}")))?;
        // On its own thread; dropping this future (cancel, client gone) stops the generation.
        let (state, id, out) = (state.clone(), id.clone(), out.clone());
        return infergate_service::own_thread::run(async move {
            generate_stream(&state, &caller, &model, generate, &id, &out).await
        })
        .await;
    }
    let mut request = infergate_protocol::message::inference_request(body)?;
    let inputs = kserve::decode_inputs(&mut request, &[])?;
    let request_in = infer::Request::kserve(&request, inputs)?;
    let mut inferred = infer::run(state, &caller, target, version, request_in).await?;
    let passage = std::mem::take(&mut inferred.passage);
    let (response, binary) = kserve::response(
        &request,
        &inferred.model,
        inferred.version,
        &inferred.outputs,
    );
    if binary.is_some() {
        // `inference_request` refused every way of asking for binary outputs.
        return Err(ApiError::internal(
            "a WebSocket answer came out with binary tensor data",
        ));
    }
    let answer = encoded(&Answer { id, response })?;
    // A failed send means the connection is gone: nobody is left to tell (and the passage,
    // dropped, tells the policies the answer was not sent).
    if out.send(answer).await.is_ok() {
        passage.finish(infergate_service::phases::Outcome::Sent);
    }
    Ok(())
}

/// An inference answer: the KServe response document with the message's id (a string or a
/// number, which KServe's own string `id` cannot carry).
#[derive(Serialize)]
struct Answer<'a> {
    id: &'a Value,
    #[serde(flatten)]
    response: kserve::InferResponse,
}

async fn generate_stream(
    state: &Arc<AppState>,
    caller: &Caller,
    model: &str,
    generate: Generate,
    id: &Value,
    out: &mpsc::Sender<Message>,
) -> ApiResult<()> {
    let (vocab, record) = crate::api::textgen::generator(state, model)?;
    let limit = state.config().openai.max_tokens_limit;
    let max_tokens = generate.max_tokens.unwrap_or(16);
    if max_tokens > limit {
        return Err(ApiError::bad_request(format!(
            "max_tokens is at most {limit} on this server"
        )));
    }
    let sampling = Sampling {
        temperature: generate.temperature.unwrap_or(1.0),
        top_p: generate.top_p.unwrap_or(1.0),
        seed: generate.seed,
        max_tokens,
        stop: generate.stop,
    };
    let max_completion_tokens = u64::from(sampling.max_tokens);
    let mut g = crate::api::textgen::start_generation(
        state,
        vocab,
        record.clone(),
        &generate.prompt,
        sampling,
    )?;
    // Token limits apply; WebSocket answers are not served from the response cache.
    let mut passage = super::chat_phases::admit(
        state,
        caller,
        &record,
        &super::chat_phases::ChatFacts {
            prompt: &generate.prompt,
            prompt_tokens: u64::from(g.prompt_tokens),
            max_completion_tokens,
            parameters: Vec::new(),
            deterministic: false,
            stream: true,
        },
    )
    .await?;
    let _in_progress = state.metrics().generation_started();
    let tokens = state.metrics().token_counter(model, PROTOCOL_LABEL);
    let mut coalescer = Coalescer::new(Duration::from_micros(state.config().websocket.coalesce_us));
    let mut text = String::new();
    loop {
        let before = g.completion_tokens;
        let next = match g.next().await {
            Ok(next) => next,
            Err(e) => {
                // The tokens held back go out before the error frame.
                for message in coalescer.take_held() {
                    let _ = out.send(message).await;
                }
                passage.finish(Outcome::Failed(e.kind));
                return Err(e);
            }
        };
        let Some(step) = next else {
            return Err(ApiError::internal(
                "generation ended without a finish reason",
            ));
        };
        if g.completion_tokens > before {
            tokens.inc();
        }
        passage.set_generated(u64::from(g.completion_tokens));
        let mut piece = passage.text(0, step.text)?;
        if step.finish.is_some() {
            piece.push_str(&passage.end_of_text(0)?);
        }
        if !piece.is_empty() {
            text.push_str(&piece);
            let token = GeneratedToken {
                id: Cow::Borrowed(id),
                token: piece.into(),
            };
            for message in coalescer.token(encoded(&token)?) {
                if out.send(message).await.is_err() {
                    return Ok(());
                }
            }
        }
        if let Some(finish) = step.finish {
            let done = encoded(&GenerationDone {
                id: Cow::Borrowed(id),
                done: true,
                finish_reason: finish.as_str().into(),
                text: text.into(),
                usage: Usage::new(g.prompt_tokens, g.completion_tokens),
            })?;
            passage.finish(Outcome::Sent);
            for message in coalescer.urgent(done) {
                if out.send(message).await.is_err() {
                    break;
                }
            }
            return Ok(());
        }
    }
}
