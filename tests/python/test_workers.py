"""Workers on other hosts (issue 14): the official Triton clients (HTTP, JSON and binary, and
gRPC), unchanged, through a manager that runs nothing itself (`--no-local-engine`) and two
workers that joined it; answers compared with ONNX Runtime's Python API."""
import os
import queue
import re
import shutil
import ssl
import subprocess
import tempfile
import threading

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import BIN, MODELS, start

IDS = np.array([[101, 1037, 2204, 2154, 2000, 2022, 6517, 102]], dtype=np.int64)
FEEDS = {"input_ids": IDS, "attention_mask": np.ones_like(IDS), "token_type_ids": np.zeros_like(IDS)}


class Worker:
    def __init__(self, manager, token, data):
        args = [BIN, "worker", "--join", manager.url, "--join-token", token,
                "--listen", "127.0.0.1:0", "--data-dir", data, "--instances", "1", "--intra-threads", "1"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in self.proc.stderr], daemon=True).start()
        while True:
            line = re.sub(r"\x1b\[[0-9;]*m", "", lines.get(timeout=60))
            if "worker listening on" in line:
                break

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cluster():
    manager = start([("minilm", "minilm.onnx")], extra_args=("--no-local-engine",))
    token = subprocess.run([BIN, "workers", "token", "create", "--data-dir", manager.data],
                           check=True, capture_output=True, text=True).stdout.strip()
    dirs = tempfile.mkdtemp(prefix="infergate-workers-")
    workers = [Worker(manager, token, os.path.join(dirs, name)) for name in ("a", "b")]
    yield manager
    for w in workers:
        assert w.stop() == 0, "a worker exits cleanly after SIGTERM"
    manager.stop()
    shutil.rmtree(dirs, ignore_errors=True)


def want():
    sess = ort.InferenceSession(os.path.join(MODELS, "minilm.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(None, FEEDS)[0]


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_http_through_the_manager(cluster, binary):
    c = httpclient.InferenceServerClient(
        url=cluster.hostport, ssl=True,
        ssl_context_factory=lambda: ssl.create_default_context(cafile=cluster.cert))
    h = {"Authorization": f"Bearer {cluster.key()}"}
    inputs = []
    for name, arr in FEEDS.items():
        i = httpclient.InferInput(name, list(arr.shape), "INT64")
        i.set_data_from_numpy(arr, binary_data=binary)
        inputs.append(i)
    outputs = [httpclient.InferRequestedOutput("last_hidden_state", binary_data=binary)]
    for _ in range(3):
        got = c.infer("minilm", inputs, outputs=outputs, headers=h).as_numpy("last_hidden_state")
        np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-5)


def test_tritonclient_grpc_through_the_manager(cluster):
    c = grpcclient.InferenceServerClient(url=cluster.grpc_hostport, ssl=True, root_certificates=cluster.cert)
    md = {"authorization": f"Bearer {cluster.key()}"}
    inputs = []
    for name, arr in FEEDS.items():
        i = grpcclient.InferInput(name, list(arr.shape), "INT64")
        i.set_data_from_numpy(arr)
        inputs.append(i)
    got = c.infer("minilm", inputs, headers=md).as_numpy("last_hidden_state")
    np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-5)
