//! Triton's trace extension (`/v2[/models/{m}]/trace/setting`, gRPC `TraceSetting`): the trace
//! settings read and changed in Triton's names, values and error messages, over the process's
//! settings (`infergate_telemetry::sampling`). Every value travels as strings: JSON's `null`
//! (HTTP) or an empty list (gRPC) clears a setting.
//!
//! Unlike Triton's, a change is kept in the store (`trace_settings`) and applied from there by
//! every replica ([`follow`]: at start, and on PostgreSQL when another replica changed them),
//! so that replicas behind one load balancer sample alike and the next start keeps them;
//! clearing a field (`null`) returns it to the configuration's value. A count is each
//! process's own: every replica records up to `trace_count` traces from when it was set (or
//! from its start).

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use infergate_store::shared_settings::TraceRecord;
use infergate_telemetry::sampling::{self, Change, Field, TENSORS, TIMESTAMPS};
use parking_lot::Mutex;
use std::collections::BTreeMap;

/// The `count_revision` last applied to this process's count, by scope (`""`: server-wide):
/// a re-read restarts a count only when it was set again. Process-wide, like the settings it
/// follows.
static APPLIED: Mutex<BTreeMap<String, i64>> = Mutex::new(BTreeMap::new());

/// A setting's new values; `None` clears it.
pub type Values = Option<Vec<String>>;

/// The only mode: traces are OpenTelemetry's, exported over OTLP.
const MODE: &str = "opentelemetry";

/// A model's settings exist for a model or pipeline the requests can name (in Triton's words
/// when there is none).
fn check_model(state: &AppState, model: Option<&str>) -> ApiResult<()> {
    match model {
        Some(name) if crate::infer::resolve(state, name, None).is_err() => Err(
            ApiError::bad_request(format!("Request for unknown model : {}", shown(name))),
        ),
        _ => Ok(()),
    }
}

/// The settings that apply to `model` (or server-wide), each as its list of strings: what GET
/// and gRPC answer.
pub fn read(state: &AppState, model: Option<&str>) -> ApiResult<Vec<(&'static str, Vec<String>)>> {
    check_model(state, model)?;
    let setting = sampling::current(model);
    let mut levels = Vec::new();
    if setting.level & TIMESTAMPS != 0 {
        levels.push("TIMESTAMPS".to_owned());
    }
    if setting.level & TENSORS != 0 {
        levels.push("TENSORS".to_owned());
    }
    if levels.is_empty() {
        levels.push("OFF".to_owned());
    }
    Ok(vec![
        ("trace_level", levels),
        ("trace_rate", vec![setting.rate.to_string()]),
        ("trace_count", vec![setting.count.to_string()]),
        ("trace_mode", vec![MODE.to_owned()]),
    ])
}

/// Applies `settings` to `model` (or server-wide), stored first, and answers the settings that
/// apply now. Nothing changes unless every setting is valid and stored.
pub async fn change(
    state: &AppState,
    model: Option<&str>,
    settings: &[(String, Values)],
) -> ApiResult<Vec<(&'static str, Vec<String>)>> {
    check_model(state, model)?;
    let mut change = Change::default();
    for (name, values) in settings {
        match name.as_str() {
            "trace_file" => {
                return Err(ApiError::bad_request(
                    "trace file location can not be updated through network protocol",
                ))
            }
            "trace_level" => change.level = field(values, level)?,
            "trace_rate" => {
                change.rate = field(values, |v| number(name, v, 0, u32::MAX.into()))?.map(
                    // Within u32 by the bounds just checked.
                    |rate| u32::try_from(rate).unwrap_or(u32::MAX),
                )
            }
            "trace_count" => change.count = field(values, count)?,
            // Triton's trace files are written every N traces; OpenTelemetry spans leave in
            // batches. Checked as Triton does, and otherwise without effect.
            "log_frequency" => {
                field(values, |v| number(name, v, 0, u32::MAX.into()))?;
            }
            "trace_mode" => {
                if let Some(values) = values {
                    if values.iter().any(|v| v != MODE) {
                        return Err(ApiError::bad_request(format!(
                            "trace_mode '{}' is not offered: infergate exports OpenTelemetry \
                             traces only ('{MODE}'), and the mode cannot change at run time",
                            shown(&values.join(","))
                        )));
                    }
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown trace setting '{}': expected trace_level, trace_rate, \
                     trace_count, log_frequency or trace_mode",
                    shown(other)
                )))
            }
        }
    }
    if change != Change::default() {
        let scope = model.unwrap_or_default().to_owned();
        let store = state.store().clone();
        let count_changed = change.count != Field::Keep;
        let record = tokio::task::spawn_blocking(move || {
            store.change_trace_setting(&scope, count_changed, |r| {
                r.level = change.level.map(i64::from).applied_to(r.level);
                r.rate = change.rate.map(i64::from).applied_to(r.rate);
                r.count = change.count.applied_to(r.count);
            })
        })
        .await
        .map_err(|e| ApiError::internal(format!("storing the trace setting: {e}")))?
        .map_err(|e| ApiError::internal(format!("storing the trace setting: {e}")))?;
        let mut applied = APPLIED.lock();
        sampling::update(model, &change);
        applied.insert(record.scope, record.count_revision);
    }
    read(state, model)
}

/// A stored field as a change of the process's: what is not set (or out of range) is cleared.
fn restored<T: TryFrom<i64>>(value: Option<i64>) -> Field<T> {
    match value.and_then(|v| T::try_from(v).ok()) {
        Some(value) => Field::Set(value),
        None => Field::Clear,
    }
}

/// Makes this process's trace settings the stored ones. A count restarts only where it was
/// set or cleared since this process last applied it.
pub fn follow(records: &[TraceRecord]) {
    let mut applied = APPLIED.lock();
    for record in records {
        let model = (!record.scope.is_empty()).then_some(record.scope.as_str());
        let count = if applied.get(&record.scope) == Some(&record.count_revision) {
            Field::Keep
        } else {
            restored(record.count)
        };
        let change = Change {
            level: restored(record.level),
            rate: restored(record.rate),
            count,
        };
        sampling::update(model, &change);
        applied.insert(record.scope.clone(), record.count_revision);
    }
}

/// A setting present in the request: cleared, or set from its values by `parse`.
fn field<T>(values: &Values, parse: impl FnOnce(&[String]) -> ApiResult<T>) -> ApiResult<Field<T>> {
    match values {
        None => Ok(Field::Clear),
        Some(values) => parse(values).map(Field::Set),
    }
}

fn level(values: &[String]) -> ApiResult<u8> {
    if values.is_empty() {
        return Err(ApiError::bad_request(
            "Unable to parse 'trace_level': expected [\"OFF\"], or \"TIMESTAMPS\" and/or \"TENSORS\"",
        ));
    }
    let mut level = 0;
    for value in values {
        match value.as_str() {
            "OFF" if values.len() == 1 => {}
            "OFF" => {
                return Err(ApiError::bad_request(
                    "Expect only one trace level 'OFF' is specified",
                ))
            }
            "TIMESTAMPS" => level |= TIMESTAMPS,
            "TENSORS" => level |= TENSORS,
            other => {
                return Err(ApiError::bad_request(format!(
                    "Unable to parse 'trace_level', got: {} (expected OFF, TIMESTAMPS or TENSORS)",
                    shown(other)
                )))
            }
        }
    }
    Ok(level)
}

/// The one value of `name` as a whole number within `[min, max]`.
fn number(name: &str, values: &[String], min: i64, max: i64) -> ApiResult<i64> {
    let [value] = values else {
        return Err(ApiError::bad_request(format!(
            "expect only 1 value for '{name}'"
        )));
    };
    let parsed: i64 = value.trim().parse().map_err(|_| {
        ApiError::bad_request(format!("Unable to parse '{name}', got: {}", shown(value)))
    })?;
    if !(min..=max).contains(&parsed) {
        return Err(ApiError::bad_request(format!(
            "Unable to parse '{name}', value is out of range [ {min}, {max} ], got: {}",
            shown(value)
        )));
    }
    Ok(parsed)
}

fn count(values: &[String]) -> ApiResult<i64> {
    if let [value] = values {
        if value
            .trim()
            .parse::<i64>()
            .is_ok_and(|n| n < sampling::UNLIMITED)
        {
            return Err(ApiError::bad_request(format!(
                "Unable to parse 'trace_count'. Expecting value >= -1, got: {}",
                shown(value)
            )));
        }
    }
    number("trace_count", values, sampling::UNLIMITED, i32::MAX.into())
}

/// A value as an error message repeats it: at most 64 characters.
fn shown(value: &str) -> String {
    match value.char_indices().nth(64) {
        Some((end, _)) => format!("{}…", &value[..end]),
        None => value.to_owned(),
    }
}
