//! Token limits per key, as a policy on the chat phases (`crate::phases`): `tokens_per_minute`
//! (a GCRA over tokens) and `token_budget` (tokens per UTC day or month), the key's own or the
//! server's `[limits] default_*`.
//!
//! At chat admission the request reserves its prompt's tokens (after the chat template) plus
//! the most its answer may generate (`max_tokens` × `n`, or what the model's context leaves),
//! against both limits or neither, in this process ([`TokenLimiter`]) or, with
//! `[limits] shared_url`, in Redis (`infergate-redis-limit`'s token script, on Redis's clock),
//! so N replicas admit one budget between them. When the answer is done (sent whole, failed,
//! or a stream the client cancelled) the reservation is settled with the tokens really used
//! (a cancelled stream: the prompt and what was generated before the cancel) and the rest is
//! refunded. A reservation that is never settled (a crash, a lost task) counts as fully used.
//!
//! A refusal is 429 with `Retry-After`, the limit it hit (`tokens_per_minute` or
//! `token_budget`) and when it frees up in the message, OpenAI's code (`rate_limit_exceeded`,
//! `insufficient_quota`) and the token policy's RateLimit fields; a request that could never
//! fit (it asks more than the whole limit) is 400 instead.
//!
//! Settled answers go to the accounting (`crate::token_accounting`, the store's
//! `key_token_usage`) and to `infergate_key_tokens_total`. A cached answer is charged what it
//! would have cost. KServe requests pass untouched: they count as requests only.
//!
//! Worst cases that remain: see `infergate_traffic::tokens` (an answer longer than reserved is
//! charged its excess after the fact; a stream running over a period's end refunds nothing to
//! the new period; Redis down with `shared_failure = "open"`: each replica limits alone).

use crate::caller::{effective_token_limits, Caller};
use crate::error::{ApiError, ApiResult, Kind, LimitFields};
use crate::metrics::Metrics;
use crate::phases::{ChatExchange, ChatHook, ChatUsage, Exchange, Hook, Outcome, Policy};
use crate::shared_limits::{SharedLimits, TokenVerdict};
use crate::token_accounting::TokenAccounting;
use futures_util::future::BoxFuture;
use infergate_redis_limit::TokenReservation;
use infergate_store::Store;
use infergate_traffic::period::Period;
use infergate_traffic::tokens::{Refusal, Reservation, TokenLimiter, TokenLimits, TokenQuota};
use std::sync::Arc;

/// The token limiters and where settled usage goes. Shared by the policy and the usage API.
pub struct TokenGate {
    local: TokenLimiter,
    shared: Option<Arc<SharedLimits>>,
    accounting: Arc<TokenAccounting>,
    metrics: Arc<Metrics>,
}

/// A reservation held until the answer is done.
enum Held {
    Local(Reservation),
    Shared(TokenReservation, Arc<SharedLimits>),
}

/// Tokens spent per key id.
type SpentByKey = Vec<(i64, u64)>;

impl Held {
    fn quota(&self) -> &TokenQuota {
        match self {
            Held::Local(r) => r.quota(),
            Held::Shared(r, _) => r.quota(),
        }
    }
}

/// The RateLimit fields' items of a token quota.
fn fields(quota: &TokenQuota) -> Option<LimitFields> {
    Some(LimitFields {
        policy: quota.policy_header()?,
        current: quota.header()?,
    })
}

/// The error a refusal answers.
pub fn refusal_error(refusal: &Refusal) -> ApiError {
    let error = match refusal.retry_after_s() {
        Some(s) => ApiError::new(Kind::RateLimited, refusal.message())
            .retry_after(s)
            .with_code(refusal.openai_code()),
        None => ApiError::bad_request(refusal.message()).with_code("token_limit_exceeded"),
    };
    match fields(&refusal.quota) {
        Some(f) => error.with_limit_fields(f),
        None => error,
    }
}

impl TokenGate {
    pub fn new(
        shared: Option<Arc<SharedLimits>>,
        accounting: Arc<TokenAccounting>,
        metrics: Arc<Metrics>,
    ) -> TokenGate {
        TokenGate {
            local: TokenLimiter::new(),
            shared,
            accounting,
            metrics,
        }
    }

    pub fn accounting(&self) -> &Arc<TokenAccounting> {
        &self.accounting
    }

    /// A key's token quotas now, spending nothing (this replica's view: with Redis, the
    /// budget's `remaining` is the store's accounting instead, see the usage API).
    pub fn quota(&self, key_id: i64, limits: &TokenLimits) -> TokenQuota {
        self.local.quota(key_id, limits)
    }

    /// Forgets a revoked key's state.
    pub fn forget(&self, key_id: i64) {
        self.local.forget(key_id);
    }

    /// Seeds the local budgets from the store's accounting, so that a restart does not hand a
    /// key a fresh day or month (Redis keeps its own across restarts).
    pub fn restore(
        &self,
        store: &Store,
        defaults: &TokenLimits,
    ) -> Result<(), crate::error::ApiError> {
        if self.shared.is_some() {
            return Ok(());
        }
        let now = infergate_store::now_secs();
        let starts = [Period::Day, Period::Month].map(|p| (p, p.bounds(now).0));
        // Per period: its start and the tokens each key spent since.
        let spent: Vec<(Period, i64, SpentByKey)> = starts
            .iter()
            .map(|&(p, start)| Ok((p, start, store.tokens_spent_since(start)?)))
            .collect::<Result<_, infergate_store::StoreError>>()?;
        for key in store.list_keys()? {
            let Some(budget) = effective_token_limits(&key, defaults).token_budget else {
                continue;
            };
            if let Some((_, start, by_key)) = spent.iter().find(|s| s.0 == budget.period) {
                if let Some((_, used)) = by_key.iter().find(|(id, _)| *id == key.id) {
                    self.local.restore_spent(key.id, *start, *used);
                }
            }
        }
        Ok(())
    }

    /// Reserves `tokens` for `caller`; `Ok(None)`: no token limit applies.
    async fn reserve(&self, caller: &Caller, tokens: u64) -> ApiResult<Option<Held>> {
        let limits = caller.token_limits();
        if limits.is_unlimited() {
            return Ok(None);
        }
        let id = caller.id();
        if let Some(shared) = &self.shared {
            match shared.reserve_tokens(id, limits, tokens).await {
                TokenVerdict::Reserved(r) => {
                    return Ok(r.map(|r| Held::Shared(r, shared.clone())));
                }
                TokenVerdict::Refused(refusal) => return Err(self.refused(caller, &refusal)),
                TokenVerdict::Unavailable => {
                    return Err(ApiError::unavailable(
                        "the shared rate limiter is unavailable (the server's Redis does not answer); retry shortly",
                    ))
                }
                TokenVerdict::Fallback => {}
            }
        }
        match self.local.reserve(id, limits, tokens) {
            Ok(r) => Ok(r.map(Held::Local)),
            Err(refusal) => Err(self.refused(caller, &refusal)),
        }
    }

    fn refused(&self, caller: &Caller, refusal: &Refusal) -> ApiError {
        self.metrics
            .rate_limited(&caller.label(), refusal.limit.as_str());
        tracing::debug!(
            key_id = caller.id(),
            limit = refusal.limit.as_str(),
            requested = refusal.requested,
            "request refused by the token limiter"
        );
        refusal_error(refusal)
    }
}

/// The token limits as a request policy (chat generations only).
pub struct TokenPolicy {
    gate: Arc<TokenGate>,
}

impl TokenPolicy {
    pub fn new(gate: Arc<TokenGate>) -> TokenPolicy {
        TokenPolicy { gate }
    }
}

struct TokenHook {
    gate: Arc<TokenGate>,
    held: Option<Held>,
    key_id: i64,
    model: String,
}

impl ChatHook for TokenHook {
    fn limit_fields(&self) -> Option<LimitFields> {
        self.held.as_ref().and_then(|h| fields(h.quota()))
    }

    fn answer_sent(self: Box<Self>, usage: ChatUsage, outcome: Outcome) {
        let generated = usage.completion_tokens;
        // A request that failed before generating anything used nothing (a model that could
        // not load, a refusal by a later policy); otherwise its prompt was processed.
        let prompt = match outcome {
            Outcome::Failed(_) if generated == 0 => 0,
            _ => usage.prompt_tokens,
        };
        let used = prompt + generated;
        match self.held {
            Some(Held::Local(r)) => {
                r.settle(used);
            }
            Some(Held::Shared(r, shared)) => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(async move { shared.settle_tokens(r, used).await });
                }
                // No runtime to settle on: the reservation stays fully charged.
                Err(_) => drop(r),
            },
            None => {}
        }
        if used > 0 {
            let now = infergate_store::now_secs();
            self.gate.accounting.record(
                self.key_id,
                &self.model,
                now,
                prompt,
                generated,
                usage.cached,
            );
            self.gate
                .metrics
                .traffic
                .key_tokens(self.key_id, &self.model, used);
            self.gate.metrics.keys.add_tokens(self.key_id, used);
        }
    }
}

impl Policy for TokenPolicy {
    fn name(&self) -> &'static str {
        "token_limits"
    }

    fn admit<'a>(
        &'a self,
        _exchange: &'a Exchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
        // KServe requests are not charged tokens: they count as requests only.
        Box::pin(async { Ok(None) })
    }

    fn admit_chat<'a>(
        &'a self,
        exchange: &'a ChatExchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn ChatHook>>>> {
        Box::pin(async move {
            let tokens = exchange.prompt_tokens + exchange.max_completion_tokens;
            let held = self.gate.reserve(exchange.caller, tokens).await?;
            Ok(Some(Box::new(TokenHook {
                gate: self.gate.clone(),
                held,
                key_id: exchange.caller.id(),
                model: exchange.model.name.clone(),
            }) as Box<dyn ChatHook>))
        })
    }
}
