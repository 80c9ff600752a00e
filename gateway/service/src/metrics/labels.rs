//! The label sets of the gateway's metric families, and of the per-version series the
//! collectors read at scrape time.

use prometheus_client::encoding::EncodeLabelSet;

/// Both labels are `'static` so that counting a request allocates nothing: methods outside the
/// standard ones count as `OTHER`, and routes are the router's own templates (a fixed set, never
/// a client's path; `api::front`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    pub method: &'static str,
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InferenceLabels {
    pub model: String,
    pub version: String,
    pub protocol: &'static str,
    pub status: u16,
}

/// The exemplar of a latency observation: the trace of a recorded request (OpenMetrics
/// exemplars), so that a bucket on a chart leads to a trace of a request that landed in it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    pub trace_id: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    pub key_id: String,
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TokenLabels {
    pub model: String,
    pub protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
    pub version: String,
    pub stage: &'static str,
    /// `ok`, `bad_input`, `busy`, or the fault kind (`timeout`, `trap`, `memory`, ...).
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LlmLabels {
    pub model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ModelLabels {
    pub(super) model: String,
    pub(super) version: String,
}
