//! A `payload_log` setting: `{"mode": "request" | "response" | "all", "sample": 0.1, "sink":
//! "NAME"}`, kept in a model's or a pipeline's settings (it survives new uploads) or on an API
//! key, and checked against the sinks the operator defined when it is set.

use serde::{Deserialize, Serialize};

/// What an entry holds of the exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Request,
    Response,
    All,
}

impl Mode {
    pub fn request(self) -> bool {
        matches!(self, Mode::Request | Mode::All)
    }

    pub fn response(self) -> bool {
        matches!(self, Mode::Response | Mode::All)
    }

    /// What two settings logging to one sink hold together: `request` and `response` make
    /// `all`.
    pub fn wider(self, other: Mode) -> Mode {
        if self == other {
            self
        } else {
            Mode::All
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSetting {
    pub mode: Mode,
    /// The share of requests logged, 0 to 1.
    #[serde(default = "one")]
    pub sample: f64,
    /// A sink the server defines (`[payload_log.sinks]`, or one an admin defined since).
    pub sink: String,
}

fn one() -> f64 {
    1.0
}

impl LogSetting {
    /// Parses `json` and checks it against `sinks` (the names the operator defined); the error
    /// names the field.
    pub fn parse<'a>(
        json: &[u8],
        mut sinks: impl Iterator<Item = &'a String>,
    ) -> Result<LogSetting, String> {
        let setting: LogSetting = super::config::from_json(json)?;
        if !(0.0..=1.0).contains(&setting.sample) {
            return Err(format!("sample: between 0 and 1, got {}", setting.sample));
        }
        if !sinks.any(|s| *s == setting.sink) {
            return Err(format!(
                "sink: '{}' is not a sink this server defines",
                setting.sink
            ));
        }
        Ok(setting)
    }

    /// A stored setting (checked against the sinks when it was set; a sink this server does
    /// not define makes the model log nothing here).
    pub fn from_stored(value: &serde_json::Value) -> Result<LogSetting, String> {
        LogSetting::deserialize(value).map_err(|e| e.to_string())
    }

    /// Whether this request is logged: a draw against `sample`.
    pub fn draw(&self) -> bool {
        self.sample >= 1.0 || (self.sample > 0.0 && rand::random::<f64>() < self.sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_names_a_defined_sink_and_a_share() {
        let sinks = ["audit".to_string()];
        let ok = LogSetting::parse(
            br#"{"mode": "all", "sample": 0.25, "sink": "audit"}"#,
            sinks.iter(),
        )
        .expect("valid");
        assert_eq!((ok.mode, ok.sample), (Mode::All, 0.25));
        let whole = LogSetting::parse(br#"{"mode": "request", "sink": "audit"}"#, sinks.iter())
            .expect("sample defaults to every request");
        assert!(whole.draw());
        for (bad, field) in [
            (r#"{"mode": "all", "sink": "elsewhere"}"#, "sink"),
            (
                r#"{"mode": "all", "sample": 1.5, "sink": "audit"}"#,
                "sample",
            ),
            (r#"{"mode": "everything", "sink": "audit"}"#, "mode"),
            (
                r#"{"mode": "all", "sink": "audit", "url": "http://x"}"#,
                "url",
            ),
        ] {
            let e = LogSetting::parse(bad.as_bytes(), sinks.iter()).expect_err("refused");
            assert!(e.contains(field), "{e}");
        }
    }
}
