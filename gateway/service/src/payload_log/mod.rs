//! Payload logs, as a policy on the request phases (`crate::phases`): a model, a pipeline or
//! an API key whose setting says `"payload_log": {"mode": "request" | "response" | "all",
//! "sample": 0.1, "sink": "NAME"}` has that share of its requests written, one JSON object
//! each, to a sink the operator defined (`[payload_log.sinks]`, or at run time through
//! `/api/payload-log/sinks`: a JSON Lines file, or an HTTP endpoint receiving CloudEvents). An
//! uploader turns logging on for a model or a pipeline, an admin for a key; only an admin says
//! where entries go.
//!
//! An entry: `time`, `request_id` (HTTP requests) and `trace_id` (a recorded trace), the caller
//! (`key: {id, name}`, never a secret, or `anonymous`), `model` and `version` (or `pipeline`, with
//! the model versions its stages ran in `stages`), `logged_by` (whose settings drew it), `outcome`,
//! then `request` (KServe: `inputs`, `outputs` asked for, `parameters`; chat: the rendered `prompt`
//! and the sampling `parameters`) and `response` (KServe: `outputs`; chat: each choice's `text` and
//! `finish`, and `usage`), as the mode says. A chat answer is logged as it was sent: after every
//! hook attached before this policy rewrote it. The request's thread only captures (tensors are
//! cloned, not encoded); the sink's writer renders the entry and redacts names like a secret
//! ([`entry::Redaction`]) before anything is written.
//!
//! When the key and the model (or pipeline) both have a setting, each draws its own sample;
//! two draws naming one sink make one entry with the wider mode, two sinks one entry each.
//!
//! Requests never wait for a sink: an entry that does not fit the sink's queue is dropped and
//! counted (`infergate_payload_log_entries_total{sink,outcome="dropped"}`).
//!
//! Not logged: stateful sequence steps (each step is its own request, and their state is not
//! in the request), mirrored copies and a pipeline's stages (they never pass the phases: a
//! pipeline's entry holds its own inputs and final outputs, and names its stages' versions).

pub mod config;
pub mod entry;
pub mod setting;
pub mod sink;
pub mod stored;

use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::infer::target::StageModel;
use crate::infer::Target;
use crate::model_settings::ModelSettings;
use crate::phases::{
    ChatAnswer, ChatExchange, ChatHook, ChatUsage, Exchange, Hook, Outcome, Policy,
};
use config::{PayloadLogConfig, SinkConfig};
use entry::{Captured, CapturedRequest, CapturedTensors, Redaction, Renderer};
use futures_util::future::BoxFuture;
use infergate_engine::Tensor;
use parking_lot::{Mutex, RwLock};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use serde_json::{json, Map, Value};
use setting::{LogSetting, Mode};
use sink::{Sink, SinkCounts, Writer};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

/// The sinks with their writers: those of `[payload_log]`, and those an admin defined since.
pub struct PayloadLogs {
    renderer: Arc<Renderer>,
    sinks: RwLock<BTreeMap<String, Arc<Sink>>>,
    /// The configuration file's sinks, which stored definitions override (`stored`).
    file_sinks: BTreeMap<String, SinkConfig>,
    /// Orders changes of the sinks, so that two replacements of one sink do not interleave.
    changes: Mutex<()>,
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
            let started = Sink::start(name, sink, "config", renderer.clone())?;
            sinks.insert(name.clone(), Arc::new(started));
        }
        Ok(PayloadLogs {
            renderer,
            sinks: RwLock::new(sinks),
            file_sinks: config.sinks.clone(),
            changes: Mutex::new(()),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.sinks.read().is_empty()
    }

    /// The names settings may log to.
    pub fn sink_names(&self) -> Vec<String> {
        self.sinks.read().keys().cloned().collect()
    }

    /// Every sink, by name.
    pub fn sinks(&self) -> Vec<(String, Arc<Sink>)> {
        let sinks = self.sinks.read();
        sinks.iter().map(|(n, s)| (n.clone(), s.clone())).collect()
    }

    /// Queues `entry` on `sink` (dropped and counted when the queue is full; nothing when no
    /// sink has that name here).
    fn send(&self, sink: &str, entry: Captured) {
        if let Some(sink) = self.sinks.read().get(sink) {
            sink.send(entry);
        }
    }

    /// Each sink's counts.
    pub fn counts(&self) -> Vec<(String, Arc<SinkCounts>)> {
        let sinks = self.sinks.read();
        sinks
            .iter()
            .map(|(name, sink)| (name.clone(), sink.counts.clone()))
            .collect()
    }

    /// Defines sink `name` as `config`, or replaces it; true when it replaced one. Blocking: a
    /// file sink that replaces one writing to the same file waits for the old writer to write
    /// what it had queued, so entries are neither lost nor interleaved; entries sent meanwhile
    /// wait in the new sink's queue. A writer that cannot start (a file that cannot be
    /// opened) is refused before the sink changes.
    pub fn define(&self, name: &str, config: SinkConfig) -> ApiResult<bool> {
        config::check_sink_name(name).map_err(ApiError::bad_request)?;
        config.validate().map_err(ApiError::bad_request)?;
        let _change = self.changes.lock();
        let (counts, drain_first) = {
            let sinks = self.sinks.read();
            let others = sinks.iter().filter(|(n, _)| *n != name);
            if let Some(other) = config.same_file(others.map(|(n, s)| (n, &s.config))) {
                return Err(ApiError::conflict(format!(
                    "file.path: sink '{other}' writes to that file"
                )));
            }
            match sinks.get(name) {
                Some(old) => (
                    old.counts.clone(),
                    old.config
                        .same_file(std::iter::once((&name.to_owned(), &config)))
                        .is_some(),
                ),
                None => (Arc::default(), false),
            }
        };
        // Checked now, opened for good once the old writer (if it writes the same file) is
        // done: its rotation must not move the file under the new one.
        let writer = Writer::open(name, &config).map_err(ApiError::bad_request)?;
        let writer = if drain_first {
            drop(writer);
            None
        } else {
            Some(writer)
        };
        let (sink, entries) = Sink::queued(config.clone(), "api", counts);
        let sink = Arc::new(sink);
        let old = self.sinks.write().insert(name.to_owned(), sink.clone());
        let replaced = old.is_some();
        if let Some(old) = old {
            let writer = old.take_writer();
            // The old writer ends once the last sender is dropped and its queue is written.
            drop(old);
            if let (true, Some(writer)) = (drain_first, writer) {
                let _ = writer.join();
            }
        }
        let started = match writer {
            Some(writer) => Ok(writer),
            None => Writer::open(name, &config),
        }
        .and_then(|writer| sink.run(name, writer, entries, self.renderer.clone()));
        if let Err(e) = started {
            let mut sinks = self.sinks.write();
            if sinks.get(name).is_some_and(|s| Arc::ptr_eq(s, &sink)) {
                sinks.remove(name);
            }
            return Err(ApiError::internal(format!(
                "payload log sink '{name}': {e}"
            )));
        }
        tracing::info!(sink = name, kind = config.kind(), target = %config.target(), replaced,
                       "payload log sink defined");
        Ok(replaced)
    }

    /// Removes sink `name`; its writer still writes what was queued, then ends. False when
    /// there was none.
    pub fn remove(&self, name: &str) -> bool {
        let _change = self.changes.lock();
        let removed = self.sinks.write().remove(name);
        if let Some(sink) = &removed {
            // Detached: it drains on its own.
            drop(sink.take_writer());
            tracing::info!(sink = name, "payload log sink removed");
        }
        removed.is_some()
    }
}

/// Whose setting is logged: a model version, or a pipeline.
enum Subject<'a> {
    Model(&'a str, u64),
    Pipeline(&'a str),
}

/// The fields every entry starts with: when, which request, who, which model version.
fn head(caller: &Caller, subject: Subject<'_>) -> Map<String, Value> {
    let mut head = Map::new();
    head.insert("time".into(), Value::String(entry::now_rfc3339()));
    if let Some(id) = infergate_telemetry::request_id::current() {
        head.insert("request_id".into(), Value::String(id.to_string()));
    }
    if let Some(trace) = infergate_telemetry::recorded_trace_id() {
        head.insert("trace_id".into(), Value::String(trace));
    }
    match caller.key() {
        Some(key) => head.insert("key".into(), json!({"id": key.id, "name": key.name})),
        None => head.insert("anonymous".into(), Value::Bool(true)),
    };
    match subject {
        Subject::Model(name, version) => {
            head.insert("model".into(), Value::String(name.to_owned()));
            head.insert("version".into(), Value::from(version));
        }
        Subject::Pipeline(name) => {
            head.insert("pipeline".into(), Value::String(name.to_owned()));
        }
    }
    head
}

fn outcome(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Sent => json!("sent"),
        Outcome::Failed(kind) => json!(format!("failed: {kind:?}")),
        Outcome::Dropped => json!("dropped"),
    }
}

/// One entry a request owes a sink: what it holds, and whose settings drew it.
struct Drawn {
    sink: String,
    mode: Mode,
    by: Vec<&'static str>,
}

/// The entries a request owes: its model's (or pipeline's) setting and its key's, each drawn
/// on its own; two draws naming one sink make one entry with the wider mode.
fn drawn(own: Option<(Arc<LogSetting>, &'static str)>, caller: &Caller) -> Vec<Drawn> {
    let mut drawn: Vec<Drawn> = Vec::new();
    if let Some((setting, by)) = own.filter(|(s, _)| s.draw()) {
        drawn.push(Drawn {
            sink: setting.sink.clone(),
            mode: setting.mode,
            by: vec![by],
        });
    }
    if let Some(setting) = key_setting(caller).filter(LogSetting::draw) {
        match drawn.iter_mut().find(|d| d.sink == setting.sink) {
            Some(same) => {
                same.mode = same.mode.wider(setting.mode);
                same.by.push("key");
            }
            None => drawn.push(Drawn {
                sink: setting.sink,
                mode: setting.mode,
                by: vec!["key"],
            }),
        }
    }
    drawn
}

/// The caller's key's own setting (anonymous callers have none). Stored as checked when it
/// was set; one that no longer parses logs nothing.
fn key_setting(caller: &Caller) -> Option<LogSetting> {
    serde_json::from_str(caller.key()?.payload_log.as_deref()?).ok()
}

/// `slot` for one of several entries: the last takes it, the others copy it.
fn share<T: Clone>(slot: &mut Option<T>, wanted: bool, last: bool) -> Option<T> {
    match (wanted, last) {
        (false, _) => None,
        (true, true) => slot.take(),
        (true, false) => slot.clone(),
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
}

struct TensorLog {
    logs: Arc<PayloadLogs>,
    targets: Vec<Drawn>,
    fields: Map<String, Value>,
    request: Option<CapturedRequest>,
    outputs: Option<Vec<Tensor>>,
}

impl Hook for TensorLog {
    fn stages_ran(&mut self, models: &[StageModel]) {
        let stages: Vec<Value> = models
            .iter()
            .map(|m| json!({"stage": m.stage, "model": m.model, "version": m.version}))
            .collect();
        self.fields.insert("stages".into(), Value::Array(stages));
    }

    fn after_model(&mut self, outputs: &[Tensor]) {
        if self.targets.iter().any(|t| t.mode.response()) {
            self.outputs = Some(outputs.to_vec());
        }
    }

    fn answer_sent(mut self: Box<Self>, ended: Outcome) {
        self.fields.insert("outcome".into(), outcome(ended));
        let targets = std::mem::take(&mut self.targets);
        let n = targets.len();
        for (i, target) in targets.into_iter().enumerate() {
            let last = i + 1 == n;
            let mut fields = if last {
                std::mem::take(&mut self.fields)
            } else {
                self.fields.clone()
            };
            fields.insert("logged_by".into(), json!(target.by));
            let entry = Captured {
                fields,
                tensors: Some(CapturedTensors {
                    request: share(&mut self.request, target.mode.request(), last),
                    outputs: share(&mut self.outputs, target.mode.response(), last),
                }),
            };
            self.logs.send(&target.sink, entry);
        }
    }
}

struct ChatLog {
    logs: Arc<PayloadLogs>,
    targets: Vec<Drawn>,
    entry: Map<String, Value>,
}

impl ChatHook for ChatLog {
    fn after_generation(&mut self, answer: &ChatAnswer) {
        if self.targets.iter().any(|t| t.mode.response()) {
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
        let targets = std::mem::take(&mut self.targets);
        let n = targets.len();
        for (i, target) in targets.into_iter().enumerate() {
            let mut fields = if i + 1 == n {
                std::mem::take(&mut self.entry)
            } else {
                self.entry.clone()
            };
            if !target.mode.request() {
                fields.remove("request");
            }
            if !target.mode.response() {
                fields.remove("response");
            }
            fields.insert("logged_by".into(), json!(target.by));
            let entry = Captured {
                fields,
                tensors: None,
            };
            self.logs.send(&target.sink, entry);
        }
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
        let hook = if exchange.stateful {
            None
        } else {
            let (subject, own) = match exchange.target {
                Target::Model(record) => (
                    Subject::Model(&record.name, record.version),
                    self.settings
                        .payload_log(&record.name)
                        .map(|s| (s, "model")),
                ),
                Target::Pipeline(pipeline) => (
                    Subject::Pipeline(&pipeline.record.name),
                    self.settings
                        .payload_log(&pipeline.record.name)
                        .map(|s| (s, "pipeline")),
                ),
            };
            let targets = drawn(own, exchange.caller);
            (!targets.is_empty()).then(|| {
                let mut fields = head(exchange.caller, subject);
                fields.insert("kind".into(), json!("kserve"));
                let request = targets
                    .iter()
                    .any(|t| t.mode.request())
                    .then(|| CapturedRequest {
                        inputs: exchange.inputs.to_vec(),
                        outputs: exchange.outputs.to_vec(),
                        parameters: exchange.parameters.to_vec(),
                    });
                Box::new(TensorLog {
                    logs: self.logs.clone(),
                    targets,
                    fields,
                    request,
                    outputs: None,
                }) as Box<dyn Hook>
            })
        };
        Box::pin(async move { Ok(hook) })
    }

    fn admit_chat<'a>(
        &'a self,
        exchange: &'a ChatExchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
        let model = exchange.model;
        let own = self.settings.payload_log(&model.name).map(|s| (s, "model"));
        let targets = drawn(own, exchange.caller);
        let hook = (!targets.is_empty()).then(|| {
            let mut entry = head(exchange.caller, Subject::Model(&model.name, model.version));
            entry.insert("kind".into(), json!("chat"));
            if targets.iter().any(|t| t.mode.request()) {
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
                targets,
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
            let sink = &sink;
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
