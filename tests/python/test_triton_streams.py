"""Decoupled models and sequences as Triton's clients drive them: a chat model over the KServe
gRPC stream (one response per generated piece of text, Triton's final flag, the empty final
response on request) and refused on unary calls; a decoupled pipeline's results; anonymous
WebSocket streams; and a stateful model's sequences through a manager and its workers, each
sequence on the worker the rendezvous hash of its correlation id names, ended with a clear error
when that worker is lost."""
import hashlib
import json
import time
import os
import queue
import shutil
import ssl
import subprocess
import tempfile

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import websocket
from tritonclient.utils import InferenceServerException

from conftest import BIN, MODELS, Gateway
from test_triton_dropin import ACC_DIRECT, ACC_OLDEST, add_model, http_send, run_sequences, write_model
from test_workers import Worker

PLUGINS = os.environ.get("INFERGATE_PLUGINS", os.path.join(os.path.dirname(BIN), "..", "..", "plugins", "dist"))


@pytest.fixture(scope="module")
def g():
    data = tempfile.mkdtemp(prefix="infergate-streams-")
    models = tempfile.mkdtemp(prefix="infergate-streams-models-")
    add_model(data, "smollm2", os.path.join(MODELS, "smollm2.gguf"))
    add_model(data, "double", write_model(models, "double"))
    gateway = Gateway(data, extra_args=("--anonymous-scopes", "infer", "--llm-threads", "2"))
    yield gateway
    gateway.stop()


def grpc_client(g):
    return grpcclient.InferenceServerClient(url=g.grpc_hostport, ssl=True, root_certificates=g.cert)


def text_input(prompt, max_tokens=8, stream=None):
    p = grpcclient.InferInput("text_input", [1], "BYTES")
    p.set_data_from_numpy(np.array([prompt.encode()], dtype=np.object_))
    s = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
    s.set_data_from_numpy(np.array([json.dumps({"max_tokens": max_tokens, "temperature": 0}).encode()],
                                   dtype=np.object_))
    inputs = [p, s]
    if stream is not None:
        b = grpcclient.InferInput("stream", [1], "BOOL")
        b.set_data_from_numpy(np.array([stream]))
        inputs.append(b)
    return inputs


def collect(c, inputs, **kwargs):
    """A stream request's responses up to its final one (without a key: anonymous)."""
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    c.async_stream_infer("smollm2", inputs, request_id="r1", **kwargs)
    responses = []
    while True:
        result, error = answers.get(timeout=120)
        assert error is None, error
        response = result.get_response()
        responses.append(result)
        if response.parameters["triton_final_response"].bool_param:
            break
    c.stop_stream()
    return responses


def text_of(result):
    return result.as_numpy("text_output")[0].decode()


def test_a_chat_model_answers_one_response_per_piece_of_text(g):
    c = grpc_client(g)
    responses = collect(c, text_input("The capital of France is", max_tokens=8))
    assert len(responses) > 1
    assert all(r.get_response().id == "r1" for r in responses)
    flags = [r.get_response().parameters["triton_final_response"].bool_param for r in responses]
    assert flags == [False] * (len(responses) - 1) + [True]
    streamed = "".join(text_of(r) for r in responses)
    assert streamed.strip()

    # The same prompt, greedy: the same text in one response when not streamed.
    whole = collect(c, text_input("The capital of France is", max_tokens=8, stream=False))
    assert len(whole) == 1 and text_of(whole[0]) == streamed

    # An empty final response of its own, when asked for.
    with_empty = collect(c, text_input("The capital of France is", max_tokens=8), enable_empty_final_response=True)
    last = with_empty[-1].get_response()
    assert len(last.outputs) == 0 and last.parameters["triton_final_response"].bool_param
    assert "".join(text_of(r) for r in with_empty[:-1]) == streamed


def test_unary_calls_to_a_decoupled_model_are_refused_as_triton_refuses_them(g):
    with pytest.raises(InferenceServerException) as grpc_refused:
        grpc_client(g).infer("smollm2", text_input("Hi"))
    assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in str(grpc_refused.value)
    http = httpclient.InferenceServerClient(
        url=g.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    i = httpclient.InferInput("text_input", [1], "BYTES")
    i.set_data_from_numpy(np.array([b"Hi"], dtype=np.object_))
    with pytest.raises(InferenceServerException) as http_refused:
        http.infer("smollm2", [i])
    assert "HTTP end point doesn't support models with decoupled transaction policy" in str(http_refused.value)
    config = grpc_client(g).get_model_config("smollm2").config
    assert config.model_transaction_policy.decoupled


def test_a_decoupled_pipeline_answers_each_result(g):
    admin = {"Authorization": f"Bearer {g.admin_key}"}
    with open(os.path.join(PLUGINS, "passthrough.wasm"), "rb") as f:
        r = requests.post(f"{g.url}/api/plugins", data=f.read(), headers=admin, verify=g.cert)
        assert r.status_code in (200, 201), r.text
    spec = {"pre": ["passthrough"], "model": "double", "post": [], "decoupled": True}
    r = requests.put(f"{g.url}/api/pipelines/rows", json=spec, headers=admin, verify=g.cert)
    assert r.status_code in (200, 201), r.text
    c = grpc_client(g)
    answers = queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)))
    x = grpcclient.InferInput("x", [3, 2], "FP32")
    x.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(3, 2))
    c.async_stream_infer("rows", [x], request_id="p")
    rows = []
    while True:
        result, error = answers.get(timeout=60)
        assert error is None, error
        rows.append(result)
        if result.get_response().parameters["triton_final_response"].bool_param:
            break
    c.stop_stream()
    assert [r.as_numpy("y").tolist() for r in rows] == [[[0.0, 2.0]], [[4.0, 6.0]], [[8.0, 10.0]]]
    with pytest.raises(InferenceServerException):
        c.infer("rows", [x])


def test_an_anonymous_websocket_is_served_at_once(g):
    ws = websocket.create_connection(f"wss://{g.hostport}/v2/stream", subprotocols=["infergate.v1"],
                                     sslopt={"ca_certs": g.cert})
    try:
        ws.send(json.dumps({"id": 1, "model": "double", "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1.5, 2.0]}]}))
        answer = json.loads(ws.recv())
        assert answer["id"] == 1 and answer["outputs"][0]["data"] == [3.0, 4.0]
        # A key presented later is used from then on.
        ws.send(json.dumps({"api_key": g.key("infer")}))
        assert json.loads(ws.recv()) == {"authenticated": True}
        ws.send(json.dumps({"id": 2, "model": "double", "inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1]}]}))
        assert json.loads(ws.recv())["outputs"][0]["data"] == [2.0]
    finally:
        ws.close()


# ---- sequences through a manager and its workers


def rendezvous_rank(key, workers):
    """cluster/src/rendezvous.rs, in Python: every replica ranks the workers alike."""
    def weight(worker):
        h = hashlib.sha256()
        h.update(len(key).to_bytes(8, "little"))
        h.update(key.encode())
        h.update(worker.encode())
        return int.from_bytes(h.digest()[:8], "big")
    return sorted(workers, key=lambda w: (-weight(w), w))


def correlation_text(corr):
    # The engine's CorrelationId display: integers as they are, strings quoted.
    return str(corr) if isinstance(corr, int) else f"'{corr}'"


@pytest.fixture(scope="module")
def cluster():
    data = tempfile.mkdtemp(prefix="infergate-seq-manager-")
    models = tempfile.mkdtemp(prefix="infergate-seq-models-")
    accumulator = write_model(models, "accumulator")
    add_model(data, "acc_direct", accumulator, ACC_DIRECT)
    add_model(data, "acc_oldest", accumulator, ACC_OLDEST)
    manager = Gateway(data, extra_args=("--no-local-engine", "--anonymous-scopes", "infer"))
    token = subprocess.run([BIN, "workers", "token", "create", "--data-dir", manager.data],
                           check=True, capture_output=True, text=True).stdout.strip()
    dirs = tempfile.mkdtemp(prefix="infergate-seq-workers-")
    workers = [Worker(manager, token, os.path.join(dirs, name)) for name in ("a", "b")]
    admin = {"Authorization": f"Bearer {manager.admin_key}"}
    ids = {}
    for _ in range(300):
        listed = requests.get(f"{manager.url}/api/workers", headers=admin, verify=manager.cert).json()
        ids = {w["advertise"]: w["id"] for w in listed["workers"] if w["state"] == "ready" and w["id"] != "local"}
        if len(ids) == 2:
            break
        time.sleep(0.1)
    assert len(ids) == 2, listed
    # Each worker process with the id the manager knows it by.
    yield manager, {ids[w.address]: w for w in workers}
    for w in workers:
        if w.proc.poll() is None:
            w.stop()
    manager.stop()
    shutil.rmtree(dirs, ignore_errors=True)


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_interleaved_sequences_through_a_manager_and_workers(cluster, model):
    manager, _ = cluster
    http = httpclient.InferenceServerClient(
        url=manager.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=manager.cert))
    run_sequences(http_send(http), model)


def test_a_lost_worker_ends_its_sequences_with_a_clear_error(cluster):
    manager, workers = cluster
    ids = sorted(workers)
    http = httpclient.InferenceServerClient(
        url=manager.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=manager.cert))
    send = http_send(http)
    # Sequences on each worker, chosen as the manager chooses: by rendezvous over the ready
    # workers, keyed by model, version and correlation id.
    owner = {}
    for corr in range(5000, 5100):
        first = rendezvous_rank(f"acc_direct:1/{correlation_text(corr)}", ids)[0]
        owner.setdefault(first, corr)
        if len(owner) == 2:
            break
    assert len(owner) == 2
    for corr in owner.values():
        assert send("acc_direct", corr, 1, start=True, end=False) == 1
    lost_id = ids[0]
    workers[lost_id].proc.kill()
    workers[lost_id].proc.wait(timeout=30)
    with pytest.raises(InferenceServerException) as ended:
        send("acc_direct", owner[lost_id], 2, start=False, end=False)
    message = str(ended.value)
    assert "sequence 5" in message and "has ended" in message, message
    kept = next(corr for w, corr in owner.items() if w != lost_id)
    assert send("acc_direct", kept, 2, start=False, end=True) == 3
