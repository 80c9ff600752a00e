//! A text generation's figures in the metrics, whatever streams it (OpenAI's SSE and JSON
//! answers, WebSocket frames): tokens as they come, the request when it ends.

use infergate_service::state::AppState;
use infergate_service::textgen::Generation;
use std::sync::Arc;
use std::time::Instant;

/// The `protocol` label of the OpenAI routes' metrics.
pub(super) const PROTOCOL: &str = "openai";

/// Records one generation in the metrics: tokens as they come, the request when it ends. A
/// generation dropped before its end (client gone) is recorded with status 499.
pub(super) struct Tracked {
    state: Arc<AppState>,
    model: String,
    version: String,
    started: Instant,
    ended: bool,
    tokens: prometheus_client::metrics::counter::Counter,
    _in_progress: infergate_service::metrics::GaugeGuard,
}

impl Tracked {
    pub(super) fn new(state: &Arc<AppState>, g: &Generation) -> Tracked {
        Tracked {
            state: state.clone(),
            model: g.model_name().to_string(),
            version: g.model_version().to_string(),
            started: Instant::now(),
            ended: false,
            tokens: state.metrics().token_counter(g.model_name(), PROTOCOL),
            _in_progress: state.metrics().generation_started(),
        }
    }

    pub(super) fn token(&self) {
        self.tokens.inc();
    }

    pub(super) fn end(&mut self, status: u16) {
        if !self.ended {
            self.ended = true;
            let elapsed = self.started.elapsed();
            self.state
                .metrics()
                .inference(&self.model, &self.version, PROTOCOL, status, elapsed);
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.ended {
            tracing::debug!(model = %self.model, "client went away; generation stopped");
            self.end(499);
        }
    }
}
