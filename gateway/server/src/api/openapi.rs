//! `GET /api/openapi.json` (scope `infer`): the OpenAPI 3.1 document of this API
//! (`infergate_api_types::openapi`), built once.

use super::authorized::{Authorized, Infer};
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::HeaderValue;
use std::sync::OnceLock;

pub async fn document(_: Authorized<Infer>) -> Response {
    static TEXT: OnceLock<String> = OnceLock::new();
    let text = TEXT.get_or_init(|| infergate_api_types::openapi::document().to_string());
    (
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        text.as_str(),
    )
        .into_response()
}
