//! A key's limits as the management API and the CLI write them: one JSON object, each field
//! checked and named in the error.

use crate::error::{ApiError, ApiResult};
use infergate_limits::RateLimit;
use infergate_store::keys::KeyLimits;
use infergate_traffic::tokens::{TokenBudget, TokenLimits};
use serde_json::{Map, Value};

/// The fields [`parse_limits`] reads.
pub const LIMIT_FIELDS: [&str; 4] = [
    "rate_limit",
    "max_concurrent",
    "tokens_per_minute",
    "token_budget",
];

/// Reads `rate_limit` (`{"rps": R, "burst": B}`, burst optional; null = server default),
/// `max_concurrent` (a positive integer; null = server default), `tokens_per_minute` (a
/// positive integer; null = server default) and `token_budget` (`{"tokens": N, "period":
/// "day" | "month"}`; null = server default) from a JSON object. A field that is absent keeps
/// `current`'s value. Nothing is stored when any field is refused.
pub fn parse_limits(body: &Map<String, Value>, current: KeyLimits) -> ApiResult<KeyLimits> {
    let mut limits = current;
    if let Some(v) = body.get("rate_limit") {
        limits.rate_limit = match v {
            Value::Null => None,
            Value::Object(o) => {
                if let Some(extra) = o.keys().find(|k| !matches!(k.as_str(), "rps" | "burst")) {
                    return Err(ApiError::bad_request(format!(
                        "rate_limit: unknown field '{extra}' (use rps, burst)"
                    )));
                }
                let rps = o.get("rps").and_then(Value::as_f64).ok_or_else(|| {
                    ApiError::bad_request("rate_limit.rps must be a positive number")
                })?;
                let burst = match o.get("burst") {
                    None | Some(Value::Null) => None,
                    Some(b) => Some(b.as_u64().and_then(|b| u32::try_from(b).ok()).ok_or_else(
                        || ApiError::bad_request("rate_limit.burst must be a positive integer"),
                    )?),
                };
                Some(RateLimit::new(rps, burst).map_err(ApiError::bad_request)?)
            }
            _ => {
                return Err(ApiError::bad_request(
                    "rate_limit must be {\"rps\": N, \"burst\": N} or null",
                ))
            }
        };
    }
    if let Some(v) = body.get("max_concurrent") {
        limits.max_concurrent = match v {
            Value::Null => None,
            v => Some(
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        ApiError::bad_request("max_concurrent must be a positive integer or null")
                    })?,
            ),
        };
    }
    if let Some(v) = body.get("tokens_per_minute") {
        limits.tokens.tokens_per_minute = match v {
            Value::Null => None,
            v => Some(v.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                ApiError::bad_request("tokens_per_minute must be a positive integer or null")
            })?),
        };
    }
    if let Some(v) = body.get("token_budget") {
        limits.tokens.token_budget = match v {
            Value::Null => None,
            v => Some(serde_json::from_value::<TokenBudget>(v.clone()).map_err(|e| {
                ApiError::bad_request(format!(
                    "token_budget must be {{\"tokens\": N, \"period\": \"day\" | \"month\"}} or null: {e}"
                ))
            })?),
        };
    }
    TokenLimits::validate(&limits.tokens).map_err(ApiError::bad_request)?;
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn absent_keeps_null_clears_and_bad_values_are_refused() {
        let current = KeyLimits {
            rate_limit: Some(RateLimit::new(1.0, Some(2)).unwrap()),
            max_concurrent: Some(3),
            tokens: TokenLimits::default(),
        };
        assert_eq!(parse_limits(&obj(json!({})), current).unwrap(), current);
        let l = parse_limits(&obj(json!({"max_concurrent": null})), current).unwrap();
        assert_eq!((l.rate_limit, l.max_concurrent), (current.rate_limit, None));
        let l = parse_limits(&obj(json!({"rate_limit": {"rps": 4}})), current).unwrap();
        assert_eq!(l.rate_limit, Some(RateLimit { rps: 4.0, burst: 4 }));
        let l = parse_limits(
            &obj(json!({"tokens_per_minute": 900, "token_budget": {"tokens": 10000, "period": "month"}})),
            current,
        )
        .unwrap();
        assert_eq!(l.tokens.tokens_per_minute, Some(900));
        assert_eq!(
            l.tokens.token_budget.unwrap().period,
            infergate_traffic::period::Period::Month
        );
        let l = parse_limits(&obj(json!({"tokens_per_minute": null})), l).unwrap();
        assert_eq!(l.tokens.tokens_per_minute, None);
        assert!(l.tokens.token_budget.is_some(), "absent keeps");
        for bad in [
            json!({"rate_limit": {"rps": 0}}),
            json!({"rate_limit": {"rps": 1, "burst": 0}}),
            json!({"rate_limit": {"rps": 1, "brust": 2}}),
            json!({"rate_limit": 5}),
            json!({"max_concurrent": 0}),
            json!({"max_concurrent": -1}),
            json!({"max_concurrent": "2"}),
            json!({"tokens_per_minute": 0}),
            json!({"tokens_per_minute": 1.5}),
            json!({"token_budget": {"tokens": 5, "period": "week"}}),
            json!({"token_budget": {"tokens": 0, "period": "day"}}),
            json!({"token_budget": 5}),
        ] {
            assert!(parse_limits(&obj(bad.clone()), current).is_err(), "{bad}");
        }
    }
}
