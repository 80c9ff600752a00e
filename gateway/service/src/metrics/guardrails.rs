//! The chat guardrails' series, per guardrail (`guardrail` = `name@version`) and `phase`
//! (`prompt`: the request's messages; `answer`: a whole answer, or one piece of a stream):
//!
//! - `infergate_guardrail_calls_total{guardrail,phase}`: calls, whatever their end.
//! - `infergate_guardrail_verdicts_total{guardrail,phase,verdict}`: `pass`, `rewrite` or
//!   `refuse`, one per call that decided.
//! - `infergate_guardrail_failures_total{guardrail,phase,kind}`: calls that failed, by the
//!   plugin fault (`trap`, `timeout`, `memory`, ...), `busy` or `internal`.
//! - `infergate_guardrail_call_duration_seconds{guardrail,phase}` (histogram): every call.
//!
//! A request resolves its guardrails' series once ([`GuardrailMetrics::series`], one map
//! lookup per guardrail); recording a call is then a few atomic adds.

use super::labels::TraceExemplar;
use super::traced_histogram::TracedHistogram;
use infergate_plugin_host::PluginError;
use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    guardrail: String,
    phase: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    guardrail: String,
    phase: &'static str,
    verdict: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    guardrail: String,
    phase: &'static str,
    kind: &'static str,
}

/// What one guardrail call decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Rewrite,
    Refuse,
}

pub struct GuardrailMetrics {
    calls: Family<CallLabels, Counter>,
    verdicts: Family<VerdictLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    duration: Family<CallLabels, TracedHistogram>,
    /// The series of each guardrail seen, by `name@version`: bounded by the uploads.
    resolved: RwLock<HashMap<String, Arc<GuardrailSeries>>>,
}

/// One guardrail's series, both phases.
pub struct GuardrailSeries {
    pub prompt: PhaseSeries,
    pub answer: PhaseSeries,
}

/// One guardrail's series in one phase.
pub struct PhaseSeries {
    calls: Counter,
    pass: Counter,
    rewrite: Counter,
    refuse: Counter,
    duration: TracedHistogram,
    /// Failures are rare: their series are found when one happens.
    failures: Family<FailureLabels, Counter>,
    guardrail: String,
    phase: &'static str,
}

impl PhaseSeries {
    /// One call that took `elapsed` and decided `outcome`, or failed with it; `exemplar`: the
    /// request's recorded trace ([`super::traced_histogram::current_exemplar`]).
    pub fn record(
        &self,
        elapsed: Duration,
        exemplar: Option<TraceExemplar>,
        outcome: Result<Verdict, &PluginError>,
    ) {
        self.calls.inc();
        self.duration.observe(elapsed, exemplar);
        match outcome {
            Ok(Verdict::Pass) => self.pass.inc(),
            Ok(Verdict::Rewrite) => self.rewrite.inc(),
            Ok(Verdict::Refuse) => self.refuse.inc(),
            Err(e) => self
                .failures
                .get_or_create(&FailureLabels {
                    guardrail: self.guardrail.clone(),
                    phase: self.phase,
                    kind: failure_kind(e),
                })
                .inc(),
        };
    }
}

/// A failed plugin call's kind, as metrics label it.
pub fn failure_kind(e: &PluginError) -> &'static str {
    match e {
        PluginError::Fault { kind, .. } => kind.as_str(),
        PluginError::BadInput { .. } => "bad_input",
        PluginError::Busy { .. } | PluginError::CompilerBusy { .. } => "busy",
        PluginError::Invalid { .. } | PluginError::Internal(_) => "internal",
    }
}

const LATENCY_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

impl GuardrailMetrics {
    pub fn register(registry: &mut Registry) -> GuardrailMetrics {
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "guardrail_calls",
            "Chat guardrail calls by guardrail (name@version) and phase (prompt, answer)",
            calls.clone(),
        );
        let verdicts = Family::<VerdictLabels, Counter>::default();
        registry.register(
            "guardrail_verdicts",
            "Chat guardrail decisions by guardrail, phase and verdict (pass, rewrite, refuse)",
            verdicts.clone(),
        );
        let failures = Family::<FailureLabels, Counter>::default();
        registry.register(
            "guardrail_failures",
            "Chat guardrail calls that failed, by guardrail, phase and kind (trap, timeout, memory, ...)",
            failures.clone(),
        );
        let duration = Family::<CallLabels, TracedHistogram>::new_with_constructor(|| {
            TracedHistogram::new(LATENCY_BUCKETS)
        });
        registry.register(
            "guardrail_call_duration_seconds",
            "Chat guardrail call duration by guardrail and phase",
            duration.clone(),
        );
        GuardrailMetrics {
            calls,
            verdicts,
            failures,
            duration,
            resolved: RwLock::default(),
        }
    }

    /// The series of `guardrail` (`name@version`).
    pub fn series(&self, guardrail: &str) -> Arc<GuardrailSeries> {
        if let Some(series) = self.resolved.read().get(guardrail) {
            return series.clone();
        }
        self.resolved
            .write()
            .entry(guardrail.to_owned())
            .or_insert_with(|| {
                Arc::new(GuardrailSeries {
                    prompt: self.phase(guardrail, "prompt"),
                    answer: self.phase(guardrail, "answer"),
                })
            })
            .clone()
    }

    fn phase(&self, guardrail: &str, phase: &'static str) -> PhaseSeries {
        let call = CallLabels {
            guardrail: guardrail.to_owned(),
            phase,
        };
        let verdict = |verdict| {
            self.verdicts
                .get_or_create(&VerdictLabels {
                    guardrail: guardrail.to_owned(),
                    phase,
                    verdict,
                })
                .clone()
        };
        PhaseSeries {
            calls: self.calls.get_or_create(&call).clone(),
            pass: verdict("pass"),
            rewrite: verdict("rewrite"),
            refuse: verdict("refuse"),
            duration: self.duration.get_or_create(&call).clone(),
            failures: self.failures.clone(),
            guardrail: guardrail.to_owned(),
            phase,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infergate_plugin_host::{FaultKind, PluginId};

    #[test]
    fn calls_verdicts_and_failures_are_counted_per_guardrail_and_phase() {
        let mut registry = Registry::with_prefix("infergate");
        let metrics = GuardrailMetrics::register(&mut registry);
        let series = metrics.series("pii-mask@1.0.0");
        assert!(Arc::ptr_eq(&series, &metrics.series("pii-mask@1.0.0")));
        let ms = Duration::from_millis(1);
        series.prompt.record(ms, None, Ok(Verdict::Rewrite));
        series.answer.record(ms, None, Ok(Verdict::Pass));
        series.answer.record(ms, None, Ok(Verdict::Refuse));
        let trap = PluginError::Fault {
            plugin: PluginId {
                name: "pii-mask".into(),
                version: "1.0.0".into(),
            },
            kind: FaultKind::Trap,
            detail: String::new(),
        };
        series.answer.record(ms, None, Err(&trap));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            r#"infergate_guardrail_calls_total{guardrail="pii-mask@1.0.0",phase="prompt"} 1"#,
            r#"infergate_guardrail_calls_total{guardrail="pii-mask@1.0.0",phase="answer"} 3"#,
            r#"infergate_guardrail_verdicts_total{guardrail="pii-mask@1.0.0",phase="prompt",verdict="rewrite"} 1"#,
            r#"infergate_guardrail_verdicts_total{guardrail="pii-mask@1.0.0",phase="answer",verdict="refuse"} 1"#,
            r#"infergate_guardrail_verdicts_total{guardrail="pii-mask@1.0.0",phase="answer",verdict="pass"} 1"#,
            r#"infergate_guardrail_failures_total{guardrail="pii-mask@1.0.0",phase="answer",kind="trap"} 1"#,
            r#"infergate_guardrail_call_duration_seconds_count{guardrail="pii-mask@1.0.0",phase="answer"} 3"#,
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
    }
}
