//! What a chat model's request counts, whatever answers it (whole, streamed, WebSocket): the
//! usage in its answer (prompt, completion, cached and drafted tokens), its metrics while it
//! runs and when it ends, and its choices' events merged in the order they come.

use futures_util::stream::{self, BoxStream, StreamExt};
use infergate_api_types::openai::{CompletionTokensDetails, PromptTokensDetails, Usage};
use infergate_llm::{Done, Event, Generation};
use infergate_service::state::AppState;
use infergate_store::models::ModelRecord;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
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
    state: Arc<AppState>,
    record: Arc<ModelRecord>,
    started: Instant,
    ended: bool,
    tokens: Counter,
    ttft: Histogram,
    itl: Histogram,
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
            tokens: state.metrics().token_counter(&record.name, PROTOCOL),
            ttft: state.metrics().llm_time_to_first_token(&record.name),
            itl: state.metrics().llm_inter_token_latency(&record.name),
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
            None => self
                .ttft
                .observe(now.duration_since(self.started).as_secs_f64()),
            Some(before) => self.itl.observe(now.duration_since(before).as_secs_f64()),
        }
    }

    pub(super) fn end(&mut self, status: u16) {
        if !self.ended {
            self.ended = true;
            self.state.metrics().inference(
                &self.record.name,
                &self.record.version.to_string(),
                PROTOCOL,
                status,
                self.started.elapsed(),
            );
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.end(499);
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
