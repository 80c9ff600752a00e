//! The OpenTelemetry sampler of a process that exports traces: the front door's decision on a
//! request's trace where it took one, else the same rule for a trace that starts elsewhere
//! ([`crate::head::samples`]: a trusted or local parent's flag, else the trace settings of the
//! model the parent context names).

use opentelemetry::trace::{
    Link, SamplingDecision, SamplingResult, SpanKind, TraceContextExt, TraceId,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::ShouldSample;

#[derive(Debug, Clone)]
pub struct Sampler;

impl ShouldSample for Sampler {
    fn should_sample(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        SamplingResult {
            decision: if crate::head::samples(parent, trace_id) {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            // Recorded or not, the caller's trace state travels with the context.
            trace_state: parent
                .map(|cx| cx.span().span_context().trace_state().clone())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{self, Change, Field};
    use crate::TrustedSampling;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};

    fn decide(parent: Option<&Context>) -> SamplingDecision {
        let trace_id = TraceId::from_bytes([7; 16]);
        Sampler
            .should_sample(parent, trace_id, "request", &SpanKind::Internal, &[], &[])
            .decision
    }

    fn parent(sampled: bool, remote: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::NOT_SAMPLED
        };
        let context = SpanContext::new(
            TraceId::from_bytes([7; 16]),
            SpanId::from_bytes([1; 8]),
            flags,
            remote,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(context)
    }

    fn set(model: Option<&str>, change: Change) {
        sampling::update(model, &change);
    }

    fn rate(rate: u32) -> Change {
        Change {
            rate: Field::Set(rate),
            ..Change::default()
        }
    }

    // The trace settings are the process's: this one test walks through them, while no other
    // test changes them.
    #[test]
    fn trusted_remote_parents_and_local_ones_decide_then_the_trace_settings() {
        let _settings = sampling::tests::SETTINGS.lock();
        const RECORD: SamplingDecision = SamplingDecision::RecordAndSample;
        const DROP: SamplingDecision = SamplingDecision::Drop;
        sampling::start(0.0);
        assert_eq!(decide(None), DROP);
        set(None, rate(1));
        assert_eq!(decide(None), RECORD);
        // An untrusted caller cannot force recording, nor prevent it.
        set(None, rate(0));
        assert_eq!(decide(Some(&parent(true, true))), DROP);
        set(None, rate(1));
        assert_eq!(decide(Some(&parent(false, true))), RECORD);
        // A trusted one decides either way.
        let trusted = |sampled| parent(sampled, true).with_value(TrustedSampling);
        set(None, rate(0));
        assert_eq!(decide(Some(&trusted(true))), RECORD);
        set(None, rate(1));
        assert_eq!(decide(Some(&trusted(false))), DROP);
        // A span inside the process follows its parent.
        set(None, rate(0));
        assert_eq!(decide(Some(&parent(true, false))), RECORD);
        set(None, rate(1));
        assert_eq!(decide(Some(&parent(false, false))), DROP);

        // A model's settings decide for the traces that name it; the others keep the
        // server-wide ones.
        let model = |name: &str| Context::new().with_value(sampling::ForModel(name.into()));
        set(
            Some("quiet"),
            Change {
                level: Field::Set(0),
                ..Change::default()
            },
        );
        set(
            Some("counted"),
            Change {
                count: Field::Set(2),
                ..Change::default()
            },
        );
        assert_eq!(decide(Some(&model("quiet"))), DROP);
        assert_eq!(decide(Some(&model("other"))), RECORD);
        let counted: Vec<_> = (0..4).map(|_| decide(Some(&model("counted")))).collect();
        assert_eq!(counted, [RECORD, RECORD, DROP, DROP]);
        assert_eq!(decide(None), RECORD, "the server-wide count is another");
        // Traces that name no model (health, admin) do not use up the count.
        set(
            None,
            Change {
                count: Field::Set(0),
                ..Change::default()
            },
        );
        assert_eq!(decide(None), RECORD);
        assert_eq!(decide(Some(&model("other"))), DROP);
        set(
            None,
            Change {
                count: Field::Clear,
                ..Change::default()
            },
        );
        // A trusted caller still decides for a model at level OFF.
        let quiet_trusted = trusted(true).with_value(sampling::ForModel("quiet".into()));
        assert_eq!(decide(Some(&quiet_trusted)), RECORD);
    }
}
