//! The dashboard's static files (built by `dashboard/build.sh` into `dashboard/dist`, or
//! `--dashboard-dir`), served for every GET that is not an API route. Paths without a file
//! extension fall back to `index.html` so the app's own routes (`/models`, `/keys`, ...) load
//! on refresh; API paths keep answering JSON 404s.

use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the dashboard is looked for when no directory is configured (relative to the
/// working directory, which is the repository root for `scripts/run.sh`).
pub const DEFAULT_DIR: &str = "dashboard/dist";

/// Path prefixes that belong to the API: never answered with the dashboard.
const API_PREFIXES: [&str; 4] = ["/api", "/v1", "/v2", "/metrics"];

/// Hashed build outputs live here and never change under the same name.
const IMMUTABLE_DIR: &str = "assets/";

const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

fn is_api(path: &str) -> bool {
    API_PREFIXES.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "wasm" => "application/wasm",
        "css" => "text/css; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// The file for a URL path: `None` for anything that could leave the directory (dot
/// segments, hidden files, backslashes, NUL). Percent-escapes are not decoded, so an encoded
/// `..` is only an odd file name that does not exist.
fn relative_file(path: &str) -> Option<PathBuf> {
    let trimmed = path.trim_start_matches('/');
    if trimmed.is_empty() {
        return Some(PathBuf::from("index.html"));
    }
    let mut out = PathBuf::new();
    for segment in trimmed.split('/') {
        if segment.is_empty()
            || segment.starts_with('.')
            || segment.contains('\\')
            || segment.contains('\0')
        {
            return None;
        }
        out.push(segment);
    }
    Some(out)
}

fn not_found(path: &str) -> Response {
    ApiError::not_found(format!("no route for {path}")).into_response()
}

/// The router's fallback: API 404s stay JSON; everything else is the dashboard.
pub async fn fallback(
    State(state): State<Arc<AppState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let path = uri.path();
    if is_api(path) || (method != Method::GET && method != Method::HEAD) {
        return not_found(path);
    }
    let dir = state
        .config
        .dashboard_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    let Some(relative) = relative_file(path) else {
        return not_found(path);
    };
    let mut file = dir.join(&relative);
    if !file.is_file() {
        // An app route (no extension) loads the app; a missing asset is a 404.
        if relative.extension().is_some() {
            return not_found(path);
        }
        file = dir.join("index.html");
        if !file.is_file() {
            return ApiError::not_found(format!(
                "the dashboard is not built: run dashboard/build.sh, or pass --dashboard-dir (looked in {})",
                dir.display()
            ))
            .into_response();
        }
    }
    serve_file(&file, &relative, &headers).await
}

async fn serve_file(file: &Path, relative: &Path, headers: &HeaderMap) -> Response {
    let accepts_gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let gzipped = {
        let mut name = file.as_os_str().to_owned();
        name.push(".gz");
        PathBuf::from(name)
    };
    let (bytes, encoded) = match accepts_gzip.then(|| gzipped.is_file()) {
        Some(true) => (tokio::fs::read(&gzipped).await, true),
        _ => (tokio::fs::read(file).await, false),
    };
    let bytes = match bytes {
        Ok(b) => b,
        Err(e) => {
            return ApiError::internal(format!("reading {}: {e}", file.display())).into_response()
        }
    };
    let immutable = relative.starts_with(IMMUTABLE_DIR);
    let mut response = (StatusCode::OK, bytes).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(file)),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if encoded {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    if content_type(file).starts_with("text/html") {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths_are_not_the_dashboard() {
        for api in [
            "/api/models",
            "/v2",
            "/v2/models/x",
            "/v1/completions",
            "/metrics",
            "/api",
        ] {
            assert!(is_api(api), "{api}");
        }
        for app in ["/", "/models", "/keys", "/assets/app.js", "/v2x", "/apis"] {
            assert!(!is_api(app), "{app}");
        }
    }

    #[test]
    fn paths_cannot_leave_the_directory() {
        assert_eq!(relative_file("/"), Some(PathBuf::from("index.html")));
        assert_eq!(
            relative_file("/assets/app-1.js"),
            Some(PathBuf::from("assets/app-1.js"))
        );
        for bad in [
            "/../etc/passwd",
            "/assets/../../x",
            "/.git/config",
            "/a//b",
            "/a\\..\\b",
        ] {
            assert_eq!(relative_file(bad), None, "{bad}");
        }
    }

    #[test]
    fn wasm_has_its_content_type() {
        assert_eq!(content_type(Path::new("a/app_bg.wasm")), "application/wasm");
        assert_eq!(
            content_type(Path::new("index.html")),
            "text/html; charset=utf-8"
        );
    }
}
