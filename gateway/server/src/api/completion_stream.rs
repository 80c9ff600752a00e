//! `stream: true` for `/v1/completions` and `/v1/chat/completions`: OpenAI's chunks as
//! Server-Sent Events, ending with `data: [DONE]`.
//!
//! The split of work is chosen for throughput on few cores:
//! - The generation runs on its own thread ([`infergate_service::own_thread`]) and does as little as it can
//!   between two model steps: it hands over each token's text, not a formatted chunk, and
//!   releases them in bursts ([`crate::coalesce`], `openai.stream_coalesce_us`).
//! - The response body, polled by the runtime while the model computes the next step, formats
//!   a whole burst into one body chunk: one write, one TLS record and one wake-up of the client
//!   per burst instead of per token (with one SSE event per token, as clients expect).
//!
//! Dropping the response (client gone) closes the channel, which stops the generation at its
//! next step, dropping the model call in progress.

use super::generation_metrics::Tracked;
use super::openai_answer::{stream_error, Meta};
use crate::coalesce::Coalescer;
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use infergate_api_types::openai::Usage;
use infergate_service::error::{ApiError, ApiResult};
use infergate_service::phases::{ChatAnswer, ChatChoice, ChatPassage, Outcome};
use infergate_service::state::AppState;
use infergate_service::textgen::Generation;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Bursts a generation may run ahead of the client: enough to overlap the model's next step
/// with sending the previous tokens, small enough that a stalled reader costs little (a burst
/// holds the tokens of `stream_coalesce_us`).
const BURSTS_AHEAD: usize = 8;

/// What the generation hands to the body: a token's text (formatted by the body), or an event's
/// payload already formatted (role, finish, usage, error, `[DONE]`: once per stream).
#[derive(Debug)]
enum Piece {
    Token(String),
    Event(String),
}

/// Where a stream is.
enum Phase {
    Start,
    Generating,
    Usage,
    Done,
    Over,
}

struct Producer {
    meta: Arc<Meta>,
    g: Generation,
    tracked: Tracked,
    phase: Phase,
    include_usage: bool,
    /// The chat phases until the stream ends; dropped with the stream (client gone), it
    /// settles with the tokens generated until then.
    passage: Option<ChatPassage>,
    /// The text as sent, piece by piece (what a cache keeps).
    pieces: Vec<String>,
}

impl Producer {
    /// A piece of text through the passage's hooks (which may hold it back or refuse it).
    fn through_hooks(&mut self, text: String) -> ApiResult<String> {
        let Some(passage) = self.passage.as_mut() else {
            return Ok(text);
        };
        passage.set_generated(u64::from(self.g.completion_tokens));
        let text = passage.text(0, text)?;
        if !text.is_empty() {
            self.pieces.push(text.clone());
        }
        Ok(text)
    }

    /// The end of the text: what the hooks held back, then the whole answer to the passage.
    fn end_of_text(&mut self, finish: &'static str) -> ApiResult<String> {
        let Some(mut passage) = self.passage.take() else {
            return Ok(String::new());
        };
        let tail = passage.end_of_text(0)?;
        if !tail.is_empty() {
            self.pieces.push(tail.clone());
        }
        passage.set_generated(u64::from(self.g.completion_tokens));
        passage.after_generation(&ChatAnswer {
            choices: vec![ChatChoice {
                pieces: std::mem::take(&mut self.pieces),
                finish,
                completion_tokens: u64::from(self.g.completion_tokens),
            }],
            prompt_tokens: u64::from(self.g.prompt_tokens),
        });
        passage.finish(Outcome::Sent);
        Ok(tail)
    }

    fn failed(&mut self, e: ApiError) -> Option<Piece> {
        e.log("sse");
        let status = infergate_kserve::http_error::status(&e).as_u16();
        self.tracked.end(status);
        if let Some(passage) = self.passage.take() {
            passage.finish(Outcome::Failed(e.kind));
        }
        self.phase = Phase::Done;
        Some(Piece::Event(stream_error(e.message, status)))
    }
}

impl Producer {
    /// The next piece, running the model as many times as it takes to have text to send.
    async fn next_piece(&mut self) -> Option<Piece> {
        loop {
            match self.phase {
                Phase::Start => {
                    self.phase = Phase::Generating;
                    if self.meta.is_chat() {
                        return Some(Piece::Event(self.meta.role_chunk(0)));
                    }
                }
                Phase::Generating => {
                    let tokens_before = self.g.completion_tokens;
                    match self.g.next().await {
                        Ok(Some(step)) => {
                            if self.g.completion_tokens > tokens_before {
                                self.tracked.token();
                            }
                            let text = match self.through_hooks(step.text) {
                                Ok(text) => text,
                                Err(e) => return self.failed(e),
                            };
                            let Some(finish) = step.finish else {
                                if text.is_empty() {
                                    continue;
                                }
                                return Some(Piece::Token(text));
                            };
                            let tail = match self.end_of_text(finish.as_str()) {
                                Ok(tail) => tail,
                                Err(e) => return self.failed(e),
                            };
                            self.tracked.end(200);
                            self.phase = if self.include_usage {
                                Phase::Usage
                            } else {
                                Phase::Done
                            };
                            let last =
                                self.meta
                                    .chunk(0, &(text + &tail), None, Some(finish.into()));
                            return Some(Piece::Event(last));
                        }
                        Ok(None) => self.phase = Phase::Done,
                        Err(e) => return self.failed(e),
                    }
                }
                Phase::Usage => {
                    self.phase = Phase::Done;
                    let usage = Usage::new(self.g.prompt_tokens, self.g.completion_tokens);
                    return Some(Piece::Event(self.meta.usage_chunk(usage)));
                }
                Phase::Done => {
                    self.phase = Phase::Over;
                    return Some(Piece::Event("[DONE]".into()));
                }
                Phase::Over => return None,
            }
        }
    }
}

/// Appends one burst as SSE events. Payloads are single-line JSON (serde_json escapes control
/// characters), so `data: ` + payload + a blank line is a complete event.
fn write_burst(meta: &Meta, burst: Vec<Piece>, out: &mut Vec<u8>) {
    for piece in burst {
        out.extend_from_slice(b"data: ");
        match piece {
            Piece::Token(text) => {
                out.extend_from_slice(meta.chunk(0, &text, None, None).as_bytes())
            }
            Piece::Event(payload) => out.extend_from_slice(payload.as_bytes()),
        }
        out.extend_from_slice(b"\n\n");
    }
}

/// The streamed response of a generation, its chat phases followed by `passage`.
pub(super) fn response(
    state: Arc<AppState>,
    meta: Meta,
    generation: Generation,
    include_usage: bool,
    passage: ChatPassage,
) -> Response {
    let meta = Arc::new(meta);
    let mut coalescer = Coalescer::new(Duration::from_micros(
        state.config().openai.stream_coalesce_us,
    ));
    let tracked = Tracked::new(&state, &generation);
    let mut producer = Producer {
        meta: meta.clone(),
        g: generation,
        tracked,
        phase: Phase::Start,
        include_usage,
        passage: Some(passage),
        pieces: Vec::new(),
    };
    let (tx, mut rx) = mpsc::channel::<Vec<Piece>>(BURSTS_AHEAD);
    let task = async move {
        loop {
            let next = tokio::select! {
                biased;
                _ = tx.closed() => return Ok(()),
                next = producer.next_piece() => next,
            };
            let Some(piece) = next else {
                return Ok(());
            };
            let burst = match piece {
                Piece::Token(_) => coalescer.token(piece),
                Piece::Event(_) => coalescer.urgent(piece),
            };
            if burst.is_empty() {
                continue;
            }
            if tx.send(burst).await.is_err() {
                return Ok(());
            }
        }
    };
    // Ends by itself when the response is dropped (`tx.closed()`).
    tokio::spawn(infergate_service::own_thread::run(task));
    let body = stream::poll_fn(move |cx| {
        rx.poll_recv(cx).map(|burst| {
            burst.map(|burst| {
                let mut out = Vec::with_capacity(256 * burst.len());
                write_burst(&meta, burst, &mut out);
                // A burst queued meanwhile goes into the same write.
                while let Ok(more) = rx.try_recv() {
                    write_burst(&meta, more, &mut out);
                }
                Ok::<_, Infallible>(Bytes::from(out))
            })
        })
    });
    (
        [
            (http::header::CONTENT_TYPE, "text/event-stream"),
            (http::header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
