//! Workers: the hosts that run models (`GET /api/workers`: workers joined to this manager, and
//! this server's own engine as `local`), each with its state as the manager judges it, the age
//! of its last heartbeat, its devices and its load; a host's detail charts the `/v2/events`
//! ticks live. Below, the execution instances of each model version on this server.
//!
//! Hosts need an admin key (both endpoints are admin-only); other keys see the instances.

mod detail;
mod hosts;
mod instances;

use crate::api::{self, ApiError};
use crate::format;
use crate::session;
use crate::types::{Event, WorkerFigures, WorkerHost, WorkerList};
use crate::widgets::{ErrorBox, PageHeader};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Seconds of ticks a host's charts hold.
const KEEP_S: usize = 300;

/// One host's figures from the `/v2/events` ticks, oldest first, one a second; NaN where a tick
/// had no value (no request in the interval, or the host was lost).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub t: Vec<f64>,
    pub rps: Vec<f64>,
    pub p50: Vec<f64>,
    pub p99: Vec<f64>,
    pub cpu: Vec<f64>,
    pub in_flight: Vec<f64>,
    pub outstanding: Vec<f64>,
    pub rss: Vec<f64>,
    /// The latest tick's figures.
    pub last: Option<WorkerFigures>,
}

impl Series {
    fn push(&mut self, time_ms: f64, f: WorkerFigures) {
        let nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
        self.t.push(time_ms);
        self.rps.push(nan(f.requests_per_s));
        self.p50.push(nan(f.p50_ms));
        self.p99.push(nan(f.p99_ms));
        self.cpu.push(nan(f.cpu_percent));
        self.in_flight.push(nan(f.in_flight.map(|v| v as f64)));
        self.outstanding.push(f.outstanding as f64);
        self.rss.push(nan(f.rss_bytes.map(|v| v as f64)));
        if self.t.len() > KEEP_S {
            for v in [
                &mut self.t,
                &mut self.rps,
                &mut self.p50,
                &mut self.p99,
                &mut self.cpu,
                &mut self.in_flight,
                &mut self.outstanding,
                &mut self.rss,
            ] {
                v.remove(0);
            }
        }
        self.last = Some(f);
    }
}

/// A `worker_state` event, for the page's feed.
#[derive(Clone, Debug, PartialEq)]
pub struct StateChange {
    pub time_ms: f64,
    pub worker: String,
    pub state: String,
    pub previous: Option<String>,
}

/// What the page shows for a host now: the latest tick's figures, or `/api/workers`'s before
/// the first tick.
pub fn current(host: &WorkerHost, live: &BTreeMap<String, Series>) -> WorkerFigures {
    live.get(&host.info.id)
        .and_then(|s| s.last.clone())
        .unwrap_or_else(|| crate::types::figures_of(host))
}

#[component]
pub fn Workers() -> impl IntoView {
    let admin = session::use_session()
        .identity
        .with_untracked(|i| i.as_ref().is_some_and(|i| i.can("admin")));
    view! {
        <PageHeader title="Workers" subtitle="Hosts that run models (this server's engine and the workers joined to it), then the execution instances per model version on this server."/>
        {if admin {
            view! { <Hosts/> }.into_any()
        } else {
            view! { <p class="notice">"The hosts (state, devices, load) are shown to admin keys."</p> }.into_any()
        }}
        <instances::Instances/>
    }
}

/// The hosts table, refreshed every two seconds and at once on a state change, with live
/// figures and the selected host's detail.
#[component]
fn Hosts() -> impl IntoView {
    let hosts = RwSignal::new(None::<Vec<WorkerHost>>);
    let error = RwSignal::new(None::<ApiError>);
    let live = RwSignal::new(BTreeMap::<String, Series>::new());
    let changes = RwSignal::new(Vec::<StateChange>::new());
    let selected = RwSignal::new(None::<String>);
    let end_ms = RwSignal::new(format::now_ms());
    let refresh = move || {
        leptos::task::spawn_local(async move {
            match api::get::<WorkerList>("/api/workers").await {
                Ok(list) => {
                    error.set(None);
                    hosts.set(Some(list.workers));
                }
                Err(e) => error.set(Some(e)),
            }
        })
    };
    refresh();
    let timer = set_interval_with_handle(refresh, std::time::Duration::from_secs(2)).ok();
    let alive = StoredValue::new(true);
    let socket = crate::events::open(alive, move |frame| match frame {
        Event::Tick(tick) => {
            let time_ms = tick.time_ms as f64;
            live.update(|all| {
                all.retain(|id, _| tick.workers.iter().any(|f| &f.id == id));
                for f in tick.workers {
                    all.entry(f.id.clone()).or_default().push(time_ms, f);
                }
            });
            end_ms.set(time_ms);
        }
        Event::WorkerState(change) => {
            changes.update(|c| {
                c.insert(
                    0,
                    StateChange {
                        time_ms: change.time_ms as f64,
                        worker: change.worker,
                        state: change.state.as_str().to_string(),
                        previous: change.previous.map(|p| p.as_str().to_string()),
                    },
                );
                c.truncate(20);
            });
            refresh();
        }
        Event::ModelState(_) => {}
    });
    let socket = StoredValue::new_local(socket);
    on_cleanup(move || {
        alive.set_value(false);
        if let Some(t) = timer {
            t.clear();
        }
        if let Some(ws) = socket.try_get_value().flatten() {
            let _ = ws.close();
        }
    });
    view! {
        <section class="hosts-section">
            <h2 class="section-title">"Hosts"</h2>
            <ErrorBox error=error/>
            {move || match hosts.get() {
                None => view! { <div class="loading">"Loading hosts…"</div> }.into_any(),
                Some(list) => view! {
                    <hosts::HostTable hosts=list live selected/>
                }.into_any(),
            }}
            {move || selected.get().map(|id| view! {
                <detail::HostDetail id hosts live end_ms on_close=move || selected.set(None)/>
            })}
            <hosts::StateFeed changes/>
        </section>
    }
}
