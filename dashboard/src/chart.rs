//! A small SVG line chart for the live series on the overview (no chart library: the bundle
//! stays small and the stylesheet themes it).

use leptos::prelude::*;

const W: f64 = 300.0;
const H: f64 = 90.0;

/// `points` are the last N samples, oldest first; `capacity` fixes the x scale so the line
/// scrolls in from the right.
#[component]
pub fn LineChart(
    #[prop(into)] points: Signal<Vec<f64>>,
    capacity: usize,
    label: &'static str,
    format: fn(f64) -> String,
) -> impl IntoView {
    let path = move || {
        let pts = points.get();
        let max = pts.iter().cloned().fold(0.0_f64, f64::max);
        let top = if max <= 0.0 { 1.0 } else { max * 1.15 };
        let step = W / (capacity.max(2) - 1) as f64;
        let offset = capacity.saturating_sub(pts.len()) as f64 * step;
        let coords: Vec<(f64, f64)> = pts
            .iter()
            .enumerate()
            .map(|(i, v)| (offset + i as f64 * step, H - (v / top) * (H - 4.0) - 2.0))
            .collect();
        let line: String = coords
            .iter()
            .enumerate()
            .map(|(i, (x, y))| format!("{}{x:.1},{y:.1}", if i == 0 { "M" } else { " L" }))
            .collect();
        let area = match (coords.first(), coords.last()) {
            (Some(first), Some(last)) => format!("{line} L{:.1},{H} L{:.1},{H} Z", last.0, first.0),
            _ => String::new(),
        };
        (line, area, max)
    };
    let current = move || points.with(|p| p.last().copied());
    view! {
        <figure class="chart">
            <figcaption>
                <span class="chart-label">{label}</span>
                <span class="chart-value">{move || current().map(format).unwrap_or_else(|| "–".into())}</span>
            </figcaption>
            <svg viewBox=format!("0 0 {W} {H}") preserveAspectRatio="none" role="img" aria-label=label>
                <line class="grid" x1="0" y1=H / 2.0 x2=W y2=H / 2.0></line>
                <path class="area" d=move || path().1></path>
                <path class="line" d=move || path().0></path>
            </svg>
            <div class="chart-scale muted">{move || format!("max {}", format(path().2))}</div>
        </figure>
    }
}
