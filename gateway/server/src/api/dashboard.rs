//! The dashboard's static files, served for every GET that is not an API route: the files
//! `dashboard/build.sh` wrote into `dashboard/dist`, embedded in the binary at compile time
//! (build.rs), so the server needs no files beside it whatever its working directory; or a
//! directory given with `--dashboard-dir`, read from disk on each request. Paths without a
//! file extension fall back to `index.html` so the app's own routes (`/models`, `/keys`, ...)
//! load on refresh; API paths keep answering JSON 404s.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use infergate_kserve::http_error::HttpError;
use infergate_service::error::ApiError;
use infergate_service::state::AppState;
use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

/// `FILES`: `(path relative to dashboard/dist, contents)`, sorted by path; empty when the
/// dashboard was not built before the gateway.
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/dashboard_files.rs"));
}

/// Path prefixes that belong to the API: never answered with the dashboard.
const API_PREFIXES: [&str; 4] = ["/api", "/v1", "/v2", "/metrics"];

/// Hashed build outputs live here and never change under the same name.
const IMMUTABLE_DIR: &str = "assets/";

const INDEX: &str = "index.html";

const CSP: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// Where the dashboard's files come from.
enum Files<'a> {
    Embedded(&'static [(&'static str, &'static [u8])]),
    Dir(&'a Path),
}

impl Files<'_> {
    fn has(&self, relative: &str) -> bool {
        match self {
            Files::Embedded(files) => embedded_file(files, relative).is_some(),
            Files::Dir(dir) => dir.join(relative).is_file(),
        }
    }

    async fn read(&self, relative: &str) -> Result<Cow<'static, [u8]>, ApiError> {
        match self {
            Files::Embedded(files) => embedded_file(files, relative)
                .map(Cow::Borrowed)
                .ok_or_else(|| ApiError::internal(format!("{relative} is not embedded"))),
            Files::Dir(dir) => {
                let file = dir.join(relative);
                tokio::fs::read(&file)
                    .await
                    .map(Cow::Owned)
                    .map_err(|e| ApiError::internal(format!("reading {}: {e}", file.display())))
            }
        }
    }

    /// Said when there is no `index.html` to serve: the operator's setup, not the client.
    fn not_built(&self) -> ApiError {
        ApiError::unavailable(match self {
            Files::Embedded(_) => "the dashboard is not built into this binary: run `bash \
                dashboard/build.sh` before building infergate, or pass --dashboard-dir"
                .to_string(),
            Files::Dir(dir) => format!(
                "the dashboard is not built: no index.html in --dashboard-dir {} (run \
                 dashboard/build.sh)",
                dir.display()
            ),
        })
    }
}

fn embedded_file(
    files: &'static [(&'static str, &'static [u8])],
    relative: &str,
) -> Option<&'static [u8]> {
    files
        .binary_search_by(|(name, _)| (*name).cmp(relative))
        .ok()
        .map(|i| files[i].1)
}

fn is_api(path: &str) -> bool {
    API_PREFIXES.iter().any(|p| {
        path.strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

fn extension(name: &str) -> Option<&str> {
    Path::new(name).extension().and_then(|e| e.to_str())
}

fn content_type(name: &str) -> &'static str {
    match extension(name).unwrap_or("") {
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

/// The file for a URL path, relative to the dashboard's root with `/` separators: `None` for
/// anything that could leave the directory (dot segments, hidden files, backslashes, NUL).
/// Percent-escapes are not decoded, so an encoded `..` is only an odd file name that does not
/// exist.
fn relative_file(path: &str) -> Option<String> {
    let trimmed = path.trim_start_matches('/');
    if trimmed.is_empty() {
        return Some(INDEX.to_string());
    }
    let bad = |segment: &str| {
        segment.is_empty()
            || segment.starts_with('.')
            || segment.contains('\\')
            || segment.contains('\0')
    };
    (!trimmed.split('/').any(bad)).then(|| trimmed.to_string())
}

fn not_found(path: &str) -> ApiError {
    ApiError::not_found(format!("no route for {path}"))
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
        return HttpError(not_found(path)).into_response();
    }
    let files = match state.config().dashboard_dir.as_deref() {
        Some(dir) => Files::Dir(dir),
        None => Files::Embedded(embedded::FILES),
    };
    let Some(relative) = relative_file(path) else {
        return HttpError(not_found(path)).into_response();
    };
    let served = match choose(&files, relative, path) {
        Ok(file) => serve_file(&files, &file, &headers).await,
        Err(e) => Err(e),
    };
    served.unwrap_or_else(|e| HttpError(e).into_response())
}

/// The file that answers `relative`: itself, `index.html` for an app route (no extension), a
/// 404 for a missing asset, a 503 when there is no dashboard at all.
fn choose(files: &Files<'_>, relative: String, path: &str) -> Result<String, ApiError> {
    if files.has(&relative) {
        return Ok(relative);
    }
    if !files.has(INDEX) {
        return Err(files.not_built());
    }
    if extension(&relative).is_some() {
        return Err(not_found(path));
    }
    Ok(INDEX.to_string())
}

async fn serve_file(
    files: &Files<'_>,
    relative: &str,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let accepts_gzip = headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let gzipped = format!("{relative}.gz");
    let encoded = accepts_gzip && files.has(&gzipped);
    let bytes = files
        .read(if encoded { &gzipped } else { relative })
        .await?;
    let immutable = relative.starts_with(IMMUTABLE_DIR);
    let mut response = (StatusCode::OK, bytes).into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(content_type(relative)),
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
    if content_type(relative).starts_with("text/html") {
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
    Ok(response)
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
        assert_eq!(relative_file("/"), Some("index.html".to_string()));
        assert_eq!(
            relative_file("/assets/app-1.js"),
            Some("assets/app-1.js".to_string())
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
        assert_eq!(content_type("a/app_bg.wasm"), "application/wasm");
        assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
    }

    #[test]
    fn embedded_files_are_found_by_exact_path() {
        static FILES: &[(&str, &[u8])] = &[
            ("assets/app.js", b"js"),
            ("index.html", b"<html>"),
            ("index.html.gz", b"gz"),
        ];
        assert_eq!(embedded_file(FILES, "index.html"), Some(&b"<html>"[..]));
        assert_eq!(embedded_file(FILES, "assets/app.js"), Some(&b"js"[..]));
        assert_eq!(embedded_file(FILES, "assets"), None);
        assert_eq!(embedded_file(FILES, "app.js"), None);
        let files = Files::Embedded(FILES);
        let pick = |relative: &str| choose(&files, relative.to_string(), relative);
        assert_eq!(pick("assets/app.js").unwrap(), "assets/app.js");
        assert_eq!(pick("keys").unwrap(), INDEX);
        assert_eq!(
            infergate_kserve::http_error::status(&pick("assets/gone.js").unwrap_err()),
            StatusCode::NOT_FOUND
        );
    }

    /// A binary compiled before `dashboard/build.sh` ran embeds nothing: every dashboard path
    /// is a 503 that says what to run, never a 404 that looks like a wrong URL.
    #[test]
    fn an_empty_embedding_says_the_dashboard_was_not_built() {
        let files = Files::Embedded(&[]);
        for relative in [INDEX, "keys", "assets/app.js"] {
            let e = choose(&files, relative.to_string(), relative).unwrap_err();
            assert_eq!(
                infergate_kserve::http_error::status(&e),
                StatusCode::SERVICE_UNAVAILABLE,
                "{relative}"
            );
            assert!(e.message.contains("dashboard/build.sh"), "{}", e.message);
        }
    }
}
