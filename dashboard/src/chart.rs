//! A small SVG line chart for the live series on the overview (no chart library: the bundle
//! stays small and the stylesheet themes it).

use leptos::prelude::*;

const W: f64 = 300.0;
const H: f64 = 90.0;

/// SVG path data for `points` on a chart whose top is `top`; NaN samples (seconds without a
/// value) break the line.
fn line(points: &[f64], capacity: usize, top: f64) -> String {
    let step = W / (capacity.max(2) - 1) as f64;
    let offset = capacity.saturating_sub(points.len()) as f64 * step;
    let mut d = String::new();
    let mut pen_down = false;
    for (i, v) in points.iter().enumerate() {
        if v.is_nan() {
            pen_down = false;
            continue;
        }
        let (x, y) = (offset + i as f64 * step, H - (v / top) * (H - 4.0) - 2.0);
        d.push_str(&format!(
            "{}{x:.1},{y:.1}",
            if pen_down { " L" } else { " M" }
        ));
        pen_down = true;
    }
    d
}

/// The area under a line without gaps (a line with gaps gets none).
fn area(points: &[f64], capacity: usize, top: f64) -> String {
    if points.is_empty() || points.iter().any(|v| v.is_nan()) {
        return String::new();
    }
    let step = W / (capacity.max(2) - 1) as f64;
    let first = capacity.saturating_sub(points.len()) as f64 * step;
    let last = first + (points.len() - 1) as f64 * step;
    format!(
        "{} L{last:.1},{H} L{first:.1},{H} Z",
        line(points, capacity, top)
    )
}

/// `points` are the last N samples, oldest first; `capacity` fixes the x scale so the line
/// scrolls in from the right. `second`, when given, is drawn as a second line on the same
/// scale (the p99 next to the p50).
#[component]
pub fn LineChart(
    #[prop(into)] points: Signal<Vec<f64>>,
    #[prop(optional, into)] second: Option<Signal<Vec<f64>>>,
    capacity: usize,
    label: &'static str,
    format: fn(f64) -> String,
) -> impl IntoView {
    let top = move || {
        let max = points
            .get()
            .into_iter()
            .chain(second.map(|s| s.get()).unwrap_or_default())
            .fold(0.0_f64, f64::max);
        (max, if max <= 0.0 { 1.0 } else { max * 1.15 })
    };
    let shown = move |s: Signal<Vec<f64>>| {
        s.with(|p| p.last().copied())
            .filter(|v| !v.is_nan())
            .map(format)
            .unwrap_or_else(|| "–".into())
    };
    let value = move || match second {
        Some(s) => format!("{} · {}", shown(points), shown(s)),
        None => shown(points),
    };
    view! {
        <figure class="chart" class:two-lines=second.is_some()>
            <figcaption>
                <span class="chart-label">{label}</span>
                <span class="chart-value">{value}</span>
            </figcaption>
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" role="img" aria-label=label>
                <line class="grid" x1="0" y1=H / 2.0 x2=W y2=H / 2.0></line>
                <path class="area" d=move || area(&points.get(), capacity, top().1)></path>
                <path class="line" d=move || line(&points.get(), capacity, top().1)></path>
                {second.map(|s| view! { <path class="line line-2" d=move || line(&s.get(), capacity, top().1)></path> })}
            </svg>
            <div class="chart-scale muted">{move || format!("max {}", format(top().0))}</div>
        </figure>
    }
}
