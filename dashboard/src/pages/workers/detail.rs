//! One host's detail: what it is (devices, models) and live charts of its load from the
//! `/v2/events` ticks (the last five minutes seen since the page opened).

use super::hosts::{gpu_text, hardware, model_names};
use super::{current, Series};
use crate::chart::{Chart, Line, Scale};
use crate::format;
use crate::types::WorkerHost;
use crate::widgets::Badge;
use leptos::prelude::*;
use std::collections::BTreeMap;

const RANGE_S: u64 = 300;

/// A chart line: its label, its colour class and where its values are in [`Series`].
type LineSpec = (&'static str, &'static str, fn(&Series) -> &Vec<f64>);

/// Requests on an axis: whole numbers, halves where the axis ends at 1.
fn count(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[component]
pub fn HostDetail(
    id: String,
    hosts: RwSignal<Option<Vec<WorkerHost>>>,
    live: RwSignal<BTreeMap<String, Series>>,
    end_ms: RwSignal<f64>,
    on_close: impl Fn() + 'static,
) -> impl IntoView {
    let key = StoredValue::new(id.clone());
    let host = Memo::new(move |_| {
        key.with_value(|id| hosts.with(|h| h.as_ref()?.iter().find(|h| &h.info.id == id).cloned()))
    });
    let series = Memo::new(move |_| {
        key.with_value(|id| live.with(|l| l.get(id).cloned().unwrap_or_default()))
    });
    let times = Signal::derive(move || series.with(|s| s.t.clone()));
    let lines = move |spec: Vec<LineSpec>| {
        Signal::derive(move || {
            series.with(|s| {
                spec.iter()
                    .map(|(label, class, pick)| Line {
                        label: label.to_string(),
                        class,
                        values: pick(s).clone(),
                    })
                    .collect::<Vec<_>>()
            })
        })
    };
    let range = Signal::derive(|| RANGE_S);
    let end = Signal::derive(move || end_ms.get());
    // No longer listed: removed by an operator, or it deregistered.
    let figures = Memo::new(move |_| {
        let host = host.get()?;
        Some(live.with(|l| current(&host, l)))
    });
    let state = move || {
        figures
            .get()
            .map_or_else(|| "removed".to_string(), |f| f.state.as_str().to_string())
    };
    let facts = move || {
        let (host, f) = (host.get()?, figures.get()?);
        Some(view! {
            <dl class="facts host-facts">
                <dt>"Address"</dt><dd>{host.info.advertise.clone()}</dd>
                <dt>"Version"</dt><dd>{host.info.version.clone()}</dd>
                <dt>"Devices"</dt><dd>{hardware(&host.info.devices)}</dd>
                <dt>"GPU"</dt><dd>{gpu_text(&host, f.gpus.as_deref().unwrap_or_default())}</dd>
                <dt>"Last seen"</dt><dd class="detail-seen">{format::age_ms(f.last_seen_ms)}</dd>
                <dt>"Models loaded"</dt><dd>{f.models.as_deref().map(model_names).unwrap_or_else(|| "–".into())}</dd>
                <dt>"Queued"</dt><dd>{f.queued.map(|q| q.to_string()).unwrap_or_else(|| "–".into())}</dd>
            </dl>
        })
    };
    view! {
        <section class="card host-detail" data-worker=id.clone()>
            <div class="card-head">
                <h2>{id.clone()}</h2>
                <span class="row-actions">
                    {move || view! { <Badge state=state()/> }}
                    <button type="button" class="btn ghost small" on:click=move |_| on_close()>"Close"</button>
                </span>
            </div>
            {facts}
            <div class="charts">
                <Chart title="Throughput" unit="requests/s" times end_ms=end range_s=range format=format::rate
                    lines=lines(vec![("requests", "series-1", |s| &s.rps)])/>
                <Chart title="Latency" unit="ms" times end_ms=end range_s=range format=format::ms scale=Scale::Log
                    lines=lines(vec![("p50", "series-1", |s| &s.p50), ("p99", "series-2", |s| &s.p99)])/>
                <Chart title="In flight" unit="requests" times end_ms=end range_s=range format=count
                    lines=lines(vec![("on the host", "series-1", |s| &s.in_flight), ("sent by the manager", "series-2", |s| &s.outstanding)])/>
                <Chart title="CPU" unit="% of one core" times end_ms=end range_s=range format=|v| format!("{v:.0}%")
                    lines=lines(vec![("process", "series-1", |s| &s.cpu)])/>
                <Chart title="Memory" unit="resident" times end_ms=end range_s=range format=|v| format::bytes(v.max(0.0) as u64)
                    lines=lines(vec![("RSS", "series-1", |s| &s.rss)])/>
            </div>
        </section>
    }
}
