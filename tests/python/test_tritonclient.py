"""The official Triton HTTP client, unchanged, against infergate over TLS and plain HTTP;
outputs compared with ONNX Runtime's Python API on the same inputs."""
import os
import ssl

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import MODELS


def client(g):
    if g.scheme == "https":
        return httpclient.InferenceServerClient(
            url=g.hostport, ssl=True,
            ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    return httpclient.InferenceServerClient(url=g.hostport)


def auth(key):
    return {"Authorization": f"Bearer {key}"}


def reference(model_file, feeds):
    sess = ort.InferenceSession(os.path.join(MODELS, model_file), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_health_metadata_and_config(gateway):
    c, h = client(gateway), auth(gateway.key())
    assert c.is_server_live(headers=h)
    assert c.is_server_ready(headers=h)
    assert c.is_model_ready("minilm", headers=h)
    meta = c.get_server_metadata(headers=h)
    assert meta["name"] == "infergate"
    mm = c.get_model_metadata("minilm", headers=h)
    assert [i["name"] for i in mm["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
    assert mm["outputs"][0]["datatype"] == "FP32"
    cfg = c.get_model_config("ocr-rec", headers=h)
    assert cfg["input"][0]["data_type"] == "TYPE_FP32"
    assert cfg["output"][0]["dims"][-1] == 6625


@pytest.mark.parametrize("binary", [False, True])
def test_minilm_matches_onnxruntime(gateway, binary):
    c, h = client(gateway), auth(gateway.key())
    ids = np.array([[101, 1037, 2204, 2154, 2000, 2022, 6517, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    inputs = []
    for name, arr in feeds.items():
        i = httpclient.InferInput(name, list(arr.shape), "INT64")
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    outputs = [httpclient.InferRequestedOutput("last_hidden_state", binary_data=binary)]
    result = c.infer("minilm", inputs, outputs=outputs, headers=h)
    got = result.as_numpy("last_hidden_state")
    want = reference("minilm.onnx", feeds)[0]
    assert got.shape == want.shape == (1, 8, 384)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("binary", [False, True])
def test_ocr_recognizer_matches_onnxruntime(gateway, binary):
    c, h = client(gateway), auth(gateway.key())
    x = np.random.default_rng(7).random((2, 3, 48, 160), dtype=np.float32)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    result = c.infer("ocr-rec", [i], headers=h,
                     outputs=[httpclient.InferRequestedOutput("softmax_11.tmp_0", binary_data=binary)])
    got = result.as_numpy("softmax_11.tmp_0")
    want = reference("ocr-rec.onnx", {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_errors_surface_as_inference_server_exceptions(gateway):
    c = client(gateway)
    x = np.zeros((1, 3, 48, 100), dtype=np.float32)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x)
    with pytest.raises(InferenceServerException) as e:
        c.infer("cls", [i], headers=auth("ig_0123456789ab_wrong"))
    assert "invalid or revoked" in str(e.value)
    bad = httpclient.InferInput("x", [1, 3, 48], "FP32")
    bad.set_data_from_numpy(np.zeros((1, 3, 48), dtype=np.float32))
    with pytest.raises(InferenceServerException) as e:
        c.infer("cls", [bad], headers=auth(gateway.key()))
    assert "'x'" in str(e.value) and "shape" in str(e.value)


def test_statistics_counts_match(gateway):
    c, h = client(gateway), auth(gateway.key())
    before = c.get_inference_statistics("cls", headers=h)["model_stats"][0]["inference_stats"]["success"]["count"]
    x = np.zeros((1, 3, 48, 100), dtype=np.float32)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    for _ in range(4):
        c.infer("cls", [i], headers=h)
    s = c.get_inference_statistics("cls", headers=h)["model_stats"][0]["inference_stats"]
    assert s["success"]["count"] == before + 4
    assert s["compute_input"]["count"] == s["compute_infer"]["count"] == s["compute_output"]["count"]


def test_plain_http_with_insecure_flag(plain_gateway):
    c, h = client(plain_gateway), auth(plain_gateway.key())
    x = np.random.default_rng(1).random((1, 3, 48, 192), dtype=np.float32)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=True)
    got = c.infer("cls", [i], headers=h).as_numpy("save_infer_model/scale_0.tmp_1")
    want = reference("ocr-cls.onnx", {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
