//! The hosts table (one row per worker; a row opens its detail) and the feed of state changes.

use super::{current, Series, StateChange};
use crate::format;
use crate::types::{Devices, LoadedModel, WorkerHost};
use crate::widgets::{Badge, Empty};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// "CPU model · 8 cores · 33.7 GB RAM".
pub fn hardware(d: &Devices) -> String {
    let mut parts = Vec::new();
    if !d.cpu_model.is_empty() {
        parts.push(d.cpu_model.clone());
    }
    if d.cores > 0 {
        parts.push(format!(
            "{} core{}",
            d.cores,
            if d.cores == 1 { "" } else { "s" }
        ));
    }
    if d.ram_bytes > 0 {
        parts.push(format!("{} RAM", format::bytes(d.ram_bytes)));
    }
    if parts.is_empty() {
        "–".into()
    } else {
        parts.join(" · ")
    }
}

pub fn model_names(models: &[LoadedModel]) -> String {
    if models.is_empty() {
        return "none".into();
    }
    models
        .iter()
        .map(|m| format!("{} v{}", m.name, m.version))
        .collect::<Vec<_>>()
        .join(", ")
}

fn or_dash<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "–".into())
}

/// GPU memory and utilisation, one entry per GPU ("–" without one).
pub fn gpu_text(host: &WorkerHost, usage: &[crate::types::GpuUsage]) -> String {
    if host.info.devices.gpus.is_empty() {
        return "–".into();
    }
    host.info
        .devices
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| match usage.get(i) {
            Some(u) => format!(
                "{}: {} of {}, {}",
                g.name,
                format::bytes(u.memory_used_bytes),
                format::bytes(g.memory_bytes),
                or_dash(u.utilisation_percent, |p| format!("{p:.0}%"))
            ),
            None => format!("{} ({})", g.name, format::bytes(g.memory_bytes)),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[component]
pub fn HostTable(
    hosts: Vec<WorkerHost>,
    live: RwSignal<BTreeMap<String, Series>>,
    selected: RwSignal<Option<String>>,
) -> impl IntoView {
    if hosts.is_empty() {
        return view! {
            <Empty title="No hosts" detail="This manager runs no engine itself and no worker has joined: create a join secret with `infergate workers token create` and start `infergate worker --join`."/>
        }
        .into_any();
    }
    let rows = move || {
        live.with(|live| {
            hosts
                .iter()
                .map(|h| {
                    let f = current(h, live);
                    let id = h.info.id.clone();
                    let choose = id.clone();
                    let is_selected = {
                        let id = id.clone();
                        move || selected.get().as_deref() == Some(id.as_str())
                    };
                    let gpus = gpu_text(h, f.gpus.as_deref().unwrap_or_default());
                    let latency = match (f.p50_ms, f.p99_ms) {
                        (Some(p50), Some(p99)) => format!("{} / {}", format::ms(p50), format::ms(p99)),
                        _ => "–".into(),
                    };
                    view! {
                        <tr class="host" class:selected=is_selected data-worker=id.clone() data-state=f.state.as_str()
                            on:click=move |_| selected.set(Some(choose.clone()))>
                            <td data-label="Host">
                                <div>
                                    <button type="button" class="link host-link" title="Show this host's live charts">{id.clone()}</button>
                                    <div class="muted small">{h.info.advertise.clone()}</div>
                                </div>
                            </td>
                            <td data-label="State" class="host-state"><span><Badge state=f.state.as_str().to_string()/></span></td>
                            <td data-label="Last seen" class="host-seen">{format::age_ms(f.last_seen_ms)}</td>
                            <td data-label="Version">{h.info.version.clone()}</td>
                            <td data-label="Devices" class="host-devices">{hardware(&h.info.devices)}</td>
                            <td data-label="Models" class="host-models">{or_dash(f.models.as_deref(), model_names)}</td>
                            <td data-label="In flight" class="num host-in-flight" title="reported by the host / sent by the manager">
                                {format!("{} / {}", or_dash(f.in_flight, |v| v.to_string()), f.outstanding)}
                            </td>
                            <td data-label="Req/s" class="num host-rate">{or_dash(f.requests_per_s, format::rate)}</td>
                            <td data-label="p50 / p99" class="num">{latency}</td>
                            <td data-label="CPU" class="num host-cpu">{or_dash(f.cpu_percent, |v| format!("{v:.0}%"))}</td>
                            <td data-label="Memory" class="num host-memory">{or_dash(f.rss_bytes, format::bytes)}</td>
                            <td data-label="GPU">{gpus}</td>
                        </tr>
                    }
                })
                .collect_view()
        })
    };
    view! {
        <div class="table-wrap">
            <table class="hosts stack" id="hosts-table">
                <thead>
                    <tr>
                        <th>"Host"</th><th>"State"</th><th>"Last seen"</th><th>"Version"</th><th>"Devices"</th>
                        <th>"Models"</th><th>"In flight"</th><th>"Req/s"</th><th>"p50 / p99"</th><th>"CPU"</th>
                        <th>"Memory"</th><th>"GPU"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
    .into_any()
}

/// The latest `worker_state` events since the page opened (the first lists every host).
#[component]
pub fn StateFeed(changes: RwSignal<Vec<StateChange>>) -> impl IntoView {
    move || {
        let list = changes.get();
        (!list.is_empty()).then(|| {
            view! {
                <div class="host-feed">
                    <h3>"State changes"</h3>
                    <ul class="feed">
                        {list.into_iter().map(|c| view! {
                            <li>
                                <span class="muted">{format::clock(c.time_ms)}</span>" "
                                <code>{c.worker}</code>" "
                                {match c.previous {
                                    Some(p) => format!("{p} → "),
                                    None => "seen: ".into(),
                                }}
                                <Badge state=c.state/>
                            </li>
                        }).collect_view()}
                    </ul>
                </div>
            }
        })
    }
}
