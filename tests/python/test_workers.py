"""Workers on other hosts: the official Triton clients (HTTP, JSON and binary, and
gRPC), unchanged, through a manager that runs nothing itself (`--no-local-engine`) and two
workers that joined it; answers compared with ONNX Runtime's Python API."""
import contextlib
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
    """`infergate worker`, joined to `manager`, with the address it listens on."""

    def __init__(self, manager, token, data):
        args = [BIN, "worker", "--join", manager.url, "--join-token", token,
                "--listen", "127.0.0.1:0", "--data-dir", data, "--instances", "1", "--intra-threads", "1"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in self.proc.stderr], daemon=True).start()
        while True:
            line = re.sub(r"\x1b\[[0-9;]*m", "", lines.get(timeout=60))
            m = re.search(r"worker listening on https://(\S+)", line)
            if m:
                self.address = m.group(1)
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


@contextlib.contextmanager
def solo_and_manager(models, extra_args=()):
    """An all-in-one server and a manager (running nothing itself) with one worker, both with
    `models`, to compare their answers."""
    solo = start(models, extra_args=extra_args)
    manager = start(models, extra_args=[*extra_args, "--no-local-engine"])
    dirs = tempfile.mkdtemp(prefix="infergate-workers-")
    worker = None
    try:
        token = subprocess.run([BIN, "workers", "token", "create", "--data-dir", manager.data],
                               check=True, capture_output=True, text=True).stdout.strip()
        worker = Worker(manager, token, os.path.join(dirs, "w"))
        yield solo, manager
    finally:
        if worker:
            worker.stop()
        manager.stop()
        solo.stop()
        shutil.rmtree(dirs, ignore_errors=True)


def test_openai_completion_through_a_worker_matches_the_all_in_one_server():
    """The text generator's steps run on a worker: a seeded completion through the manager is
    the one an all-in-one server writes."""
    import openai

    vocab = ["--openai-vocab", os.path.join(MODELS, "textgen-vocab.json")]
    with solo_and_manager([("textgen", "textgen.onnx")], vocab) as servers:
        texts = []
        for g in servers:
            oc = openai.OpenAI(base_url=f"{g.url}/v1", api_key=g.key(), max_retries=0,
                               http_client=openai.DefaultHttpxClient(
                                   verify=ssl.create_default_context(cafile=g.cert)))
            texts.append(oc.completions.create(model="textgen", prompt="The weather today",
                                               max_tokens=16, temperature=0.8, seed=42).choices[0].text)
        assert texts[0] == texts[1] and texts[0]


def test_a_pipeline_runs_its_model_on_a_worker():
    """WASM pre- and post-plugins on the manager, the model stage on a worker: the same
    sentence embedding as an all-in-one server's."""
    from test_pipelines import Api

    spec = {"pre": ["wordpiece-tokenizer"], "model": "minilm", "post": ["mean-pool"]}
    with solo_and_manager([("minilm", "minilm.onnx")]) as servers:
        vectors = []
        for g in servers:
            api = Api(g)
            for plugin in spec["pre"] + spec["post"]:
                api.upload(plugin)
            assert api.put("/api/pipelines/embed", json=spec).status_code in (200, 201)
            r = api.post("/api/pipelines/embed/run", data=b"a worker on another host",
                         headers={"Content-Type": "text/plain"})
            assert r.status_code == 200, r.text
            vectors.append(np.array(r.json()["outputs"][0]["data"], dtype=np.float32))
        assert vectors[0].shape == (384,)
        np.testing.assert_allclose(vectors[0], vectors[1], rtol=1e-4, atol=1e-5)


def test_tritonclient_directly_on_a_worker_with_an_assigned_token(cluster):
    import json
    import urllib.request

    request = urllib.request.Request(f"{cluster.url}/v2/models/minilm/assign", data=b"{}", method="POST",
                                     headers={"Authorization": f"Bearer {cluster.key()}"})
    ctx = ssl.create_default_context(cafile=cluster.cert)
    grant = json.load(urllib.request.urlopen(request, context=ctx))
    ca = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)
    ca.write(grant["ca_pem"])
    ca.close()
    c = httpclient.InferenceServerClient(
        url=grant["worker"].removeprefix("https://"), ssl=True,
        ssl_context_factory=lambda: ssl.create_default_context(cafile=ca.name))
    inputs = []
    for name, arr in FEEDS.items():
        i = httpclient.InferInput(name, list(arr.shape), "INT64")
        i.set_data_from_numpy(arr, binary_data=True)
        inputs.append(i)
    h = {"Authorization": f"Bearer {grant['token']}"}
    got = c.infer("minilm", inputs, headers=h).as_numpy("last_hidden_state")
    np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-5)
    from tritonclient.utils import InferenceServerException
    with pytest.raises(InferenceServerException, match="direct token"):
        c.infer("minilm", inputs, headers={"Authorization": "Bearer forged"})
    os.unlink(ca.name)


def test_tritonclient_grpc_directly_on_a_worker_with_an_assigned_token(cluster):
    """The worker's KServe gRPC listener (the grant's `grpc`), TLS with the cluster CA, the
    token as `authorization` metadata: inference runs; a token for this model does not run
    another, and a call without a token or with a forged one is refused, as over HTTP."""
    import json
    import time
    import urllib.request
    from tritonclient.utils import InferenceServerException

    ctx = ssl.create_default_context(cafile=cluster.cert)
    # A worker reports its gRPC address with its heartbeats (every 2 s): a grant made just
    # after it joined may not have one yet.
    deadline = time.monotonic() + 15
    while True:
        request = urllib.request.Request(f"{cluster.url}/v2/models/minilm/assign", data=b"{}", method="POST",
                                         headers={"Authorization": f"Bearer {cluster.key()}"})
        grant = json.load(urllib.request.urlopen(request, context=ctx))
        if grant.get("grpc") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert grant["grpc"], grant
    assert grant["grpc"] != grant["worker"].removeprefix("https://"), "gRPC has a listener of its own"
    ca = tempfile.NamedTemporaryFile("w", suffix=".pem", delete=False)
    ca.write(grant["ca_pem"])
    ca.close()
    try:
        c = grpcclient.InferenceServerClient(url=grant["grpc"], ssl=True, root_certificates=ca.name)
        inputs = []
        for name, arr in FEEDS.items():
            i = grpcclient.InferInput(name, list(arr.shape), "INT64")
            i.set_data_from_numpy(arr)
            inputs.append(i)
        h = {"authorization": f"Bearer {grant['token']}"}
        got = c.infer("minilm", inputs, headers=h).as_numpy("last_hidden_state")
        np.testing.assert_allclose(got, want(), rtol=1e-5, atol=1e-5)
        assert c.is_model_ready("minilm", headers=h)

        with pytest.raises(InferenceServerException, match="direct token is for model 'minilm'") as e:
            c.infer("other", inputs, headers=h)
        assert "PERMISSION_DENIED" in str(e.value.status())
        with pytest.raises(InferenceServerException, match="missing direct token") as e:
            c.infer("minilm", inputs)
        assert "UNAUTHENTICATED" in str(e.value.status())
        with pytest.raises(InferenceServerException, match="direct token") as e:
            c.infer("minilm", inputs, headers={"authorization": "Bearer forged"})
        assert "UNAUTHENTICATED" in str(e.value.status())
        c.close()
    finally:
        os.unlink(ca.name)
