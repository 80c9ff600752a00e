//! Cross-origin resource sharing for browser clients served from other origins, from the
//! checked configuration (`infergate_service::cors`). Preflight
//! (`OPTIONS` with `Access-Control-Request-Method`) is answered here, before authentication,
//! as browsers send it without the API key.

use http::{header, HeaderName, HeaderValue, Method};
use infergate_service::cors::{CorsConfig, Origins};
use std::time::Duration;
use tower_http::cors::{AllowOrigin, CorsLayer};

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
    let origin = match config.origins()? {
        Origins::None => return Ok(None),
        Origins::Any => AllowOrigin::any(),
        Origins::List(origins) => AllowOrigin::list(
            origins
                .into_iter()
                .map(|o| {
                    HeaderValue::from_str(o)
                        .map_err(|_| format!("[cors] allowed_origins: '{o}' is not a header value"))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_only_where_origins_are_allowed() {
        assert!(layer(&CorsConfig::default()).unwrap().is_none());
        let config = CorsConfig {
            allowed_origins: vec!["https://a.example".into()],
            allow_credentials: true,
            max_age_s: 600,
        };
        assert!(layer(&config).unwrap().is_some());
        let bad = CorsConfig {
            allowed_origins: vec!["https://a.example/".into()],
            ..CorsConfig::default()
        };
        assert!(layer(&bad).is_err());
    }
}
