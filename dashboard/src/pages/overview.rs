//! Overview: live throughput, latency and errors per model; the device the native ops run on
//! (`GET /v2`) and the memory loaded models hold (events ticks).
//!
//! Source of numbers, best first:
//! 1. `/v2/events` (WebSocket, key offered as a subprotocol next to `infergate.v1`): per-second
//!    frames `{"type": "tick", "models": [{"model", "version", "requests_per_s",
//!    "failures_per_s", "avg_latency_ms", "p50_ms", "p99_ms", "in_flight", ...}]}` and
//!    `{"type": "model_state",
//!    "model", "version", "state"}` (see gateway/src/api/events.rs).
//! 2. Otherwise `/v2/models/stats` polled each second: Triton's cumulative counters, whose
//!    differences give requests/s, error rate and mean latency.

use crate::api::{self, Body};
use crate::chart::LineChart;
use crate::format;
use crate::session;
use crate::types::{InferenceStats, ModelList, StatsList};
use crate::widgets::{Empty, ErrorBox, PageHeader};
use leptos::prelude::*;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

const WINDOW: usize = 60;

#[derive(Clone, Default, PartialEq)]
struct Series {
    rps: VecDeque<f64>,
    /// The mean over each second (polling), or the p50 (events).
    latency: VecDeque<f64>,
    /// The p99 of each second (events only; NaN in a second without requests).
    p99: VecDeque<f64>,
    error_rate: VecDeque<f64>,
    queue: VecDeque<f64>,
}

fn push(q: &mut VecDeque<f64>, v: f64) {
    if q.len() == WINDOW {
        q.pop_front();
    }
    q.push_back(v);
}

#[derive(Clone, Copy, PartialEq)]
enum Source {
    Probing,
    Events,
    Polling,
}

fn num(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_f64))
}

#[component]
pub fn Overview() -> impl IntoView {
    let series = RwSignal::new(BTreeMap::<String, Series>::new());
    let source = RwSignal::new(Source::Probing);
    let error = RwSignal::new(None::<api::ApiError>);
    let models = RwSignal::new((0usize, 0usize, 0u64));
    let server = RwSignal::new(None::<String>);
    let device = RwSignal::new(None::<String>);
    let memory = RwSignal::new(None::<Value>);
    let activity = RwSignal::new(VecDeque::<String>::new());
    let alive = StoredValue::new(true);
    let socket: StoredValue<Option<web_sys::WebSocket>, LocalStorage> =
        StoredValue::new_local(None);
    on_cleanup(move || {
        alive.set_value(false);
        if let Some(ws) = socket.try_get_value().flatten() {
            let _ = ws.close();
        }
    });

    leptos::task::spawn_local(async move {
        if let Ok(v) = api::call("GET", "/v2", Body::None).await {
            server.set(Some(format!(
                "{} {}",
                v["name"].as_str().unwrap_or("infergate"),
                v["version"].as_str().unwrap_or("")
            )));
            device.set(Some(match v["device"]["kind"].as_str() {
                Some("cuda") => format!("GPU · {}", v["device"]["name"].as_str().unwrap_or("CUDA")),
                _ => "CPU".to_string(),
            }));
        }
    });
    let refresh_models = move || {
        leptos::task::spawn_local(async move {
            if let Ok(list) = api::get::<ModelList>("/api/models").await {
                let mut names: Vec<&str> = list.models.iter().map(|m| m.name.as_str()).collect();
                names.dedup();
                let loaded = list.models.iter().filter(|m| m.state == "loaded").count();
                let in_flight = list.models.iter().map(|m| m.in_flight).sum();
                models.set((names.len(), loaded, in_flight));
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

    leptos::task::spawn_local(async move {
        let events = api::has_extension("infergate_events").await;
        if !is_alive(alive) {
            return;
        }
        match events
            .then(|| connect_events(series, activity, memory, source, alive))
            .flatten()
        {
            Some(ws) => {
                socket.set_value(Some(ws));
                source.set(Source::Events);
            }
            None => source.set(Source::Polling),
        }
    });
    // Polling starts when the events stream is absent or fails before its first frame.
    Effect::new(move |_| {
        if source.get() == Source::Polling {
            poll_stats(series, error, alive);
        }
    });

    let totals = move || {
        series.with(|s| {
            let rps: f64 = s.values().filter_map(|x| x.rps.back()).sum();
            let errs: f64 = s
                .values()
                .filter_map(|x| Some(x.error_rate.back()? * x.rps.back()?))
                .sum();
            (rps, errs)
        })
    };
    view! {
        <PageHeader title="Overview" subtitle="Traffic per model, updated every second.">
            <span class="live" class:on=move || source.get() != Source::Probing>
                {move || match source.get() {
                    Source::Probing => "connecting…",
                    Source::Events => "live · /v2/events",
                    Source::Polling => "live · polling /v2/models/stats",
                }}
            </span>
        </PageHeader>
        <ErrorBox error=error/>
        <div class="tiles">
            <div class="tile"><span class="muted">"Requests/s"</span><strong id="total-rps">{move || format::rate(totals().0)}</strong></div>
            <div class="tile"><span class="muted">"Errors/s"</span><strong>{move || format::rate(totals().1)}</strong></div>
            <div class="tile"><span class="muted">"Models (loaded)"</span><strong>{move || { let (n, l, _) = models.get(); format!("{n} ({l})") }}</strong></div>
            <div class="tile"><span class="muted">"In flight"</span><strong>{move || models.get().2}</strong></div>
            <div class="tile"><span class="muted">"Server"</span><strong class="small-strong">{move || server.get().unwrap_or_else(|| "–".into())}</strong></div>
            <div class="tile"><span class="muted">"Device"</span><strong class="small-strong" id="device">{move || device.get().unwrap_or_else(|| "–".into())}</strong></div>
            <div class="tile"><span class="muted">"Model memory"</span><strong class="small-strong" id="memory">{move || memory_text(memory.get())}</strong></div>
        </div>
        {move || (source.get() == Source::Polling).then(|| view! {
            <p class="notice">"Live events (" <code>"/v2/events"</code> ") are not available on this server: rates and mean latency are computed from " <code>"/v2/models/stats"</code> " each second."</p>
        })}
        {move || {
            let names: Vec<String> = series.with(|s| s.keys().cloned().collect());
            if names.is_empty() {
                return view! { <Empty title="No models yet" detail="Charts appear here for every registered model."/> }.into_any();
            }
            let events = source.get() == Source::Events;
            names.into_iter().map(|name| {
                let n1 = name.clone();
                let pick = move |f: fn(&Series) -> &VecDeque<f64>| {
                    let n = n1.clone();
                    Signal::derive(move || series.with(|s| s.get(&n).map(|x| f(x).iter().copied().collect()).unwrap_or_default()))
                };
                view! {
                    <section class="card model-live" data-model=name.clone()>
                        <h2>{name.clone()}</h2>
                        <div class="charts">
                            <LineChart points=pick(|s| &s.rps) capacity=WINDOW label="Requests/s" format=format::rate/>
                            {if events {
                                view! { <LineChart points=pick(|s| &s.latency) second=pick(|s| &s.p99) capacity=WINDOW label="p50 · p99" format=format::ms/> }.into_any()
                            } else {
                                // Cumulative counters give only the mean over each second.
                                view! { <LineChart points=pick(|s| &s.latency) capacity=WINDOW label="Mean latency" format=format::ms/> }.into_any()
                            }}
                            <LineChart points=pick(|s| &s.error_rate) capacity=WINDOW label="Error rate" format=|v| format!("{:.1}%", v * 100.0)/>
                            <LineChart points=pick(|s| &s.queue) capacity=WINDOW label=if events { "In flight" } else { "Mean queue time" } format=if events { |v: f64| format!("{v:.0}") } else { format::ms }/>
                        </div>
                    </section>
                }
            }).collect_view().into_any()
        }}
        {move || (!activity.with(VecDeque::is_empty)).then(|| view! {
            <section class="card"><h2>"Activity"</h2><ul class="activity">{activity.get().into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ul></section>
        })}
    }
}

/// Every second: fetch the cumulative counters and turn differences into rates.
fn is_alive(alive: StoredValue<bool>) -> bool {
    alive.try_get_value().unwrap_or(false)
}

fn poll_stats(
    series: RwSignal<BTreeMap<String, Series>>,
    error: RwSignal<Option<api::ApiError>>,
    alive: StoredValue<bool>,
) {
    leptos::task::spawn_local(async move {
        let mut previous: Option<(f64, BTreeMap<String, InferenceStats>)> = None;
        while is_alive(alive) {
            let started = format::now_ms();
            match api::get::<StatsList>("/v2/models/stats").await {
                Ok(list) => {
                    error.set(None);
                    let now = format::now_ms();
                    // Versions of one model add up.
                    let mut current: BTreeMap<String, InferenceStats> = BTreeMap::new();
                    for m in list.model_stats {
                        let e = current.entry(m.name).or_default();
                        let s = m.inference_stats;
                        for (a, b) in [
                            (&mut e.success, s.success),
                            (&mut e.fail, s.fail),
                            (&mut e.queue, s.queue),
                            (&mut e.compute_infer, s.compute_infer),
                        ] {
                            a.count += b.count;
                            a.ns += b.ns;
                        }
                    }
                    if let Some((then, before)) = &previous {
                        let dt = ((now - then) / 1000.0).max(0.001);
                        series.update(|all| {
                            all.retain(|name, _| current.contains_key(name));
                            for (name, s) in &current {
                                let b = before.get(name).cloned().unwrap_or_default();
                                let ok = s.success.count.saturating_sub(b.success.count) as f64;
                                let failed = s.fail.count.saturating_sub(b.fail.count) as f64;
                                let entry = all.entry(name.clone()).or_default();
                                push(&mut entry.rps, ok / dt);
                                push(
                                    &mut entry.error_rate,
                                    if ok + failed > 0.0 {
                                        failed / (ok + failed)
                                    } else {
                                        0.0
                                    },
                                );
                                let lat = if ok > 0.0 {
                                    s.success.ns.saturating_sub(b.success.ns) as f64 / ok / 1e6
                                } else {
                                    0.0
                                };
                                push(&mut entry.latency, lat);
                                let queued = s.queue.count.saturating_sub(b.queue.count) as f64;
                                push(
                                    &mut entry.queue,
                                    if queued > 0.0 {
                                        s.queue.ns.saturating_sub(b.queue.ns) as f64 / queued / 1e6
                                    } else {
                                        0.0
                                    },
                                );
                            }
                        });
                    } else {
                        series.update(|all| {
                            for name in current.keys() {
                                all.entry(name.clone()).or_default();
                            }
                        });
                    }
                    previous = Some((now, current));
                }
                Err(e) => error.set(Some(e)),
            }
            let wait = (1000.0 - (format::now_ms() - started)).max(100.0);
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
fn memory_text(memory: Option<Value>) -> String {
    let Some(m) = memory else {
        return "–".into();
    };
    let reserved = format::bytes(m["host_reserved_bytes"].as_u64().unwrap_or(0));
    let host = match m["host_budget_bytes"].as_u64() {
        Some(budget) => format!("{reserved} of {}", format::bytes(budget)),
        None => format!("{reserved} reserved"),
    };
    match m["gpu_pools"]["device"]["held_bytes"].as_u64() {
        Some(held) => format!("{host} · GPU pool {}", format::bytes(held)),
        None => host,
    }
}

/// Opens `/v2/events`; falls back to polling if the socket closes before any frame.
fn connect_events(
    series: RwSignal<BTreeMap<String, Series>>,
    activity: RwSignal<VecDeque<String>>,
    memory: RwSignal<Option<Value>>,
    source: RwSignal<Source>,
    alive: StoredValue<bool>,
) -> Option<web_sys::WebSocket> {
    let origin = web_sys::window()
        .and_then(|w| w.location().origin().ok())
        .unwrap_or_default();
    let url = format!("{}/v2/events", origin.replacen("http", "ws", 1));
    let key = session::stored_key().unwrap_or_default();
    let protocols = js_sys::Array::of2(&"infergate.v1".into(), &key.into());
    let ws = web_sys::WebSocket::new_with_str_sequence(&url, &protocols).ok()?;
    let got_frame = std::rc::Rc::new(std::cell::Cell::new(false));
    let seen = got_frame.clone();
    let ws_msg = ws.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            if !is_alive(alive) {
                let _ = ws_msg.close();
                return;
            }
            let Some(text) = e.data().as_string() else {
                return;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                return;
            };
            seen.set(true);
            if v["type"] == "tick" {
                memory.set(Some(v["memory"].clone()));
            }
            match v["type"].as_str().unwrap_or("stats") {
                "stats" | "tick" => series.update(|all| {
                    for m in v["models"].as_array().into_iter().flatten() {
                        let Some(name) = m["model"].as_str().or(m["name"].as_str()) else {
                            continue;
                        };
                        let entry = all.entry(name.to_string()).or_default();
                        let rps = num(m, &["requests_per_s", "rps", "throughput"]).unwrap_or(0.0);
                        push(&mut entry.rps, rps);
                        // A second without requests has no percentiles: a gap in the line.
                        push(&mut entry.latency, num(m, &["p50_ms"]).unwrap_or(f64::NAN));
                        push(&mut entry.p99, num(m, &["p99_ms"]).unwrap_or(f64::NAN));
                        let errs = num(m, &["errors_per_s", "failures_per_s"]).unwrap_or(0.0);
                        push(
                            &mut entry.error_rate,
                            num(m, &["error_rate"]).unwrap_or(if rps + errs > 0.0 {
                                errs / (rps + errs)
                            } else {
                                0.0
                            }),
                        );
                        push(
                            &mut entry.queue,
                            num(m, &["queue_depth", "in_flight"]).unwrap_or(0.0),
                        );
                    }
                }),
                kind => {
                    let line = format!(
                        "{} · {} {} v{}",
                        format::date((format::now_ms() / 1000.0) as i64),
                        kind.replace('_', " "),
                        v["model"].as_str().unwrap_or("?"),
                        v["version"]
                            .as_u64()
                            .map(|x| x.to_string())
                            .or(v["version"].as_str().map(str::to_string))
                            .unwrap_or_default()
                    );
                    activity.update(|a| {
                        a.push_front(line);
                        a.truncate(20);
                    });
                }
            }
        });
    let on_close = Closure::<dyn FnMut()>::new(move || {
        if is_alive(alive) && !got_frame.get() {
            source.set(Source::Polling);
        }
    });
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    on_message.forget();
    on_close.forget();
    Some(ws)
}
