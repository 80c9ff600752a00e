//! Overview: traffic, errors (4xx and 5xx apart), latency, queue time and batch sizes per
//! model and pipeline over a chosen time range, with the answers by status code, the device the
//! native ops run on and the memory loaded models hold, and the model activity feed.
//!
//! The numbers come from the server's own history (`GET /api/metrics/history`): the last hour
//! is there as soon as the page opens, and each second the page asks for the newer samples
//! only (`after_ms`). Memory comes from the `/v2/events` ticks (admin keys).

use crate::api;
use crate::chart::{Chart, Line, Scale};
use crate::format;
use crate::session;
use crate::types::{
    Activity, Event, History, HistorySeries, KeyTraffic, Memory, ModelList, ServerDevice,
    ServerMetadata, Totals, VersionState,
};
use crate::widgets::{ErrorBox, PageHeader};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// The most the server keeps, and so the most the page holds.
const KEEP: usize = 3600;
const RANGES: [(u64, &str); 3] = [(300, "5 min"), (900, "15 min"), (3600, "1 h")];

/// One model's or pipeline's samples, oldest first, one per second.
#[derive(Clone, Debug, Default, PartialEq)]
struct Series {
    kind: String,
    t: Vec<f64>,
    rps: Vec<f64>,
    client_errors: Vec<f64>,
    server_errors: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    queue: Vec<f64>,
    batch: Vec<f64>,
    in_flight: Vec<f64>,
    statuses: Vec<BTreeMap<u16, u64>>,
    /// Chat models: mean time to first token (ms) and tokens generated per second.
    ttft: Vec<f64>,
    tokens: Vec<f64>,
}

/// Appends `new` to a column and keeps its newest [`KEEP`] values.
fn extend_kept<T>(dest: &mut Vec<T>, new: impl IntoIterator<Item = T>) {
    dest.extend(new);
    let extra = dest.len().saturating_sub(KEEP);
    dest.drain(..extra);
}

/// A column with gaps: `NaN` where a second had no value (charts skip it).
fn gaps(column: &[Option<f64>]) -> impl Iterator<Item = f64> + '_ {
    column.iter().map(|v| v.unwrap_or(f64::NAN))
}

fn floats<T: Copy + Into<f64>>(column: &[T]) -> impl Iterator<Item = f64> + '_ {
    column.iter().map(|v| (*v).into())
}

impl Series {
    fn append(&mut self, v: &HistorySeries) {
        self.kind = match v.kind {
            crate::types::SeriesKind::Model => "model",
            crate::types::SeriesKind::Pipeline => "pipeline",
        }
        .to_string();
        // Milliseconds and counts are far below 2^53: exact as f64.
        extend_kept(&mut self.t, v.t_ms.iter().map(|t| *t as f64));
        extend_kept(&mut self.in_flight, v.in_flight.iter().map(|n| *n as f64));
        extend_kept(&mut self.rps, floats(&v.requests_per_s));
        extend_kept(&mut self.client_errors, floats(&v.client_errors_per_s));
        extend_kept(&mut self.server_errors, floats(&v.server_errors_per_s));
        extend_kept(&mut self.p50, gaps(&v.p50_ms));
        extend_kept(&mut self.p99, gaps(&v.p99_ms));
        extend_kept(&mut self.queue, gaps(&v.avg_queue_ms));
        extend_kept(&mut self.batch, gaps(&v.avg_batch));
        extend_kept(&mut self.ttft, gaps(&v.ttft_ms));
        extend_kept(&mut self.tokens, gaps(&v.tokens_per_s));
        extend_kept(&mut self.statuses, v.statuses.iter().cloned());
    }

    /// The index of the first sample inside the range.
    fn start(&self, since_ms: f64) -> usize {
        self.t.partition_point(|t| *t < since_ms)
    }

    fn sum(values: &[f64]) -> f64 {
        values.iter().filter(|v| !v.is_nan()).sum()
    }

    /// A chat model: the server reports tokens per second for it (0 when idle).
    fn generates(&self) -> bool {
        self.tokens.iter().any(|v| !v.is_nan())
    }

    /// Text generation over the range: mean time to first token (over the seconds that had a
    /// first token, weighted alike), tokens generated and the busiest second's tokens/s.
    fn generation(&self, since_ms: f64) -> Generation {
        let i = self.start(since_ms);
        let ttfts: Vec<f64> = self
            .ttft
            .get(i..)
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|v| !v.is_nan())
            .collect();
        let tokens = self.tokens.get(i..).unwrap_or_default();
        Generation {
            ttft_ms: (!ttfts.is_empty()).then(|| ttfts.iter().sum::<f64>() / ttfts.len() as f64),
            tokens: Series::sum(tokens),
            peak_tokens_per_s: tokens
                .iter()
                .copied()
                .filter(|v| !v.is_nan())
                .fold(0.0, f64::max),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Generation {
    ttft_ms: Option<f64>,
    tokens: f64,
    peak_tokens_per_s: f64,
}

/// One API key's traffic, oldest first, one sample per second (admin keys get these).
#[derive(Clone, Debug, Default, PartialEq)]
struct KeySeries {
    name: String,
    t: Vec<f64>,
    rps: Vec<f64>,
    refused: Vec<f64>,
    /// Tokens charged per second (LLM requests).
    tokens: Vec<f64>,
}

impl KeySeries {
    fn append(&mut self, v: &KeyTraffic) {
        self.name = v.name.clone();
        extend_kept(&mut self.t, v.t_ms.iter().map(|t| *t as f64));
        extend_kept(&mut self.rps, floats(&v.requests_per_s));
        extend_kept(&mut self.refused, floats(&v.refused_per_s));
        // A server without the column sends none: the key's seconds are then token-less.
        let tokens: Vec<f64> = if v.tokens_per_s.len() == v.t_ms.len() {
            floats(&v.tokens_per_s).collect()
        } else {
            vec![0.0; v.t_ms.len()]
        };
        extend_kept(&mut self.tokens, tokens);
    }

    /// Tokens in the range.
    fn tokens(&self, since_ms: f64) -> f64 {
        let i = self.t.partition_point(|t| *t < since_ms);
        Series::sum(&self.tokens[i.min(self.tokens.len())..])
    }

    /// Requests in the range.
    fn requests(&self, since_ms: f64) -> f64 {
        let i = self.t.partition_point(|t| *t < since_ms);
        Series::sum(&self.rps[i.min(self.rps.len())..])
    }
}

/// Up to four keys with the most requests in the range, as lines on one time axis (a key's
/// seconds before its ring started are gaps): their requests per second, and their tokens per
/// second (no lines when none of them was charged tokens in the range).
fn key_lines(keys: &BTreeMap<i64, KeySeries>, since_ms: f64) -> (Vec<f64>, Vec<Line>, Vec<Line>) {
    let mut busiest: Vec<&KeySeries> = keys
        .values()
        .filter(|k| k.requests(since_ms) > 0.0)
        .collect();
    busiest.sort_by(|a, b| b.requests(since_ms).total_cmp(&a.requests(since_ms)));
    busiest.truncate(4);
    let times: Vec<f64> = busiest
        .iter()
        .flat_map(|k| k.t.iter().map(|t| *t as u64))
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .map(|t| t as f64)
        .collect();
    let lines_of = |value: fn(&KeySeries) -> &[f64]| -> Vec<Line> {
        busiest
            .iter()
            .zip(["series-1", "series-2", "series-3", "series-4"])
            .map(|(k, class)| {
                let at: BTreeMap<u64, f64> =
                    k.t.iter()
                        .zip(value(k))
                        .map(|(t, v)| (*t as u64, *v))
                        .collect();
                Line {
                    label: k.name.clone(),
                    class,
                    values: times
                        .iter()
                        .map(|t| at.get(&(*t as u64)).copied().unwrap_or(f64::NAN))
                        .collect(),
                }
            })
            .collect()
    };
    let requests = lines_of(|k| &k.rps);
    let tokens = if busiest.iter().any(|k| k.tokens(since_ms) > 0.0) {
        lines_of(|k| &k.tokens)
    } else {
        Vec::new()
    };
    (times, requests, tokens)
}

/// What the range holds for one name: requests by status, the share that failed.
#[derive(Clone, Debug, Default, PartialEq)]
struct RangeSummary {
    statuses: BTreeMap<u16, u64>,
    answered: u64,
    client_errors: u64,
    server_errors: u64,
}

impl RangeSummary {
    fn of(s: &Series, since_ms: f64) -> RangeSummary {
        let mut out = RangeSummary::default();
        for m in &s.statuses[s.start(since_ms).min(s.statuses.len())..] {
            for (status, n) in m {
                *out.statuses.entry(*status).or_default() += n;
                out.answered += n;
                match status {
                    400..=499 => out.client_errors += n,
                    500..=599 => out.server_errors += n,
                    _ => {}
                }
            }
        }
        out
    }

    fn error_rate(&self) -> Option<f64> {
        (self.answered > 0)
            .then(|| (self.client_errors + self.server_errors) as f64 / self.answered as f64)
    }
}

#[component]
pub fn Overview() -> impl IntoView {
    let series = RwSignal::new(BTreeMap::<String, Series>::new());
    let totals = RwSignal::new(BTreeMap::<String, Totals>::new());
    let activity = RwSignal::new(Vec::<Activity>::new());
    let end_ms = RwSignal::new(format::now_ms());
    let range = RwSignal::new(300u64);
    let live = RwSignal::new(false);
    let error = RwSignal::new(None::<api::ApiError>);
    let models = RwSignal::new((0usize, 0usize, 0u64, BTreeMap::<String, String>::new()));
    let server = RwSignal::new(None::<String>);
    let device = RwSignal::new(None::<String>);
    let memory = RwSignal::new(None::<Memory>);
    let keys = RwSignal::new(BTreeMap::<i64, KeySeries>::new());
    let alive = StoredValue::new(true);
    let socket: StoredValue<Option<web_sys::WebSocket>, LocalStorage> =
        StoredValue::new_local(None);
    on_cleanup(move || {
        alive.set_value(false);
        if let Some(ws) = socket.try_get_value().flatten() {
            let _ = ws.close();
        }
    });

    let admin = session::use_session()
        .identity
        .with_untracked(|i| i.as_ref().is_some_and(|i| i.can("admin")));
    leptos::task::spawn_local(async move {
        if let Ok(v) = api::get::<ServerMetadata>("/v2").await {
            server.set(Some(format!("{} {}", v.name, v.version)));
            device.set(Some(match v.device {
                ServerDevice::Cuda { name, .. } => format!("GPU · {name}"),
                ServerDevice::Cpu { .. } => "CPU".to_string(),
            }));
        }
        if admin {
            if let Some(ws) = connect_memory(memory, alive) {
                socket.set_value(Some(ws));
            }
        }
    });
    let refresh_models = move || {
        leptos::task::spawn_local(async move {
            if let Ok(list) = api::get::<ModelList>("/api/models").await {
                let mut names: Vec<&str> = list.models.iter().map(|m| m.name.as_str()).collect();
                names.dedup();
                let loaded = list
                    .models
                    .iter()
                    .filter(|m| m.state == VersionState::Loaded)
                    .count();
                let in_flight = list.models.iter().map(|m| m.in_flight).sum();
                let mut states = BTreeMap::new();
                for m in &list.models {
                    let e: &mut String = states.entry(m.name.clone()).or_default();
                    if e.is_empty() || m.state == VersionState::Loaded {
                        *e = m.state.as_str().to_string();
                    }
                }
                models.set((names.len(), loaded, in_flight, states));
            }
        })
    };
    refresh_models();
    let model_timer =
        set_interval_with_handle(refresh_models, std::time::Duration::from_secs(3)).ok();
    on_cleanup(move || {
        if let Some(h) = model_timer {
            h.clear();
        }
    });
    poll_history(series, keys, totals, activity, end_ms, live, error, alive);

    let since = move || end_ms.get() - range.get() as f64 * 1000.0;
    let summaries = Memo::new(move |_| {
        let since = since();
        series.with(|all| {
            all.iter()
                .map(|(n, s)| (n.clone(), RangeSummary::of(s, since)))
                .collect::<BTreeMap<_, _>>()
        })
    });
    // Rates over the last five seconds, all names together.
    let recent = move |pick: fn(&Series) -> &Vec<f64>| {
        series.with(|all| {
            all.values()
                .map(|s| {
                    let v = pick(s);
                    Series::sum(&v[v.len().saturating_sub(5)..]) / 5.0
                })
                .sum::<f64>()
        })
    };
    let overall = Memo::new(move |_| {
        summaries.with(|all| {
            let mut sum = RangeSummary::default();
            for s in all.values() {
                for (k, n) in &s.statuses {
                    *sum.statuses.entry(*k).or_default() += n;
                }
                sum.answered += s.answered;
                sum.client_errors += s.client_errors;
                sum.server_errors += s.server_errors;
            }
            sum
        })
    });
    // Chat models' text generation over the range, all together.
    let generation = Memo::new(move |_| {
        let since = since();
        series.with(|all| {
            let chat: Vec<Generation> = all
                .values()
                .filter(|s| s.generates())
                .map(|s| s.generation(since))
                .collect();
            (!chat.is_empty()).then(|| {
                let ttfts: Vec<f64> = chat.iter().filter_map(|g| g.ttft_ms).collect();
                Generation {
                    ttft_ms: (!ttfts.is_empty())
                        .then(|| ttfts.iter().sum::<f64>() / ttfts.len() as f64),
                    tokens: chat.iter().map(|g| g.tokens).sum(),
                    peak_tokens_per_s: chat.iter().map(|g| g.peak_tokens_per_s).fold(0.0, f64::max),
                }
            })
        })
    });
    let key_chart = Memo::new(move |_| {
        let since = since();
        keys.with(|k| key_lines(k, since))
    });
    // Names with traffic in the range get charts; the others are listed, collapsed.
    let active = Memo::new(move |_| {
        summaries.with(|all| {
            all.iter()
                .filter(|(_, s)| s.answered > 0)
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        })
    });
    let idle = Memo::new(move |_| {
        summaries.with(|all| {
            all.iter()
                .filter(|(_, s)| s.answered == 0)
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>()
        })
    });
    view! {
        <PageHeader title="Overview" subtitle="Traffic per model and pipeline, from the server's per-second history.">
            <div class="segmented" role="group" aria-label="Time range">
                {RANGES.into_iter().map(|(s, label)| view! {
                    <button type="button" class:active=move || range.get() == s aria-pressed=move || (range.get() == s).to_string() on:click=move |_| range.set(s)>{label}</button>
                }).collect_view()}
            </div>
            <span class="live" class:on=move || live.get()>
                {move || if live.get() { "live · every second" } else { "connecting…" }}
            </span>
        </PageHeader>
        <ErrorBox error=error/>
        <div class="tiles">
            <div class="tile"><span class="muted">"Requests/s"</span><strong id="total-rps">{move || format::rate(recent(|s| &s.rps))}</strong></div>
            <div class="tile"><span class="muted" title="4xx answers: the request was refused (bad input, no key, rate limit…)">"Client errors/s (4xx)"</span><strong id="total-4xx" class={move || if recent(|s| &s.client_errors) > 0.0 { "warn-text" } else { "" }}>{move || format::rate(recent(|s| &s.client_errors))}</strong></div>
            <div class="tile"><span class="muted" title="5xx answers: the server or the model failed">"Server errors/s (5xx)"</span><strong id="total-5xx" class={move || if recent(|s| &s.server_errors) > 0.0 { "bad-text" } else { "" }}>{move || format::rate(recent(|s| &s.server_errors))}</strong></div>
            <div class="tile"><span class="muted">{move || format!("Error rate ({})", range_label(range.get()))}</span><strong id="error-rate">{move || overall.with(|o| o.error_rate().map(format::percent).unwrap_or_else(|| "–".into()))}</strong></div>
            {move || generation.get().map(|g| view! {
                <div class="tile"><span class="muted" title="Chat models: mean time from a request's arrival to its first token">{format!("Time to first token ({})", range_label(range.get()))}</span><strong id="total-ttft">{g.ttft_ms.map(format::ms).unwrap_or_else(|| "–".into())}</strong></div>
                <div class="tile"><span class="muted" title="Chat models: tokens generated per second, now (last 5 s)">"Tokens/s"</span><strong id="total-tokens">{format::rate(recent(|s| &s.tokens))}</strong></div>
            })}
            <div class="tile"><span class="muted">"Models (loaded)"</span><strong>{move || { let (n, l, _, _) = models.get(); format!("{n} ({l})") }}</strong></div>
            <div class="tile"><span class="muted">"In flight"</span><strong>{move || models.get().2}</strong></div>
            <div class="tile"><span class="muted">"Device"</span><strong class="small-strong" id="device">{move || device.get().unwrap_or_else(|| "–".into())}</strong></div>
            <div class="tile"><span class="muted">"Model memory"</span><strong class="small-strong" id="memory">{move || memory_text(memory.get())}</strong></div>
            <div class="tile"><span class="muted">"Server"</span><strong class="small-strong">{move || server.get().unwrap_or_else(|| "–".into())}</strong></div>
        </div>
        <section class="card" id="status-breakdown">
            <div class="card-head">
                <h2>"Answers by status"</h2>
                <span class="muted small">{move || format!("all models and pipelines, last {}", range_label(range.get()))}</span>
            </div>
            {move || status_table(&overall.get().statuses)}
        </section>
        {move || {
            let (times, lines, tokens) = key_chart.get();
            let token_times = times.clone();
            (!lines.is_empty()).then(|| view! {
                <section class="card" id="key-traffic">
                    <div class="card-head">
                        <h2>"Traffic per API key"</h2>
                        <span class="muted small">"the busiest keys in the range: requests admitted per second, every route; tokens charged per second, LLM routes"</span>
                    </div>
                    <div class="charts">
                        <Chart title="Requests per key" unit="requests/s" times=Signal::derive(move || times.clone()) end_ms range_s=range format=format::rate
                            lines=Signal::derive(move || lines.clone())/>
                        {(!tokens.is_empty()).then(|| view! {
                            <Chart title="Tokens per key" unit="tokens/s" times=Signal::derive(move || token_times.clone()) end_ms range_s=range format=format::rate
                                lines=Signal::derive(move || tokens.clone())/>
                        })}
                    </div>
                </section>
            })
        }}
        {move || {
            let names = active.get();
            if names.is_empty() {
                return view! { <div class="empty"><div class="empty-title">"No traffic in this range"</div><p class="muted">"Charts appear here for every model and pipeline that answers requests."</p></div> }.into_any();
            }
            names.into_iter().map(|name| view! {
                <ModelLive name series totals summaries end_ms range/>
            }).collect_view().into_any()
        }}
        {move || {
            let names = idle.get();
            (!names.is_empty()).then(|| {
                let states = models.get().3;
                view! {
                    <details class="card idle-models" id="idle-models">
                        <summary>{format!("Idle in this range: {} ", names.len())}<span class="muted small">{names.join(", ")}</span></summary>
                        <ul class="idle-list">
                            {names.into_iter().map(|n| {
                                let kind = series.with(|s| s.get(&n).map(|s| s.kind.clone()).unwrap_or_default());
                                let state = states.get(&n).cloned().unwrap_or_else(|| kind.clone());
                                view! { <li><strong>{n}</strong>" "<span class="muted small">{state}</span></li> }
                            }).collect_view()}
                        </ul>
                    </details>
                }
            })
        }}
        <section class="card" id="activity">
            <h2>"Activity"</h2>
            {move || {
                let list = activity.get();
                if list.is_empty() {
                    view! { <p class="muted">"No model has changed state in the last hour."</p> }.into_any()
                } else {
                    view! {
                        <ul class="activity">
                            {list.into_iter().rev().take(30).map(|a| view! {
                                <li>
                                    <time class="muted" title=format::date((a.time_ms / 1000) as i64)>{format::clock(a.time_ms as f64)}</time>" "
                                    <strong>{format!("{} v{}", a.model, a.version)}</strong>" → "
                                    <span class=format!("badge badge-{}", a.state.as_str())>{a.state.as_str()}</span>
                                    {a.reason.map(|r| view! { <span class="error-inline">" "{r}</span> })}
                                </li>
                            }).collect_view()}
                        </ul>
                    }.into_any()
                }
            }}
        </section>
    }
}

fn range_label(seconds: u64) -> &'static str {
    RANGES
        .iter()
        .find(|(s, _)| *s == seconds)
        .map(|(_, l)| *l)
        .unwrap_or("range")
}

fn status_class(status: u16) -> &'static str {
    match status {
        200..=299 => "status-ok",
        400..=499 => "status-client",
        _ => "status-server",
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "bad request",
        401 => "no or bad key",
        403 => "scope missing",
        404 => "not found",
        408 => "timeout",
        409 => "conflict",
        413 => "too large",
        422 => "unprocessable",
        429 => "rate limited",
        499 => "client went away",
        500 => "server error",
        502 => "bad gateway",
        503 => "unavailable",
        504 => "timed out",
        _ => "",
    }
}

/// One bar of a share chart: its code, what it means, its class, and its count.
struct Bar {
    code: String,
    name: &'static str,
    class: &'static str,
    status: Option<u16>,
    count: u64,
}

/// Bars with their share of the total, or `empty` when there is nothing to share.
fn share_bars(bars: Vec<Bar>, empty: &'static str, class: &'static str) -> AnyView {
    let total: u64 = bars.iter().map(|b| b.count).sum();
    if total == 0 {
        return view! { <p class="muted">{empty}</p> }.into_any();
    }
    view! {
        <div class=format!("status-bars {class}")>
            {bars.into_iter().map(|b| {
                let share = b.count as f64 / total as f64;
                view! {
                    <div class=format!("status-row {}", b.class) data-status=b.status.map(|s| s.to_string())>
                        <span class="status-code">{b.code}</span>
                        {(!b.name.is_empty() || b.status.is_some()).then(|| view! { <span class="status-name muted">{b.name}</span> })}
                        <span class="status-bar"><span style:width=format!("{:.1}%", share * 100.0)></span></span>
                        <span class="status-count">{format!("{} · {}", b.count, format::percent(share))}</span>
                    </div>
                }
            }).collect_view()}
        </div>
    }
    .into_any()
}

/// Answers by status with their share, 4xx and 5xx marked apart.
fn status_table(statuses: &BTreeMap<u16, u64>) -> AnyView {
    let bars = statuses
        .iter()
        .map(|(status, n)| Bar {
            code: status.to_string(),
            name: status_text(*status),
            class: status_class(*status),
            status: Some(*status),
            count: *n,
        })
        .collect();
    share_bars(bars, "No answers in this range.", "")
}

/// A chart line: its label, its colour class and the column it draws.
type LineSpec = (&'static str, &'static str, fn(&Series) -> &Vec<f64>);

/// One model's or pipeline's charts.
#[component]
fn ModelLive(
    name: String,
    series: RwSignal<BTreeMap<String, Series>>,
    totals: RwSignal<BTreeMap<String, Totals>>,
    summaries: Memo<BTreeMap<String, RangeSummary>>,
    end_ms: RwSignal<f64>,
    range: RwSignal<u64>,
) -> impl IntoView {
    let n = name.clone();
    let data = Memo::new(move |_| series.with(|s| s.get(&n).cloned().unwrap_or_default()));
    let times = Signal::derive(move || data.with(|d| d.t.clone()));
    let lines = move |spec: Vec<LineSpec>| {
        Signal::derive(move || {
            data.with(|d| {
                spec.iter()
                    .map(|(label, class, pick)| Line {
                        label: label.to_string(),
                        class,
                        values: pick(d).clone(),
                    })
                    .collect::<Vec<_>>()
            })
        })
    };
    let is_model = move || data.with(|d| d.kind != "pipeline");
    let generates = move || data.with(Series::generates);
    let generation = Memo::new(move |_| {
        let since = end_ms.get() - range.get() as f64 * 1000.0;
        data.with(|d| d.generation(since))
    });
    let n2 = name.clone();
    let summary = Memo::new(move |_| summaries.with(|s| s.get(&n2).cloned().unwrap_or_default()));
    let n3 = name.clone();
    let batch_sizes = Memo::new(move |_| {
        totals.with(|t| {
            t.get(&n3)
                .map(|t| t.batch_sizes.clone())
                .unwrap_or_default()
        })
    });
    view! {
        <section class="card model-live" data-model=name.clone()>
            <div class="card-head">
                <h2>{name.clone()}<span class="muted small">{move || if is_model() { "" } else { " · pipeline" }}</span></h2>
                <span class="muted small model-errors">{move || {
                    let s = summary.get();
                    format!(
                        "{} answer{} · {} client errors (4xx) · {} server errors (5xx){}",
                        s.answered,
                        if s.answered == 1 { "" } else { "s" },
                        s.client_errors,
                        s.server_errors,
                        s.error_rate().map(|r| format!(" · {} failed", format::percent(r))).unwrap_or_default()
                    )
                }}</span>
            </div>
            <div class="charts">
                <Chart title="Throughput" unit="requests/s" times end_ms range_s=range format=format::rate
                    lines=lines(vec![("all", "series-1", |s| &s.rps), ("4xx", "series-warn", |s| &s.client_errors), ("5xx", "series-bad", |s| &s.server_errors)])/>
                <Chart title="Latency" unit="ms" times end_ms range_s=range format=format::ms scale=Scale::Log
                    lines=lines(vec![("p50", "series-1", |s| &s.p50), ("p99", "series-2", |s| &s.p99)])/>
                {move || generates().then(|| view! {
                    <Chart title="Time to first token" unit="ms, mean" times end_ms range_s=range format=format::ms scale=Scale::Log
                        lines=lines(vec![("TTFT", "series-3", |s| &s.ttft)])/>
                    <Chart title="Generation" unit="tokens/s" times end_ms range_s=range format=format::rate
                        lines=lines(vec![("tokens/s", "series-4", |s| &s.tokens)])/>
                })}
                {move || (is_model() && !generates()).then(|| view! {
                    <Chart title="Queue time" unit="ms, mean" times end_ms range_s=range format=format::ms scale=Scale::Log
                        lines=lines(vec![("queue", "series-3", |s| &s.queue)])/>
                    <Chart title="Batch size" unit="samples per execution, mean" times end_ms range_s=range format=|v| format!("{v:.1}")
                        lines=lines(vec![("batch", "series-4", |s| &s.batch), ("in flight", "series-2", |s| &s.in_flight)])/>
                })}
            </div>
            {move || generates().then(|| {
                let g = generation.get();
                view! {
                    <p class="gen-figures muted small">
                        "Text generation in the range: time to first token "
                        <strong class="gen-ttft">{g.ttft_ms.map(format::ms).unwrap_or_else(|| "–".into())}</strong>
                        " (mean) · "<strong class="gen-tokens">{format!("{:.0}", g.tokens)}</strong>" tokens · busiest second "
                        <strong>{format!("{:.1} tokens/s", g.peak_tokens_per_s)}</strong>
                    </p>
                }
            })}
            <div class="model-breakdown">
                <div>
                    <h3>"Answers by status"</h3>
                    {move || status_table(&summary.get().statuses)}
                </div>
                {move || is_model().then(|| view! {
                    <div>
                        <h3>"Executions by batch size (since start)"</h3>
                        {move || batch_table(&batch_sizes.get())}
                    </div>
                })}
            </div>
        </section>
    }
}

fn batch_table(sizes: &[(u64, u64)]) -> AnyView {
    let bars = sizes
        .iter()
        .map(|(size, n)| Bar {
            code: format!("×{size}"),
            name: "",
            class: "",
            status: None,
            count: *n,
        })
        .collect();
    share_bars(bars, "No executions yet.", "batch-sizes")
}

fn is_alive(alive: StoredValue<bool>) -> bool {
    alive.try_get_value().unwrap_or(false)
}

/// The whole hour once, then each second only what is newer.
#[allow(clippy::too_many_arguments)]
fn poll_history(
    series: RwSignal<BTreeMap<String, Series>>,
    keys: RwSignal<BTreeMap<i64, KeySeries>>,
    totals: RwSignal<BTreeMap<String, Totals>>,
    activity: RwSignal<Vec<Activity>>,
    end_ms: RwSignal<f64>,
    live: RwSignal<bool>,
    error: RwSignal<Option<api::ApiError>>,
    alive: StoredValue<bool>,
) {
    leptos::task::spawn_local(async move {
        let mut after: Option<u64> = None;
        while is_alive(alive) {
            let started = format::now_ms();
            let path = match after {
                None => format!("/api/metrics/history?seconds={KEEP}"),
                Some(t) => format!("/api/metrics/history?after_ms={t}"),
            };
            match api::get::<History>(&path).await {
                Ok(v) if is_alive(alive) => {
                    error.set(None);
                    live.set(true);
                    series.update(|all| {
                        all.retain(|name, _| v.models.iter().any(|m| m.name == *name));
                        for m in &v.models {
                            all.entry(m.name.clone()).or_default().append(m);
                        }
                    });
                    keys.update(|all| {
                        all.retain(|id, _| v.keys.iter().any(|k| k.id == *id));
                        for k in &v.keys {
                            all.entry(k.id).or_default().append(k);
                        }
                    });
                    let newest = v
                        .models
                        .iter()
                        .filter_map(|m| m.t_ms.last())
                        .chain(v.keys.iter().filter_map(|k| k.t_ms.last()))
                        .max()
                        .copied();
                    if let Some(t) = newest {
                        after = Some(after.map_or(t, |a| a.max(t)));
                    } else if after.is_none() {
                        after = Some(v.now_ms.saturating_sub(1000));
                    }
                    end_ms.set(v.now_ms as f64);
                    totals.set(v.totals);
                    let new = v.activity;
                    if !new.is_empty() {
                        activity.update(|all| {
                            let newest = all.last().map_or(0, |a| a.time_ms);
                            all.extend(new.into_iter().filter(|a| a.time_ms > newest));
                            let extra = all.len().saturating_sub(100);
                            all.drain(..extra);
                        });
                    }
                }
                Ok(_) => return,
                Err(e) => {
                    live.set(false);
                    error.set(Some(e));
                }
            }
            let wait = (1000.0 - (format::now_ms() - started)).max(200.0);
            sleep_ms(wait as i32).await;
        }
    });
}

async fn sleep_ms(ms: i32) {
    let p = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(p).await;
}

/// Host memory reserved by loaded models (of the budget, when one is set), and the GPU pool's
/// holding when the native ops run on a GPU; from the latest events tick.
fn memory_text(memory: Option<Memory>) -> String {
    let Some(m) = memory else {
        return "–".into();
    };
    let reserved = format::bytes(m.host_reserved_bytes);
    let host = match m.host_budget_bytes {
        Some(budget) => format!("{reserved} of {}", format::bytes(budget)),
        None => format!("{reserved} reserved"),
    };
    match m.gpu_pools {
        Some(pools) => format!(
            "{host} · GPU pool {}",
            format::bytes(pools.device.held_bytes)
        ),
        None => host,
    }
}

/// Opens `/v2/events` for the memory figures of its ticks.
fn connect_memory(
    memory: RwSignal<Option<Memory>>,
    alive: StoredValue<bool>,
) -> Option<web_sys::WebSocket> {
    crate::events::open(alive, move |frame| {
        if let Event::Tick(tick) = frame {
            memory.set(Some(tick.memory));
        }
    })
}
