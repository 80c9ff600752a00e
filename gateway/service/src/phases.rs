//! The named phases of an inference request, where policies attach (rate and token budgets,
//! traffic splits, response caches, payload logs, guardrails), so that each lands in one place
//! whatever the protocol:
//!
//! 1. **admission**: the caller and the target are known, nothing has run; a policy may refuse
//!    the request, or follow it through the later phases with a [`Hook`];
//! 2. **before the model**: a hook may answer in the model's place (a cache hit);
//! 3. **after the model**: hooks see the answer the model gave;
//! 4. **answer sent**: the transport has written the answer (or the request ended without one:
//!    an error, a client gone); hooks settle what they reserved at admission.
//!
//! The service runs phases 1 to 3 ([`crate::infer::run`]); the transport keeps the request's
//! [`Passage`] until its answer is written, and dropping it is phase 4. Without policies a
//! passage allocates nothing.

use crate::caller::Caller;
use crate::error::{ApiResult, Kind};
use crate::infer::Target;
use futures_util::future::BoxFuture;
use infergate_engine::Tensor;
use std::sync::Arc;

/// What a policy sees of a request at admission.
pub struct Exchange<'a> {
    pub caller: &'a Caller,
    /// The target the name resolved to: a model version or a pipeline.
    pub target: &'a Target,
    /// The version the request named; None when the model's policy chose it.
    pub named_version: Option<u64>,
    /// The request's inputs (a relayed request that is not decoded has none).
    pub inputs: &'a [Tensor],
    /// The outputs asked for by name; empty for all of them.
    pub outputs: &'a [String],
    /// Set when the request belongs to a sequence (request parameter `sequence_id`): its
    /// state lives on one copy of the model, so policies that would send it elsewhere (traffic
    /// splits, mirrors) or answer it from elsewhere (response caches) must let it pass.
    pub sequence: Option<&'a infergate_engine::SequenceFlags>,
}

/// How a request ended, for [`Hook::answer_sent`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The answer was written whole.
    Sent,
    /// The request failed with an error of this kind.
    Failed(Kind),
    /// The request ended without an answer being written (a client gone, a cancelled
    /// stream).
    Dropped,
}

/// A policy attached to the inference service.
pub trait Policy: Send + Sync + 'static {
    /// A name for logs and metrics.
    fn name(&self) -> &'static str;

    /// Admission: refuse the request (its error is the answer), let it pass (`None`), or follow
    /// it through the later phases with a hook.
    fn admit<'a>(
        &'a self,
        exchange: &'a Exchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>>;
}

/// One request's passage through a policy after admission.
pub trait Hook: Send {
    /// Before the model: outputs returned here answer the request in the model's place (the
    /// first hook that answers wins; the model does not run).
    fn before_model(&mut self) -> Option<Vec<Tensor>> {
        None
    }

    /// After the model (or the hook that answered in its place), with the answer's outputs.
    fn after_model(&mut self, _outputs: &[Tensor]) {}

    /// The request ended: its answer was sent, it failed, or it was dropped.
    fn answer_sent(self: Box<Self>, _outcome: Outcome) {}
}

/// The policies of a service, in the order they run.
#[derive(Clone, Default)]
pub struct Phases {
    policies: Vec<Arc<dyn Policy>>,
}

impl Phases {
    /// Adds a policy after those already attached.
    pub fn attach(&mut self, policy: Arc<dyn Policy>) {
        self.policies.push(policy);
    }

    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// The names of the attached policies, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.policies.iter().map(|p| p.name()).collect()
    }

    /// Runs every policy's admission in order; the first refusal ends it, and the hooks of the
    /// policies admitted before it hear that the request failed.
    pub async fn admit(&self, exchange: &Exchange<'_>) -> ApiResult<Passage> {
        let mut passage = Passage::default();
        for policy in &self.policies {
            match policy.admit(exchange).await {
                Ok(Some(hook)) => passage.hooks.push(hook),
                Ok(None) => {}
                Err(refusal) => {
                    passage.finish(Outcome::Failed(refusal.kind));
                    return Err(refusal);
                }
            }
        }
        Ok(passage)
    }
}

/// A request's hooks between admission and the answer. Dropping it without [`Passage::finish`]
/// tells them the request was dropped.
#[derive(Default)]
pub struct Passage {
    hooks: Vec<Box<dyn Hook>>,
}

impl Passage {
    /// Whether any policy follows this request.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Before the model: the first hook's answer in the model's place, if any.
    pub fn before_model(&mut self) -> Option<Vec<Tensor>> {
        self.hooks.iter_mut().find_map(|hook| hook.before_model())
    }

    /// After the model, with the answer's outputs.
    pub fn after_model(&mut self, outputs: &[Tensor]) {
        for hook in &mut self.hooks {
            hook.after_model(outputs);
        }
    }

    /// The request ended with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        for hook in self.hooks.drain(..) {
            hook.answer_sent(outcome);
        }
    }
}

impl Drop for Passage {
    fn drop(&mut self) {
        for hook in self.hooks.drain(..) {
            hook.answer_sent(Outcome::Dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;
    use parking_lot::Mutex;

    /// Records every phase it sees; refuses or answers when told to.
    struct Recorder {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        refuse: bool,
        answer: bool,
    }

    struct RecorderHook {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        answer: bool,
    }

    impl Policy for Recorder {
        fn name(&self) -> &'static str {
            self.name
        }

        fn admit<'a>(
            &'a self,
            _exchange: &'a Exchange<'a>,
        ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
            Box::pin(async move {
                self.log.lock().push(format!("{}: admission", self.name));
                if self.refuse {
                    return Err(ApiError::new(Kind::RateLimited, "over budget"));
                }
                Ok(Some(Box::new(RecorderHook {
                    name: self.name,
                    log: self.log.clone(),
                    answer: self.answer,
                }) as Box<dyn Hook>))
            })
        }
    }

    impl Hook for RecorderHook {
        fn before_model(&mut self) -> Option<Vec<Tensor>> {
            self.log.lock().push(format!("{}: before", self.name));
            self.answer
                .then(|| vec![Tensor::from_f32("y", vec![1], &[1.0]).expect("tensor")])
        }

        fn after_model(&mut self, outputs: &[Tensor]) {
            self.log
                .lock()
                .push(format!("{}: after {}", self.name, outputs.len()));
        }

        fn answer_sent(self: Box<Self>, outcome: Outcome) {
            self.log
                .lock()
                .push(format!("{}: sent {outcome:?}", self.name));
        }
    }

    fn recorder(
        name: &'static str,
        log: &Arc<Mutex<Vec<String>>>,
        refuse: bool,
        answer: bool,
    ) -> Arc<dyn Policy> {
        Arc::new(Recorder {
            name,
            log: log.clone(),
            refuse,
            answer,
        })
    }

    fn admit(phases: &Phases) -> ApiResult<Passage> {
        let key = Arc::new(infergate_store::keys::KeyRecord {
            id: 1,
            public_id: "0123456789ab".into(),
            name: "k".into(),
            scopes: vec![infergate_store::auth::Scope::Infer],
            created_at: 0,
            revoked_at: None,
            rate_limit: None,
            max_concurrent: None,
        });
        let caller = Caller::of_key(key, &infergate_limits::Limits::default());
        let target = Target::Model(Arc::new(infergate_store::models::ModelRecord {
            name: "m".into(),
            version: 1,
            sha256: String::new(),
            size_bytes: 0,
            signature: Default::default(),
            config: serde_json::Value::Null,
            created_at: 0,
        }));
        let exchange = Exchange {
            caller: &caller,
            target: &target,
            named_version: None,
            inputs: &[],
            outputs: &[],
            sequence: None,
        };
        futures_executor::block_on(phases.admit(&exchange))
    }

    #[test]
    fn phases_run_in_order_and_a_dropped_passage_says_so() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut phases = Phases::default();
        phases.attach(recorder("a", &log, false, false));
        phases.attach(recorder("b", &log, false, true));
        assert_eq!(phases.names(), ["a", "b"]);
        let mut passage = admit(&phases).expect("admitted");
        let answer = passage.before_model().expect("b answers");
        passage.after_model(&answer);
        passage.finish(Outcome::Sent);
        assert_eq!(
            *log.lock(),
            [
                "a: admission",
                "b: admission",
                "a: before",
                "b: before",
                "a: after 1",
                "b: after 1",
                "a: sent Sent",
                "b: sent Sent"
            ]
        );
        log.lock().clear();
        drop(admit(&phases).expect("admitted"));
        assert_eq!(log.lock()[2..], ["a: sent Dropped", "b: sent Dropped"]);
    }

    #[test]
    fn a_refusal_ends_admission_and_earlier_hooks_hear_it() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut phases = Phases::default();
        phases.attach(recorder("a", &log, false, false));
        phases.attach(recorder("b", &log, true, false));
        phases.attach(recorder("c", &log, false, false));
        let refused = admit(&phases).err().expect("refused");
        assert_eq!(refused.kind, Kind::RateLimited);
        assert_eq!(
            *log.lock(),
            [
                "a: admission",
                "b: admission",
                "a: sent Failed(RateLimited)"
            ]
        );
    }

    #[test]
    fn without_policies_a_passage_is_empty() {
        let passage = admit(&Phases::default()).expect("admitted");
        assert!(passage.is_empty());
    }
}
