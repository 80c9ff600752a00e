//! Time-series charts for the overview (no chart library: the bundle stays small and the
//! stylesheet themes it): a time axis over the chosen range, a value axis with units (linear,
//! or logarithmic where one slow request would flatten the rest), a legend with the latest
//! values, a hover read-out, and a text description for screen readers.

use leptos::prelude::*;
use wasm_bindgen::JsCast;

const W: f64 = 600.0;
const H: f64 = 160.0;

/// One line of a chart; NaN samples (seconds without a value) break the line.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    /// `series-1` .. `series-4`: the line's colour in the stylesheet.
    pub class: &'static str,
    pub values: Vec<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    Linear,
    /// Decades: one cold start does not flatten the steady state.
    Log,
}

/// The value axis: where a value goes (0 at the bottom, 1 at the top) and its labelled ticks.
#[derive(Clone, Debug, PartialEq)]
struct Axis {
    scale: Scale,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Axis {
    fn new(scale: Scale, values: impl Iterator<Item = f64>) -> Axis {
        let finite: Vec<f64> = values.filter(|v| v.is_finite()).collect();
        let max = finite.iter().copied().fold(0.0_f64, f64::max);
        match scale {
            Scale::Log => {
                let min_pos = finite
                    .iter()
                    .copied()
                    .filter(|v| *v > 0.0)
                    .fold(f64::INFINITY, f64::min);
                if !min_pos.is_finite() {
                    return Axis::new(Scale::Linear, std::iter::empty());
                }
                let hi = 10f64.powf(max.log10().ceil());
                let lo = 10f64.powf(min_pos.log10().floor()).min(hi / 10.0);
                let mut ticks = Vec::new();
                let mut t = lo;
                while t <= hi * 1.0001 {
                    ticks.push(t);
                    t *= 10.0;
                }
                // At most four labels: every other decade on wide ranges.
                while ticks.len() > 4 {
                    ticks = ticks.into_iter().step_by(2).collect();
                }
                Axis {
                    scale,
                    lo,
                    hi,
                    ticks,
                }
            }
            Scale::Linear => {
                let hi = nice(if max <= 0.0 { 1.0 } else { max * 1.05 });
                Axis {
                    scale,
                    lo: 0.0,
                    hi,
                    ticks: vec![0.0, hi / 2.0, hi],
                }
            }
        }
    }

    /// 0..=1 from the bottom.
    fn place(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Linear => (v - self.lo) / (self.hi - self.lo),
            Scale::Log => {
                if v <= 0.0 {
                    return 0.0;
                }
                (v.log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
            }
        }
        .clamp(0.0, 1.0)
    }
}

/// 1, 2 or 5 times a power of ten, at least `v`.
fn nice(v: f64) -> f64 {
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|x| *x >= v)
        .unwrap_or(10.0 * p)
}

/// SVG path data for one line; x from the sample times, a gap wherever a value is NaN or two
/// samples are more than `gap_ms` apart (the server was down, the page was closed).
fn path(times: &[f64], values: &[f64], t0: f64, t1: f64, axis: &Axis) -> String {
    let span = (t1 - t0).max(1.0);
    // Runs of joined points; a run of one is drawn as a dot (a zero-length segment, round caps).
    let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut pen_down = false;
    let mut previous_t = f64::NEG_INFINITY;
    for (t, v) in times.iter().zip(values) {
        if v.is_nan() || *t < t0 {
            pen_down = false;
            continue;
        }
        if *t - previous_t > 5_000.0 {
            pen_down = false;
        }
        previous_t = *t;
        let x = (t - t0) / span * W;
        let y = H - axis.place(*v) * (H - 2.0) - 1.0;
        if !pen_down {
            runs.push(Vec::new());
        }
        if let Some(run) = runs.last_mut() {
            run.push((x, y));
        }
        pen_down = true;
    }
    let mut d = String::new();
    for run in runs {
        for (i, (x, y)) in run.iter().enumerate() {
            d.push_str(&format!(
                "{}{x:.1},{y:.1}",
                if i == 0 { " M" } else { " L" }
            ));
        }
        if let [(x, y)] = run[..] {
            d.push_str(&format!(" L{x:.1},{y:.1}"));
        }
    }
    d
}

/// "−5 min", "−2:30", "now" for a point `ago_s` seconds before the end.
fn ago_label(ago_s: f64) -> String {
    if ago_s < 0.5 {
        "now".into()
    } else if ago_s >= 60.0 && (ago_s % 60.0).abs() < 0.5 {
        format!("−{} min", (ago_s / 60.0).round())
    } else if ago_s >= 60.0 {
        format!("−{}:{:02}", (ago_s / 60.0) as u64, (ago_s % 60.0) as u64)
    } else {
        format!("−{ago_s:.0} s")
    }
}

fn last_value(values: &[f64]) -> Option<f64> {
    values.iter().rev().find(|v| !v.is_nan()).copied()
}

/// A chart of `lines` against `times` (Unix ms, oldest first) over the last `range_s`
/// seconds before `end_ms`.
#[component]
pub fn Chart(
    title: &'static str,
    /// The unit, for the axis caption and screen readers ("requests/s", "ms").
    unit: &'static str,
    #[prop(into)] times: Signal<Vec<f64>>,
    #[prop(into)] lines: Signal<Vec<Line>>,
    #[prop(into)] end_ms: Signal<f64>,
    #[prop(into)] range_s: Signal<u64>,
    format: fn(f64) -> String,
    #[prop(optional)] scale: Option<Scale>,
) -> impl IntoView {
    let scale = scale.unwrap_or(Scale::Linear);
    let hover = RwSignal::new(None::<f64>);
    let window = move || {
        let t1 = end_ms.get();
        (t1 - range_s.get() as f64 * 1000.0, t1)
    };
    let axis = Memo::new(move |_| {
        let (t0, _) = window();
        let times = times.get();
        lines.with(|lines| {
            Axis::new(
                scale,
                lines.iter().flat_map(|l| {
                    l.values
                        .iter()
                        .zip(&times)
                        .filter(move |(_, t)| **t >= t0)
                        .map(|(v, _)| *v)
                        .collect::<Vec<_>>()
                }),
            )
        })
    });
    let legend = move || {
        lines
            .get()
            .into_iter()
            .map(|l| {
                let value = last_value(&l.values)
                    .map(format)
                    .unwrap_or_else(|| "–".into());
                view! {
                    <span class=format!("legend-item {}", l.class)>
                        <span class="swatch" aria-hidden="true"></span>
                        {l.label}" "<strong class="legend-value">{value}</strong>
                    </span>
                }
            })
            .collect_view()
    };
    let description = move || {
        let values = lines
            .get()
            .into_iter()
            .map(|l| {
                let finite: Vec<f64> = l.values.iter().copied().filter(|v| !v.is_nan()).collect();
                let max = finite.iter().copied().fold(f64::NAN, f64::max);
                format!(
                    "{} now {}, highest {}",
                    l.label,
                    last_value(&l.values)
                        .map(format)
                        .unwrap_or_else(|| "no value".into()),
                    if max.is_nan() {
                        "no value".into()
                    } else {
                        format(max)
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "{title} in {unit} over the last {}: {values}.",
            ago_label(range_s.get() as f64).trim_start_matches('−')
        )
    };
    let readout = move || {
        let f = hover.get()?;
        let (t0, t1) = window();
        let at = t0 + f * (t1 - t0);
        let times = times.get();
        let i = times
            .iter()
            .enumerate()
            .min_by(|a, b| (a.1 - at).abs().total_cmp(&(b.1 - at).abs()))
            .map(|(i, _)| i)?;
        if (times[i] - at).abs() > 2_500.0 {
            return None;
        }
        let when = crate::format::clock(times[i]);
        let rows = lines
            .get()
            .into_iter()
            .map(|l| {
                let v = l.values.get(i).copied().filter(|v| !v.is_nan());
                view! { <div class=format!("readout-row {}", l.class)><span class="swatch" aria-hidden="true"></span>{l.label}" "<strong>{v.map(format).unwrap_or_else(|| "–".into())}</strong></div> }
            })
            .collect_view();
        let x = ((times[i] - t0) / (t1 - t0) * 100.0).clamp(0.0, 100.0);
        Some(view! {
            <div class="hover-line" style:left=format!("{x:.2}%")></div>
            <div class="readout" class:flip={x > 60.0} style:left=format!("{x:.2}%")>
                <div class="readout-time">{when}</div>
                {rows}
            </div>
        })
    };
    let on_move = move |ev: web_sys::PointerEvent| {
        let Some(target) = ev
            .current_target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
        else {
            return;
        };
        let rect = target.get_bounding_client_rect();
        if rect.width() > 0.0 {
            hover.set(Some(
                ((ev.client_x() as f64 - rect.left()) / rect.width()).clamp(0.0, 1.0),
            ));
        }
    };
    let x_labels = move || {
        let range = range_s.get() as f64;
        [1.0, 0.5, 0.0]
            .into_iter()
            .map(|f| {
                let left = (1.0 - f) * 100.0;
                view! { <span class="x-tick" style:left=format!("{left}%")>{ago_label(range * f)}</span> }
            })
            .collect_view()
    };
    view! {
        <figure class="chart" role="group" aria-label=description>
            <figcaption>
                <span class="chart-label">{title}<span class="chart-unit">{format!(" ({unit}{})", if scale == Scale::Log { ", log scale" } else { "" })}</span></span>
                <span class="legend">{legend}</span>
            </figcaption>
            <div class="plot-area">
                <div class="y-axis" aria-hidden="true">
                    {move || axis.get().ticks.iter().map(|t| {
                        let bottom = axis.get().place(*t) * 100.0;
                        view! { <span class="y-tick" style:bottom=format!("{bottom}%")>{format(*t)}</span> }
                    }).collect_view()}
                </div>
                <div class="plot" on:pointermove=on_move on:pointerleave=move |_| hover.set(None)>
                    <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" aria-hidden="true">
                        {move || axis.get().ticks.iter().map(|t| {
                            let y = H - axis.get().place(*t) * (H - 2.0) - 1.0;
                            view! { <line class="grid" x1="0" y1=y x2=W y2=y></line> }
                        }).collect_view()}
                        {move || {
                            let (t0, t1) = window();
                            let times = times.get();
                            let axis = axis.get();
                            lines.get().into_iter().map(|l| view! {
                                <path class=format!("line {}", l.class) d=path(&times, &l.values, t0, t1, &axis)></path>
                            }).collect_view()
                        }}
                    </svg>
                    {readout}
                </div>
                <div class="x-axis" aria-hidden="true">{x_labels}</div>
            </div>
        </figure>
    }
}
