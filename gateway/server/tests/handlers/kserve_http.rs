//! KServe v2 over HTTP, in process: keys and scopes, statuses and error bodies, a real
//! inference on the tiny model, and the request phases policies attach to.

use futures_util::future::BoxFuture;
use http::StatusCode;
use infergate_engine::Tensor;
use infergate_service::error::{ApiError, ApiResult, Kind};
use infergate_service::phases::{Exchange, Hook, Outcome, Policy};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::sync::Arc;
use crate::support::App;

fn ones() -> Vec<f32> {
    vec![1.5; 16]
}

#[tokio::test]
async fn an_inference_answers_the_model_output_and_names_the_version() {
    let app = App::start().await;
    let reply = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{:?}", reply.body);
    let answer = reply.json();
    assert_eq!(answer["model_name"], "tiny");
    assert_eq!(answer["model_version"], "1");
    assert_eq!(answer["outputs"][0]["name"], "y");
    assert_eq!(answer["outputs"][0]["data"], json!(vec![3.0; 16]));
    assert!(reply
        .header("x-request-id")
        .is_some_and(|id| !id.is_empty()));
}

#[tokio::test]
async fn keys_and_scopes_are_checked_with_json_errors() {
    let app = App::start().await;
    let body = App::tiny_request(&ones());
    let missing = app.post("/v2/models/tiny/infer", None, body.clone()).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert!(
        missing.error().contains("missing API key"),
        "{}",
        missing.error()
    );

    let forged = app
        .post(
            "/v2/models/tiny/infer",
            Some("ig_0123456789ab_nope"),
            body.clone(),
        )
        .await;
    assert_eq!(forged.status, StatusCode::UNAUTHORIZED);
    assert_eq!(forged.error(), "invalid or revoked API key");

    let upload_only = app
        .post("/v2/models/tiny/infer", Some(&app.upload), body)
        .await;
    assert_eq!(upload_only.status, StatusCode::FORBIDDEN);
    assert!(
        upload_only.error().contains("lacks the 'infer' scope"),
        "{}",
        upload_only.error()
    );
    let keys = app.get("/api/keys", Some(&app.infer)).await;
    assert_eq!(keys.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn unknown_models_and_bad_inputs_are_the_clients_fault() {
    let app = App::start().await;
    let unknown = app
        .post(
            "/v2/models/nope/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(unknown.error().contains("nope"), "{}", unknown.error());

    let wrong_shape = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(&[1.0; 3]),
        )
        .await;
    assert_eq!(wrong_shape.status, StatusCode::BAD_REQUEST);
    assert!(
        wrong_shape.error().contains("shape"),
        "{}",
        wrong_shape.error()
    );

    let not_json = app
        .call(
            http::Request::post("/v2/models/tiny/infer")
                .header("authorization", format!("Bearer {}", app.infer))
                .body(axum::body::Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    assert!(!not_json.error().is_empty());

    let bad_version = app
        .post(
            "/v2/models/tiny/versions/x/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(bad_version.status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn health_needs_no_key_and_metadata_needs_one() {
    let app = App::start().await;
    assert_eq!(
        app.get("/v2/health/live", None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.get("/v2/health/ready", None).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.get("/v2/models/tiny", None).await.status,
        StatusCode::UNAUTHORIZED
    );
    let metadata = app.get("/v2/models/tiny", Some(&app.infer)).await;
    assert_eq!(metadata.status, StatusCode::OK);
    let metadata = metadata.json();
    assert_eq!(metadata["inputs"][0]["name"], "x");
    assert_eq!(metadata["inputs"][0]["datatype"], "FP32");
}

/// Records the phases it sees; refuses, or answers in the model's place, when told to.
struct Recorder {
    log: Arc<Mutex<Vec<String>>>,
    refuse: bool,
    answer: bool,
}

struct RecorderHook {
    log: Arc<Mutex<Vec<String>>>,
    answer: bool,
}

impl Policy for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn admit<'a>(
        &'a self,
        exchange: &'a Exchange<'a>,
    ) -> BoxFuture<'a, ApiResult<Option<Box<dyn Hook>>>> {
        Box::pin(async move {
            self.log.lock().push(format!(
                "admission: caller {} with {} input(s)",
                exchange.caller.key().map_or("-", |k| k.name.as_str()),
                exchange.inputs.len()
            ));
            if self.refuse {
                return Err(ApiError::new(Kind::RateLimited, "the recorder refuses"));
            }
            Ok(Some(Box::new(RecorderHook {
                log: self.log.clone(),
                answer: self.answer,
            }) as Box<dyn Hook>))
        })
    }
}

impl Hook for RecorderHook {
    fn before_model(&mut self) -> Option<Vec<Tensor>> {
        self.log.lock().push("before".into());
        self.answer
            .then(|| vec![Tensor::from_f32("y", vec![1, 16], &[7.0; 16]).expect("tensor")])
    }

    fn after_model(&mut self, outputs: &[Tensor]) {
        self.log.lock().push(format!("after: {}", outputs[0].name));
    }

    fn answer_sent(self: Box<Self>, outcome: Outcome) {
        self.log.lock().push(format!("sent: {outcome:?}"));
    }
}

fn recorder(log: &Arc<Mutex<Vec<String>>>, refuse: bool, answer: bool) -> Arc<dyn Policy> {
    Arc::new(Recorder {
        log: log.clone(),
        refuse,
        answer,
    })
}

#[tokio::test]
async fn a_policy_sees_every_phase_of_an_http_inference() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let app = App::with_policies(vec![recorder(&log, false, false)]).await;
    let reply = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        *log.lock(),
        [
            "admission: caller infer with 1 input(s)",
            "before",
            "after: y",
            "sent: Sent"
        ]
    );
}

#[tokio::test]
async fn a_policy_may_answer_in_the_models_place_or_refuse() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let app = App::with_policies(vec![recorder(&log, false, true)]).await;
    let reply = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.json()["outputs"][0]["data"], json!(vec![7.0; 16]));
    let stats = app
        .get("/v2/models/tiny/stats", Some(&app.infer))
        .await
        .json();
    assert_eq!(stats["model_stats"][0]["inference_count"], 0, "{stats}");

    let log = Arc::new(Mutex::new(Vec::new()));
    let app = App::with_policies(vec![recorder(&log, true, false)]).await;
    let refused = app
        .post(
            "/v2/models/tiny/infer",
            Some(&app.infer),
            App::tiny_request(&ones()),
        )
        .await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.json(),
        json!({"error": "the recorder refuses"}) as Value
    );
}
