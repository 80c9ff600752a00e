//! The named phases of an inference request, where policies attach (rate and token budgets,
//! traffic splits, response caches, payload logs) and chat guardrails' hooks run, so that each
//! lands in one place whatever the protocol:
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
//!
//! **Chat generations** (the OpenAI routes and WebSocket `generate`, on a chat model or the
//! text generator) do not go through [`crate::infer::run`]: a generation is many model steps
//! and its answer is text. They have phases of their own, through the same policies
//! ([`Policy::admit_chat`]), driven by the transport that streams the text:
//!
//! 1. **admission** ([`ChatExchange`]): the caller, the model version, the prompt after its
//!    template was rendered (and after the guardrails read the messages:
//!    [`crate::guardrails`]), its tokens, and the most tokens the answer may generate; a token
//!    budget reserves here;
//! 2. **before generation** ([`ChatHook::before_generation`]): a hook may answer from a cache
//!    (only for deterministic requests: [`ChatExchange::deterministic`]); a streamed request
//!    then replays the cached pieces as a stream;
//! 3. **each piece of text** ([`ChatHook::on_text`]): a hook may rewrite it, hold it back (answer
//!    less, keep the rest for a later piece or [`ChatHook::end_of_text`]: a bounded
//!    look-behind is the hook's own buffer) or refuse the answer from there on; guardrails'
//!    hooks go first ([`ChatPassage::guard_first`]);
//! 4. **after generation** ([`ChatHook::after_generation`]): the whole answer as it was sent
//!    (a cache stores it here);
//! 5. **answer sent** ([`ChatHook::answer_sent`]): with the real usage, for a whole answer, a
//!    failed one, or a stream the client cancelled (the tokens generated until then); dropping
//!    the [`ChatPassage`] is this phase with [`Outcome::Dropped`].
//!
//! Requests that must not be split, mirrored or cached (stateful sequences, decoupled models)
//! are told apart by [`crate::infer::Request::is_stateful`]: every policy checks it there.

use crate::caller::Caller;
use crate::error::{ApiResult, Kind, LimitFields};
use crate::infer::target::StageModel;
use crate::infer::Target;
use futures_util::future::BoxFuture;
use infergate_engine::Tensor;
use infergate_store::models::ModelRecord;
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
    /// The request's scalar parameters, as text.
    pub parameters: &'a [(String, String)],
    /// A stateful request (a sequence's step, a decoupled model's): never answered from a
    /// cache, never split or mirrored.
    pub stateful: bool,
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

    /// Admission of a chat generation: refuse it, let it pass (`None`, the default: a policy
    /// that only knows tensors), or follow it with a [`ChatHook`].
    fn admit_chat<'a>(
        &'a self,
        _exchange: &'a ChatExchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
        Box::pin(async { Ok(None) })
    }
}

/// One request's passage through a policy after admission.
pub trait Hook: Send {
    /// Before the model: outputs returned here answer the request in the model's place (the
    /// first hook that answers wins; the model does not run).
    fn before_model(&mut self) -> Option<Vec<Tensor>> {
        None
    }

    /// A pipeline's stages ran these model versions (before [`Hook::after_model`]; not called
    /// for a model, nor when a hook answered in the pipeline's place).
    fn stages_ran(&mut self, _models: &[StageModel]) {}

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

    /// Runs every policy's chat admission in order; the first refusal ends it, and the hooks
    /// of the policies admitted before it hear that the request failed (nothing generated).
    pub async fn admit_chat(&self, exchange: &ChatExchange<'_>) -> ApiResult<ChatPassage> {
        let mut passage = ChatPassage::new(exchange);
        for policy in &self.policies {
            match policy.admit_chat(exchange).await {
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

    /// A pipeline's stages ran `models`.
    pub fn stages_ran(&mut self, models: &[StageModel]) {
        for hook in &mut self.hooks {
            hook.stages_ran(models);
        }
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

/// What a policy sees of a chat generation at admission.
pub struct ChatExchange<'a> {
    pub caller: &'a Caller,
    /// The version that generates (after any traffic split).
    pub model: &'a Arc<ModelRecord>,
    /// The version the request named; None when the model's policy chose it.
    pub named_version: Option<u64>,
    /// The prompt after the chat template was rendered (the text the model continues).
    pub prompt: &'a str,
    pub prompt_tokens: u64,
    /// The most tokens the answer may generate, every choice together (`max_tokens` × `n`,
    /// or what the model's context leaves when the request set no `max_tokens`).
    pub max_completion_tokens: u64,
    /// Every parameter that changes the answer besides the prompt (sampling, stop sequences,
    /// constraints, `n`, logprobs), by name, each value in a canonical text: a cache's key.
    pub parameters: &'a [(&'static str, String)],
    /// Whether the same request always gets the same answer (temperature 0 or a fixed seed):
    /// only such answers may be cached.
    pub deterministic: bool,
    /// Whether the answer is streamed.
    pub stream: bool,
}

/// A chat answer as sent: per choice, the pieces of text in the order they were sent (a
/// streamed replay sends the same pieces), why it finished and the tokens it generated.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatAnswer {
    pub choices: Vec<ChatChoice>,
    pub prompt_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ChatChoice {
    pub pieces: Vec<String>,
    /// `stop` or `length`.
    pub finish: &'static str,
    pub completion_tokens: u64,
}

impl ChatChoice {
    pub fn text(&self) -> String {
        self.pieces.concat()
    }
}

impl ChatAnswer {
    pub fn completion_tokens(&self) -> u64 {
        self.choices.iter().map(|c| c.completion_tokens).sum()
    }
}

/// What a chat generation used, as the answer-sent phase hears it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChatUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The answer came from a cache (its tokens are charged as if generated).
    pub cached: bool,
}

/// One chat generation's passage through a policy after admission.
pub trait ChatHook: Send {
    /// Before generation: an answer given here is sent in the model's place (the first hook
    /// that answers wins; nothing is generated).
    fn before_generation(&mut self) -> Option<Arc<ChatAnswer>> {
        None
    }

    /// A piece of choice `choice`'s text on its way to the client: what to send instead (the
    /// piece itself, a rewrite, or less, holding the rest back), or an error that ends the
    /// answer there (a refusal with its reason).
    fn on_text(&mut self, _choice: usize, text: String) -> ApiResult<String> {
        Ok(text)
    }

    /// The choice's text is complete: what the hook still holds back, to send last.
    fn end_of_text(&mut self, _choice: usize) -> ApiResult<String> {
        Ok(String::new())
    }

    /// The whole answer as sent (a cached answer included).
    fn after_generation(&mut self, _answer: &ChatAnswer) {}

    /// The state of a limit this hook admitted the generation under, for the answer's
    /// `RateLimit` fields (a token budget's).
    fn limit_fields(&self) -> Option<LimitFields> {
        None
    }

    /// The generation ended: answered, failed or dropped, with what it used.
    fn answer_sent(self: Box<Self>, _usage: ChatUsage, _outcome: Outcome) {}
}

/// A chat generation's hooks between admission and the end of its answer. The transport
/// counts the tokens generated ([`ChatPassage::generated`]) as they come, so that a stream
/// dropped halfway is settled with what it used; dropping the passage without
/// [`ChatPassage::finish`] tells the hooks it was dropped.
pub struct ChatPassage {
    hooks: Vec<Box<dyn ChatHook>>,
    usage: ChatUsage,
}

impl ChatPassage {
    fn new(exchange: &ChatExchange<'_>) -> ChatPassage {
        ChatPassage {
            hooks: Vec::new(),
            usage: ChatUsage {
                prompt_tokens: exchange.prompt_tokens,
                ..ChatUsage::default()
            },
        }
    }

    /// A passage no policy follows (a transport without phases, tests).
    pub fn unfollowed(prompt_tokens: u64) -> ChatPassage {
        ChatPassage {
            hooks: Vec::new(),
            usage: ChatUsage {
                prompt_tokens,
                ..ChatUsage::default()
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// Puts `hooks` in front of the policies' hooks, in order: guardrails, which must have
    /// the text before anything that keeps it (a cache stores what they let through).
    pub fn guard_first(&mut self, hooks: Vec<Box<dyn ChatHook>>) {
        self.hooks.splice(0..0, hooks);
    }

    /// Before generation: the first hook's answer in the model's place, if any (its tokens
    /// become this passage's usage).
    pub fn before_generation(&mut self) -> Option<Arc<ChatAnswer>> {
        let answer = self
            .hooks
            .iter_mut()
            .find_map(|hook| hook.before_generation())?;
        self.usage = ChatUsage {
            prompt_tokens: self.usage.prompt_tokens,
            completion_tokens: answer.completion_tokens(),
            cached: true,
        };
        Some(answer)
    }

    /// A piece of text through every hook, in order.
    pub fn text(&mut self, choice: usize, text: String) -> ApiResult<String> {
        let mut text = text;
        for hook in &mut self.hooks {
            text = hook.on_text(choice, text)?;
        }
        Ok(text)
    }

    /// The end of a choice's text: what the hooks held back, each hook's remainder passed
    /// through the hooks after it.
    pub fn end_of_text(&mut self, choice: usize) -> ApiResult<String> {
        let mut tail = String::new();
        for i in 0..self.hooks.len() {
            let held = self.hooks[i].end_of_text(choice)?;
            let mut piece = std::mem::take(&mut tail) + &held;
            for hook in &mut self.hooks[i + 1..] {
                if piece.is_empty() {
                    break;
                }
                piece = hook.on_text(choice, piece)?;
            }
            tail = piece;
        }
        Ok(tail)
    }

    /// Counts `tokens` more generated tokens.
    pub fn generated(&mut self, tokens: u64) {
        self.usage.completion_tokens += tokens;
    }

    /// Sets the generated tokens to the answer's own count (its usage, once known).
    pub fn set_generated(&mut self, tokens: u64) {
        self.usage.completion_tokens = tokens;
    }

    /// Corrects the prompt's token count (a generator that counts it itself).
    pub fn set_prompt_tokens(&mut self, tokens: u64) {
        self.usage.prompt_tokens = tokens;
    }

    pub fn usage(&self) -> ChatUsage {
        self.usage
    }

    /// The first hook's limit state, for the answer's `RateLimit` fields.
    pub fn limit_fields(&self) -> Option<LimitFields> {
        self.hooks.iter().find_map(|hook| hook.limit_fields())
    }

    /// The whole answer, as sent.
    pub fn after_generation(&mut self, answer: &ChatAnswer) {
        for hook in &mut self.hooks {
            hook.after_generation(answer);
        }
    }

    /// The generation ended with `outcome`.
    pub fn finish(mut self, outcome: Outcome) {
        let usage = self.usage;
        for hook in self.hooks.drain(..) {
            hook.answer_sent(usage, outcome);
        }
    }
}

impl Drop for ChatPassage {
    fn drop(&mut self) {
        let usage = self.usage;
        for hook in self.hooks.drain(..) {
            hook.answer_sent(usage, Outcome::Dropped);
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

    /// An infer key's caller with no limits.
    fn caller() -> Caller {
        let key = Arc::new(infergate_store::keys::KeyRecord {
            id: 1,
            public_id: "0123456789ab".into(),
            name: "k".into(),
            scopes: vec![infergate_store::auth::Scope::Infer],
            created_at: 0,
            revoked_at: None,
            rate_limit: None,
            max_concurrent: None,
            tokens: Default::default(),
            guardrails: None,
            payload_log: None,
        });
        Caller::of_key(key, &infergate_limits::Limits::default())
    }

    fn admit(phases: &Phases) -> ApiResult<Passage> {
        let caller = caller();
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
            parameters: &[],
            stateful: false,
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

    /// A chat policy: holds back text that could begin `banned` and replaces it whole (a
    /// guardrail's bounded look-behind), answers from `cached` when given, and logs usage.
    struct Redactor {
        banned: &'static str,
        cached: Option<Arc<ChatAnswer>>,
        log: Arc<Mutex<Vec<String>>>,
    }

    struct RedactorHook {
        banned: &'static str,
        held: String,
        cached: Option<Arc<ChatAnswer>>,
        log: Arc<Mutex<Vec<String>>>,
    }

    impl Policy for Redactor {
        fn name(&self) -> &'static str {
            "redactor"
        }

        fn admit<'a>(
            &'a self,
            _exchange: &'a Exchange<'a>,
        ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
            Box::pin(async { Ok(None) })
        }

        fn admit_chat<'a>(
            &'a self,
            exchange: &'a ChatExchange<'a>,
        ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
            Box::pin(async move {
                if exchange.prompt.contains("forbidden") {
                    return Err(ApiError::bad_request(
                        "the prompt asks for something refused",
                    ));
                }
                self.log.lock().push(format!(
                    "admit {} + {}",
                    exchange.prompt_tokens, exchange.max_completion_tokens
                ));
                Ok(Some(Box::new(RedactorHook {
                    banned: self.banned,
                    held: String::new(),
                    cached: self.cached.clone(),
                    log: self.log.clone(),
                }) as Box<dyn ChatHook>))
            })
        }
    }

    impl ChatHook for RedactorHook {
        fn before_generation(&mut self) -> Option<Arc<ChatAnswer>> {
            self.cached.clone()
        }

        fn on_text(&mut self, _choice: usize, text: String) -> ApiResult<String> {
            self.held.push_str(&text);
            let replaced = self.held.replace(self.banned, "***");
            // Keep back the longest tail that may still begin the banned word.
            let keep = (1..self.banned.len())
                .rev()
                .find(|&n| replaced.ends_with(&self.banned[..n]))
                .unwrap_or(0);
            let cut = replaced.len() - keep;
            self.held = replaced[cut..].to_owned();
            Ok(replaced[..cut].to_owned())
        }

        fn end_of_text(&mut self, _choice: usize) -> ApiResult<String> {
            Ok(std::mem::take(&mut self.held))
        }

        fn after_generation(&mut self, answer: &ChatAnswer) {
            self.log
                .lock()
                .push(format!("after {:?}", answer.choices[0].text()));
        }

        fn answer_sent(self: Box<Self>, usage: ChatUsage, outcome: Outcome) {
            self.log.lock().push(format!(
                "sent {outcome:?} {}+{} cached={}",
                usage.prompt_tokens, usage.completion_tokens, usage.cached
            ));
        }
    }

    fn chat_exchange<'a>(
        caller: &'a Caller,
        model: &'a Arc<ModelRecord>,
        prompt: &'a str,
    ) -> ChatExchange<'a> {
        ChatExchange {
            caller,
            model,
            named_version: None,
            prompt,
            prompt_tokens: 5,
            max_completion_tokens: 20,
            parameters: &[],
            deterministic: true,
            stream: true,
        }
    }

    fn chat_admit(phases: &Phases, prompt: &str) -> ApiResult<ChatPassage> {
        let caller = caller();
        let model = Arc::new(ModelRecord {
            name: "chat".into(),
            version: 1,
            sha256: String::new(),
            size_bytes: 0,
            signature: Default::default(),
            config: serde_json::Value::Null,
            created_at: 0,
        });
        futures_executor::block_on(phases.admit_chat(&chat_exchange(&caller, &model, prompt)))
    }

    fn redactor(log: &Arc<Mutex<Vec<String>>>, cached: Option<Arc<ChatAnswer>>) -> Phases {
        let mut phases = Phases::default();
        phases.attach(Arc::new(Redactor {
            banned: "secret",
            cached,
            log: log.clone(),
        }));
        phases
    }

    #[test]
    fn chat_text_passes_each_hook_which_may_hold_back_and_rewrite() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let phases = redactor(&log, None);
        let mut passage = chat_admit(&phases, "hello").expect("admitted");
        assert!(passage.before_generation().is_none());
        let mut sent = Vec::new();
        for piece in ["the se", "cr", "et is ", "sec"] {
            sent.push(passage.text(0, piece.to_owned()).unwrap());
            passage.generated(1);
        }
        sent.push(passage.end_of_text(0).unwrap());
        assert_eq!(sent, ["the ", "", "*** is ", "", "sec"]);
        let answer = ChatAnswer {
            choices: vec![ChatChoice {
                pieces: sent,
                finish: "stop",
                completion_tokens: 4,
            }],
            prompt_tokens: 5,
        };
        passage.after_generation(&answer);
        passage.finish(Outcome::Sent);
        assert_eq!(
            *log.lock(),
            [
                "admit 5 + 20",
                "after \"the *** is sec\"",
                "sent Sent 5+4 cached=false"
            ]
        );
    }

    #[test]
    fn a_cached_chat_answer_is_charged_and_a_dropped_stream_reports_its_tokens() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let cached = Arc::new(ChatAnswer {
            choices: vec![ChatChoice {
                pieces: vec!["a".into(), "b".into()],
                finish: "length",
                completion_tokens: 2,
            }],
            prompt_tokens: 5,
        });
        let phases = redactor(&log, Some(cached.clone()));
        let mut passage = chat_admit(&phases, "hello").expect("admitted");
        assert_eq!(passage.before_generation(), Some(cached));
        passage.finish(Outcome::Sent);
        assert_eq!(log.lock()[1], "sent Sent 5+2 cached=true");

        log.lock().clear();
        let phases = redactor(&log, None);
        let mut passage = chat_admit(&phases, "hello").expect("admitted");
        passage.text(0, "x".into()).unwrap();
        passage.generated(3);
        drop(passage);
        assert_eq!(log.lock()[1], "sent Dropped 5+3 cached=false");

        let refused = chat_admit(&phases, "something forbidden")
            .err()
            .expect("refused");
        assert_eq!(refused.kind, Kind::Invalid);
    }

    #[test]
    fn without_policies_a_passage_is_empty() {
        let passage = admit(&Phases::default()).expect("admitted");
        assert!(passage.is_empty());
    }
}
