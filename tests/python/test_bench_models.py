"""The benchmark's hand-encoded model (bench/workers.py's "tiny", written without the onnx
package so the script runs on a bare host): ONNX's own checker accepts it and ONNX Runtime runs
it as the identity over [N, 16] floats that the hop measurement sends."""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
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
