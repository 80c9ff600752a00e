//! Payload logs, as a policy on the request phases (`crate::phases`): a model whose settings
//! say `"payload_log": {"mode": "request" | "response" | "all", "sample": 0.1, "sink": "NAME"}`
//! has that share of its requests written, one JSON object each, to a sink the operator
//! defined in `[payload_log.sinks]` (a JSON Lines file, or an HTTP endpoint receiving
//! CloudEvents). An uploader turns logging on for a model; only the server's configuration
//! says where entries go.
//!
//! An entry: `time`, `request_id` (HTTP requests) and `trace_id` (a recorded trace), the
//! caller (`key: {id, name}`, never a secret, or `anonymous`), `model`, `version`, `outcome`,
//! then `request` (KServe: `inputs`, `outputs` asked for, `parameters`; chat: the rendered
//! `prompt` and the sampling `parameters`) and `response` (KServe: `outputs`; chat: each
//! choice's `text` and `finish`, and `usage`), as the mode says. A chat answer is logged as it
//! was sent: after every hook attached before this policy rewrote it. The request's thread only
//! captures (tensors are cloned, not encoded); the sink's writer renders the entry and redacts
//! names like a secret ([`entry::Redaction`]) before anything is written.
//!
//! Requests never wait for a sink: an entry that does not fit the sink's queue is dropped and
//! counted (`infergate_payload_log_entries_total{sink,outcome="dropped"}`).
//!
//! Not logged: pipelines, stateful sequence steps (each step is its own request, and their
//! state is not in the request), mirrored copies (they never pass the phases).

pub mod config;
pub mod entry;
pub mod setting;
pub mod sink;

use crate::caller::Caller;
use crate::error::ApiResult;
use crate::infer::Target;
use crate::model_settings::ModelSettings;
use crate::phases::{
    ChatAnswer, ChatExchange, ChatHook, ChatUsage, Exchange, Hook, Outcome, Policy,
};
use config::PayloadLogConfig;
use entry::{Captured, CapturedRequest, CapturedTensors, Redaction, Renderer};
use futures_util::future::BoxFuture;
use infergate_engine::Tensor;
use infergate_store::models::ModelRecord;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use serde_json::{json, Map, Value};
use setting::LogSetting;
use sink::{Sink, SinkCounts};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// The sinks of `[payload_log]` with their writers.
pub struct PayloadLogs {
    sinks: BTreeMap<String, Sink>,
}

impl PayloadLogs {
    /// Starts a writer for each sink of `config`.
    pub fn start(config: &PayloadLogConfig) -> Result<PayloadLogs, String> {
        config.validate()?;
        let renderer = Arc::new(Renderer {
            redaction: Redaction::new(&config.redact),
            max_entry_bytes: config.max_entry_bytes,
            form: config.tensor_data,
        });
        let mut sinks = BTreeMap::new();
        for (name, sink) in &config.sinks {
            sinks.insert(name.clone(), Sink::start(name, sink, renderer.clone())?);
        }
        Ok(PayloadLogs { sinks })
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.is_empty()
    }

    /// The names models may log to.
    pub fn sink_names(&self) -> impl Iterator<Item = &String> {
        self.sinks.keys()
    }

    /// Queues `entry` on `sink` (dropped and counted when the queue is full).
    fn send(&self, sink: &str, entry: Captured) {
        if let Some(sink) = self.sinks.get(sink) {
            sink.send(entry);
        }
    }

    /// Each sink's counts.
    pub fn counts(&self) -> impl Iterator<Item = (&String, &Arc<SinkCounts>)> {
        self.sinks.iter().map(|(name, sink)| (name, &sink.counts))
    }
}

/// The fields every entry starts with: when, which request, who, which model version.
fn head(caller: &Caller, model: &ModelRecord) -> Map<String, Value> {
    let mut head = Map::new();
    head.insert("time".into(), Value::String(entry::now_rfc3339()));
    if let Some(id) = infergate_telemetry::request_id::current() {
        head.insert("request_id".into(), Value::String(id.to_string()));
    }
    if let Some((trace, _)) = infergate_telemetry::w3c::recorded_ids(&tracing::Span::current()) {
        head.insert("trace_id".into(), Value::String(trace));
    }
    match caller.key() {
        Some(key) => head.insert("key".into(), json!({"id": key.id, "name": key.name})),
        None => head.insert("anonymous".into(), Value::Bool(true)),
    };
    head.insert("model".into(), Value::String(model.name.clone()));
    head.insert("version".into(), Value::from(model.version));
    head
}

fn outcome(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Sent => json!("sent"),
        Outcome::Failed(kind) => json!(format!("failed: {kind:?}")),
        Outcome::Dropped => json!("dropped"),
    }
}

/// The policy: attached after the others, so that it logs what they let through.
pub struct PayloadLogPolicy {
    logs: Arc<PayloadLogs>,
    settings: Arc<ModelSettings>,
}

impl PayloadLogPolicy {
    pub fn new(logs: Arc<PayloadLogs>, settings: Arc<ModelSettings>) -> PayloadLogPolicy {
        PayloadLogPolicy { logs, settings }
    }

    /// The setting of `model` when it logs this request.
    fn drawn(&self, model: &str) -> Option<Arc<LogSetting>> {
        let setting = self.settings.payload_log(model)?;
        setting.draw().then_some(setting)
    }
}

struct TensorLog {
    logs: Arc<PayloadLogs>,
    setting: Arc<LogSetting>,
    fields: Map<String, Value>,
    tensors: CapturedTensors,
}

impl Hook for TensorLog {
    fn after_model(&mut self, outputs: &[Tensor]) {
        if self.setting.mode.response() {
            self.tensors.outputs = Some(outputs.to_vec());
        }
    }

    fn answer_sent(mut self: Box<Self>, ended: Outcome) {
        self.fields.insert("outcome".into(), outcome(ended));
        let this = *self;
        let entry = Captured {
            fields: this.fields,
            tensors: Some(this.tensors),
        };
        this.logs.send(&this.setting.sink, entry);
    }
}

struct ChatLog {
    logs: Arc<PayloadLogs>,
    setting: Arc<LogSetting>,
    entry: Map<String, Value>,
}

impl ChatHook for ChatLog {
    fn after_generation(&mut self, answer: &ChatAnswer) {
        if self.setting.mode.response() {
            let choices: Vec<Value> = answer
                .choices
                .iter()
                .map(|c| json!({"text": c.text(), "finish": c.finish}))
                .collect();
            self.entry
                .insert("response".into(), json!({ "choices": choices }));
        }
    }

    fn answer_sent(mut self: Box<Self>, usage: ChatUsage, ended: Outcome) {
        self.entry.insert("outcome".into(), outcome(ended));
        self.entry.insert(
            "usage".into(),
            json!({"prompt_tokens": usage.prompt_tokens,
                   "completion_tokens": usage.completion_tokens,
                   "cached": usage.cached}),
        );
        let entry = Captured {
            fields: std::mem::take(&mut self.entry),
            tensors: None,
        };
        self.logs.send(&self.setting.sink, entry);
    }
}

impl Policy for PayloadLogPolicy {
    fn name(&self) -> &'static str {
        "payload_log"
    }

    fn admit<'a>(
        &'a self,
        exchange: &'a Exchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
        let hook = match exchange.target {
            Target::Model(record) if !exchange.stateful => {
                self.drawn(&record.name).map(|setting| {
                    let mut fields = head(exchange.caller, record);
                    fields.insert("kind".into(), json!("kserve"));
                    let request = setting.mode.request().then(|| CapturedRequest {
                        inputs: exchange.inputs.to_vec(),
                        outputs: exchange.outputs.to_vec(),
                        parameters: exchange.parameters.to_vec(),
                    });
                    Box::new(TensorLog {
                        logs: self.logs.clone(),
                        setting,
                        fields,
                        tensors: CapturedTensors {
                            request,
                            outputs: None,
                        },
                    }) as Box<dyn Hook>
                })
            }
            _ => None,
        };
        Box::pin(async move { Ok(hook) })
    }

    fn admit_chat<'a>(
        &'a self,
        exchange: &'a ChatExchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
        let hook = self.drawn(&exchange.model.name).map(|setting| {
            let mut entry = head(exchange.caller, exchange.model);
            entry.insert("kind".into(), json!("chat"));
            if setting.mode.request() {
                let parameters: Map<String, Value> = exchange
                    .parameters
                    .iter()
                    .map(|(k, v)| (k.to_string(), Value::String(v.clone())))
                    .collect();
                entry.insert(
                    "request".into(),
                    json!({"prompt": exchange.prompt, "parameters": parameters,
                           "stream": exchange.stream}),
                );
            }
            Box::new(ChatLog {
                logs: self.logs.clone(),
                setting,
                entry,
            }) as Box<dyn ChatHook>
        });
        Box::pin(async move { Ok(hook) })
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SinkLabels {
    sink: String,
    outcome: &'static str,
}

/// `infergate_payload_log_entries_total{sink,outcome}` (`written`, `dropped`: the queue was
/// full, `failed`: the sink's error), read at each scrape.
#[derive(Default)]
pub struct PayloadLogCollector {
    pub logs: Arc<OnceLock<Arc<PayloadLogs>>>,
}

impl std::fmt::Debug for PayloadLogCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PayloadLogCollector")
    }
}

impl Collector for PayloadLogCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(logs) = self.logs.get().filter(|l| !l.is_empty()) else {
            return Ok(());
        };
        let mut family = encoder.encode_descriptor(
            "payload_log_entries",
            "Payload log entries by sink: written, dropped (the sink's queue was full) or failed (the sink's error)",
            None,
            ConstCounter::new(0u64).metric_type(),
        )?;
        for (sink, counts) in logs.counts() {
            for (outcome, n) in [
                ("written", &counts.written),
                ("dropped", &counts.dropped),
                ("failed", &counts.failed),
            ] {
                ConstCounter::new(n.load(Ordering::Relaxed)).encode(family.encode_family(
                    &SinkLabels {
                        sink: sink.clone(),
                        outcome,
                    },
                )?)?;
            }
        }
        Ok(())
    }
}
