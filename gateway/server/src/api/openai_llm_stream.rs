//! A chat model's answer streamed as OpenAI's chunks (Server-Sent Events): per choice its role,
//! then its text (and log probabilities) as tokens come, or, with tools, the text outside
//! calls and the calls' `tool_calls` deltas; its finish; the usage when asked; `[DONE]`. The
//! events ready together go out in one write. The text passes the chat phases' hooks before it
//! is read for calls; a hook that refuses ends the stream with its reason (a guardrail's refusal
//! with the finish reason `content_filter`). A client that goes
//! away drops the body, which drops the sequences' receivers (the scheduler frees them at its
//! next step) and the passage, which settles the tokens generated until then.

use super::openai_answer::{stream_error, FinishReason, Meta};
use super::openai_llm_usage::{merged, usage, Tracked};
use super::openai_tools::{ChoiceCalls, Pieces};
use axum::body::{Body, Bytes};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{self, BoxStream, StreamExt};
use futures_util::FutureExt;
use infergate_llm::{Done, Event, Generation, TokenLogprob, Tools};
use infergate_service::error::{ApiError, Kind as ErrorKind};
use infergate_service::guardrails;
use infergate_service::phases::{ChatAnswer, ChatChoice, ChatPassage, Outcome};
use std::convert::Infallible;

/// Where a streamed response is.
struct Streaming {
    meta: Meta,
    events: BoxStream<'static, (usize, Event)>,
    tracked: Tracked,
    prompt_tokens: u32,
    include_usage: bool,
    done: Vec<Option<Done>>,
    /// Per choice, its answer read for tool calls.
    calls: Vec<ChoiceCalls>,
    /// Text bytes sent per choice (completions' `text_offset`).
    sent: Vec<usize>,
    /// The text per choice as the hooks passed it, piece by piece (what a cache keeps).
    pieces: Vec<Vec<String>>,
    /// The chat phases until the stream ends.
    passage: Option<ChatPassage>,
    over: bool,
}

fn sse(out: &mut Vec<u8>, payload: &str) {
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(payload.as_bytes());
    out.extend_from_slice(b"\n\n");
}

impl Streaming {
    fn first_chunks(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.meta.is_chat() {
            for i in 0..self.done.len() {
                sse(&mut out, &self.meta.role_chunk(i as u32));
            }
        }
        out
    }

    /// Formats one event; the last one adds usage and `[DONE]`.
    fn write(&mut self, (i, event): (usize, Event), out: &mut Vec<u8>) {
        let index = i as u32;
        match event {
            Event::Text { text, logprob } => {
                self.tracked.token(i);
                let text = match self.passage.as_mut().map(|p| {
                    p.generated(1);
                    p.text(i, text.clone())
                }) {
                    None => text,
                    Some(Ok(text)) => text,
                    Some(Err(e)) => return self.refused(e, out),
                };
                let pieces = self.calls[i].push(&text);
                self.pieces[i].push(text);
                self.emit(i, pieces, logprob, true, out);
            }
            Event::Done(done) => {
                match self.passage.as_mut().map(|p| p.end_of_text(i)) {
                    Some(Ok(tail)) if !tail.is_empty() => {
                        let pieces = self.calls[i].push(&tail);
                        self.pieces[i].push(tail);
                        self.emit(i, pieces, None, false, out);
                    }
                    Some(Err(e)) => return self.refused(e, out),
                    _ => {}
                }
                let rest = self.calls[i].finish();
                self.emit(i, rest, None, false, out);
                self.tracked.done(&done);
                self.done[i] = Some(done);
                let finish = match FinishReason::from(done.finish) {
                    FinishReason::Stop if self.calls[i].called => FinishReason::ToolCalls,
                    other => other,
                };
                sse(out, &self.meta.chunk(index, "", None, Some(finish)));
                if self.done.iter().all(Option::is_some) {
                    self.tracked.end(200);
                    self.answered();
                    self.finish(out);
                }
            }
            Event::Error(message) => {
                self.tracked.end(500);
                if let Some(p) = self.passage.take() {
                    p.finish(Outcome::Failed(ErrorKind::Internal));
                }
                sse(out, &stream_error(message, 500));
                self.finish(out);
            }
        }
    }

    /// Sends what a piece of choice `i`'s answer adds once read for tool calls: its text (with
    /// the log probability of the token it came from, which goes out even when the text is
    /// held back; for a `token` with no call in it, even when empty) and its calls' deltas.
    fn emit(
        &mut self,
        i: usize,
        pieces: Pieces,
        logprob: Option<TokenLogprob>,
        token: bool,
        out: &mut Vec<u8>,
    ) {
        let index = i as u32;
        if !pieces.content.is_empty() || logprob.is_some() || (token && pieces.calls.is_empty()) {
            let logprob = logprob.map(|lp| (lp, self.sent[i]));
            self.sent[i] += pieces.content.len();
            sse(out, &self.meta.chunk(index, &pieces.content, logprob, None));
        }
        if !pieces.calls.is_empty() {
            sse(out, &self.meta.tool_chunk(index, pieces.calls));
        }
    }

    /// A hook refused the answer from here on: the stream ends with its reason, or, for a
    /// guardrail's refusal, as OpenAI ends a filtered answer: every choice not finished yet
    /// finishes with `content_filter`.
    fn refused(&mut self, e: ApiError, out: &mut Vec<u8>) {
        let status = infergate_kserve::http_error::status(&e).as_u16();
        self.tracked.end(status);
        if let Some(p) = self.passage.take() {
            p.finish(Outcome::Failed(e.kind));
        }
        if e.code == Some(guardrails::REFUSED) {
            for (i, done) in self.done.iter().enumerate() {
                if done.is_none() {
                    let filtered = Some(FinishReason::ContentFilter);
                    sse(out, &self.meta.chunk(i as u32, "", None, filtered));
                }
            }
        } else {
            sse(out, &stream_error(e.message, status));
        }
        self.finish(out);
    }

    /// Every choice is done: the passage hears the whole answer and its real usage.
    fn answered(&mut self) {
        let Some(mut passage) = self.passage.take() else {
            return;
        };
        let choices: Vec<ChatChoice> = self
            .done
            .iter()
            .zip(&mut self.pieces)
            .filter_map(|(done, pieces)| {
                done.map(|d| ChatChoice {
                    pieces: std::mem::take(pieces),
                    finish: d.finish.as_str(),
                    completion_tokens: u64::from(d.completion_tokens),
                })
            })
            .collect();
        let answer = ChatAnswer {
            choices,
            prompt_tokens: u64::from(self.prompt_tokens),
        };
        passage.set_generated(answer.completion_tokens());
        passage.after_generation(&answer);
        passage.finish(Outcome::Sent);
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        if self.include_usage {
            let usage = usage(self.prompt_tokens, &self.done);
            sse(out, &self.meta.usage_chunk(usage));
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
        self.over = true;
    }
}

/// The streamed answer of `generations` (one per choice).
pub(super) fn response(
    meta: Meta,
    generations: Vec<Generation>,
    tools: Option<&Tools>,
    tracked: Tracked,
    prompt_tokens: u32,
    include_usage: bool,
    passage: ChatPassage,
) -> Response {
    let n = generations.len();
    let streaming = Streaming {
        meta,
        events: merged(generations),
        tracked,
        prompt_tokens,
        include_usage,
        done: vec![None; n],
        calls: (0..n).map(|_| ChoiceCalls::new(tools)).collect(),
        sent: vec![0; n],
        pieces: vec![Vec::new(); n],
        passage: Some(passage),
        over: false,
    };
    let first = Bytes::from(streaming.first_chunks());
    let body = stream::unfold(streaming, |mut s| async move {
        if s.over {
            return None;
        }
        // Events that are ready go into one write: one TLS record and one client wake-up.
        let mut out = Vec::with_capacity(512);
        match s.events.next().await {
            Some(event) => s.write(event, &mut out),
            None => {
                // Senders gone without a Done: the model was unloaded under the request.
                s.write((0, Event::Error("the model stopped".into())), &mut out);
            }
        }
        while !s.over {
            match s.events.next().now_or_never() {
                Some(Some(event)) => s.write(event, &mut out),
                _ => break,
            }
        }
        Some((Ok::<_, Infallible>(Bytes::from(out)), s))
    });
    let body = stream::once(async move { Ok::<_, Infallible>(first) }).chain(body);
    (
        [
            (http::header::CONTENT_TYPE, "text/event-stream"),
            (http::header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}
