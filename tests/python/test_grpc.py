"""The official Triton gRPC client (tritonclient.grpc), unchanged, against infergate's gRPC
listener over TLS: health, metadata, configuration and statistics, inference on real models
compared with the same request over HTTP, typed `contents` inputs through Triton's generated
stub, error codes, the bidirectional stream, and the inference metrics' `grpc` label."""
import queue
import ssl
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

IDS = np.array([[101, 1037, 2204, 2154, 2000, 2022, 6517, 102]], dtype=np.int64)
MINILM = {"input_ids": IDS, "attention_mask": np.ones_like(IDS), "token_type_ids": np.zeros_like(IDS)}
OCR_OUT = "softmax_11.tmp_0"


def grpc_client(g):
    if g.scheme == "https":
        return grpcclient.InferenceServerClient(url=g.grpc_hostport, ssl=True, root_certificates=g.cert)
    return grpcclient.InferenceServerClient(url=g.grpc_hostport)


def http_client(g):
    return httpclient.InferenceServerClient(
        url=g.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))


def metadata(key):
    # gRPC metadata keys are lower-case.
    return {"authorization": f"Bearer {key}"}


def inputs(module, feeds, datatype):
    out = []
    for name, arr in feeds.items():
        i = module.InferInput(name, list(arr.shape), datatype)
        if module is httpclient:
            i.set_data_from_numpy(arr, binary_data=True)
        else:
            i.set_data_from_numpy(arr)
        out.append(i)
    return out


def over_http(g, key, model, feeds, datatype, output):
    result = http_client(g).infer(model, inputs(httpclient, feeds, datatype), headers=metadata(key),
                                  outputs=[httpclient.InferRequestedOutput(output, binary_data=True)])
    return result.as_numpy(output)


def code(error):
    return error.value.status()


def test_health_metadata_config_and_statistics(gateway):
    c, h = grpc_client(gateway), metadata(gateway.key())
    # Liveness and readiness need no key, as over HTTP.
    assert c.is_server_live()
    assert c.is_server_ready()
    assert c.is_model_ready("minilm", headers=h)
    server = c.get_server_metadata(headers=h)
    assert server.name == "infergate" and "statistics" in server.extensions
    mm = c.get_model_metadata("minilm", headers=h)
    assert [i.name for i in mm.inputs] == ["input_ids", "attention_mask", "token_type_ids"]
    assert mm.outputs[0].datatype == "FP32"
    http_meta = http_client(gateway).get_model_metadata("minilm", headers=h)
    assert [list(i.shape) for i in mm.inputs] == [i["shape"] for i in http_meta["inputs"]]
    assert list(mm.versions) == http_meta["versions"]
    cfg = c.get_model_config("ocr-rec", headers=h).config
    http_cfg = http_client(gateway).get_model_config("ocr-rec", headers=h)
    assert cfg.name == "ocr-rec" and cfg.platform == http_cfg["platform"]
    assert cfg.input[0].data_type == model_config_pb2.TYPE_FP32
    assert cfg.max_batch_size == http_cfg["max_batch_size"]
    assert list(cfg.output[0].dims) == http_cfg["output"][0]["dims"]
    assert cfg.output[0].dims[-1] == 6625
    assert cfg.instance_group[0].count == http_cfg["instance_group"][0]["count"]
    stats = c.get_inference_statistics("minilm", headers=h).model_stats
    assert [(s.name, s.version) for s in stats] == [("minilm", "1")]
    every = c.get_inference_statistics(headers=h).model_stats
    assert {s.name for s in every} == {"minilm", "ocr-rec", "cls"}


def test_minilm_equals_the_http_answer(gateway):
    key = gateway.key()
    result = grpc_client(gateway).infer("minilm", inputs(grpcclient, MINILM, "INT64"), headers=metadata(key),
                                        request_id="q-1")
    assert result.get_response().id == "q-1"
    assert result.get_response().model_version == "1"
    got = result.as_numpy("last_hidden_state")
    want = over_http(gateway, key, "minilm", MINILM, "INT64", "last_hidden_state")
    assert got.shape == want.shape == (1, 8, 384)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_ocr_recognizer_equals_the_http_answer(gateway):
    key = gateway.key()
    x = np.random.default_rng(7).random((2, 3, 48, 160), dtype=np.float32)
    result = grpc_client(gateway).infer("ocr-rec", inputs(grpcclient, {"x": x}, "FP32"), headers=metadata(key),
                                        outputs=[grpcclient.InferRequestedOutput(OCR_OUT)])
    got = result.as_numpy(OCR_OUT)
    want = over_http(gateway, key, "ocr-rec", {"x": x}, "FP32", OCR_OUT)
    assert got.shape == want.shape and got.shape[-1] == 6625
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_typed_contents_equal_raw_contents(gateway):
    """tritonclient always sends raw_input_contents; other clients send typed contents."""
    key = gateway.key()
    request = service_pb2.ModelInferRequest(model_name="minilm")
    for name, arr in MINILM.items():
        tensor = request.inputs.add(name=name, datatype="INT64", shape=list(arr.shape))
        tensor.contents.int64_contents.extend(arr.ravel().tolist())
    with open(gateway.cert, "rb") as f:
        credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
    with grpc.secure_channel(gateway.grpc_hostport, credentials) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        response = stub.ModelInfer(request, metadata=list(metadata(key).items()), timeout=60)
    out = response.outputs[0]
    assert out.name == "last_hidden_state" and out.datatype == "FP32"
    got = np.frombuffer(response.raw_output_contents[0], dtype=np.float32).reshape(list(out.shape))
    want = over_http(gateway, key, "minilm", MINILM, "INT64", "last_hidden_state")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_errors_have_grpc_status_codes(gateway):
    c, key = grpc_client(gateway), gateway.key()
    x = np.zeros((1, 3, 48, 100), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        c.infer("cls", inputs(grpcclient, {"x": x}, "FP32"), headers=metadata("ig_0123456789ab_wrong"))
    assert code(e) == "StatusCode.UNAUTHENTICATED" and "invalid or revoked" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("cls")
    assert code(e) == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("cls", headers=metadata(gateway.key("upload")))
    assert code(e) == "StatusCode.PERMISSION_DENIED" and "'infer' scope" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        c.infer("no-such-model", inputs(grpcclient, {"x": x}, "FP32"), headers=metadata(key))
    assert code(e) == "StatusCode.NOT_FOUND" and "no-such-model" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        c.get_model_config("no-such-model", headers=metadata(key))
    assert code(e) == "StatusCode.NOT_FOUND"
    bad = np.zeros((1, 3, 48), dtype=np.float32)
    with pytest.raises(InferenceServerException) as e:
        c.infer("cls", inputs(grpcclient, {"x": bad}, "FP32"), headers=metadata(key))
    assert code(e) == "StatusCode.INVALID_ARGUMENT" and "'x'" in str(e.value) and "shape" in str(e.value)
    with pytest.raises(InferenceServerException) as e:
        c.get_model_metadata("cls", model_version="x", headers=metadata(key))
    assert code(e) == "StatusCode.INVALID_ARGUMENT"


def test_stream_answers_every_request_and_survives_a_failed_one(gateway):
    c, key = grpc_client(gateway), gateway.key()
    rng = np.random.default_rng(3)
    images = [rng.random((1, 3, 48, 96 + 32 * n), dtype=np.float32) for n in range(4)]
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)), headers=metadata(key))
    try:
        for n, x in enumerate(images):
            c.async_stream_infer("ocr-rec", inputs(grpcclient, {"x": x}, "FP32"), request_id=f"img-{n}",
                                 outputs=[grpcclient.InferRequestedOutput(OCR_OUT)])
            if n == 1:
                c.async_stream_infer("no-such-model", inputs(grpcclient, {"x": x}, "FP32"), request_id="bad")
        got, errors = {}, []
        for _ in range(len(images) + 1):
            result, error = answers.get(timeout=120)
            if error is not None:
                errors.append(str(error))
            else:
                got[result.get_response().id] = result.as_numpy(OCR_OUT)
    finally:
        c.stop_stream()
    assert len(errors) == 1 and "no-such-model" in errors[0]
    assert sorted(got) == [f"img-{n}" for n in range(len(images))]
    for n, x in enumerate(images):
        want = over_http(gateway, key, "ocr-rec", {"x": x}, "FP32", OCR_OUT)
        np.testing.assert_allclose(got[f"img-{n}"], want, rtol=1e-6, atol=1e-6)


def test_requests_are_counted_under_the_grpc_protocol(gateway):
    c = grpc_client(gateway)
    x = np.zeros((1, 3, 48, 100), dtype=np.float32)
    c.infer("cls", inputs(grpcclient, {"x": x}, "FP32"), headers=metadata(gateway.key()))
    request = urllib.request.Request(gateway.url + "/metrics", headers=metadata(gateway.admin_key))
    context = ssl.create_default_context(cafile=gateway.cert)
    text = urllib.request.urlopen(request, context=context).read().decode()
    counted = [line for line in text.splitlines()
               if line.startswith("infergate_inference_requests_total{")
               and 'protocol="grpc"' in line and 'model="cls"' in line and 'status="200"' in line]
    assert counted and float(counted[0].split()[-1]) >= 1


def test_plain_grpc_with_insecure_flag(plain_gateway):
    c, h = grpc_client(plain_gateway), metadata(plain_gateway.key())
    x = np.random.default_rng(1).random((1, 3, 48, 192), dtype=np.float32)
    got = c.infer("cls", inputs(grpcclient, {"x": x}, "FP32"), headers=h).as_numpy(
        "save_infer_model/scale_0.tmp_1")
    assert got.shape == (1, 2)
    np.testing.assert_allclose(got.sum(axis=1), [1.0], rtol=1e-5)
