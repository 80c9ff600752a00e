//! The OpenAPI document against the router: every route the server serves is documented or on
//! the document's list of exclusions, and every documented route is served. A route's methods
//! are what the router itself answers: a request with a method no route uses is refused with
//! 405 and an `Allow` header naming the ones it serves.

use http::{Method, StatusCode};
use infergate_api_types::openapi::{document, EXCLUDED};
use std::collections::BTreeSet;
use crate::support::App;

/// `/v2/models/{model}` with every parameter filled in.
fn concrete(template: &str) -> String {
    let mut path = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        path.push_str(&rest[..open]);
        let close = rest[open..].find('}').expect("a closed parameter") + open;
        path.push_str("p1");
        rest = &rest[close + 1..];
    }
    path + rest
}

#[tokio::test]
async fn the_document_names_exactly_the_routes_the_router_serves() {
    let app = App::start().await;
    let probe = Method::from_bytes(b"PROBE").expect("a method");
    let mut served = BTreeSet::new();
    for template in infergate_server::api::route_templates() {
        let reply = app
            .send(probe.clone(), &concrete(template), Some(&app.admin), None)
            .await;
        assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED, "{template}");
        let allow = reply
            .header("allow")
            .unwrap_or_else(|| panic!("{template}: no Allow header"));
        for method in allow.split(',').map(str::trim) {
            // axum answers HEAD wherever it answers GET.
            if method != "HEAD" {
                served.insert(format!("{method} {template}"));
            }
        }
    }
    let doc = document();
    let mut described = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            described.insert(format!("{} {path}", method.to_uppercase()));
        }
    }
    let excluded: BTreeSet<String> = EXCLUDED
        .iter()
        .map(|e| format!("{} {}", e.method, e.path))
        .collect();
    assert!(described.is_disjoint(&excluded), "documented and excluded");
    let undocumented: Vec<_> = served
        .difference(&described)
        .filter(|r| !excluded.contains(*r))
        .collect();
    assert!(
        undocumented.is_empty(),
        "served, but neither in the OpenAPI document nor excluded: {undocumented:?}"
    );
    let unserved: Vec<_> = described
        .union(&excluded)
        .filter(|r| !served.contains(*r))
        .collect();
    assert!(
        unserved.is_empty(),
        "in the OpenAPI document or its exclusions, but not served: {unserved:?}"
    );
}

#[tokio::test]
async fn the_document_is_served_to_any_key_and_to_no_one_without() {
    let app = App::start().await;
    let reply = app.get("/api/openapi.json", Some(&app.infer)).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.json(), document());
    let refused = app.get("/api/openapi.json", None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(!refused.error().is_empty());
}
