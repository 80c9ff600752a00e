//! Triton's trace extension in process: the server-wide settings and a model's overrides read
//! and changed over HTTP and gRPC, field by field, cleared with `null` (an empty value over
//! gRPC); refusals in Triton's words that change nothing; reading needs `infer`, changing
//! `admin`. The settings are the process's: one test changes them, the others only read or
//! are refused.

use crate::support::App;
use http::StatusCode;
use infergate_kserve::proto::trace_setting_request::SettingValue;
use infergate_kserve::proto::{TraceSettingRequest, TraceSettingResponse};
use serde_json::{json, Value};
use std::collections::HashMap;

const GLOBAL: &str = "/v2/trace/setting";
const TINY: &str = "/v2/models/tiny/trace/setting";

async fn post(app: &App, path: &str, body: Value) -> Value {
    let reply = app.post(path, Some(&app.admin), body).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.json()
}

async fn get(app: &App, path: &str) -> Value {
    let reply = app.get(path, Some(&app.infer)).await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    reply.json()
}

fn grpc_request(model: &str, settings: &[(&str, &[&str])]) -> TraceSettingRequest {
    TraceSettingRequest {
        model_name: model.into(),
        settings: settings
            .iter()
            .map(|(name, values)| {
                let value = values.iter().map(|v| v.to_string()).collect();
                (name.to_string(), SettingValue { value })
            })
            .collect(),
    }
}

async fn grpc(
    app: &App,
    key: &str,
    request: &TraceSettingRequest,
) -> crate::support::grpc::GrpcReply {
    let bearer = format!("Bearer {key}");
    app.grpc_call(
        "TraceSetting",
        request,
        &[("authorization", bearer.as_str())],
        None,
    )
    .await
}

fn flat(answer: &TraceSettingResponse) -> HashMap<String, Vec<String>> {
    answer
        .settings
        .iter()
        .map(|(name, value)| (name.clone(), value.value.clone()))
        .collect()
}

#[tokio::test]
async fn a_models_settings_override_the_server_wide_ones_field_by_field() {
    let app = App::start().await;
    let start = get(&app, GLOBAL).await;
    assert_eq!(start["trace_mode"], "opentelemetry");
    for field in ["trace_rate", "trace_count"] {
        assert!(start[field].is_string(), "{field} is a string: {start}");
    }
    assert!(start["trace_level"].is_array());

    let global = post(
        &app,
        GLOBAL,
        json!({"trace_level": ["TIMESTAMPS"], "trace_rate": "10"}),
    )
    .await;
    assert_eq!(global["trace_rate"], "10");
    assert_eq!(global["trace_level"], json!(["TIMESTAMPS"]));
    assert_eq!(
        get(&app, TINY).await,
        global,
        "no override: the server-wide ones"
    );

    let tiny = post(
        &app,
        TINY,
        json!({"trace_level": ["OFF"], "trace_count": "5"}),
    )
    .await;
    assert_eq!(tiny["trace_level"], json!(["OFF"]));
    assert_eq!(tiny["trace_count"], "5");
    assert_eq!(
        tiny["trace_rate"], "10",
        "the rate follows the server-wide one"
    );
    assert_eq!(
        get(&app, GLOBAL).await["trace_level"],
        json!(["TIMESTAMPS"])
    );

    // A server-wide change reaches the fields the model does not set, and only those.
    post(&app, GLOBAL, json!({"trace_rate": "20"})).await;
    let tiny = get(&app, TINY).await;
    assert_eq!(
        (&tiny["trace_rate"], &tiny["trace_level"]),
        (&json!("20"), &json!(["OFF"]))
    );

    // null clears one override; the others stay.
    let tiny = post(&app, TINY, json!({"trace_level": null})).await;
    assert_eq!(tiny["trace_level"], json!(["TIMESTAMPS"]));
    assert_eq!(tiny["trace_count"], "5");

    // gRPC reads and changes the same settings; an empty value clears.
    let set = grpc(
        &app,
        &app.admin,
        &grpc_request(
            "tiny",
            &[
                ("trace_rate", &["3"]),
                ("trace_level", &["TENSORS", "TIMESTAMPS"]),
            ],
        ),
    )
    .await;
    let set = flat(&set.decode());
    assert_eq!(set["trace_rate"], ["3"]);
    assert_eq!(set["trace_level"], ["TIMESTAMPS", "TENSORS"]);
    assert_eq!(set["trace_mode"], ["opentelemetry"]);
    let read = grpc(&app, &app.infer, &grpc_request("tiny", &[])).await;
    assert_eq!(flat(&read.decode()), set);
    assert_eq!(get(&app, TINY).await["trace_rate"], "3", "HTTP sees it");
    let cleared = grpc(
        &app,
        &app.admin,
        &grpc_request(
            "tiny",
            &[
                ("trace_rate", &[]),
                ("trace_level", &[]),
                ("trace_count", &[]),
            ],
        ),
    )
    .await;
    assert_eq!(flat(&cleared.decode())["trace_rate"], ["20"]);
    assert_eq!(
        get(&app, TINY).await,
        get(&app, GLOBAL).await,
        "no override left"
    );

    // Cleared server-wide settings return to their values at startup.
    let back = post(
        &app,
        GLOBAL,
        json!({"trace_level": null, "trace_rate": null, "trace_count": null}),
    )
    .await;
    assert_eq!(back, start);
}

#[tokio::test]
async fn refusals_are_in_tritons_words_and_change_nothing() {
    let app = App::start().await;
    let refusals = [
        (
            json!({"trace_rate": "abc"}),
            "Unable to parse 'trace_rate', got: abc",
        ),
        (
            json!({"trace_rate": "-1"}),
            "Unable to parse 'trace_rate', value is out of range [ 0, 4294967295 ], got: -1",
        ),
        (
            json!({"trace_count": "-2"}),
            "Unable to parse 'trace_count'. Expecting value >= -1, got: -2",
        ),
        (
            json!({"trace_count": "3000000000"}),
            "Unable to parse 'trace_count', value is out of range [ -1, 2147483647 ]",
        ),
        (
            json!({"log_frequency": "often"}),
            "Unable to parse 'log_frequency', got: often",
        ),
        (
            json!({"trace_level": ["OFF", "TIMESTAMPS"]}),
            "Expect only one trace level 'OFF' is specified",
        ),
        (
            json!({"trace_level": ["LOUD"]}),
            "Unable to parse 'trace_level', got: LOUD",
        ),
        (
            json!({"trace_rate": "7", "trace_file": "/tmp/trace.json"}),
            "trace file location can not be updated through network protocol",
        ),
        (json!({"trace_mode": "triton"}), "OpenTelemetry traces only"),
        (
            json!({"trace_colour": "red"}),
            "unknown trace setting 'trace_colour'",
        ),
        (
            json!({"trace_rate": {"n": 1}}),
            "Unable to parse 'trace_rate': expected a string",
        ),
        (json!(["trace_rate"]), "not a JSON object"),
    ];
    for (body, wording) in refusals {
        for path in [GLOBAL, TINY] {
            let reply = app.post(path, Some(&app.admin), body.clone()).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{body}");
            assert!(reply.error().contains(wording), "{body}: {}", reply.error());
        }
    }
    assert_ne!(
        get(&app, GLOBAL).await["trace_rate"],
        "7",
        "a refused change changes nothing"
    );

    let unknown = app
        .get("/v2/models/nope/trace/setting", Some(&app.infer))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert_eq!(unknown.error(), "Request for unknown model : nope");

    let two = grpc(
        &app,
        &app.admin,
        &grpc_request("", &[("trace_rate", &["1", "2"])]),
    )
    .await;
    assert_eq!(two.code, tonic::Code::InvalidArgument);
    assert_eq!(two.message, "expect only 1 value for 'trace_rate'");
    let unknown = grpc(&app, &app.infer, &grpc_request("nope", &[])).await;
    assert_eq!(unknown.code, tonic::Code::InvalidArgument);
    assert_eq!(unknown.message, "Request for unknown model : nope");
}

#[tokio::test]
async fn reading_needs_an_infer_key_and_changing_an_admin_key() {
    let app = App::start().await;
    assert_eq!(app.get(GLOBAL, None).await.status, StatusCode::UNAUTHORIZED);
    for path in [GLOBAL, TINY] {
        assert_eq!(app.get(path, Some(&app.infer)).await.status, StatusCode::OK);
        for key in [&app.infer, &app.upload] {
            let refused = app.post(path, Some(key), json!({})).await;
            assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
        }
        let empty = app.post(path, Some(&app.admin), json!({})).await;
        assert_eq!(
            empty.status,
            StatusCode::OK,
            "an empty change changes nothing"
        );
    }
    let change = grpc_request("", &[("trace_rate", &["9"])]);
    let refused = grpc(&app, &app.infer, &change).await;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied,
        "{}",
        refused.message
    );
    let read = grpc(&app, &app.infer, &grpc_request("", &[])).await;
    assert_ne!(flat(&read.decode())["trace_rate"], ["9"]);
}
