//! Triton's extensions in process: compressed KServe bodies (both ways, and a decompression bomb
//! refused over HTTP and gRPC), system shared memory (inputs and outputs through a region, the
//! region's owner and size checked, loopback only, CUDA answered as on a host without GPUs),
//! and model control over gRPC.

use axum::body::Body;
use flate2::write::{GzEncoder, ZlibEncoder};
use flate2::Compression;
use http::{Request, StatusCode};
use infergate_kserve::proto::{
    CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse, RepositoryIndexRequest,
    RepositoryIndexResponse, RepositoryModelLoadRequest, RepositoryModelUnloadRequest,
    ServerMetadataRequest,
};
use serde_json::{json, Value};
use std::io::Write;
use crate::support::App;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

fn compressed_infer(
    key: &str,
    encoding: &str,
    body: Vec<u8>,
    header_len: Option<usize>,
) -> Request<Body> {
    let mut request = Request::builder()
        .method("POST")
        .uri("/v2/models/tiny/infer")
        .header("authorization", format!("Bearer {key}"))
        .header("content-encoding", encoding);
    request = match header_len {
        Some(len) => request
            .header("content-type", "application/octet-stream")
            .header("inference-header-content-length", len.to_string()),
        None => request.header("content-type", "application/json"),
    };
    request.body(Body::from(body)).expect("request")
}

#[tokio::test]
async fn compressed_requests_are_inflated_and_the_binary_header_length_is_the_inflated_one() {
    let app = App::start().await;
    let json_body = App::tiny_request(&[1.5; 16]).to_string();
    for (encoding, body) in [
        ("gzip", gzip(json_body.as_bytes())),
        ("deflate", zlib(json_body.as_bytes())),
    ] {
        let answer = app
            .call(compressed_infer(&app.infer, encoding, body, None))
            .await;
        assert_eq!(
            answer.status,
            StatusCode::OK,
            "{encoding}: {:?}",
            answer.body
        );
        assert_eq!(answer.json()["outputs"][0]["data"][0], json!(3.0));
    }
    // Binary extension: the header length counts the decompressed header, as tritonclient
    // sends it.
    let header = json!({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16],
                        "parameters": {"binary_data_size": 64}}]})
    .to_string();
    let mut plain = header.clone().into_bytes();
    plain.extend([2.0f32.to_le_bytes(); 16].concat());
    let answer = app
        .call(compressed_infer(
            &app.infer,
            "gzip",
            gzip(&plain),
            Some(header.len()),
        ))
        .await;
    assert_eq!(
        answer.status,
        StatusCode::OK,
        "{:?}",
        String::from_utf8_lossy(&answer.body)
    );
    assert_eq!(answer.json()["outputs"][0]["data"][0], json!(4.0));

    let garbage = app
        .call(compressed_infer(
            &app.infer,
            "gzip",
            b"not gzip at all".to_vec(),
            None,
        ))
        .await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST);
    assert!(
        garbage.error().contains("does not decompress"),
        "{}",
        garbage.error()
    );
    let unknown = app
        .call(compressed_infer(
            &app.infer,
            "br",
            json_body.clone().into_bytes(),
            None,
        ))
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(
        unknown
            .error()
            .contains("Unsupported compression type 'br'"),
        "{}",
        unknown.error()
    );
}

#[tokio::test]
async fn a_decompression_bomb_is_refused_over_http_and_grpc() {
    const LIMIT: usize = 1 << 20;
    let app = App::with_config(|c| c.limits.max_request_bytes = LIMIT).await;
    // 16 MiB of zeros deflate to a few KiB: only the inflated size can tell.
    let bomb = gzip(&vec![0u8; 16 << 20]);
    assert!(bomb.len() < LIMIT / 16);
    let refused = app
        .call(compressed_infer(&app.infer, "gzip", bomb.clone(), None))
        .await;
    assert_eq!(refused.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        refused.error().contains("once decompressed"),
        "{}",
        refused.error()
    );

    let mut framed = vec![1u8];
    framed.extend((bomb.len() as u32).to_be_bytes());
    framed.extend(&bomb);
    let bearer = format!("Bearer {}", app.infer);
    let grpc = app
        .grpc_raw(
            "ModelInfer",
            framed,
            &[
                ("authorization", bearer.as_str()),
                ("grpc-encoding", "gzip"),
            ],
            None,
        )
        .await;
    assert_eq!(
        grpc.code,
        tonic::Code::ResourceExhausted,
        "{}",
        grpc.message
    );
}

#[tokio::test]
async fn answers_are_compressed_only_when_asked_and_worth_it() {
    let app = App::start().await;
    let ask = |encoding: &str| {
        Request::builder()
            .method("POST")
            .uri("/v2/models/tiny/infer")
            .header("authorization", format!("Bearer {}", app.infer))
            .header("content-type", "application/json")
            .header("accept-encoding", encoding)
            .body(Body::from(App::tiny_request(&[0.5; 16]).to_string()))
            .expect("request")
    };
    // The tiny model's answer is smaller than is worth compressing.
    let small = app.call(ask("gzip")).await;
    assert_eq!(small.status, StatusCode::OK);
    assert_eq!(small.header("content-encoding"), None);
    assert_eq!(small.json()["outputs"][0]["data"][0], json!(1.0));

    // A compressed gRPC request is answered in its own algorithm.
    let bearer = format!("Bearer {}", app.infer);
    let message = crate::support::grpc::frame(&ServerMetadataRequest {});
    let mut framed = vec![1u8];
    let payload = gzip(&message[5..]);
    framed.extend((payload.len() as u32).to_be_bytes());
    framed.extend(&payload);
    let answer = app
        .grpc_raw(
            "ServerMetadata",
            framed,
            &[
                ("authorization", bearer.as_str()),
                ("grpc-encoding", "gzip"),
            ],
            None,
        )
        .await
        .decode::<infergate_kserve::proto::ServerMetadataResponse>();
    assert_eq!(answer.name, "infergate");
}

/// A POSIX shared-memory object made the way tritonclient makes one (a file under /dev/shm),
/// removed when dropped.
struct Object {
    key: String,
    path: std::path::PathBuf,
}

impl Object {
    fn new(tag: &str, bytes: &[u8]) -> Object {
        let name = format!("infergate-test-{}-{tag}", std::process::id());
        let path = std::path::Path::new("/dev/shm").join(&name);
        std::fs::write(&path, bytes).expect("write /dev/shm object");
        Object {
            key: format!("/{name}"),
            path,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).expect("read /dev/shm object")
    }
}

impl Drop for Object {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn register(key: &str, offset: u64, byte_size: u64) -> Value {
    json!({"key": key, "offset": offset, "byte_size": byte_size})
}

#[tokio::test]
async fn inputs_and_outputs_pass_through_a_callers_own_regions() {
    let app = App::start().await;
    let key = Some(app.infer.as_str());
    // The input at offset 16 of one object, the output at offset 8 of another.
    let mut input = vec![0u8; 16];
    input.extend([3.0f32.to_le_bytes(); 16].concat());
    let input = Object::new("in", &input);
    let output = Object::new("out", &[0u8; 8 + 64]);
    for (name, object, size) in [("in", &input, 80), ("out", &output, 72)] {
        let registered = app
            .post_from(
                "127.0.0.1",
                &format!("/v2/systemsharedmemory/region/{name}/register"),
                key,
                register(&object.key, 0, size),
            )
            .await;
        assert_eq!(registered.status, StatusCode::OK, "{:?}", registered.body);
    }
    let status = app
        .get_from("127.0.0.1", "/v2/systemsharedmemory/status", key)
        .await;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(
        status.json().as_array().map(Vec::len),
        Some(2),
        "{}",
        status.json()
    );

    let request = json!({
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 16], "parameters": {
            "shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": 16}}],
        "outputs": [{"name": "y", "parameters": {
            "shared_memory_region": "out", "shared_memory_byte_size": 64, "shared_memory_offset": 8}}]
    });
    let answer = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", key, request.clone())
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.error());
    let out = &answer.json()["outputs"][0];
    assert!(out["data"].is_null(), "{out}");
    // Named without parameters, as Triton answers (its C++ client reads any output's
    // parameters as a binary section's size).
    assert!(out.get("parameters").is_none(), "{out}");
    assert_eq!(out["shape"], json!([1, 16]));
    let written = output.bytes();
    assert_eq!(
        &written[..8],
        &[0u8; 8],
        "bytes before the offset are untouched"
    );
    assert_eq!(floats(&written[8..]), vec![6.0; 16]);

    // Another key neither sees nor uses these regions.
    let other = app.key("infer");
    let other = Some(other.as_str());
    let theirs = app
        .get_from("127.0.0.1", "/v2/systemsharedmemory/status", other)
        .await;
    assert_eq!(theirs.json(), json!([]));
    let used = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", other, request.clone())
        .await;
    assert_eq!(used.status, StatusCode::NOT_FOUND, "{:?}", used.error());
    assert!(
        used.error()
            .contains("Unable to find system shared memory region: 'in'"),
        "{}",
        used.error()
    );

    // A byte size that does not fit the region, or the tensor.
    let mut too_far = request.clone();
    too_far["inputs"][0]["parameters"]["shared_memory_offset"] = json!(32);
    let refused = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", key, too_far)
        .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        refused.error()
    );
    let mut wrong_size = request.clone();
    wrong_size["inputs"][0]["parameters"]["shared_memory_byte_size"] = json!(60);
    let refused = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", key, wrong_size)
        .await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        refused.error()
    );

    // A region smaller than its object claims: the object shrank after registering.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input.path)
        .and_then(|f| f.set_len(20))
        .expect("shrink");
    let shrunk = app
        .post_from("127.0.0.1", "/v2/models/tiny/infer", key, request.clone())
        .await;
    assert_eq!(
        shrunk.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        shrunk.error()
    );
    assert!(shrunk.error().contains("shrank"), "{}", shrunk.error());

    // Unregistered regions are gone.
    let gone = app
        .post_from(
            "127.0.0.1",
            "/v2/systemsharedmemory/unregister",
            key,
            json!({}),
        )
        .await;
    assert_eq!(gone.status, StatusCode::OK);
    let status = app
        .get_from("127.0.0.1", "/v2/systemsharedmemory/status", key)
        .await;
    assert_eq!(status.json(), json!([]));
}

#[tokio::test]
async fn shared_memory_is_for_this_host_only_and_cuda_answers_as_without_gpus() {
    let app = App::start().await;
    let key = Some(app.infer.as_str());
    let object = Object::new("remote", &[0u8; 64]);
    let remote = app
        .post_from(
            "10.1.2.3",
            "/v2/systemsharedmemory/region/r/register",
            key,
            register(&object.key, 0, 64),
        )
        .await;
    assert_eq!(
        remote.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        remote.error()
    );
    assert!(
        remote.error().contains("own host only"),
        "{}",
        remote.error()
    );
    // Not a POSIX object name: never a path.
    let path = app
        .post_from(
            "127.0.0.1",
            "/v2/systemsharedmemory/region/r/register",
            key,
            register("/etc/passwd", 0, 8),
        )
        .await;
    assert_eq!(path.status, StatusCode::BAD_REQUEST, "{:?}", path.error());
    assert!(
        path.error().contains("not a single object name"),
        "{}",
        path.error()
    );

    let cuda = app
        .get_from("127.0.0.1", "/v2/cudasharedmemory/status", key)
        .await;
    assert_eq!(cuda.status, StatusCode::OK);
    assert_eq!(cuda.json(), json!([]));
    let unregister = app
        .post_from(
            "127.0.0.1",
            "/v2/cudasharedmemory/unregister",
            key,
            json!({}),
        )
        .await;
    assert_eq!(unregister.status, StatusCode::OK);
    let grpc = grpc_with(
        &app,
        "CudaSharedMemoryStatus",
        &CudaSharedMemoryStatusRequest::default(),
        &app.infer,
    )
    .await
    .decode::<CudaSharedMemoryStatusResponse>();
    assert!(grpc.regions.is_empty());
}

/// A gRPC call with `key`.
async fn grpc_with(
    app: &App,
    method: &str,
    message: &impl prost::Message,
    key: &str,
) -> crate::support::grpc::GrpcReply {
    let bearer = format!("Bearer {key}");
    app.grpc_call(method, message, &[("authorization", bearer.as_str())], None)
        .await
}

#[tokio::test]
async fn model_control_over_grpc_matches_http() {
    let app = App::start().await;
    let index = |ready: bool| RepositoryIndexRequest {
        repository_name: String::new(),
        ready,
    };
    let listed = grpc_with(&app, "RepositoryIndex", &index(false), &app.infer)
        .await
        .decode::<RepositoryIndexResponse>();
    let tiny = listed
        .models
        .iter()
        .find(|m| m.name == "tiny")
        .expect("tiny in the index");
    assert_eq!(tiny.version, "1");

    let unload = RepositoryModelUnloadRequest {
        model_name: "tiny".into(),
        ..Default::default()
    };
    let refused = grpc_with(&app, "RepositoryModelUnload", &unload, &app.infer).await;
    assert_eq!(
        refused.code,
        tonic::Code::PermissionDenied,
        "{}",
        refused.message
    );
    let done = grpc_with(&app, "RepositoryModelUnload", &unload, &app.upload).await;
    assert_eq!(done.code, tonic::Code::Ok, "{}", done.message);
    let ready = grpc_with(&app, "RepositoryIndex", &index(true), &app.infer)
        .await
        .decode::<RepositoryIndexResponse>();
    assert!(
        ready.models.iter().all(|m| m.name != "tiny"),
        "{:?}",
        ready.models
    );

    let load = |model: &str| RepositoryModelLoadRequest {
        model_name: model.into(),
        ..Default::default()
    };
    let loaded = grpc_with(&app, "RepositoryModelLoad", &load("tiny"), &app.upload).await;
    assert_eq!(loaded.code, tonic::Code::Ok, "{}", loaded.message);
    let http = app
        .post(
            "/v2/repository/index",
            Some(&app.infer),
            json!({"ready": true}),
        )
        .await;
    assert_eq!(http.status, StatusCode::OK);
    assert!(
        http.json().as_array().is_some_and(|all| all
            .iter()
            .any(|m| m["name"] == "tiny" && m["state"] == "READY")),
        "{}",
        http.json()
    );
    let missing = grpc_with(&app, "RepositoryModelLoad", &load("nope"), &app.upload).await;
    assert_eq!(missing.code, tonic::Code::NotFound, "{}", missing.message);
}
