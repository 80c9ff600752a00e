//! Cross-origin access for browser clients served from other origins, as configured: none by
//! default; a list of exact origins, or `*` for any origin without credentials. The rules are
//! checked here; the HTTP server builds its CORS layer from the checked [`Origins`].

use serde::Deserialize;

/// Cross-origin access (CORS) for browser clients served from other origins.
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Allowed origins (`https://app.example.com`), or `["*"]` for any; empty = no CORS.
    pub allowed_origins: Vec<String>,
    /// Send `Access-Control-Allow-Credentials: true` (refused with `*`).
    pub allow_credentials: bool,
    /// Seconds a browser may cache a preflight answer (`Access-Control-Max-Age`).
    pub max_age_s: u64,
}

/// The origins a configuration allows, checked.
#[derive(Debug, PartialEq, Eq)]
pub enum Origins<'a> {
    /// No cross-origin access.
    None,
    /// Any origin, without credentials.
    Any,
    /// These origins, each `scheme://host[:port]`.
    List(Vec<&'a str>),
}

impl CorsConfig {
    /// The allowed origins, or an error naming the bad setting.
    pub fn origins(&self) -> Result<Origins<'_>, String> {
        if self.allowed_origins.is_empty() {
            if self.allow_credentials {
                return Err("[cors] allow_credentials needs allowed_origins".into());
            }
            return Ok(Origins::None);
        }
        if self.allowed_origins.iter().any(|o| o == "*") {
            if self.allowed_origins.len() > 1 {
                return Err(
                    "[cors] allowed_origins: \"*\" cannot be combined with other origins".into(),
                );
            }
            if self.allow_credentials {
                return Err(
                    "[cors] allow_credentials cannot be used with allowed_origins = [\"*\"]: list the origins"
                        .into(),
                );
            }
            return Ok(Origins::Any);
        }
        self.allowed_origins
            .iter()
            .map(|o| check_origin(o))
            .collect::<Result<Vec<_>, _>>()
            .map(Origins::List)
    }
}

/// An origin is `scheme://host[:port]`, exactly as browsers send it: no path, no trailing
/// slash.
fn check_origin(origin: &str) -> Result<&str, String> {
    let (scheme, rest) = origin.split_once("://").unwrap_or(("", ""));
    let ok = matches!(scheme, "http" | "https")
        && !rest.is_empty()
        && rest
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    if ok {
        Ok(origin)
    } else {
        Err(format!(
            "[cors] allowed_origins: '{origin}' is not an origin like https://app.example.com"
        ))
    }
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
        assert_eq!(CorsConfig::default().origins(), Ok(Origins::None));
        assert_eq!(config(&["*"], false).origins(), Ok(Origins::Any));
        assert!(config(&["*"], true)
            .origins()
            .unwrap_err()
            .contains("allow_credentials"));
        assert!(config(&["*", "https://a.example"], false)
            .origins()
            .is_err());
        assert_eq!(
            config(&["https://a.example", "http://localhost:3000"], true).origins(),
            Ok(Origins::List(vec![
                "https://a.example",
                "http://localhost:3000"
            ]))
        );
        for bad in [
            "a.example",
            "https://a.example/",
            "https://a.example/path",
            "ftp://a",
            "https://",
        ] {
            assert!(config(&[bad], false).origins().is_err(), "{bad}");
        }
        assert!(config(&[], true).origins().is_err());
    }
}
