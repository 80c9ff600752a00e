//! Cross-origin resource sharing for browser clients served from other origins: none by
//! default; a list of exact origins, or `*` for any origin without credentials. Preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) is answered here, before authentication,
//! as browsers send it without the API key.

use http::{header, HeaderName, HeaderValue, Method};
use serde::Deserialize;
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Cross-origin access for browser clients on other origins.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Allowed origins (`https://app.example.com`), or `["*"]` for any; empty = no CORS.
    pub allowed_origins: Vec<String>,
    /// Send `Access-Control-Allow-Credentials: true` (refused with `*`).
    pub allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer.
    pub max_age_s: u64,
}

/// Request headers a browser client may send.
const ALLOWED_HEADERS: [HeaderName; 5] = [
    header::AUTHORIZATION,
    header::CONTENT_TYPE,
    HeaderName::from_static("x-api-key"),
    HeaderName::from_static("x-request-id"),
    HeaderName::from_static(infergate_protocol::kserve::HEADER_LENGTH),
];

/// Response headers a browser client may read.
const EXPOSED_HEADERS: [HeaderName; 5] = [
    HeaderName::from_static("x-request-id"),
    header::RETRY_AFTER,
    HeaderName::from_static("ratelimit"),
    HeaderName::from_static("ratelimit-policy"),
    HeaderName::from_static(infergate_protocol::kserve::HEADER_LENGTH),
];

/// The CORS layer for `config`, None when no origin is allowed. Errors name the bad setting.
pub fn layer(config: &CorsConfig) -> Result<Option<CorsLayer>, String> {
    if config.allowed_origins.is_empty() {
        if config.allow_credentials {
            return Err("[cors] allow_credentials needs allowed_origins".into());
        }
        return Ok(None);
    }
    let wildcard = config.allowed_origins.iter().any(|o| o == "*");
    let origin = if wildcard {
        if config.allowed_origins.len() > 1 {
            return Err(
                "[cors] allowed_origins: \"*\" cannot be combined with other origins".into(),
            );
        }
        if config.allow_credentials {
            return Err(
                "[cors] allow_credentials cannot be used with allowed_origins = [\"*\"]: list the origins"
                    .into(),
            );
        }
        AllowOrigin::any()
    } else {
        let origins = config
            .allowed_origins
            .iter()
            .map(|o| parse_origin(o))
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(origins)
    };
    let mut layer = CorsLayer::new()
        .allow_origin(origin)
        .allow_methods([
            Method::GET,
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers(ALLOWED_HEADERS)
        .expose_headers(EXPOSED_HEADERS)
        .max_age(Duration::from_secs(config.max_age_s));
    if config.allow_credentials {
        layer = layer.allow_credentials(true);
    }
    Ok(Some(layer))
}

/// An origin is `scheme://host[:port]`, exactly as browsers send it: no path, no trailing
/// slash.
fn parse_origin(origin: &str) -> Result<HeaderValue, String> {
    let bad = || {
        format!("[cors] allowed_origins: '{origin}' is not an origin like https://app.example.com")
    };
    let (scheme, rest) = origin.split_once("://").ok_or_else(bad)?;
    let ok = matches!(scheme, "http" | "https")
        && !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if !ok {
        return Err(bad());
    }
    HeaderValue::from_str(origin).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(origins: &[&str], credentials: bool) -> CorsConfig {
        CorsConfig {
            allowed_origins: origins.iter().map(|s| s.to_string()).collect(),
            allow_credentials: credentials,
            max_age_s: 600,
        }
    }

    #[test]
    fn none_by_default_and_wildcard_never_with_credentials() {
        assert!(layer(&CorsConfig::default()).unwrap().is_none());
        assert!(layer(&config(&["*"], false)).unwrap().is_some());
        assert!(layer(&config(&["*"], true))
            .unwrap_err()
            .contains("allow_credentials"));
        assert!(layer(&config(&["*", "https://a.example"], false)).is_err());
        assert!(layer(&config(
            &["https://a.example", "http://localhost:3000"],
            true
        ))
        .unwrap()
        .is_some());
        for bad in [
            "a.example",
            "https://a.example/",
            "https://a.example/path",
            "ftp://a",
            "https://",
        ] {
            assert!(layer(&config(&[bad], false)).is_err(), "{bad}");
        }
        assert!(layer(&config(&[], true)).is_err());
    }
}
