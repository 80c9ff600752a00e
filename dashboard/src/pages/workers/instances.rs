//! Model instances: the execution instances behind each model version on this server, from
//! what the API exposes —
//! state and in-flight requests (`/api/models`), instance groups (`/v2/models/{m}/config`),
//! counters (`/v2/models/stats`) and the answers by status since start, 4xx and 5xx apart
//! (`/api/metrics/history`). Refreshed every two seconds.

use crate::api::{self, ApiError, Body};
use crate::format;
use crate::types::{History, ModelList, ModelStats, StatsList};
use crate::widgets::{Badge, Empty, ErrorBox};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Answers of one model (all versions) since the server started: (4xx, 5xx).
fn errors_by_model(history: &History) -> BTreeMap<String, (u64, u64)> {
    history
        .totals
        .iter()
        .map(|(name, t)| {
            let mut sums = (0, 0);
            for (status, n) in &t.statuses {
                match status {
                    400..=499 => sums.0 += n,
                    500..=599 => sums.1 += n,
                    _ => {}
                }
            }
            (name.clone(), sums)
        })
        .collect()
}

#[derive(Clone, PartialEq)]
struct Instance {
    model: String,
    version: u64,
    state: String,
    reason: Option<String>,
    in_flight: u64,
    kind: String,
    instances: u64,
    stats: Option<ModelStats>,
    /// The model's 4xx and 5xx answers since start (all its versions).
    errors: (u64, u64),
}

#[component]
pub fn Instances() -> impl IntoView {
    let workers = RwSignal::new(None::<Vec<Instance>>);
    let error = RwSignal::new(None::<ApiError>);
    let groups: StoredValue<BTreeMap<String, (String, u64)>> = StoredValue::new(BTreeMap::new());
    let refresh = move || {
        leptos::task::spawn_local(async move {
            let (models, stats) = (
                api::get::<ModelList>("/api/models").await,
                api::get::<StatsList>("/v2/models/stats").await,
            );
            let (models, stats) = match (models, stats) {
                (Ok(m), Ok(s)) => (m.models, s.model_stats),
                (Err(e), _) | (_, Err(e)) => {
                    error.set(Some(e));
                    return;
                }
            };
            error.set(None);
            let errors = api::get::<History>("/api/metrics/history?seconds=1")
                .await
                .map(|v| errors_by_model(&v))
                .unwrap_or_default();
            let mut list = Vec::new();
            for m in models {
                let known = groups.try_with_value(|g| g.get(&m.name).cloned()).flatten();
                let (kind, instances) = match known {
                    Some(g) => g,
                    None => {
                        let path = format!("/v2/models/{}/config", api::seg(&m.name));
                        let g = match api::call("GET", &path, Body::None).await {
                            Ok(c) => {
                                let group = &c["instance_group"][0];
                                (
                                    group["kind"]
                                        .as_str()
                                        .unwrap_or("KIND_CPU")
                                        .trim_start_matches("KIND_")
                                        .to_string(),
                                    group["count"].as_u64().unwrap_or(1),
                                )
                            }
                            Err(_) => ("?".to_string(), 0),
                        };
                        groups.try_update_value(|all| all.insert(m.name.clone(), g.clone()));
                        g
                    }
                };
                let s = stats
                    .iter()
                    .find(|s| s.name == m.name && s.version == m.version.to_string())
                    .cloned();
                list.push(Instance {
                    errors: errors.get(&m.name).copied().unwrap_or_default(),
                    model: m.name,
                    version: m.version,
                    state: m.state.as_str().to_string(),
                    reason: m.reason,
                    in_flight: m.in_flight,
                    kind,
                    instances,
                    stats: s,
                });
            }
            list.sort_by(|a, b| (a.model.as_str(), b.version).cmp(&(b.model.as_str(), a.version)));
            workers.set(Some(list));
        })
    };
    refresh();
    let timer = set_interval_with_handle(refresh, std::time::Duration::from_secs(2)).ok();
    on_cleanup(move || {
        if let Some(t) = timer {
            t.clear();
        }
    });
    view! {
        <h2 class="section-title">"Model instances on this server"</h2>
        <p class="muted">"Execution instances per model version: device, load state, queue and activity (refreshed every 2 s)."</p>
        <ErrorBox error=error/>
        {move || match workers.get() {
            None => view! { <div class="loading">"Loading workers…"</div> }.into_any(),
            Some(list) if list.is_empty() => view! { <Empty title="No workers" detail="Instances start when a model version is loaded."/> }.into_any(),
            Some(list) => view! {
                <div class="worker-grid">
                    {list.into_iter().map(|w| {
                        let health = match w.state.as_str() {
                            "loaded" => "healthy",
                            "failed" => "failed",
                            "loading" => "loading",
                            _ => "idle",
                        };
                        let st = w.stats.clone().unwrap_or_else(|| ModelStats { name: w.model.clone(), version: w.version.to_string(), ..Default::default() });
                        let q = st.inference_stats.queue;
                        let mean_queue = if q.count > 0 { format::ms(q.ns as f64 / q.count as f64 / 1e6) } else { "–".into() };
                        let last = if st.last_inference > 0 { format::ago((st.last_inference / 1000) as i64) } else { "never".into() };
                        view! {
                            <section class="card worker">
                                <div class="card-head">
                                    <h2>{format!("{} v{}", w.model, w.version)}</h2>
                                    <Badge state=health/>
                                </div>
                                <dl class="facts">
                                    <dt>"Device"</dt><dd>{format!("{} × {}", w.instances, w.kind)}</dd>
                                    <dt>"State"</dt><dd>{w.state.clone()}</dd>
                                    <dt>"In flight"</dt><dd>{w.in_flight}</dd>
                                    <dt>"Inferences"</dt><dd>{st.inference_count}</dd>
                                    <dt>"Batches run"</dt><dd>{st.execution_count}</dd>
                                    <dt>"Engine failures"</dt><dd>{st.inference_stats.fail.count}</dd>
                                    <dt title="Requests refused as the client's mistake (bad input, missing scope, rate limit…), all versions">"Client errors (4xx)"</dt><dd class="client-errors">{w.errors.0}</dd>
                                    <dt title="Requests the server or the model failed, all versions">"Server errors (5xx)"</dt><dd class="server-errors">{w.errors.1}</dd>
                                    <dt>"Mean queue"</dt><dd>{mean_queue}</dd>
                                    <dt>"Last inference"</dt><dd>{last}</dd>
                                </dl>
                                {w.reason.map(|r| view! { <p class="error-inline">{r}</p> })}
                            </section>
                        }
                    }).collect_view()}
                </div>
            }.into_any(),
        }}
    }
}
