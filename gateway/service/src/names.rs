//! Names and versions as requests carry them: model, pipeline and plugin names (checked once,
//! here, for every path and upload) and version path segments. A bad one is the client's (400).

use crate::error::{ApiError, ApiResult};

/// Parses a version path segment.
pub fn parse_version(v: &str) -> ApiResult<u64> {
    v.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "model version must be a positive integer, got '{v}'"
        ))
    })
}

/// Names of models, pipelines and plugins (see [`infergate_protocol::names`]); a bad one is a
/// 400.
pub fn validate_name(kind: &str, name: &str) -> ApiResult<()> {
    Ok(infergate_protocol::names::check(kind, name)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_reject_traversal_and_control_characters() {
        for good in ["ocr", "mini-lm_v2", "a.b"] {
            validate_name("model", good).unwrap();
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "a/b",
            "a\\b",
            "a\nb",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(validate_name("model", bad).is_err(), "{bad:?}");
        }
    }
}
