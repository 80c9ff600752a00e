"""OpenTelemetry traces across hosts, checked with real OTLP receivers (OTLP/HTTP protobuf
bodies decoded with `opentelemetry-proto`, and its gRPC `TraceService` on grpcio, plain and
TLS): a KServe request through a manager (exporting over HTTP) to a worker (over gRPC), sent
with a `traceparent`, yields spans from both processes in the caller's trace with the right parent
links; sampling 0 records nothing the caller did not ask for; a receiver that is down fails no
request; Triton's trace extension, driven by tritonclient over HTTP and gRPC, changes what is
recorded at run time, per model."""
import json
import os
import queue
import re
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from conftest import BIN, start

IDS = [101, 1037, 2204, 2154, 2000, 2022, 6517, 102]
BODY = json.dumps({"inputs": [
    {"name": "input_ids", "shape": [1, 8], "datatype": "INT64", "data": IDS},
    {"name": "attention_mask", "shape": [1, 8], "datatype": "INT64", "data": [1] * 8},
    {"name": "token_type_ids", "shape": [1, 8], "datatype": "INT64", "data": [0] * 8},
]}).encode()

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


class Spans:
    """Every span received, with its resource's attributes."""

    def __init__(self):
        self.spans = []
        self.lock = threading.Lock()

    def keep(self, request):
        with self.lock:
            for rs in request.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.spans.append((resource, span))

    def trace(self, trace_id):
        with self.lock:
            return [(r, s) for r, s in self.spans if s.trace_id.hex() == trace_id]


class Receiver(Spans):
    """An OTLP/HTTP traces endpoint."""

    def __init__(self):
        super().__init__()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.keep(request)
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1/traces"

    def stop(self):
        self.server.shutdown()


class GrpcReceiver(Spans):
    """An OTLP/gRPC collector's `TraceService` (grpcio, with `opentelemetry-proto`'s stubs); TLS
    with `tls` = (cert PEM, key PEM); keeping its spans with another receiver's with `keep_in`."""

    def __init__(self, tls=None, keep_in=None):
        super().__init__()
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
        receiver = keep_in or self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.keep(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        if tls:
            credentials = grpc.ssl_server_credentials([(tls[1], tls[0])])
            port = self.server.add_secure_port("127.0.0.1:0", credentials)
            self.url = f"https://localhost:{port}"
        else:
            port = self.server.add_insecure_port("127.0.0.1:0")
            self.url = f"http://127.0.0.1:{port}"
        self.server.start()

    def stop(self):
        self.server.stop(grace=None)


class Worker:
    """`infergate worker` joined to `manager`, exporting to `endpoint` over `protocol`."""

    def __init__(self, manager, token, data, endpoint, protocol):
        args = [BIN, "worker", "--join", manager.url, "--join-token", token,
                "--listen", "127.0.0.1:0", "--data-dir", data, "--instances", "1", "--intra-threads", "1",
                "--otlp-endpoint", endpoint, "--otlp-protocol", protocol, "--trace-sample-ratio", "0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in self.proc.stderr], daemon=True).start()
        while True:
            line = re.sub(r"\x1b\[[0-9;]*m", "", lines.get(timeout=60))
            if re.search(r"worker listening on https://(\S+)", line):
                break

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)


def infer(gateway, key, headers=None, model="minilm"):
    ctx = ssl.create_default_context(cafile=gateway.cert)
    request = urllib.request.Request(
        f"{gateway.url}/v2/models/{model}/infer", data=BODY, method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}", **(headers or {})})
    with urllib.request.urlopen(request, context=ctx, timeout=60) as answer:
        json.load(answer)
        return answer.status, answer.headers


@pytest.fixture(scope="module")
def traced():
    """A manager exporting over OTLP/HTTP and its worker over gRPC, both kept in `receiver`."""
    receiver = Receiver()
    collector = GrpcReceiver(keep_in=receiver)
    manager = start([("minilm", "minilm.onnx")], extra_args=(
        "--no-local-engine", "--otlp-endpoint", receiver.url, "--trace-sample-ratio", "0"))
    dirs = tempfile.mkdtemp(prefix="infergate-workers-")
    worker = None
    try:
        token = subprocess.run([BIN, "workers", "token", "create", "--data-dir", manager.data],
                               check=True, capture_output=True, text=True).stdout.strip()
        worker = Worker(manager, token, os.path.join(dirs, "w"), collector.url, "grpc")
        yield manager, receiver
    finally:
        if worker:
            assert worker.stop() == 0
        manager.stop()
        receiver.stop()
        collector.stop()
        shutil.rmtree(dirs, ignore_errors=True)


def exemplars(gateway, key, histogram="infergate_request_duration_seconds"):
    """The trace ids of a histogram's bucket exemplars on /metrics (OpenMetrics)."""
    ctx = ssl.create_default_context(cafile=gateway.cert)
    request = urllib.request.Request(f"{gateway.url}/metrics", headers={
        "Authorization": f"Bearer {key}", "Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(request, context=ctx, timeout=30) as answer:
        text = answer.read().decode()
    return {m.group(1) for line in text.splitlines()
            if line.startswith(f"{histogram}_bucket{{")
            for m in [re.search(r' # \{trace_id="([0-9a-f]{32})"\} [0-9.e-]+ [0-9.]+$', line)] if m}


def wait_for(receiver, trace_id, names, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        spans = receiver.trace(trace_id)
        if names <= {s.name for _, s in spans}:
            return spans
        time.sleep(0.2)
    return receiver.trace(trace_id)


def test_one_trace_spans_the_manager_and_the_worker(traced):
    manager, receiver = traced
    key = manager.key()
    status, headers = infer(manager, key, {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
                                           "tracestate": "vendor=abc"})
    assert status == 200
    assert headers["X-Trace-Id"] == CALLER_TRACE, "the answer names the caller's trace"
    wanted = {"request", "admission", "read body", "forward", "worker hop",
              "worker request", "decode", "model run", "encode"}
    spans = wait_for(receiver, CALLER_TRACE, wanted)
    names = {s.name for _, s in spans}
    assert wanted <= names, f"missing spans: {wanted - names}"
    roles = {r["infergate.role"] for r, _ in spans}
    assert roles == {"manager", "worker"}
    assert all(r["service.name"] == "infergate" and r["host.name"] and r["service.version"] for r, _ in spans)
    by_id = {s.span_id.hex(): (r, s) for r, s in spans}
    request = [s for r, s in spans if s.name == "request" and r["infergate.role"] == "manager"]
    assert len(request) == 1 and request[0].parent_span_id.hex() == CALLER_SPAN, "the caller's span is the parent"
    (worker_request,) = [s for _, s in spans if s.name == "worker request"]
    hop_resource, hop = by_id[worker_request.parent_span_id.hex()]
    assert hop.name == "worker hop" and hop_resource["infergate.role"] == "manager", \
        "the worker's span is a child of the manager's hop"
    for resource, span in spans:
        if span.name != "request":
            assert span.parent_span_id.hex() in by_id, f"{span.name}: its parent is in the trace"
        if resource["infergate.role"] == "worker" and span.name != "worker request":
            assert by_id[span.parent_span_id.hex()][0]["infergate.role"] == "worker"
    (run,) = [s for r, s in spans if s.name == "model run" and r["infergate.role"] == "worker"]
    figures = {a.key: a.value.int_value for a in run.attributes}
    assert figures["compute_infer_us"] > 0 and figures["batch_size"] == 1, figures
    assert figures["batch_requests"] == 1 and "queue_us" in figures, figures
    attributes = {a.key: a for a in hop.attributes}
    assert attributes["model"].value.string_value == "minilm"
    assert attributes["request_bytes"].value.int_value > 0
    admission = {a.key: a for _, s in spans if s.name == "admission" for a in s.attributes}
    assert admission["anonymous"].value.bool_value is False
    assert CALLER_TRACE in exemplars(manager, manager.admin_key), "the latency bucket leads to the trace"
    secret = key.split(".")[-1]
    for _, span in spans:
        for a in span.attributes:
            assert secret not in str(a.value), "no key secret in an attribute"


def test_sampling_0_records_nothing_the_caller_did_not_ask_for(traced):
    manager, receiver = traced
    key = manager.key()
    status, headers = infer(manager, key)
    assert status == 200
    unasked = headers["X-Trace-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", unasked) and unasked != CALLER_TRACE
    not_sampled = "0af7651916cd43dd8448eb211c80319c"
    status, headers = infer(manager, key, {"traceparent": f"00-{not_sampled}-b7ad6b7169203331-00"})
    assert headers["X-Trace-Id"] == not_sampled
    # A malformed parent is ignored, never echoed: the trace starts at the server.
    status, headers = infer(manager, key, {"traceparent": f"00-{CALLER_TRACE.upper()}-{CALLER_SPAN}-01"})
    assert status == 200 and headers["X-Trace-Id"] not in (CALLER_TRACE, CALLER_TRACE.upper())
    malformed = headers["X-Trace-Id"]
    # A sampled request afterwards is exported within the batch delay: the ones before it
    # would have been too.
    marker = "1af7651916cd43dd8448eb211c80319c"
    infer(manager, key, {"traceparent": f"00-{marker}-b7ad6b7169203331-01"})
    assert wait_for(receiver, marker, {"request", "worker request"})
    for trace in (unasked, not_sampled, malformed):
        assert receiver.trace(trace) == [], f"trace {trace} was not to be recorded"
    assert not {unasked, not_sampled, malformed} & exemplars(manager, manager.admin_key), \
        "only recorded traces become exemplars"


def test_a_grpc_call_continues_the_callers_trace(traced):
    import numpy as np
    import tritonclient.grpc as grpcclient

    manager, receiver = traced
    trace, parent = "2af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331"
    c = grpcclient.InferenceServerClient(url=manager.grpc_hostport, ssl=True, root_certificates=manager.cert)
    inputs = []
    for name, data in (("input_ids", IDS), ("attention_mask", [1] * 8), ("token_type_ids", [0] * 8)):
        i = grpcclient.InferInput(name, [1, 8], "INT64")
        i.set_data_from_numpy(np.array([data], dtype=np.int64))
        inputs.append(i)
    c.infer("minilm", inputs, headers={"authorization": f"Bearer {manager.key()}",
                                       "traceparent": f"00-{trace}-{parent}-01"})
    spans = wait_for(receiver, trace, {"grpc request", "worker hop", "worker request"})
    (call,) = [s for _, s in spans if s.name == "grpc request"]
    assert call.parent_span_id.hex() == parent
    assert {r["infergate.role"] for r, _ in spans} == {"manager", "worker"}

    # A stream: the call's span continues the caller's trace, each request is its child.
    import queue as answers_queue
    trace = "2bf7651916cd43dd8448eb211c80319c"
    answers = answers_queue.Queue()
    c.start_stream(callback=lambda result, error: answers.put((result, error)),
                   headers={"authorization": f"Bearer {manager.key()}",
                            "traceparent": f"00-{trace}-{parent}-01"})
    try:
        for i in range(2):
            c.async_stream_infer("minilm", inputs, request_id=f"r{i}")
        for _ in range(2):
            result, error = answers.get(timeout=60)
            assert error is None, error
    finally:
        c.stop_stream()
    spans = wait_for(receiver, trace, {"grpc stream", "grpc stream request", "worker request"})
    (call,) = [s for _, s in spans if s.name == "grpc stream"]
    assert call.parent_span_id.hex() == parent
    requests = [s for _, s in spans if s.name == "grpc stream request"]
    assert sorted({a.key: a.value.string_value for a in r.attributes}["id"] for r in requests) == ["r0", "r1"]
    assert all(r.parent_span_id == call.span_id for r in requests)


def test_log_lines_of_a_recorded_request_carry_its_trace_and_span(monkeypatch):
    # Filtered by the server's crate: the span of a request whose trace is not recorded sits
    # under the same target as a recorded one, so its lines keep their request id.
    monkeypatch.setenv("INFERGATE_LOG", "warn,infergate_server=info,infergate_server::request_id=debug")
    receiver = Receiver()
    g = start([("minilm", "minilm.onnx")], extra_args=(
        "--log-format", "json", "--otlp-endpoint", receiver.url, "--trace-sample-ratio", "0"))
    try:
        key = g.key()
        recorded, dropped = "3af7651916cd43dd8448eb211c80319c", "4af7651916cd43dd8448eb211c80319c"
        _, headers = infer(g, key, {"traceparent": f"00-{recorded}-d7ad6b7169203331-01",
                                    "X-Request-Id": "logged-recorded"})
        infer(g, key, {"traceparent": f"00-{dropped}-d7ad6b7169203331-00",
                       "X-Request-Id": "logged-dropped"})
        spans = {}
        deadline = time.monotonic() + 20
        while len(spans) < 2 and time.monotonic() < deadline:
            try:
                line = g.lines.get(timeout=1)
            except queue.Empty:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            span = entry.get("span") or {}
            if entry.get("fields", {}).get("message") == "request finished":
                spans[span.get("request_id")] = span
        assert set(spans) >= {"logged-recorded", "logged-dropped"}, spans
        assert spans["logged-recorded"]["trace_id"] == recorded
        assert "trace_id" not in spans["logged-dropped"], "a dropped trace is not named in logs"
        (request,) = [s for _, s in wait_for(receiver, recorded, {"request"}) if s.name == "request"]
        assert spans["logged-recorded"]["span_id"] == request.span_id.hex(), \
            "the log line names the exported request span"
    finally:
        g.stop()
        receiver.stop()


def post_json(g, key, path, body, headers=None, method="POST"):
    ctx = ssl.create_default_context(cafile=g.cert)
    request = urllib.request.Request(
        f"{g.url}{path}", data=body if isinstance(body, bytes) else json.dumps(body).encode(),
        method=method, headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}",
                                **(headers or {})})
    with urllib.request.urlopen(request, context=ctx, timeout=120) as answer:
        return json.load(answer)


def test_chat_generations_and_plugin_calls_have_their_spans():
    receiver = Receiver()
    g = start([("minilm", "minilm.onnx"), ("smollm2", "smollm2.gguf")], extra_args=(
        "--otlp-endpoint", receiver.url, "--trace-sample-ratio", "0", "--llm-max-sequences", "1",
        "--llm-context", "512", "--llm-threads", "1"))
    try:
        admin = g.admin_key
        plugins = os.environ.get("INFERGATE_PLUGINS", "")
        for plugin in ("passthrough", "pii-mask"):
            with open(os.path.join(plugins, f"{plugin}.wasm"), "rb") as f:
                post_json(g, admin, "/api/plugins", f.read())
        post_json(g, admin, "/api/models/smollm2/guardrails", {"guardrails": [{"plugin": "pii-mask"}]},
                  method="PUT")
        chat = "5af7651916cd43dd8448eb211c80319c"
        answer = post_json(g, admin, "/v1/chat/completions", {
            "model": "smollm2", "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]},
            {"traceparent": f"00-{chat}-e7ad6b7169203331-01"})
        spans = wait_for(receiver, chat, {"request", "prefill", "decode"})
        by_name = {s.name: s for _, s in spans}
        assert {"prefill", "decode"} <= set(by_name), [s.name for _, s in spans]
        request = by_name["request"]
        for name in ("prefill", "decode"):
            assert by_name[name].parent_span_id == request.span_id, f"{name} is the request's child"
        prefill = {a.key: a.value for a in by_name["prefill"].attributes}
        decode = {a.key: a.value for a in by_name["decode"].attributes}
        assert prefill["model"].string_value == "smollm2"
        assert prefill["prompt_tokens"].int_value == answer["usage"]["prompt_tokens"]
        assert decode["completion_tokens"].int_value == answer["usage"]["completion_tokens"]
        answer_tokens = answer["usage"]["completion_tokens"]
        assert by_name["prefill"].end_time_unix_nano <= by_name["decode"].start_time_unix_nano
        assert [e.name for e in by_name["decode"].events] == ["first token"]

        post_json(g, admin, "/api/pipelines/traced", {"model": "minilm", "pre": ["passthrough"]},
                  method="PUT")
        piped = "6af7651916cd43dd8448eb211c80319c"
        post_json(g, admin, "/v2/models/traced/infer", BODY,
                  {"traceparent": f"00-{piped}-e7ad6b7169203331-01"})
        spans = wait_for(receiver, piped, {"request", "plugin"})
        (plugin,) = [s for _, s in spans if s.name == "plugin"]
        attributes = {a.key: a.value.string_value for a in plugin.attributes}
        assert attributes["plugin"] == "passthrough" and attributes["stage"] == "pre"
        assert attributes["outcome"] == "ok"

        # Each WebSocket message is a trace of its own, continuing the one it names and linked
        # to the connection's span.
        import websocket
        connection_trace = "7af7651916cd43dd8448eb211c80319c"
        ws = websocket.create_connection(
            f"wss://{g.url.split('://', 1)[1]}/v2/stream", subprotocols=["infergate.v1"],
            sslopt={"ca_certs": g.cert},
            header=[f"Authorization: Bearer {admin}",
                    f"traceparent: 00-{connection_trace}-f7ad6b7169203331-01"])
        messages = {"8af7651916cd43dd8448eb211c80319c": "a7ad6b7169203331",
                    "9af7651916cd43dd8448eb211c80319c": "b7ad6b7169203331"}
        try:
            inference = json.loads(BODY)
            for i, (trace, parent) in enumerate(messages.items()):
                ws.send(json.dumps({"id": i, "model": "minilm", "traceparent": f"00-{trace}-{parent}-01",
                                    **inference}))
                answer = json.loads(ws.recv())
                assert answer["id"] == i and "outputs" in answer, answer
        finally:
            ws.close()
        (upgrade,) = [s for _, s in wait_for(receiver, connection_trace, {"request"}) if s.name == "request"]
        for trace, parent in messages.items():
            spans = wait_for(receiver, trace, {"websocket message", "model run"})
            (message,) = [s for _, s in spans if s.name == "websocket message"]
            assert message.parent_span_id.hex() == parent, "the message continues the trace it names"
            assert [(l.trace_id.hex(), l.span_id) for l in message.links] == \
                [(connection_trace, upgrade.span_id)], "linked to the connection"
            (run,) = [s for _, s in spans if s.name == "model run"]
            assert run.trace_id.hex() == trace

        # Every latency histogram observed inside a recorded request leads to its trace. (Only
        # requests that asked to be recorded were: sampling is 0.)
        assert answer_tokens > 1, "an inter-token latency was observed"
        for histogram, trace in [
                ("infergate_request_duration_seconds", chat),
                ("infergate_request_duration_seconds", piped),
                ("infergate_llm_time_to_first_token_seconds", chat),
                ("infergate_llm_inter_token_latency_seconds", chat),
                ("infergate_guardrail_call_duration_seconds", chat),
                ("infergate_plugin_call_duration_seconds", piped)]:
            assert trace in exemplars(g, admin, histogram), histogram
    finally:
        g.stop()
        receiver.stop()


def span_outcomes(gateway):
    """`infergate_trace_spans_total` by outcome, from /metrics."""
    ctx = ssl.create_default_context(cafile=gateway.cert)
    request = urllib.request.Request(f"{gateway.url}/metrics",
                                     headers={"Authorization": f"Bearer {gateway.admin_key}"})
    with urllib.request.urlopen(request, context=ctx, timeout=30) as answer:
        text = answer.read().decode()
    return {m.group(1): int(m.group(2)) for m in
            re.finditer(r'^infergate_trace_spans_total\{outcome="(\w+)"\} (\d+)$', text, re.M)}


def wait_for_outcomes(gateway, done, timeout=30):
    deadline = time.monotonic() + timeout
    while not done(span_outcomes(gateway)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return span_outcomes(gateway)


def serve_twenty(gateway):
    """20 inferences, each answered and naming its trace, whatever the collector does."""
    key = gateway.key()
    for _ in range(20):
        status, headers = infer(gateway, key)
        assert status == 200 and headers["X-Trace-Id"]


@pytest.mark.parametrize("protocol,path", [("http/protobuf", "/v1/traces"), ("grpc", "")])
def test_a_receiver_that_is_down_fails_no_request(protocol, path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    g = start([("minilm", "minilm.onnx")], extra_args=(
        "--otlp-endpoint", f"http://127.0.0.1:{closed}{path}", "--otlp-protocol", protocol,
        "--trace-sample-ratio", "1"))
    try:
        serve_twenty(g)
        outcomes = wait_for_outcomes(g, lambda o: o.get("failed", 0) > 0)
        assert outcomes["failed"] > 0 and outcomes["sent"] == 0, outcomes
    finally:
        # Shutdown flushes the queue to a dead receiver: bounded (stop() fails when the process
        # has not exited within its wait).
        g.stop()


def test_a_receiver_that_never_answers_loses_spans_not_requests(tmp_path):
    """A collector that accepts connections and never answers holds the exporter for its
    timeout per batch: the bounded queue fills, spans past it are dropped and counted, and
    every request is served."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)
    held = []
    stop = threading.Event()

    def hold():
        hung.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(hung.accept()[0])
            except OSError:
                pass
    threading.Thread(target=hold, daemon=True).start()
    config = tmp_path / "traces.toml"
    config.write_text("[tracing]\nmax_queued_spans = 8\n")
    g = start([("minilm", "minilm.onnx")], extra_args=(
        "--config", str(config),
        "--otlp-endpoint", f"http://127.0.0.1:{hung.getsockname()[1]}/v1/traces",
        "--trace-sample-ratio", "1"))
    try:
        serve_twenty(g)
        # 20 recorded requests of several spans each, a queue of 8 and an exporter stuck on
        # its first batch: most spans are dropped at once.
        outcomes = wait_for_outcomes(g, lambda o: o.get("dropped", 0) > 0)
        assert outcomes["dropped"] > 0 and outcomes.get("sent", 0) == 0, outcomes
        assert held, "the exporter never reached the collector"
    finally:
        g.stop()
        stop.set()
        hung.close()
        for conn in held:
            conn.close()


def assert_spans_arrive_over_grpc(receiver):
    """A server exporting every trace to `receiver` over gRPC delivers a request's spans."""
    g = start([("minilm", "minilm.onnx")], extra_args=(
        "--otlp-endpoint", receiver.url, "--otlp-protocol", "grpc", "--trace-sample-ratio", "1"))
    try:
        status, headers = infer(g, g.key(), {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
        assert status == 200 and headers["X-Trace-Id"] == CALLER_TRACE
        wanted = {"request", "admission", "read body", "decode", "model run", "encode"}
        spans = wait_for(receiver, CALLER_TRACE, wanted)
        names = {s.name for _, s in spans}
        assert wanted <= names, f"missing spans: {wanted - names}"
        for resource, _ in spans:
            assert resource["infergate.role"] == "server" and resource["service.name"] == "infergate"
            assert resource["host.name"] and resource["service.version"]
        (request,) = [s for _, s in spans if s.name == "request"]
        assert request.parent_span_id.hex() == CALLER_SPAN
        # The receiver has the spans a moment before the exporter counts its answer.
        outcomes = wait_for_outcomes(g, lambda o: o.get("sent", 0) >= len(wanted))
        assert outcomes["sent"] >= len(wanted) and outcomes["failed"] == 0, outcomes
    finally:
        g.stop()
        receiver.stop()


def test_spans_reach_a_grpc_collector():
    assert_spans_arrive_over_grpc(GrpcReceiver())


def test_spans_reach_a_grpc_collector_over_tls(monkeypatch, tmp_path):
    # Another server's self-signed certificate (for localhost) is the collector's, and the one
    # the exporter is told to trust.
    other = start([])
    try:
        tls = os.path.join(other.data, "tls")
        with open(os.path.join(tls, "cert.pem"), "rb") as c, open(os.path.join(tls, "key.pem"), "rb") as k:
            pair = (c.read(), k.read())
    finally:
        other.stop()
    (tmp_path / "collector.pem").write_bytes(pair[0])
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "collector.pem"))
    assert_spans_arrive_over_grpc(GrpcReceiver(tls=pair))


def triton_clients(g):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    http = httpclient.InferenceServerClient(
        url=g.hostport, ssl=True, ssl_context_factory=lambda: ssl.create_default_context(cafile=g.cert))
    grpc = grpcclient.InferenceServerClient(url=g.grpc_hostport, ssl=True, root_certificates=g.cert)
    return http, grpc


def recorded(receiver, trace_ids):
    return [t for t in trace_ids if receiver.trace(t)]


@pytest.fixture(scope="module")
def settable():
    """A server with its own engine, two models and every trace recorded at startup."""
    receiver = Receiver()
    g = start([("minilm", "minilm.onnx"), ("quiet", "minilm.onnx")], extra_args=(
        "--otlp-endpoint", receiver.url, "--trace-sample-ratio", "1"))
    try:
        yield g, receiver
    finally:
        g.stop()
        receiver.stop()


def test_tritonclient_reads_and_changes_trace_settings_over_http_and_grpc(settable):
    from tritonclient.utils import InferenceServerException

    g, _ = settable
    http, grpc = triton_clients(g)
    admin = {"authorization": f"Bearer {g.admin_key}"}
    reader = {"authorization": f"Bearer {g.key()}"}
    start = http.get_trace_settings(headers=reader)
    assert start == {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
                     "trace_mode": "opentelemetry"}
    changed = http.update_trace_settings(model_name="quiet", settings={"trace_rate": "4"}, headers=admin)
    assert changed["trace_rate"] == "4" and changed["trace_level"] == ["TIMESTAMPS"]
    assert http.get_trace_settings(model_name="quiet", headers=reader)["trace_rate"] == "4"
    assert http.get_trace_settings(headers=reader) == start, "the server-wide ones are unchanged"

    def values(answer):
        return {name: setting.get("value", []) for name, setting in answer["settings"].items()}

    over_grpc = grpc.get_trace_settings(model_name="quiet", headers=reader, as_json=True)
    assert values(over_grpc)["trace_rate"] == ["4"]
    cleared = grpc.update_trace_settings(model_name="quiet", settings={"trace_rate": None},
                                         headers=admin, as_json=True)
    assert values(cleared)["trace_rate"] == ["1"], "the model follows the server-wide rate again"
    grpc.update_trace_settings(settings={"trace_count": "7"}, headers=admin)
    assert http.get_trace_settings(model_name="quiet", headers=reader)["trace_count"] == "7"
    http.update_trace_settings(settings={"trace_count": None}, headers=admin)
    assert http.get_trace_settings(headers=reader) == start

    with pytest.raises(InferenceServerException, match="Unable to parse 'trace_rate', got: often"):
        http.update_trace_settings(settings={"trace_rate": "often"}, headers=admin)
    with pytest.raises(InferenceServerException, match="Expect only one trace level 'OFF'"):
        grpc.update_trace_settings(settings={"trace_level": ["OFF", "TENSORS"]}, headers=admin)
    with pytest.raises(InferenceServerException):
        http.update_trace_settings(settings={"trace_rate": "2"}, headers=reader)


def test_a_models_level_and_count_decide_what_is_recorded(settable):
    g, receiver = settable
    http, _ = triton_clients(g)
    admin = {"authorization": f"Bearer {g.admin_key}"}
    key = g.key()
    try:
        http.update_trace_settings(model_name="quiet", settings={"trace_level": ["OFF"]}, headers=admin)
        quiet = [infer(g, key, model="quiet")[1]["X-Trace-Id"] for _ in range(3)]
        loud = [infer(g, key)[1]["X-Trace-Id"] for _ in range(3)]
        # Spans leave in order within a batch delay: once the last request's trace is in,
        # the earlier ones would have been.
        assert wait_for(receiver, loud[-1], {"request", "model run"})
        assert recorded(receiver, loud) == loud, "the other model still records"
        assert recorded(receiver, quiet) == [], "a model at level OFF records nothing"

        http.update_trace_settings(model_name="quiet", settings={"trace_level": None, "trace_count": "2"},
                                   headers=admin)
        counted = [infer(g, key, model="quiet")[1]["X-Trace-Id"] for _ in range(4)]
        marker = infer(g, key)[1]["X-Trace-Id"]
        assert wait_for(receiver, marker, {"request", "model run"})
        assert recorded(receiver, counted) == counted[:2], "exactly the count, then none"
        assert http.get_trace_settings(model_name="quiet", headers=admin)["trace_count"] == "0"

        ctx = ssl.create_default_context(cafile=g.cert)
        metrics = urllib.request.Request(f"{g.url}/metrics", headers=admin)
        with urllib.request.urlopen(metrics, context=ctx, timeout=30) as answer:
            text = answer.read().decode()
        sent = re.search(r'^infergate_trace_spans_total\{outcome="sent"\} (\d+)', text, re.M)
        assert sent and int(sent.group(1)) > 0, "the exported spans are counted"
        assert re.search(r'^infergate_trace_spans_total\{outcome="dropped"\} 0$', text, re.M)
    finally:
        http.update_trace_settings(model_name="quiet", settings={"trace_level": None, "trace_count": None},
                                   headers=admin)
