//! Structured logging through the host; records are tagged with the plugin's
//! name and version, and capped per call.

use crate::__bindings::infergate::plugin::log::log as host_log;
pub use crate::__bindings::infergate::plugin::log::Level;

/// Logs `message` with key/value `fields` at `level`.
pub fn log(level: Level, message: &str, fields: &[(&str, &str)]) {
    let fields: Vec<(String, String)> = fields
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    host_log(level, message, &fields);
}

pub fn debug(message: &str) {
    log(Level::Debug, message, &[]);
}

pub fn info(message: &str) {
    log(Level::Info, message, &[]);
}

pub fn warn(message: &str) {
    log(Level::Warn, message, &[]);
}

pub fn error(message: &str) {
    log(Level::Error, message, &[]);
}
