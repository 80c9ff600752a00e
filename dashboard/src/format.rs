//! Numbers and times as people read them.

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit < UNITS.len() - 1 {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// "3 min ago" for a Unix time in seconds.
pub fn ago(unix_s: i64) -> String {
    let secs = (now_ms() / 1000.0) as i64 - unix_s;
    match secs {
        s if s < 5 => "just now".into(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86400 => format!("{} h ago", s / 3600),
        s => format!("{} days ago", s / 86400),
    }
}

/// The local date and time for a Unix time in seconds.
pub fn date(unix_s: i64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(unix_s as f64 * 1000.0));
    String::from(d.to_locale_string("en-GB", &wasm_bindgen::JsValue::UNDEFINED))
}

/// The local time of day, "17:35:02", for a Unix time in milliseconds.
pub fn clock(unix_ms: f64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(unix_ms));
    format!(
        "{:02}:{:02}:{:02}",
        d.get_hours(),
        d.get_minutes(),
        d.get_seconds()
    )
}

pub fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

pub fn rate(v: f64) -> String {
    if v > 0.0 && v < 0.1 {
        format!("{v:.2}/s")
    } else if v >= 100.0 {
        format!("{v:.0}/s")
    } else {
        format!("{v:.1}/s")
    }
}

pub fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

/// "now", "1.4 s ago", "3 min ago" for an age in milliseconds.
pub fn age_ms(ms: u64) -> String {
    match ms {
        0..=499 => "now".into(),
        500..=9_999 => format!("{:.1} s ago", ms as f64 / 1000.0),
        10_000..=59_999 => format!("{} s ago", ms / 1000),
        60_000..=3_599_999 => format!("{} min ago", ms / 60_000),
        _ => format!("{} h ago", ms / 3_600_000),
    }
}
