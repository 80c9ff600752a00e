//! A model's traffic between its versions: the split (version → weight) with what each version
//! served callers since the server started, the mirror and its copies apart, and the response
//! cache's hit rate. With the `upload` scope the weights are edited and saved
//! (`PUT /api/models/{name}/traffic`), a version is promoted (all the weight on it, sticky and
//! mirror kept unless the mirror was that version), and a change is rolled back.
//!
//! Rollback puts back the policy in force before the last change made here (saved, promoted or
//! rolled back); with no such change in this page's life, it removes the policy
//! (`DELETE`), and the model's version policy chooses the version again. The server keeps no
//! history of policies, so the page remembers the one it replaced.

use crate::api::{self, ApiError, Body};
use crate::format;
use crate::session::use_session;
use crate::types::{ModelVersion, Policy, SplitEntry, StatsList, TrafficAnswer, TrafficFigures};
use crate::widgets::ErrorBox;
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Weights as typed per version; empty: the version is not in the split.
type Weights = BTreeMap<u64, String>;

fn weights_of(policy: Option<&Policy>) -> Weights {
    policy
        .and_then(|p| p.split.as_ref())
        .map(|split| {
            split
                .iter()
                .map(|e| (e.version, e.weight.to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// The split to send: every version with a weight, checked as the server would.
fn split_of(weights: &Weights) -> Result<Vec<SplitEntry>, String> {
    let mut split = Vec::new();
    for (version, text) in weights {
        let t = text.trim();
        if t.is_empty() {
            continue;
        }
        let weight = t
            .parse::<u32>()
            .ok()
            .filter(|w| (1..=1_000_000).contains(w))
            .ok_or_else(|| {
                format!("Version {version}: weight '{t}' is not a whole number from 1 to 1000000 (leave it empty to send it nothing)")
            })?;
        split.push(SplitEntry {
            version: *version,
            weight,
        });
    }
    if split.is_empty() {
        return Err("Give at least one version a weight.".into());
    }
    Ok(split)
}

/// Each version's share of the split, 0–1, from the weights as typed (invalid ones count 0).
fn shares(weights: &Weights) -> BTreeMap<u64, f64> {
    let parsed: Vec<(u64, u64)> = weights
        .iter()
        .map(|(v, w)| (*v, w.trim().parse::<u64>().unwrap_or(0)))
        .collect();
    let total: u64 = parsed.iter().map(|(_, w)| w).sum();
    parsed
        .into_iter()
        .map(|(v, w)| {
            (
                v,
                if total == 0 {
                    0.0
                } else {
                    w as f64 / total as f64
                },
            )
        })
        .collect()
}

/// The response cache's hits among lookups, over every version of the model.
fn cache_rate(stats: &StatsList) -> Option<(u64, u64)> {
    let (hits, misses) = stats.model_stats.iter().fold((0, 0), |(h, m), s| {
        (
            h + s.inference_stats.cache_hit.count,
            m + s.inference_stats.cache_miss.count,
        )
    });
    (hits + misses > 0).then_some((hits, hits + misses))
}

fn cache_text(stats: Option<&StatsList>, enabled: bool) -> Option<String> {
    match stats.and_then(cache_rate) {
        Some((hits, lookups)) => Some(format!(
            "Response cache: {} hits ({hits} of {lookups} lookups)",
            format::percent(hits as f64 / lookups as f64)
        )),
        None if enabled => Some("Response cache: on, no lookups yet".into()),
        None => None,
    }
}

fn ms_text(v: Option<f64>) -> String {
    v.map(format::ms).unwrap_or_else(|| "–".into())
}

#[component]
pub fn TrafficPanel(name: String, versions: Memo<Vec<ModelVersion>>) -> impl IntoView {
    let session = use_session();
    let answer = RwSignal::new(None::<TrafficAnswer>);
    let stats = RwSignal::new(None::<StatsList>);
    let error = RwSignal::new(None::<ApiError>);
    let weights = RwSignal::new(Weights::new());
    // While someone edits the weights, refreshes leave the form alone.
    let edited = RwSignal::new(false);
    // The policy a rollback restores: Some(None) means "no policy".
    let previous = RwSignal::new(None::<Option<Policy>>);
    let busy = RwSignal::new(false);
    let done = RwSignal::new(None::<String>);
    let path = StoredValue::new(format!("/api/models/{}/traffic", api::seg(&name)));
    let stats_path = StoredValue::new(format!("/v2/models/{}/stats", api::seg(&name)));
    let show = move |a: TrafficAnswer| {
        if !edited.get_untracked() {
            weights.set(weights_of(a.policy.as_ref()));
        }
        answer.set(Some(a));
    };
    let reload = move || {
        leptos::task::spawn_local(async move {
            match api::get::<TrafficAnswer>(&path.get_value()).await {
                Ok(a) => show(a),
                Err(e) => error.set(Some(e)),
            }
            match api::get::<StatsList>(&stats_path.get_value()).await {
                Ok(s) => stats.set(Some(s)),
                Err(e) => error.set(Some(e)),
            }
        })
    };
    reload();
    let timer = set_interval_with_handle(reload, std::time::Duration::from_secs(5)).ok();
    on_cleanup(move || {
        if let Some(t) = timer {
            t.clear();
        }
    });
    // Sends a new policy (None: remove it) and remembers the one it replaces.
    let apply = move |policy: Option<Policy>, what: String| {
        error.set(None);
        done.set(None);
        busy.set(true);
        let before = answer.with_untracked(|a| a.as_ref().and_then(|a| a.policy.clone()));
        leptos::task::spawn_local(async move {
            let result = match &policy {
                Some(p) => {
                    api::send::<TrafficAnswer>("PUT", &path.get_value(), Body::typed(p)).await
                }
                None => api::send::<TrafficAnswer>("DELETE", &path.get_value(), Body::None).await,
            };
            busy.set(false);
            match result {
                Ok(a) => {
                    previous.set(Some(before));
                    edited.set(false);
                    show(a);
                    done.set(Some(what));
                }
                Err(e) => error.set(Some(e)),
            }
        });
    };
    let current = move || answer.with_untracked(|a| a.as_ref().and_then(|a| a.policy.clone()));
    let save = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        match split_of(&weights.get_untracked()) {
            Ok(split) => {
                let policy = Policy {
                    split: Some(split),
                    ..current().unwrap_or_default()
                };
                apply(
                    Some(policy),
                    "Saved: the split applies to the next request.".into(),
                );
            }
            Err(e) => error.set(Some(ApiError::client(e))),
        }
    };
    let promote = move |version: u64| {
        let base = current().unwrap_or_default();
        let policy = Policy {
            split: Some(vec![SplitEntry {
                version,
                weight: 100,
            }]),
            sticky: base.sticky,
            mirror: base.mirror.filter(|m| m.version != version),
        };
        apply(
            Some(policy),
            format!("Promoted: version {version} takes every request."),
        );
    };
    let rollback = move |_| match previous.get_untracked() {
        Some(Some(p)) => apply(Some(p), "Rolled back to the policy before.".into()),
        _ => apply(
            None,
            "Rolled back: no policy, the version policy chooses.".into(),
        ),
    };
    let can_edit = move || session.can("upload");
    let has_policy = move || answer.with(|a| a.as_ref().is_some_and(|a| a.policy.is_some()));
    let figures =
        move || answer.with(|a| a.as_ref().map(|a| a.figures.clone()).unwrap_or_default());
    let cache_enabled = move || {
        versions.with(|v| {
            v.iter()
                .any(|v| v.config["response_cache"]["enable"].as_bool() == Some(true))
        })
    };
    // A model with one version has no split to make: its panel starts closed.
    let open = versions.with_untracked(|v| v.len() > 1);
    let version_numbers = Memo::new(move |_| {
        let mut v: Vec<u64> = versions.with(|v| v.iter().map(|v| v.version).collect());
        v.sort_unstable();
        v
    });
    let mirror_text = move || {
        answer.with(|a| {
            a.as_ref()
                .and_then(|a| a.policy.as_ref())
                .and_then(|p| p.mirror)
                .map(|m| {
                    format!(
                        "Mirror: {}% of requests copied to version {} (answers dropped).",
                        m.percent, m.version
                    )
                })
        })
    };
    let sticky_text = move || {
        answer.with(|a| {
            a.as_ref()
                .and_then(|a| a.policy.as_ref())
                .and_then(|p| p.sticky.clone())
                .map(|s| format!("Sticky by {s}."))
        })
    };
    view! {
        <details class="traffic" data-model=name.clone() open=open>
            <summary>"Traffic between versions"
                <span class="muted small traffic-state">{move || if has_policy() { " · split in force" } else { " · version policy chooses" }}</span>
            </summary>
            {move || stats.with(|s| cache_text(s.as_ref(), cache_enabled())).map(|t| view! { <p class="cache-rate">{t}</p> })}
            <form class="traffic-form" on:submit=save>
                <div class="table-wrap">
                    <table class="split stack">
                        <thead><tr><th>"Version"</th><th>"Weight"</th><th>"Share"</th><th>"Sent by the split"</th><th>"Requests"</th><th>"Errors"</th><th>"p50"</th><th>"p99"</th><th><span class="sr-only">"Actions"</span></th></tr></thead>
                        <tbody>
                            <For each=move || version_numbers.get() key=|v| *v let:version>
                                {
                                    let row = move || figures().versions.into_iter().find(|f| f.version == version).unwrap_or_default();
                                    let share = move || weights.with(|w| shares(w).get(&version).copied().unwrap_or(0.0));
                                    view! {
                                        <tr data-version=version.to_string()>
                                            <td data-label="Version">{format!("v{version}")}</td>
                                            <td data-label="Weight">
                                                <input class="split-weight" data-version=version.to_string() inputmode="numeric" placeholder="–"
                                                    aria-label=format!("Weight of version {version}") disabled=move || !can_edit()
                                                    prop:value=move || weights.with(|w| w.get(&version).cloned().unwrap_or_default())
                                                    on:input=move |ev| { let v = event_target_value(&ev); edited.set(true); weights.update(|w| { w.insert(version, v); }); }/>
                                            </td>
                                            <td data-label="Share" class="split-share">{move || format::percent(share())}</td>
                                            <td data-label="Sent by the split">{move || row().split_requests}</td>
                                            <td data-label="Requests" class="version-requests">{move || row().requests}</td>
                                            <td data-label="Errors">{move || row().errors}</td>
                                            <td data-label="p50">{move || ms_text(row().p50_ms)}</td>
                                            <td data-label="p99">{move || ms_text(row().p99_ms)}</td>
                                            <td class="actions">
                                                <Show when=can_edit>
                                                    <button class="btn small promote" type="button" data-version=version.to_string()
                                                        disabled=move || busy.get() on:click=move |_| promote(version)>"Promote"</button>
                                                </Show>
                                            </td>
                                        </tr>
                                    }
                                }
                            </For>
                        </tbody>
                    </table>
                </div>
                <p class="muted small">{sticky_text}" "{mirror_text}" Requests that name a version bypass the split; figures count since the server started."</p>
                <MirrorTable figures=Signal::derive(figures)/>
                <ErrorBox error=error/>
                {move || done.get().map(|d| view! { <p class="success" role="status">{d}</p> })}
                <Show when=can_edit>
                    <div class="form-actions">
                        <button class="btn small ghost rollback" type="button" disabled=move || busy.get() || (previous.get().is_none() && !has_policy())
                            title="Puts back the policy before your last change here; without one, removes the policy so the version policy chooses"
                            on:click=rollback>"Rollback"</button>
                        <button class="btn small primary save-split" type="submit" disabled=move || busy.get()>"Save split"</button>
                    </div>
                </Show>
            </form>
        </details>
    }
}

/// The mirrored copies, apart from callers' figures: they never answer anyone.
#[component]
fn MirrorTable(figures: Signal<TrafficFigures>) -> impl IntoView {
    move || {
        let mirror = figures.with(|f| f.mirror.clone());
        (!mirror.is_empty()).then(|| {
            view! {
                <div class="table-wrap">
                    <table class="mirror-figures stack">
                        <thead><tr><th>"Mirrored to"</th><th>"Copies run"</th><th>"Errors"</th><th>"Shed (busy)"</th><th>"Mean time"</th></tr></thead>
                        <tbody>
                            {mirror.into_iter().map(|m| view! {
                                <tr data-version=m.version.to_string()>
                                    <td data-label="Mirrored to">{format!("v{}", m.version)}</td>
                                    <td data-label="Copies run">{m.ok + m.errors}</td>
                                    <td data-label="Errors">{m.errors}</td>
                                    <td data-label="Shed (busy)">{m.shed}</td>
                                    <td data-label="Mean time">{ms_text(m.mean_ms)}</td>
                                </tr>
                            }).collect_view()}
                        </tbody>
                    </table>
                </div>
            }
        })
    }
}
