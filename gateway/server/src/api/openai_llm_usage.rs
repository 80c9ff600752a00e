//! What a chat model's request counts, whatever answers it (whole, streamed, WebSocket): the
//! usage in its answer (prompt, completion, cached and drafted tokens), its metrics while it
//! runs and when it ends, its `prefill` and `decode` spans while its trace is recorded, and its
//! choices' events merged in the order they come.

use futures_util::stream::{self, BoxStream, StreamExt};
use infergate_api_types::openai::{CompletionTokensDetails, PromptTokensDetails, Usage};
use infergate_llm::{Done, Event, Generation};
use infergate_service::metrics::{InferenceLabels, TraceExemplar, TracedHistogram};
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Instant;

pub(super) const PROTOCOL: &str = "openai";

/// The usage of a request whose choices ended as `done` (those that did).
pub(super) fn usage(prompt_tokens: u32, done: &[Option<Done>]) -> Usage {
    let ended = || done.iter().flatten();
    let completion: u32 = ended().map(|d| d.completion_tokens).sum();
    let cached = ended().map(|d| d.cached_tokens).max().unwrap_or(0);
    Usage {
        prompt_tokens_details: Some(PromptTokensDetails {
            cached_tokens: cached,
        }),
        completion_tokens_details: Some(CompletionTokensDetails {
            accepted_prediction_tokens: ended().map(|d| d.accepted_prediction_tokens).sum(),
            rejected_prediction_tokens: ended().map(|d| d.rejected_prediction_tokens).sum(),
        }),
        ..Usage::new(prompt_tokens, completion)
    }
}

/// Metrics of one request: counted while it runs, recorded when it ends (499 when the client
/// left first).
pub(super) struct Tracked {
    /// Set while the request's trace is recorded.
    spans: Option<GenerationSpans>,
    state: Arc<AppState>,
    record: Arc<ModelRecord>,
    started: Instant,
    ended: bool,
    tokens: Counter,
    ttft: TracedHistogram,
    itl: TracedHistogram,
    /// The request's trace while it is recorded, looked up in the request's task: tokens are
    /// counted where the answer is sent from, outside it.
    exemplar: Option<TraceExemplar>,
    /// Per choice: when its last text came.
    last: Vec<Option<Instant>>,
    _in_progress: infergate_service::metrics::GaugeGuard,
}

impl Tracked {
    pub(super) fn new(
        state: &Arc<AppState>,
        record: &Arc<ModelRecord>,
        n: usize,
        started: Instant,
    ) -> Tracked {
        Tracked {
            spans: None,
            tokens: state.metrics().token_counter(&record.name, PROTOCOL),
            ttft: state.metrics().llm_time_to_first_token(&record.name),
            itl: state.metrics().llm_inter_token_latency(&record.name),
            exemplar: infergate_service::metrics::current_exemplar(),
            _in_progress: state.metrics().generation_started(),
            state: state.clone(),
            record: record.clone(),
            started,
            ended: false,
            last: vec![None; n],
        }
    }

    pub(super) fn token(&mut self, index: usize) {
        self.tokens.inc();
        let now = Instant::now();
        match self.last[index].replace(now) {
            None => {
                let ttft = now.duration_since(self.started);
                self.ttft.observe(ttft, self.exemplar.clone());
                if let Some(spans) = &mut self.spans {
                    spans.first_text(ttft);
                }
            }
            Some(before) => self
                .itl
                .observe(now.duration_since(before), self.exemplar.clone()),
        }
    }

    /// Opens the generation's spans while the current trace is recorded (not for an answer
    /// replayed from the cache: nothing is generated).
    pub(super) fn trace(&mut self, prompt_tokens: u32) {
        self.spans = GenerationSpans::open(&self.record, self.last.len(), prompt_tokens);
    }

    /// A choice ended with `done`: its counts go on the request's spans.
    pub(super) fn done(&mut self, done: &Done) {
        if let Some(spans) = &mut self.spans {
            spans.done(done);
        }
    }

    pub(super) fn end(&mut self, status: u16) {
        if !self.ended {
            self.ended = true;
            if let Some(spans) = self.spans.take() {
                spans.end(status);
            }
            let labels = InferenceLabels {
                model: self.record.name.clone(),
                version: self.record.version.to_string(),
                protocol: PROTOCOL,
                status,
            };
            self.state.metrics().inference_traced(
                labels,
                self.started.elapsed(),
                self.exemplar.take(),
            );
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.end(499);
    }
}

/// A generation's spans in its request's trace: `prefill` from admission to the first text of
/// any choice (the prompt's tokens), then `decode` to the end (the prompt tokens found in the
/// prefix cache, known when the answer ends; tokens generated; drafted tokens accepted and
/// rejected; the time to the first token as an event). A streamed answer outlives the handler that opened its `request` span,
/// so both name that span as their parent explicitly.
struct GenerationSpans {
    request: tracing::Span,
    prefill: tracing::Span,
    decode: Option<tracing::Span>,
    cached_tokens: u32,
    completion_tokens: u32,
    accepted: u32,
    rejected: u32,
}

impl GenerationSpans {
    /// None unless the current span's trace is recorded.
    fn open(record: &ModelRecord, choices: usize, prompt_tokens: u32) -> Option<GenerationSpans> {
        if !infergate_telemetry::recording() {
            return None;
        }
        let request = tracing::Span::current();
        let prefill = tracing::info_span!(
            target: infergate_telemetry::TARGET,
            parent: &request,
            "prefill",
            model = %record.name,
            version = record.version,
            choices = choices as i64,
            prompt_tokens = i64::from(prompt_tokens),
        );
        Some(GenerationSpans {
            request,
            prefill,
            decode: None,
            cached_tokens: 0,
            completion_tokens: 0,
            accepted: 0,
            rejected: 0,
        })
    }

    fn first_text(&mut self, ttft: std::time::Duration) {
        if self.decode.is_some() {
            return;
        }
        // The prefill ends here: dropping its span closes it, before the decode's opens.
        self.prefill = tracing::Span::none();
        let decode = tracing::info_span!(
            target: infergate_telemetry::TARGET,
            parent: &self.request,
            "decode",
            cached_tokens = tracing::field::Empty,
            completion_tokens = tracing::field::Empty,
            accepted_prediction_tokens = tracing::field::Empty,
            rejected_prediction_tokens = tracing::field::Empty,
            status = tracing::field::Empty,
        );
        tracing::info!(
            target: infergate_telemetry::TARGET,
            parent: &decode,
            ttft_ms = ttft.as_secs_f64() * 1000.0,
            "first token"
        );
        self.decode = Some(decode);
    }

    fn done(&mut self, done: &Done) {
        self.cached_tokens = self.cached_tokens.max(done.cached_tokens);
        self.completion_tokens += done.completion_tokens;
        self.accepted += done.accepted_prediction_tokens;
        self.rejected += done.rejected_prediction_tokens;
    }

    /// Counts are known only at the end; a prefill that never produced text ends here too.
    fn end(self, status: u16) {
        if let Some(decode) = &self.decode {
            decode.record("cached_tokens", i64::from(self.cached_tokens));
            decode.record("completion_tokens", i64::from(self.completion_tokens));
            decode.record("accepted_prediction_tokens", i64::from(self.accepted));
            decode.record("rejected_prediction_tokens", i64::from(self.rejected));
            decode.record("status", i64::from(status));
        }
    }
}

/// Every choice's events, tagged with its index, in the order they come.
pub(super) fn merged(generations: Vec<Generation>) -> BoxStream<'static, (usize, Event)> {
    stream::select_all(generations.into_iter().enumerate().map(|(i, g)| {
        stream::unfold(g.events, move |mut rx| async move {
            rx.recv().await.map(|event| ((i, event), rx))
        })
        .boxed()
    }))
    .boxed()
}
