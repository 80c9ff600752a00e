//! The API's JSON shapes the dashboard reads: the gateway's own answer types
//! (`infergate-api-types`), plus what the pages compute from them.

pub use infergate_api_types::events::{Event, Memory};
pub use infergate_api_types::history::{
    Activity, History, KeyTraffic, Series as HistorySeries, SeriesKind, Totals, VersionState,
};
pub use infergate_api_types::keys::{
    ApiKey, KeyCreated, KeyList, KeyTokens, KeyUsageReport, ModelTokens, RateLimit,
};
pub use infergate_api_types::kserve::{ServerDevice, ServerMetadata};
pub use infergate_api_types::models::{ModelList, ModelVersion, TensorSpec};
pub use infergate_api_types::openai::{
    ChatChunkChoice, Embedding, EmbeddingList, EmbeddingVector, ModelCardList, StreamEvent,
    TextChoice,
};
pub use infergate_api_types::pipelines::{
    DetectedRegions, PipelineList, PipelineSpec, PipelineView,
};
pub use infergate_api_types::plugins::{
    EffectiveLimits, PluginDescription, PluginKind, PluginLimits, PluginList, PluginView,
};
pub use infergate_api_types::stats::{InferenceStats, ModelStats, StatDuration, StatsList};
pub use infergate_api_types::traffic::{Policy, SplitEntry, TrafficAnswer, TrafficFigures};
pub use infergate_api_types::workers::{
    Devices, GpuUsage, LoadedModel, WorkerFigures, WorkerList, WorkerState,
    WorkerView as WorkerHost,
};

/// A tensor's shape as the pages print it: `[1, 3, ?, ?]` (`?` for a dynamic dimension).
pub fn shape_text(spec: &TensorSpec) -> String {
    let dims: Vec<String> = spec
        .shape
        .iter()
        .map(|d| {
            if *d < 0 {
                "?".to_string()
            } else {
                d.to_string()
            }
        })
        .collect();
    format!("[{}]", dims.join(", "))
}

/// Versions grouped by model name, newest version first.
pub fn group_models(list: &[ModelVersion]) -> Vec<(String, Vec<ModelVersion>)> {
    let mut groups: Vec<(String, Vec<ModelVersion>)> = Vec::new();
    for m in list {
        match groups.iter_mut().find(|(n, _)| *n == m.name) {
            Some((_, v)) => v.push(m.clone()),
            None => groups.push((m.name.clone(), vec![m.clone()])),
        }
    }
    for (_, v) in &mut groups {
        v.sort_by_key(|m| std::cmp::Reverse(m.version));
    }
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    groups
}

/// A host's figures from `/api/workers`, as a `/v2/events` tick would give them, before the
/// first tick arrives.
pub fn figures_of(h: &WorkerHost) -> WorkerFigures {
    let live = h.state != WorkerState::Lost;
    let r = &h.report;
    let measured = |v: f64| (live && r.requests_per_s > 0.0).then_some(v);
    WorkerFigures {
        id: h.info.id.clone(),
        address: h.info.advertise.clone(),
        state: h.state,
        last_seen_ms: h.last_seen_ms,
        outstanding: h.outstanding,
        models: live.then(|| r.models.clone()),
        in_flight: live.then_some(r.in_flight),
        queued: live.then_some(r.queued),
        requests_per_s: live.then_some(r.requests_per_s),
        p50_ms: measured(r.p50_ms),
        p99_ms: measured(r.p99_ms),
        cpu_percent: live.then_some(r.cpu_percent),
        rss_bytes: live.then_some(r.rss_bytes),
        gpus: live.then(|| r.gpus.clone()),
    }
}
