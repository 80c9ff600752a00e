"""The benchmark's hand-encoded model (bench/workers.py's "tiny", written without the onnx
package so the script runs on a bare host): ONNX's own checker accepts it and ONNX Runtime runs
it as the identity over [N, 16] floats that the hop measurement sends. And the KServe v2 binary
request bench/latency_floor.py builds by hand: its JSON head describes its binary part exactly."""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import latency_floor  # noqa: E402
import workers  # noqa: E402


def test_tiny_model_is_valid_onnx_and_runs_as_identity(tmp_path):
    path = workers.model_file("tiny", str(tmp_path))
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in sess.get_inputs()] == [("x", ["N", 16])]
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    (y,) = sess.run(["y"], {"x": x})
    np.testing.assert_array_equal(y, x)


def test_tiny_request_matches_the_model():
    _, inputs, output, shape = workers.SPECS["tiny"]
    assert output == "y" and shape == inputs["x"].shape == [1, 16]
    assert len(inputs["x"].tobytes()) == 16 * 4


def test_latency_floor_request_describes_its_binary_part():
    feeds, content, shapes = latency_floor.minilm_inputs()
    head, binary = latency_floor.kserve_request(feeds)
    meta = json.loads(head)
    assert meta["parameters"] == {"binary_data_output": True}
    offset = 0
    for tensor in meta["inputs"]:
        size = tensor["parameters"]["binary_data_size"]
        value = np.frombuffer(binary[offset:offset + size], dtype=np.int64).reshape(tensor["shape"])
        np.testing.assert_array_equal(value, feeds[tensor["name"]])
        assert content["data"][0][tensor["name"]]["shape"] == tensor["shape"]
        offset += size
    assert offset == len(binary)
    assert sorted(shapes) == sorted(f"{t['name']}:{','.join(map(str, t['shape']))}" for t in meta["inputs"])
