"""infergate as a drop-in for Triton: the official clients (tritonclient HTTP, HTTP aio, gRPC, gRPC
aio), unchanged and as their documentation shows them, over TLS and plain listeners, with and
without a key (anonymous access on for loopback): compressed bodies both ways with every
algorithm they offer (and a decompression bomb refused), system shared memory for inputs and
outputs, model control over gRPC, BYTES with any bytes, Triton's error texts, sequences on a
stateful model, and raw gRPC stubs from Triton's protos without metadata."""
import asyncio
import gzip
import json
import os
import ssl
import subprocess
import tempfile
import threading
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
import tritonclient.http.aio as httpaio
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from conftest import BIN, ROOT, Gateway

SCRIPTS = os.path.join(ROOT, "scripts")
PYTHON = os.environ.get("INFERGATE_PYTHON", "python3")
MAX_REQUEST = 8 << 20


def accumulator_config(strategy, corrid="TYPE_INT64"):
    return json.dumps({
        "max_batch_size": 4,
        "sequence_batching": {
            "max_sequence_idle_microseconds": 30_000_000,
            **strategy,
            "control_input": [
                {"name": "start", "control": [{"kind": "CONTROL_SEQUENCE_START", "int32_false_true": [0, 1]}]},
                {"name": "ready", "control": [{"kind": "CONTROL_SEQUENCE_READY", "int32_false_true": [0, 1]}]},
                {"name": "corrid", "control": [{"kind": "CONTROL_SEQUENCE_CORRID", "data_type": corrid}]},
            ],
            "state": [{"input_name": "acc_in", "output_name": "acc_out", "data_type": "TYPE_FP32", "dims": [1],
                       "initial_state": {"name": "zero", "data_type": "TYPE_FP32", "dims": [1], "zero_data": True}}],
        },
    })


ACC_DIRECT = accumulator_config({"direct": {}})
ACC_OLDEST = accumulator_config({"oldest": {"max_candidate_sequences": 4}})
ACC_STRING = accumulator_config({"oldest": {"max_candidate_sequences": 4}}, corrid="TYPE_STRING")


def write_model(directory, kind):
    path = os.path.join(directory, f"{kind}.onnx")
    subprocess.run([PYTHON, os.path.join(SCRIPTS, "test_models.py"), kind, path], check=True)
    return path


def add_model(data, name, path, config=None):
    args = [BIN, "models", "add", "--data-dir", data, "--name", name, path]
    if config:
        args += ["--config", config]
    subprocess.run(args, check=True, capture_output=True)


def start_dropin(insecure, extra=()):
    data = tempfile.mkdtemp(prefix="infergate-dropin-")
    models = tempfile.mkdtemp(prefix="infergate-dropin-models-")
    add_model(data, "double", write_model(models, "double"))
    add_model(data, "strings", write_model(models, "string-identity"))
    accumulator = write_model(models, "accumulator")
    add_model(data, "acc_direct", accumulator, ACC_DIRECT)
    add_model(data, "acc_oldest", accumulator, ACC_OLDEST)
    add_model(data, "acc_string", write_model(models, "accumulator-string"), ACC_STRING)
    args = ("--anonymous-scopes", "infer,upload", "--max-request-bytes", str(MAX_REQUEST), *extra)
    return Gateway(data, insecure=insecure, extra_args=args)


@pytest.fixture(scope="module", params=["tls", "plain"])
def g(request):
    gateway = start_dropin(insecure=request.param == "plain")
    yield gateway
    gateway.stop()


# ---- clients, as tritonclient's documentation builds them


def http(g):
    if g.scheme == "https":
        return httpclient.InferenceServerClient(
            url=g.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    return httpclient.InferenceServerClient(url=g.hostport)


def http_aio(g):
    if g.scheme == "https":
        return httpaio.InferenceServerClient(
            url=g.hostport, ssl=True, ssl_context=ssl.create_default_context(cafile=g.cert))
    return httpaio.InferenceServerClient(url=g.hostport)


def grpc_client(g):
    if g.scheme == "https":
        return grpcclient.InferenceServerClient(url=g.grpc_hostport, ssl=True, root_certificates=g.cert)
    return grpcclient.InferenceServerClient(url=g.grpc_hostport)


def grpc_aio(g):
    if g.scheme == "https":
        return grpcaio.InferenceServerClient(url=g.grpc_hostport, ssl=True, root_certificates=g.cert)
    return grpcaio.InferenceServerClient(url=g.grpc_hostport)


def stub(g):
    if g.scheme == "https":
        with open(g.cert, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(g.grpc_hostport, creds)
    else:
        channel = grpc.insecure_channel(g.grpc_hostport)
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


def headers(key):
    return {"authorization": f"Bearer {key}"} if key else None


def double_inputs(module, x, binary=True):
    i = module.InferInput("x", list(x.shape), "FP32")
    if module is httpclient:
        i.set_data_from_numpy(x, binary_data=binary)
    else:
        i.set_data_from_numpy(x)
    return [i]


X = np.arange(12, dtype=np.float32).reshape(3, 4)


# ---- anonymous access and keys, every client


@pytest.mark.parametrize("keyed", [False, True], ids=["anonymous", "key"])
def test_sync_clients_with_and_without_a_key(g, keyed):
    key = g.key("infer") if keyed else None
    c = http(g)
    assert c.is_server_ready(headers=headers(key))
    assert c.is_model_ready("double", headers=headers(key))
    result = c.infer("double", double_inputs(httpclient, X), headers=headers(key))
    np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
    gc = grpc_client(g)
    assert gc.get_server_metadata(headers=headers(key)).name == "infergate"
    result = gc.infer("double", double_inputs(grpcclient, X), headers=headers(key))
    np.testing.assert_array_equal(result.as_numpy("y"), X * 2)


@pytest.mark.parametrize("keyed", [False, True], ids=["anonymous", "key"])
def test_aio_clients_with_and_without_a_key(g, keyed):
    key = g.key("infer") if keyed else None

    async def run():
        c = http_aio(g)
        try:
            assert await c.is_model_ready("double", headers=headers(key))
            result = await c.infer("double", double_inputs(httpclient, X), headers=headers(key))
            np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
        finally:
            await c.close()
        gc = grpc_aio(g)
        try:
            result = await gc.infer("double", double_inputs(grpcclient, X), headers=headers(key))
            np.testing.assert_array_equal(result.as_numpy("y"), X * 2)
        finally:
            await gc.close()

    asyncio.run(run())


def test_raw_grpc_stubs_need_no_metadata(g):
    s = stub(g)
    assert s.ServerLive(service_pb2.ServerLiveRequest()).live
    request = service_pb2.ModelInferRequest(model_name="double")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    tensor.contents.fp32_contents.extend([1.5, -2.0])
    answer = s.ModelInfer(request)
    assert np.frombuffer(answer.raw_output_contents[0], dtype=np.float32).tolist() == [3.0, -4.0]


def test_anonymous_callers_never_get_admin_and_a_bad_key_is_refused(g):
    c = http(g)
    with pytest.raises(InferenceServerException) as refused:
        c.infer("double", double_inputs(httpclient, X), headers=headers("ig_0123456789ab_forged"))
    assert "invalid or revoked" in str(refused.value)
    url = f"{g.url}/api/keys"
    context = ssl.create_default_context(cafile=g.cert) if g.scheme == "https" else None
    with pytest.raises(urllib.error.HTTPError) as admin:
        urllib.request.urlopen(url, context=context)
    assert admin.value.code == 401
    assert "send an API key" in json.loads(admin.value.read())["error"]
    with pytest.raises(InferenceServerException) as grpc_forged:
        grpc_client(g).infer("double", double_inputs(grpcclient, X), headers=headers("ig_0123456789ab_forged"))
    assert "invalid or revoked" in str(grpc_forged.value)


# ---- compression


@pytest.mark.parametrize("request_algorithm", ["gzip", "deflate", None])
@pytest.mark.parametrize("response_algorithm", ["gzip", "deflate", None])
def test_http_compression_both_ways(g, request_algorithm, response_algorithm):
    x = np.tile(np.arange(8, dtype=np.float32), (2, 128))  # compresses well, above 1 KiB
    for binary in (True, False):
        result = http(g).infer("double", double_inputs(httpclient, x, binary=binary),
                               outputs=[httpclient.InferRequestedOutput("y", binary_data=binary)],
                               request_compression_algorithm=request_algorithm,
                               response_compression_algorithm=response_algorithm)
        np.testing.assert_array_equal(result.as_numpy("y"), x * 2)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_http_aio_compression(g, algorithm):
    x = np.ones((4, 256), dtype=np.float32)

    async def run():
        c = http_aio(g)
        try:
            result = await c.infer("double", double_inputs(httpclient, x),
                                   request_compression_algorithm=algorithm,
                                   response_compression_algorithm=algorithm)
            np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
        finally:
            await c.close()

    asyncio.run(run())


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_grpc_compression_both_ways(g, algorithm):
    x = np.ones((4, 256), dtype=np.float32)
    result = grpc_client(g).infer("double", double_inputs(grpcclient, x), compression_algorithm=algorithm)
    np.testing.assert_array_equal(result.as_numpy("y"), x * 2)

    async def run():
        c = grpc_aio(g)
        try:
            result = await c.infer("double", double_inputs(grpcclient, x), compression_algorithm=algorithm)
            np.testing.assert_array_equal(result.as_numpy("y"), x * 2)
        finally:
            await c.close()

    asyncio.run(run())


def test_a_decompression_bomb_is_refused_over_http_and_grpc(g):
    zeros = bytes(MAX_REQUEST * 2)  # twice the request limit once inflated
    bomb = gzip.compress(b'{"inputs": [{"name": "x", "shape": [1, 1], "datatype": "FP32", "data": [0]}]}' + zeros)
    assert len(bomb) < MAX_REQUEST // 100
    request = urllib.request.Request(f"{g.url}/v2/models/double/infer", data=bomb, method="POST",
                                     headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})
    context = ssl.create_default_context(cafile=g.cert) if g.scheme == "https" else None
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, context=context)
    assert refused.value.code == 413
    assert "once decompressed" in json.loads(refused.value.read())["error"]

    big = service_pb2.ModelInferRequest(model_name="double")
    big.inputs.add(name="x", datatype="FP32", shape=[1, MAX_REQUEST // 2])
    big.raw_input_contents.append(zeros)
    with pytest.raises(grpc.RpcError) as exhausted:
        stub(g).ModelInfer(big, compression=grpc.Compression.Gzip)
    assert exhausted.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The server is still there.
    assert http(g).is_server_live()


# ---- system shared memory


class Regions:
    """Regions created with tritonclient's own shared-memory utilities, destroyed at the end."""

    def __init__(self):
        self.handles = []

    def create(self, name, size):
        key = f"/ig-test-{os.getpid()}-{name}"
        handle = shm.create_shared_memory_region(name, key, size)
        self.handles.append(handle)
        return key, handle

    def close(self):
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def regions():
    r = Regions()
    yield r
    r.close()


@pytest.mark.parametrize("client", ["http", "grpc"])
def test_inputs_and_outputs_through_shared_memory_with_offsets(g, regions, client):
    module, c = (httpclient, http(g)) if client == "http" else (grpcclient, grpc_client(g))
    key = g.key("infer")
    h = headers(key)
    c.unregister_system_shared_memory(headers=h)
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    in_key, in_handle = regions.create(f"in-{client}", 64 + x.nbytes)
    out_key, out_handle = regions.create(f"out-{client}", 32 + x.nbytes)
    shm.set_shared_memory_region(in_handle, [x], offset=64)
    c.register_system_shared_memory("in", in_key, 64 + x.nbytes, headers=h)
    # The output region starts 32 bytes into its object.
    c.register_system_shared_memory("out", out_key, x.nbytes, offset=32, headers=h)
    status = c.get_system_shared_memory_status(headers=h)
    names = sorted(s["name"] for s in status) if client == "http" else sorted(status.regions)
    assert names == ["in", "out"]
    i = module.InferInput("x", list(x.shape), "FP32")
    i.set_shared_memory("in", x.nbytes, offset=64)
    o = module.InferRequestedOutput("y")
    o.set_shared_memory("out", x.nbytes)
    result = c.infer("double", [i], outputs=[o], headers=h)
    # The answer names the output; its data is in the region.
    described = result.get_output("y")
    shape = described["shape"] if client == "http" else list(described.shape)
    assert shape == [2, 8]
    got = shm.get_contents_as_numpy(out_handle, np.float32, list(x.shape), offset=32)
    np.testing.assert_array_equal(got, x * 2)
    # The output did not fit: refused before anything is written.
    small = module.InferRequestedOutput("y")
    small.set_shared_memory("out", x.nbytes - 4)
    with pytest.raises(InferenceServerException) as too_small:
        c.infer("double", [i], outputs=[small], headers=h)
    assert "should be at least" in str(too_small.value)
    # An offset past the region.
    beyond = module.InferInput("x", list(x.shape), "FP32")
    beyond.set_shared_memory("in", x.nbytes, offset=128)
    with pytest.raises(InferenceServerException) as past:
        c.infer("double", [beyond], headers=h)
    assert "Invalid offset + byte size" in str(past.value)
    c.unregister_system_shared_memory("in", headers=h)
    c.unregister_system_shared_memory(headers=h)
    assert len(c.get_system_shared_memory_status(headers=h) if client == "http"
               else c.get_system_shared_memory_status(headers=h).regions) == 0


def test_another_keys_region_is_not_found(g, regions):
    c = http(g)
    owner, other = g.key("infer"), g.key("infer")
    x = np.ones((1, 4), dtype=np.float32)
    key, handle = regions.create("private", x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("mine", key, x.nbytes, headers=headers(owner))
    i = httpclient.InferInput("x", [1, 4], "FP32")
    i.set_shared_memory("mine", x.nbytes)
    assert c.infer("double", [i], headers=headers(owner)).as_numpy("y").tolist() == [[2.0] * 4]
    with pytest.raises(InferenceServerException) as hidden:
        c.infer("double", [i], headers=headers(other))
    assert "Unable to find system shared memory region: 'mine'" in str(hidden.value)
    assert c.get_system_shared_memory_status(headers=headers(other)) == []
    # Anonymous callers share one set of their own.
    with pytest.raises(InferenceServerException):
        c.get_system_shared_memory_status("mine")
    c.unregister_system_shared_memory(headers=headers(owner))


def test_a_shrunk_object_and_unregister_during_use_are_errors_not_crashes(g, regions):
    c = http(g)
    h = headers(g.key("infer"))
    x = np.ones((64, 1024), dtype=np.float32)
    key, handle = regions.create("shrinks", x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("shrinks", key, x.nbytes, headers=h)
    os.truncate(f"/dev/shm{key}", 16)
    i = httpclient.InferInput("x", list(x.shape), "FP32")
    i.set_shared_memory("shrinks", x.nbytes)
    with pytest.raises(InferenceServerException) as shrunk:
        c.infer("double", [i], headers=h)
    assert "shrank" in str(shrunk.value)
    c.unregister_system_shared_memory("shrinks", headers=h)

    key, handle = regions.create("busy", x.nbytes)
    shm.set_shared_memory_region(handle, [x])
    c.register_system_shared_memory("busy", key, x.nbytes, headers=h)
    outcomes = []

    def worker():
        client = http(g)
        for _ in range(10):
            i = httpclient.InferInput("x", list(x.shape), "FP32")
            i.set_shared_memory("busy", x.nbytes)
            try:
                y = client.infer("double", [i], headers=h).as_numpy("y")
                outcomes.append(bool((y == 2).all()))
            except InferenceServerException as e:
                outcomes.append("Unable to find" in str(e))

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    c.unregister_system_shared_memory("busy", headers=h)
    for t in threads:
        t.join()
    assert len(outcomes) == 30 and all(outcomes), outcomes
    assert c.is_server_live()


def test_cuda_shared_memory_answers_as_on_a_host_without_gpus(g):
    for c in (http(g), grpc_client(g)):
        c.unregister_cuda_shared_memory()
        status = c.get_cuda_shared_memory_status()
        assert (status == [] if isinstance(c, httpclient.InferenceServerClient) else len(status.regions) == 0)
        with pytest.raises(InferenceServerException) as refused:
            c.register_cuda_shared_memory("gpu", b"\0" * 64, 0, 64)
        assert "GPUs not supported" in str(refused.value)


# ---- model control over gRPC, as over HTTP


def test_model_control_over_grpc_matches_http(g):
    c, hc = grpc_client(g), http(g)
    index = {m.name for m in c.get_model_repository_index().models}
    assert {"double", "strings", "acc_direct"} <= index
    assert index == {m["name"] for m in hc.get_model_repository_index()}
    c.load_model("double", config=json.dumps({"name": "double", "backend": "onnxruntime", "max_batch_size": 0}))
    ready = [m for m in c.get_model_repository_index().models if m.name == "double"]
    assert ready[0].state == "READY"
    c.unload_model("double")
    unloaded = [m for m in hc.get_model_repository_index() if m["name"] == "double"]
    assert unloaded[0]["state"] == "UNAVAILABLE"
    with pytest.raises(InferenceServerException) as unknown:
        c.load_model("nope")
    assert "Request for unknown model: 'nope' is not found" in str(unknown.value)
    # It loads again on the next request.
    assert grpc_client(g).infer("double", double_inputs(grpcclient, X)).as_numpy("y")[0][1] == 2.0


# ---- BYTES with any bytes


ODD = np.array([b"he\x00llo", b"\x00\x01\x02\x03", b"\xff\xfe", b""], dtype=np.object_)


def test_bytes_with_any_bytes_over_http_and_grpc(g):
    i = httpclient.InferInput("text", [len(ODD)], "BYTES")
    i.set_data_from_numpy(ODD, binary_data=True)
    result = http(g).infer("strings", [i], outputs=[httpclient.InferRequestedOutput("echo", binary_data=True)])
    assert result.as_numpy("echo").tolist() == ODD.tolist()
    # JSON carries the UTF-8 ones (zero bytes included); the answer is JSON too.
    utf8 = ODD[:2]
    i = httpclient.InferInput("text", [2], "BYTES")
    i.set_data_from_numpy(utf8, binary_data=False)
    result = http(g).infer("strings", [i], outputs=[httpclient.InferRequestedOutput("echo", binary_data=False)])
    assert [v if isinstance(v, bytes) else v.encode() for v in result.as_numpy("echo").tolist()] == utf8.tolist()
    gi = grpcclient.InferInput("text", [len(ODD)], "BYTES")
    gi.set_data_from_numpy(ODD)
    assert grpc_client(g).infer("strings", [gi]).as_numpy("echo").tolist() == ODD.tolist()
    request = service_pb2.ModelInferRequest(model_name="strings")
    typed = request.inputs.add(name="text", datatype="BYTES", shape=[len(ODD)])
    typed.contents.bytes_contents.extend(ODD.tolist())
    answer = stub(g).ModelInfer(request)
    raw = answer.raw_output_contents[0]
    items, at = [], 0
    while at < len(raw):
        n = int.from_bytes(raw[at:at + 4], "little")
        items.append(raw[at + 4:at + 4 + n])
        at += 4 + n
    assert items == ODD.tolist()


# ---- Triton's error texts


def test_error_texts_are_tritons(g):
    for c, module in ((http(g), httpclient), (grpc_client(g), grpcclient)):
        with pytest.raises(InferenceServerException) as unknown:
            c.infer("nope", double_inputs(module, X))
        assert "Request for unknown model: 'nope' is not found" in str(unknown.value)
        wrong = module.InferInput("z", [1, 1], "FP32")
        wrong.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
        with pytest.raises(InferenceServerException) as name:
            c.infer("double", [wrong])
        assert "unexpected inference input 'z' for model 'double'" in str(name.value)
        with pytest.raises(InferenceServerException) as version:
            c.infer("double", double_inputs(module, X), model_version="9")
        assert "Request for unknown model: 'double' version 9 is not found" in str(version.value)


# ---- sequences


def run_sequences(send, model):
    """Three interleaved sequences (integer ids: the CORRID control is TYPE_INT64); each answer is its sequence's
    running sum."""
    values = {1001: [1, 2, 3, 4], 1002: [10, 20, 30, 40], 1003: [100, 200, 300, 400]}
    sums = {k: 0 for k in values}
    for step in range(4):
        for corr, xs in values.items():
            sums[corr] += xs[step]
            got = send(model, corr, xs[step], start=step == 0, end=step == 3)
            assert got == sums[corr], (model, corr, step, got)


def http_send(c):
    def send(model, corr, x, start, end):
        i = httpclient.InferInput("x", [1, 1], "FP32")
        i.set_data_from_numpy(np.array([[x]], dtype=np.float32))
        r = c.infer(model, [i], outputs=[httpclient.InferRequestedOutput("sum")],
                    sequence_id=corr, sequence_start=start, sequence_end=end)
        return float(r.as_numpy("sum")[0][0])
    return send


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_interleaved_sequences_over_http(g, model):
    run_sequences(http_send(http(g)), model)


@pytest.mark.parametrize("model", ["acc_direct", "acc_oldest"])
def test_interleaved_sequences_on_a_grpc_stream(g, model):
    c = grpc_client(g)
    answers = []
    done = threading.Event()

    def callback(result, error):
        answers.append((result, error))
        if len(answers) == 12:
            done.set()

    c.start_stream(callback=callback)
    expected = {}
    sums = {}
    values = {7: [1, 2, 3, 4], 8: [5, 6, 7, 8], 9: [9, 10, 11, 12]}
    for step in range(4):
        for corr, xs in values.items():
            sums[corr] = sums.get(corr, 0) + xs[step]
            i = grpcclient.InferInput("x", [1, 1], "FP32")
            i.set_data_from_numpy(np.array([[xs[step]]], dtype=np.float32))
            request_id = f"{corr}-{step}"
            expected[request_id] = sums[corr]
            # Sent without waiting for answers: a sequence's requests still run in order.
            c.async_stream_infer(model, [i], request_id=request_id, sequence_id=corr,
                                 sequence_start=step == 0, sequence_end=step == 3,
                                 outputs=[grpcclient.InferRequestedOutput("sum")])
    assert done.wait(60)
    c.stop_stream()
    for result, error in answers:
        assert error is None, error
        response = result.get_response()
        assert float(result.as_numpy("sum")[0][0]) == expected[response.id], response.id
        assert response.parameters["triton_final_response"].bool_param


def test_string_correlation_ids_over_http_and_grpc(g):
    """A model whose CORRID control is TYPE_STRING takes string ids (and Triton's clients send
    them as strings); each sequence's model run sees its own id."""
    values = {"alpha": [1, 2, 3], "beta": [10, 20, 30], "gamma": [100, 200, 300]}
    for client, module in ((http(g), httpclient), (grpc_client(g), grpcclient)):
        sums = {k: 0 for k in values}
        for step in range(3):
            for corr, xs in values.items():
                sums[corr] += xs[step]
                i = module.InferInput("x", [1, 1], "FP32")
                i.set_data_from_numpy(np.array([[xs[step]]], dtype=np.float32))
                r = client.infer("acc_string", [i], sequence_id=corr, sequence_start=step == 0,
                                 sequence_end=step == 2,
                                 outputs=[module.InferRequestedOutput("sum"),
                                          module.InferRequestedOutput("corr")])
                assert float(r.as_numpy("sum")[0][0]) == sums[corr], (module.__name__, corr, step)
                assert r.as_numpy("corr")[0][0] == corr.encode(), (module.__name__, corr)
    # An integer id to a string CORRID is given as its text; a string id to an integer CORRID
    # is refused naming the control's type.
    i = httpclient.InferInput("x", [1, 1], "FP32")
    i.set_data_from_numpy(np.array([[5]], dtype=np.float32))
    r = http(g).infer("acc_string", [i], sequence_id=42, sequence_start=True, sequence_end=True,
                      outputs=[httpclient.InferRequestedOutput("corr")])
    assert r.as_numpy("corr")[0][0] == b"42"
    with pytest.raises(InferenceServerException, match="TYPE_INT64"):
        i = httpclient.InferInput("x", [1, 1], "FP32")
        i.set_data_from_numpy(np.array([[1]], dtype=np.float32))
        http(g).infer("acc_direct", [i], sequence_id="alpha", sequence_start=True)


def test_a_request_of_an_unknown_sequence_is_refused(g):
    i = httpclient.InferInput("x", [1, 1], "FP32")
    i.set_data_from_numpy(np.ones((1, 1), dtype=np.float32))
    with pytest.raises(InferenceServerException) as refused:
        http(g).infer("acc_direct", [i], sequence_id=424242)
    assert "START" in str(refused.value)
    with pytest.raises(InferenceServerException) as none:
        http(g).infer("acc_direct", [i])
    assert "correlation ID" in str(none.value)
