//! The decision on an HTTP request's trace, taken at the front door before its `request` span
//! opens. A request whose trace is recorded gets a span the OpenTelemetry layer follows, told
//! the decision ([`Decided`]) so the sampler does not take it again; one whose trace is not
//! recorded gets a span on [`crate::UNTRACED`], which the layer never sees, so that it costs
//! what a request costs without traces but for this decision and its `X-Trace-Id`. Its trace
//! still travels: the hop to a worker carries it, unsampled ([`crate::w3c::inject`]), so the
//! worker does not record it either.
//!
//! The decision is the sampler's own rule ([`records`]): a trusted caller's sampled flag, else
//! the trace settings ([`crate::sampling`]) of the request's model, the ratio drawn from the
//! trace id as OpenTelemetry's ratio sampler draws it (so that every process decides alike),
//! the count taken only for recorded traces of a model.

use crate::sampling;
use opentelemetry::trace::{TraceContextExt, TraceId, TraceState};
use opentelemetry::Context;
use std::cell::Cell;

/// Tells the sampler that the front door decided to record this trace.
#[derive(Debug, Clone, Copy)]
pub struct Decided;

/// A request's trace as the front door decided it.
pub struct Head {
    pub trace_id: TraceId,
    pub recorded: bool,
    /// The caller's trace context, when it sent one that parses.
    pub parent: Option<Context>,
    /// The caller's `tracestate`, passed on with the trace.
    pub trace_state: TraceState,
}

/// A request's trace before it is decided: a request naming its model in its body is decided
/// once the body was read ([`Undecided::decide`]).
pub struct Undecided {
    pub trace_id: TraceId,
    parent: Option<Context>,
    trace_state: TraceState,
}

/// Decides the trace of a request whose caller sent `parent` (its `traceparent`, parsed with
/// whether the caller is trusted: [`crate::w3c::extract`]) for `model`.
pub fn decide(parent: Option<Context>, model: Option<&str>) -> Head {
    undecided(parent).decide(model)
}

/// The trace of a request whose caller sent `parent`, left to decide: the caller's trace id, or
/// a new one.
pub fn undecided(parent: Option<Context>) -> Undecided {
    let remote = parent
        .as_ref()
        .map(|cx| cx.span().span_context().clone())
        .filter(|c| c.is_valid());
    let trace_state = remote
        .as_ref()
        .map(|c| c.trace_state().clone())
        .unwrap_or_default();
    let trace_id = remote.map_or_else(random_trace_id, |c| c.trace_id());
    Undecided {
        trace_id,
        parent,
        trace_state,
    }
}

impl Undecided {
    /// Decides it for `model` ([`records`]).
    pub fn decide(self, model: Option<&str>) -> Head {
        Head {
            recorded: records(self.parent.as_ref(), self.trace_id, model),
            trace_id: self.trace_id,
            parent: self.parent,
            trace_state: self.trace_state,
        }
    }
}

/// The sampler's rule, for the front door and for every trace that starts elsewhere (the
/// process's sampler asks it too): a parent in this process, or a remote one whose caller is
/// trusted ([`crate::TrustedSampling`]), decides by its sampled flag; any other trace is
/// recorded by `model`'s trace settings (or the server-wide ones): not at level `OFF`, else by
/// ratio from `trace_id`, and for a model's trace while the count lasts (it is of inference
/// traces, as Triton's: a health probe or an admin call does not use it up).
pub fn records(parent: Option<&Context>, trace_id: TraceId, model: Option<&str>) -> bool {
    if let Some(cx) = parent.filter(|cx| cx.has_active_span()) {
        let span = cx.span();
        let context = span.span_context();
        if context.is_valid()
            && (!context.is_remote() || cx.get::<crate::TrustedSampling>().is_some())
        {
            return context.is_sampled();
        }
    }
    let applied = sampling::applied(model);
    applied.level != 0 && by_ratio(applied.ratio, trace_id) && (model.is_none() || applied.take())
}

/// The sampler's decision on a span opened under `parent`: the front door's, where it took one
/// ([`Decided`]), else [`records`] for the model `parent` names ([`sampling::ForModel`]).
pub fn samples(parent: Option<&Context>, trace_id: TraceId) -> bool {
    parent.is_some_and(|cx| cx.get::<Decided>().is_some())
        || records(
            parent,
            trace_id,
            parent
                .and_then(|cx| cx.get::<sampling::ForModel>())
                .map(|m| &*m.0),
        )
}

/// OpenTelemetry's `TraceIdRatioBased`: the trace id's low 64 bits, halved, under the ratio's
/// share of 2^63.
fn by_ratio(ratio: f64, trace_id: TraceId) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let bound = (ratio.max(0.0) * (1u64 << 63) as f64) as u64;
    let bytes = trace_id.to_bytes();
    let mut low = [0u8; 8];
    low.copy_from_slice(&bytes[8..]);
    (u64::from_be_bytes(low) >> 1) < bound
}

thread_local! {
    static STATE: Cell<u64> = Cell::new({
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x9e37_79b9_7f4a_7c15);
        h.finish()
    });
}

/// SplitMix64 from a per-thread random seed: ids that are unique and uniform, not secret.
fn next_u64() -> u64 {
    STATE.with(|s| {
        let mut z = s.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        s.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// A new trace id (never the invalid all-zero one).
pub fn random_trace_id() -> TraceId {
    loop {
        let id = (u128::from(next_u64()) << 64) | u128::from(next_u64());
        if id != 0 {
            return TraceId::from(id);
        }
    }
}

/// A new span id, for the unsampled parent a hop names.
pub(crate) fn random_span_id() -> u64 {
    loop {
        let id = next_u64();
        if id != 0 {
            return id;
        }
    }
}

/// `id` as 32 lowercase hex digits, on the stack: a header's value or a span's field.
pub fn hex(id: TraceId) -> [u8; 32] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 32];
    for (pair, b) in out.chunks_exact_mut(2).zip(id.to_bytes()) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 15)];
    }
    out
}

/// [`crate::w3c::TRACE_ID`]'s value for `id`.
pub fn header(id: TraceId) -> Option<http::HeaderValue> {
    http::HeaderValue::from_bytes(&hex(id)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_drawn_as_opentelemetry_draws_it() {
        let id = |low: u64| TraceId::from(u128::from(low));
        assert!(by_ratio(1.0, id(u64::MAX)));
        assert!(!by_ratio(0.0, id(0)));
        // Half of 2^63 is the bound of 0.5: the low half, halved, decides.
        assert!(by_ratio(0.5, id((1u64 << 62) * 2 - 2)));
        assert!(!by_ratio(0.5, id(1u64 << 63)));
        let recorded = (0..20_000)
            .filter(|_| by_ratio(0.1, random_trace_id()))
            .count();
        assert!(
            (1_600..2_400).contains(&recorded),
            "{recorded} of 20000 at 0.1"
        );
    }

    #[test]
    fn ids_are_hex_and_distinct() {
        let a = random_trace_id();
        assert_ne!(a, random_trace_id());
        assert_eq!(hex(a), format!("{a:032x}").as_bytes());
        assert_eq!(
            header(a).unwrap().as_bytes(),
            format!("{a:032x}").as_bytes()
        );
    }
}
