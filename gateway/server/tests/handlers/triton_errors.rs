//! Triton's error texts where its clients match them, over HTTP and gRPC, with infergate's own
//! detail after them: unknown model and version, wrong input count or name, datatype, shape.

use http::StatusCode;
use infergate_kserve::proto::model_infer_request::InferInputTensor;
use infergate_kserve::proto::ModelInferRequest;
use serde_json::json;
use crate::support::App;

fn tiny_grpc(model: &str, version: &str, name: &str, shape: Vec<i64>) -> ModelInferRequest {
    let count: i64 = shape.iter().product();
    ModelInferRequest {
        model_name: model.into(),
        model_version: version.into(),
        inputs: vec![InferInputTensor {
            name: name.into(),
            datatype: "FP32".into(),
            shape,
            ..Default::default()
        }],
        raw_input_contents: vec![vec![0; 4 * count as usize]],
        ..Default::default()
    }
}

#[tokio::test]
async fn unknown_models_and_versions_say_so_as_triton_does() {
    let app = App::start().await;
    let key = Some(app.infer.as_str());
    let unknown = app
        .post("/v2/models/nope/infer", key, App::tiny_request(&[1.0; 16]))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert!(
        unknown
            .error()
            .starts_with("Request for unknown model: 'nope' is not found"),
        "{}",
        unknown.error()
    );
    let version = app
        .post(
            "/v2/models/tiny/versions/7/infer",
            key,
            App::tiny_request(&[1.0; 16]),
        )
        .await;
    assert_eq!(version.status, StatusCode::NOT_FOUND);
    assert!(
        version
            .error()
            .starts_with("Request for unknown model: 'tiny' version 7 is not found"),
        "{}",
        version.error()
    );
    let metadata = app.get("/v2/models/nope", key).await;
    assert!(metadata
        .error()
        .starts_with("Request for unknown model: 'nope'"));

    let bearer = format!("Bearer {}", app.infer);
    let auth = [("authorization", bearer.as_str())];
    let grpc = app
        .grpc_call(
            "ModelInfer",
            &tiny_grpc("nope", "", "x", vec![1, 16]),
            &auth,
            None,
        )
        .await;
    assert_eq!(grpc.code, tonic::Code::NotFound);
    assert!(
        grpc.message
            .starts_with("Request for unknown model: 'nope' is not found"),
        "{}",
        grpc.message
    );
    let grpc = app
        .grpc_call(
            "ModelInfer",
            &tiny_grpc("tiny", "3", "x", vec![1, 16]),
            &auth,
            None,
        )
        .await;
    assert!(
        grpc.message
            .starts_with("Request for unknown model: 'tiny' version 3 is not found"),
        "{}",
        grpc.message
    );
}

#[tokio::test]
async fn inputs_that_do_not_fit_are_named_in_tritons_words() {
    let app = App::start().await;
    let key = Some(app.infer.as_str());
    let shape = app
        .post("/v2/models/tiny/infer", key, App::tiny_request(&[1.0; 3]))
        .await;
    assert_eq!(shape.status, StatusCode::BAD_REQUEST);
    assert!(
        shape.error().contains(
            "unexpected shape for input 'x' for model 'tiny'. Expected [1,16], got [1,3]."
        ),
        "{}",
        shape.error()
    );
    let name = app
        .post(
            "/v2/models/tiny/infer",
            key,
            json!({"inputs": [{"name": "z", "datatype": "FP32", "shape": [1, 16], "data": vec![0.0; 16]}]}),
        )
        .await;
    assert_eq!(name.status, StatusCode::BAD_REQUEST);
    assert!(
        name.error()
            .contains("unexpected inference input 'z' for model 'tiny'"),
        "{}",
        name.error()
    );
    let none = app
        .post("/v2/models/tiny/infer", key, json!({"inputs": []}))
        .await;
    assert!(
        none.error().contains(
            "expected 1 inputs but got 0 inputs for model 'tiny'. Got input(s) [], but missing required input(s) ['x']"
        ),
        "{}",
        none.error()
    );
    let datatype = app
        .post(
            "/v2/models/tiny/infer",
            key,
            json!({"inputs": [{"name": "x", "datatype": "INT32", "shape": [1, 16], "data": vec![0; 16]}]}),
        )
        .await;
    assert!(
        datatype
            .error()
            .contains("inference input 'x' data-type is 'INT32', but model 'tiny' expects 'FP32'"),
        "{}",
        datatype.error()
    );

    let bearer = format!("Bearer {}", app.infer);
    let grpc = app
        .grpc_call(
            "ModelInfer",
            &tiny_grpc("tiny", "", "x", vec![2, 8]),
            &[("authorization", bearer.as_str())],
            None,
        )
        .await;
    assert_eq!(grpc.code, tonic::Code::InvalidArgument);
    assert!(
        grpc.message
            .contains("unexpected shape for input 'x' for model 'tiny'"),
        "{}",
        grpc.message
    );
}
