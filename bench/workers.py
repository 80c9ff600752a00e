#!/usr/bin/env python3
"""Workers on other hosts: four measurements, each against a baseline taken in the
same run, with real processes on 127.0.0.1 (random ports, TLS everywhere).

(a) Proxy hop: a manager that runs nothing itself (`serve --no-local-engine`) + 1 worker vs an
    all-in-one `serve`, same model, 1 instance × 1 intra-op thread on both: throughput at
    concurrency 8 (target ratio >= 0.85) and the p50 added at concurrency 1 (target <= 300 us)
    and at 8. The model is by default "tiny" (an Identity over 16 floats, so the difference is
    the hop's alone); `--hop-model minilm` (8 tokens, ~5 ms a run on 2 cores) shows the hop
    beside a real model's run, whose own drift between runs (±300 us) then blurs the figure.
    Beside it, in the same interleaved rounds, a reference hop: HAProxy (`--reference-proxy`;
    haproxy on PATH by default) re-encrypting TLS in front of an all-in-one server of its own:
    what a dedicated proxy adds on the same machine.
(b) Scale: a compute-bound model (EfficientNet-Lite0, 224x224) through the manager with 2 workers
    vs 1, each worker pinned to its own core (`taskset -c N`), 1 instance × 1 intra-op thread,
    concurrency 8 (target >= 1.7x). The second worker gets the model by the manager's scale-out.
(c) Direct mode vs through the manager, same setup as (b): each client connection asks the
    manager once for a worker (`POST /v2/models/{m}/assign`) and then talks KServe v2 to that
    worker with the token.
(d) Failover: the same two workers under load from 8 concurrent connections through the manager;
    one worker is killed with SIGKILL halfway; every failed request is counted (target 0).

The load generator is Python in this process: one thread per connection, each with its own
keep-alive HTTPS connection (http.client), KServe v2 over HTTP/1.1 with binary tensors (the body
built once), every answer checked (status 200, the output's shape). It shares the machine's
cores with the servers: on a small machine that caps (b) (the manager and the client need CPU
too, beside the two pinned workers), so the CPU each process spent per request is printed too.

Usage: bench/workers.py [--bin target/release/infergate] [--seconds 5] [--concurrency 8]
                        [--phases hop,scale,direct,failover] [--hop-model tiny]
                        [--out bench/results/workers]
Needs: scripts/setup.sh (models, ORT library, Python venv); `taskset` (util-linux); for the
reference hop, HAProxy (Debian: `apt-get install haproxy`; left out when absent).
Results: printed, and written to OUT/workers-LABEL.json and OUT/workers-LABEL.txt.
"""
import argparse
import array
import http.client
import json
import os
import platform
import queue
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))
ANSI = re.compile(r"\x1b\[[0-9;]*m")

class Tensor:
    """A little-endian tensor's shape, KServe datatype and raw bytes (the standard library's
    `array`, so the script needs nothing beyond Python: it also runs on a bare GPU host)."""

    def __init__(self, shape, datatype, typecode, values):
        self.shape, self.datatype = list(shape), datatype
        count = 1
        for d in shape:
            count *= d
        values = list(values)
        assert len(values) == count, (shape, len(values))
        self.raw = array.array(typecode, values)
        if sys.byteorder != "little":
            self.raw.byteswap()

    def tobytes(self):
        return self.raw.tobytes()


def ids(values):
    return Tensor([1, len(values)], "INT64", "q", values)


# name -> (file, inputs {name: tensor}, the output asked for, its shape)
IDS = [101, 1037, 2204, 2154, 2000, 2022, 6517, 102]
_rng = random.Random(0)
SPECS = {
    "minilm": ("minilm.onnx",
               {"input_ids": ids(IDS), "attention_mask": ids([1] * len(IDS)),
                "token_type_ids": ids([0] * len(IDS))},
               "last_hidden_state", [1, 8, 384]),
    "cls": ("ocr-cls.onnx", {"x": Tensor([1, 3, 48, 192], "FP32", "f", [0.5] * (3 * 48 * 192))},
            "save_infer_model/scale_0.tmp_1", [1, 2]),
    # No compute to speak of (one Identity over 16 floats): the added latency of a hop is then
    # the hop alone, not hidden in the run-to-run drift of a model's own milliseconds.
    "tiny": (None, {"x": Tensor([1, 16], "FP32", "f", [0.25] * 16)}, "y", [1, 16]),
    "effnet": ("efficientnet-lite0.onnx",
               {"input": Tensor([1, 3, 224, 224], "FP32", "f",
                                (_rng.random() for _ in range(3 * 224 * 224)))},
               "probabilities", [1, 1000]),
}


def _varint(n):
    """A non-negative int as a protobuf varint (7 bits a byte, low bits first)."""
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number, value):
    """One protobuf field: an int as a varint, bytes or str length-delimited."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def tiny_onnx():
    """The "tiny" model's file: y = Identity(x), x and y FP32 [N, 16], encoded by hand (ONNX's
    protobuf schema, field numbers from onnx.proto) so the script keeps needing nothing beyond
    Python's standard library."""
    def value_info(name):
        dims = _field(1, _field(2, "N")) + _field(1, _field(1, 16))  # dim_param N, dim_value 16
        tensor = _field(1, 1) + _field(2, dims)  # elem_type FLOAT, shape
        return _field(1, name) + _field(2, _field(1, tensor))  # name, type.tensor_type
    node = _field(1, "x") + _field(2, "y") + _field(3, "identity") + _field(4, "Identity")
    graph = _field(1, node) + _field(2, "tiny") + _field(11, value_info("x")) + _field(12, value_info("y"))
    # ir_version 8, graph, opset_import {version 17}
    return _field(1, 8) + _field(7, graph) + _field(8, _field(2, 17))


def model_file(model, workdir):
    """The model's file: from MODELS, or (the tiny model) written into `workdir`."""
    name = SPECS[model][0]
    if name is not None:
        return os.path.join(MODELS, name)
    path = os.path.join(workdir, f"{model}.onnx")
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(tiny_onnx())
    return path


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return float("nan")
    v = sorted(values)
    k = (len(v) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


class Report:
    """Prints lines and keeps them (and the figures) for the results files."""

    def __init__(self):
        self.lines = []
        self.figures = {}

    def say(self, line=""):
        print(line, flush=True)
        self.lines.append(line)


class Proc:
    """An infergate process whose log (ANSI-stripped) is read on a thread."""

    def __init__(self, cmd, ready, env=None):
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=env)
        self.lines = queue.Queue()
        self.log = []

        def read():
            for line in self.proc.stderr:
                line = ANSI.sub("", line)
                self.log.append(line)
                self.lines.put(line)
        threading.Thread(target=read, daemon=True).start()
        self.match = self.wait_for(ready)

    def wait_for(self, pattern, timeout=90):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None and self.lines.empty():
                sys.exit(f"{' '.join(self.cmd)}: no '{pattern}' in its log:\n{''.join(self.log[-30:])}")
            try:
                m = re.search(pattern, self.lines.get(timeout=min(left, 1)))
            except queue.Empty:
                continue
            if m:
                return m

    def cpu_s(self):
        """User + system CPU seconds so far (children not included)."""
        fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class Cluster:
    """Starts and stops the processes of one run; every data directory lives under one temp dir."""

    def __init__(self, binary, heartbeat_ms):
        self.bin = binary
        self.base = tempfile.mkdtemp(prefix="infergate-workers-bench-")
        self.procs = []
        self.config = os.path.join(self.base, "infergate.toml")
        with open(self.config, "w") as f:
            f.write(f"[cluster]\nheartbeat_ms = {heartbeat_ms}\n")

    def cli(self, *args):
        return subprocess.run([self.bin, *args], check=True, capture_output=True, text=True).stdout.strip()

    def serve(self, name, models, manager):
        """An all-in-one server, or a manager with no engine of its own; (proc, Server)."""
        data = os.path.join(self.base, name)
        for model in models:
            self.cli("models", "add", "--data-dir", data, "--name", model, model_file(model, self.base))
        cmd = [self.bin, "serve", "--listen", "127.0.0.1:0", "--no-grpc", "--data-dir", data,
               "--config", self.config, "--instances", "1", "--intra-threads", "1"]
        if manager:
            cmd.append("--no-local-engine")
        p = Proc(cmd, r"listening on https://(\S+)")
        self.procs.append(p)
        return Server(self, p, data, p.match.group(1))

    def worker(self, server, name, core=None):
        cmd = [self.bin, "worker", "--join", server.url, "--join-token", server.join_token(),
               "--listen", "127.0.0.1:0", "--data-dir", os.path.join(self.base, name),
               "--instances", "1", "--intra-threads", "1"]
        if core is not None:
            cmd = ["taskset", "-c", str(core)] + cmd
        p = Proc(cmd, r"worker listening on https://(\S+)")
        self.procs.append(p)
        return p

    def close(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.base, ignore_errors=True)


class Server:
    def __init__(self, cluster, proc, data, hostport):
        self.cluster, self.proc, self.data, self.hostport = cluster, proc, data, hostport
        self.url = f"https://{hostport}"
        self.cert = os.path.join(data, "tls", "cert.pem")
        self.admin = open(os.path.join(data, "admin.key")).read().strip()
        self.key = cluster.cli("keys", "create", "--scope", "infer", "--data-dir", data)
        self.tls = ssl.create_default_context(cafile=self.cert)
        self._join_token = None

    def join_token(self):
        if self._join_token is None:
            self._join_token = self.cluster.cli("workers", "token", "create", "--data-dir", self.data)
        return self._join_token

    def call(self, method, path, key, body=None):
        host, port = self.hostport.rsplit(":", 1)
        c = http.client.HTTPSConnection(host, int(port), context=self.tls, timeout=30)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
            return json.loads(data)
        finally:
            c.close()

    def workers(self):
        return self.call("GET", "/api/workers", self.admin)["workers"]

    def holders(self, model):
        """Ids of the ready workers that report `model` loaded."""
        return sorted(w["id"] for w in self.workers()
                      if w["state"] == "ready" and any(m["name"] == model for m in w["report"]["models"]))

    def wait_workers(self, count, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sum(w["state"] == "ready" for w in self.workers()) >= count:
                return
            time.sleep(0.1)
        sys.exit(f"{count} ready workers not seen within {timeout} s: {self.workers()}")


def kserve_body(model):
    """The binary-tensor KServe v2 request for `model` (header JSON, then the raw tensors)."""
    _, inputs, output, _ = SPECS[model]
    header = {"inputs": [{"name": n, "shape": a.shape, "datatype": a.datatype,
                          "parameters": {"binary_data_size": len(a.tobytes())}} for n, a in inputs.items()],
              "outputs": [{"name": output, "parameters": {"binary_data": True}}]}
    head = json.dumps(header).encode()
    return head, head + b"".join(a.tobytes() for a in inputs.values())


class Target:
    """Where one connection sends its requests: host:port, TLS trust, bearer."""

    def __init__(self, hostport, tls, bearer, label):
        self.host, port = hostport.rsplit(":", 1)
        self.port, self.tls, self.bearer, self.label = int(port), tls, bearer, label


class Call:
    """One kind of request a load sends: path, body, headers, and a check of each answer that
    returns a problem (text) or None."""

    def __init__(self, path, body, headers, check):
        self.path, self.body, self.headers, self.check = path, body, headers, check


def kserve_call(model):
    """A KServe v2 binary request for `model`, its answer checked for the output's shape."""
    head, body = kserve_body(model)
    _, _, output, shape = SPECS[model]

    def answer_ok(r, data):
        if r.status != 200:
            return f"{r.status} {data[:200]!r}"
        n = int(r.getheader("Inference-Header-Content-Length", "0"))
        outputs = json.loads(data[:n] if n else data)["outputs"]
        if outputs[0]["name"] != output or outputs[0]["shape"] != shape:
            return f"unexpected output {outputs[0]}"
        return None
    return Call(f"/v2/models/{model}/infer", body,
                {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))},
                answer_ok)


def load(model, targets, seconds, midway=None):
    """One connection per target (a thread each) sending `model` requests back to back for
    `seconds`. `midway` runs once, halfway. Returns the figures: answers, failures (with a few
    examples), requests/s, p50/p99 in µs, and the client's CPU seconds."""
    return load_calls(kserve_call(model), targets, seconds, midway)


def load_calls(call, targets, seconds, midway=None):
    """`load` for any `Call`."""
    lock = threading.Lock()
    latencies, failures, examples, per_label = [], [0], [], {}
    stop_at = time.monotonic() + seconds

    def connection(target):
        headers = {"Authorization": f"Bearer {target.bearer}", **call.headers}
        mine, bad, ex = [], 0, []
        c = None
        while time.monotonic() < stop_at:
            if c is None:
                c = http.client.HTTPSConnection(target.host, target.port, context=target.tls, timeout=60)
            t = time.perf_counter()
            try:
                c.request("POST", call.path, body=call.body, headers=headers)
                r = c.getresponse()
                data = r.read()
                problem = call.check(r, data)
            except (OSError, http.client.HTTPException, ValueError) as e:
                problem = f"{type(e).__name__}: {e}"
                c.close()
                c = None
            if problem:
                bad += 1
                if len(ex) < 3:
                    ex.append(problem)
            else:
                mine.append(time.perf_counter() - t)
        if c is not None:
            c.close()
        with lock:
            latencies.extend(mine)
            failures[0] += bad
            examples.extend(ex)
            per_label[target.label] = per_label.get(target.label, 0) + len(mine)

    cpu0 = time.process_time()
    started = time.monotonic()
    threads = [threading.Thread(target=connection, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    if midway:
        time.sleep(seconds / 2)
        midway()
    for t in threads:
        t.join(timeout=seconds + 120)
    elapsed = time.monotonic() - started
    lat = [x * 1e6 for x in latencies]
    return {"ok": len(latencies), "failed": failures[0], "examples": examples[:6],
            "rps": len(latencies) / elapsed, "p50_us": percentile(lat, 50),
            "p99_us": percentile(lat, 99), "seconds": elapsed,
            "client_cpu_s": time.process_time() - cpu0, "per_target": per_label}


def interleaved(model, sides, seconds):
    """Concurrency 1, interleaved: one thread sends `model` requests to each side ({name: Target},
    the first one the base; a keep-alive connection each) in turn (in a rotating order), round
    after round, so all see the same machine, second by second. Separate runs of a few seconds differ by several hundred
    microseconds on a small, shared machine (other processes, CPU frequency, the page cache),
    which hides a difference of that size; alternating cancels that drift. Returns the rounds,
    each side's p50 (µs) and, for the others, the median of their per-round differences from
    the base."""
    call = kserve_call(model)
    names = list(sides)
    conns, times = {}, {name: [] for name in names}
    stop_at = time.monotonic() + seconds
    turn = 0
    try:
        while time.monotonic() < stop_at:
            # Each round starts one side later than the one before: the side right after a
            # given one was measured paying 100-300 us more than elsewhere in the order (its
            # predecessor's processes presumably still finishing on the same cores), and
            # rotating gives every side each position equally often.
            turn += 1
            for side in names[turn % len(names):] + names[:turn % len(names)]:
                target = sides[side]
                c = conns.get(side)
                if c is None:
                    c = conns[side] = http.client.HTTPSConnection(target.host, target.port,
                                                                  context=target.tls, timeout=60)
                t = time.perf_counter()
                c.request("POST", call.path, body=call.body,
                          headers={"Authorization": f"Bearer {target.bearer}", **call.headers})
                r = c.getresponse()
                data = r.read()
                problem = call.check(r, data)
                if problem:
                    sys.exit(f"interleaved run: {side}: {problem}")
                times[side].append(time.perf_counter() - t)
    finally:
        for c in conns.values():
            c.close()
    us = {name: [x * 1e6 for x in times[name]] for name in names}
    rounds = min(len(v) for v in us.values())
    base = us[names[0]]
    return {"rounds": rounds, "p50_us": {name: percentile(us[name], 50) for name in names},
            "median_difference_us": {name: percentile([o - b for b, o in zip(base, us[name])], 50)
                                     for name in names[1:]}}


def free_port():
    """A port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_haproxy(haproxy, tls_dir, workdir, config):
    """HAProxy listening with TLS on a free port of 127.0.0.1 with the certificate and key in
    `tls_dir` (cert.pem, key.pem): `config(port, pem)` gives its configuration's text. Returns
    (process, port) once the port accepts connections."""
    os.makedirs(workdir, exist_ok=True)
    pem = os.path.join(workdir, "front.pem")
    with open(pem, "w") as f:
        for part in ("cert.pem", "key.pem"):
            with open(os.path.join(tls_dir, part)) as src:
                f.write(src.read().rstrip("\n") + "\n")
    port = free_port()
    path = os.path.join(workdir, "haproxy.cfg")
    with open(path, "w") as f:
        f.write(config(port, pem))
    proc = subprocess.Popen([haproxy, "-db", "-f", path], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"haproxy exited: {proc.stderr.read()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    sys.exit("haproxy did not listen within 15 s")


class ReferenceProxy:
    """HAProxy in front of a server, TLS on both sides (its own listener with the server's
    certificate and key; to the server with keep-alive connections verified against the
    server's certificate): what a dedicated, C-written proxy adds for the same hop on this
    machine, the reference for the manager's hop."""

    def __init__(self, haproxy, server, workdir):
        backend = server.hostport.rsplit(":", 1)[1]
        self.proc, port = start_haproxy(haproxy, os.path.join(server.data, "tls"), workdir, lambda port, pem: f"""global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    http-reuse always
frontend front
    bind 127.0.0.1:{port} ssl crt {pem}
    default_backend server
backend server
    server s 127.0.0.1:{backend} ssl verify required ca-file {server.cert}
""")
        self.hostport = f"127.0.0.1:{port}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def measured(model, targets, seconds, procs):
    """`load` plus the CPU each named process spent per answered request (ms)."""
    before = {name: p.cpu_s() for name, p in procs.items()}
    r = load(model, targets, seconds)
    n = max(r["ok"], 1)
    r["cpu_ms_per_request"] = {name: (p.cpu_s() - before[name]) * 1e3 / n for name, p in procs.items()}
    r["cpu_ms_per_request"]["client"] = r["client_cpu_s"] * 1e3 / n
    return r


def describe(r):
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in r.get("cpu_ms_per_request", {}).items())
    line = f"{r['rps']:.1f} req/s, p50 {r['p50_us'] / 1e3:.2f} ms, p99 {r['p99_us'] / 1e3:.2f} ms, {r['ok']} ok, {r['failed']} failed"
    return line + (f"; CPU ms/request: {cpu}" if cpu else "")


def through(server, concurrency):
    return [Target(server.hostport, server.tls, server.key, "manager") for _ in range(concurrency)]


def warm(model, targets, seconds=1.0):
    r = load(model, targets, seconds)
    if r["failed"]:
        sys.exit(f"warm-up failed: {r['examples']}")


def verdict(ok):
    return "met" if ok else "NOT met"


def hop(c, args, rep):
    model = args.hop_model
    rep.say(f"## (a) proxy hop: manager + 1 worker vs all-in-one ({model}, 1 instance x 1 intra-op thread)")
    solo = c.serve("solo", [model], manager=False)
    manager = c.serve("hop-manager", [model], manager=True)
    worker = c.worker(manager, "hop-worker")
    manager.wait_workers(1)
    rows = {}
    for name, server, procs in (("all-in-one", solo, {"server": solo.proc}),
                                ("manager+worker", manager, {"manager": manager.proc, "worker": worker})):
        warm(model, through(server, args.concurrency))
        rows[name] = {conc: measured(model, through(server, conc), args.seconds, procs)
                      for conc in (args.concurrency, 1)}
        for conc, r in rows[name].items():
            rep.say(f"  {name:15s} concurrency {conc}: {describe(r)}")
    ratio = rows["manager+worker"][args.concurrency]["rps"] / rows["all-in-one"][args.concurrency]["rps"]
    separate1 = rows["manager+worker"][1]["p50_us"] - rows["all-in-one"][1]["p50_us"]
    added8 = rows["manager+worker"][args.concurrency]["p50_us"] - rows["all-in-one"][args.concurrency]["p50_us"]
    # The added p50 at concurrency 1 is taken interleaved (see `interleaved`): the separate
    # runs' difference is printed too, but drifts by more than the target between runs.
    sides = {"all-in-one": through(solo, 1)[0], "manager+worker": through(manager, 1)[0]}
    compare = None
    if args.compare_bin:
        # Another build's manager + worker in the same rounds: a before/after of a change.
        compare = Cluster(args.compare_bin, args.heartbeat_ms)
        other = compare.serve("hop-manager", [model], manager=True)
        compare.worker(other, "hop-worker")
        other.wait_workers(1)
        sides["compare-bin manager+worker"] = through(other, 1)[0]
        warm(model, [sides["compare-bin manager+worker"]])
    proxy = None
    if args.reference_proxy:
        # The same hop through HAProxy (TLS re-encrypting, keep-alive to the server), interleaved
        # with the others: what a dedicated proxy adds on this machine (two more TLS legs and
        # loopback crossings, a process woken after the model's run), beside the manager's.
        # Behind it a second all-in-one server of its own, so that each side's model runs in a
        # process that serves only that side: a process's idle time between its requests (and
        # with it how cold its caches and its core are) is then the same on every side.
        behind = c.serve("solo-behind-haproxy", [model], manager=False)
        proxy = ReferenceProxy(args.reference_proxy, behind, os.path.join(c.base, "haproxy"))
        sides["haproxy+all-in-one"] = Target(proxy.hostport, behind.tls, behind.key, "haproxy")
        warm(model, [sides["haproxy+all-in-one"]])
    run = interleaved(model, sides, 2 * args.seconds)
    pair = {"pairs": run["rounds"], "base_p50_us": run["p50_us"]["all-in-one"],
            "other_p50_us": run["p50_us"]["manager+worker"],
            "median_pair_difference_us": run["median_difference_us"]["manager+worker"]}
    added1 = pair["other_p50_us"] - pair["base_p50_us"]
    rep.say(f"  interleaved at concurrency 1 ({pair['pairs']} rounds): all-in-one p50 {pair['base_p50_us'] / 1e3:.2f} ms, "
            f"manager+worker p50 {pair['other_p50_us'] / 1e3:.2f} ms; median pair difference "
            f"{pair['median_pair_difference_us']:+.0f} us")
    if proxy is not None:
        ref = run["p50_us"]["haproxy+all-in-one"] - pair["base_p50_us"]
        rep.say(f"  reference, same rounds: haproxy (TLS both sides) + all-in-one p50 "
                f"{run['p50_us']['haproxy+all-in-one'] / 1e3:.2f} ms: {ref:+.0f} us over the all-in-one "
                f"(median difference {run['median_difference_us']['haproxy+all-in-one']:+.0f} us); "
                f"the manager's hop minus haproxy's: {added1 - ref:+.0f} us")
        rep.figures["hop_reference_haproxy"] = {"interleaved_c1": run, "added_p50_us_c1": ref}
        proxy.stop()
        behind.proc.stop()
    if compare is not None:
        cmp = run["p50_us"]["compare-bin manager+worker"] - pair["base_p50_us"]
        rep.say(f"  compare, same rounds: {args.compare_bin} manager+worker: {cmp:+.0f} us over the all-in-one "
                f"(median difference {run['median_difference_us']['compare-bin manager+worker']:+.0f} us)")
        rep.figures["hop_compare_bin"] = {"binary": args.compare_bin, "added_p50_us_c1": cmp}
        compare.close()
    rep.say(f"  throughput ratio at concurrency {args.concurrency}: {ratio:.3f} (target >= 0.85: {verdict(ratio >= 0.85)})")
    rep.say(f"  added p50 at concurrency 1 (interleaved): {added1:+.0f} us (target <= 300 us: {verdict(added1 <= 300)}); "
            f"separate runs: {separate1:+.0f} us; at concurrency {args.concurrency}: {added8:+.0f} us")
    rep.figures["hop"] = {"model": model, "runs": rows, "ratio": ratio, "paired_c1": pair,
                          "added_p50_us_c1": added1, "added_p50_us_c1_separate_runs": separate1,
                          f"added_p50_us_c{args.concurrency}": added8}
    for p in (worker, manager.proc, solo.proc):
        p.stop()


def pinned_pair(c, args, rep):
    """(b), and the two pinned workers (c) and (d) run on: the 1-worker figure only when the
    scale phase was asked for."""
    model = args.scale_model
    cores = os.sched_getaffinity(0)
    pins = sorted(cores)[:2] if len(cores) >= 2 else [None, None]
    rep.say(f"## (b) scale: 2 workers vs 1 ({model}, each worker pinned to one core: "
            f"taskset -c {pins[0]} / -c {pins[1]}, 1 instance x 1 intra-op thread; manager and client unpinned)")
    manager = c.serve("manager", [model], manager=True)
    a = c.worker(manager, "worker-a", pins[0])
    manager.wait_workers(1)
    warm(model, through(manager, args.concurrency), 2.0)
    one = None
    if "scale" in args.phases:
        one = measured(model, through(manager, args.concurrency), args.seconds,
                       {"manager": manager.proc, "worker-a": a})
        rep.say(f"  1 worker : {describe(one)}")
    b = c.worker(manager, "worker-b", pins[1])
    manager.wait_workers(2)
    # The second worker loads the model when the first one's queue delay passes the manager's
    # scale-out threshold; keep the load on until both report it (bounded).
    deadline = time.monotonic() + 30
    while len(manager.holders(model)) < 2 and time.monotonic() < deadline:
        load(model, through(manager, args.concurrency), 1.0)
    holders = manager.holders(model)
    if len(holders) < 2:
        rep.say(f"  the second worker did not load {model} within 30 s (holders: {holders})")
    procs = {"manager": manager.proc, "worker-a": a, "worker-b": b}
    two = measured(model, through(manager, args.concurrency), args.seconds, procs)
    rep.say(f"  2 workers: {describe(two)}")
    rep.figures["scale"] = {"model": model, "one": one, "two": two, "holders": holders}
    if one:
        ratio = two["rps"] / one["rps"]
        rep.say(f"  scale ratio 2/1: {ratio:.2f}x (target >= 1.7x: {verdict(ratio >= 1.7)})")
        busy = sum(two["cpu_ms_per_request"].values())
        workers_ms = two["cpu_ms_per_request"]["worker-a"] + two["cpu_ms_per_request"]["worker-b"]
        rep.say(f"  CPU per request with 2 workers: {busy:.2f} ms in all ({workers_ms:.2f} ms in the workers, "
                f"{busy - workers_ms:.2f} ms in the manager and the client); {len(cores)} cores give at most "
                f"{len(cores) * 1000 / busy:.1f} req/s at that cost; 1 worker alone gave {one['rps']:.1f}")
        rep.figures["scale"]["ratio"] = ratio
    if "direct" in args.phases:
        direct(manager, args, rep, model, two)
    if "failover" in args.phases:
        failover(manager, args, rep, model, a)


def direct(manager, args, rep, model, through_manager):
    rep.say(f"## (c) direct mode vs through the manager (same 2 pinned workers, {model})")
    targets, cas = [], {}
    for _ in range(args.concurrency):
        grant = manager.call("POST", f"/v2/models/{model}/assign", manager.key, {})
        if grant["ca_pem"] not in cas:
            ca = os.path.join(manager.cluster.base, f"cluster-ca-{len(cas)}.pem")
            with open(ca, "w") as f:
                f.write(grant["ca_pem"])
            cas[grant["ca_pem"]] = ssl.create_default_context(cafile=ca)
        targets.append(Target(grant["worker"].removeprefix("https://"), cas[grant["ca_pem"]], grant["token"],
                              grant["worker_id"]))
    spread = {t.label: sum(x.label == t.label for x in targets) for t in targets}
    rep.say(f"  connections per worker from /assign: {spread}")
    if len(spread) == 1 and len(manager.holders(model)) > 1:
        rep.say("  every grant named the same worker: the direct clients run on one worker's core")
    warm(model, targets)
    r = measured(model, targets, args.seconds, {"manager": manager.proc})
    rep.say(f"  direct         : {describe(r)}")
    rep.say(f"  through manager: {describe(through_manager)} (from (b))")
    ratio = r["rps"] / through_manager["rps"]
    rep.say(f"  direct / through the manager: {ratio:.2f}x throughput, p50 {r['p50_us'] / 1e3:.2f} vs "
            f"{through_manager['p50_us'] / 1e3:.2f} ms")
    rep.figures["direct"] = {"model": model, "direct": r, "through_manager": through_manager, "ratio": ratio,
                             "connections_per_worker": spread}


def failover(manager, args, rep, model, a):
    rep.say(f"## (d) failover: kill -9 one of two workers under load ({args.concurrency} connections "
            f"through the manager, {args.failover_seconds:g} s, the kill at half time; heartbeat {args.heartbeat_ms} ms, lost after 3 missed)")
    ids = {w["advertise"]: w["id"] for w in manager.workers()}
    victim_addr = a.match.group(1)
    victim = ids.get(victim_addr, victim_addr)
    killed, lost = {}, {}

    def watch():
        """Polls the manager from the kill on: when does it list the victim lost (or gone)?"""
        deadline = killed["at"] + 20
        while time.monotonic() < deadline:
            state = {w["id"]: w["state"] for w in manager.workers()}.get(victim)
            if state in ("lost", None):
                lost["after"] = time.monotonic() - killed["at"]
                return
            time.sleep(0.05)
    watcher = threading.Thread(target=watch)

    def kill():
        killed["at"] = time.monotonic()
        a.kill9()
        watcher.start()
    before = {w["id"]: w for w in manager.workers()}
    retries0 = metric(manager, "infergate_worker_retries_total") or 0
    r = load(model, through(manager, args.concurrency), args.failover_seconds, midway=kill)
    watcher.join()
    lost_after = lost.get("after")
    rep.say(f"  killed worker {victim} (pid {a.proc.pid}); both held the model before: "
            f"{sorted(w for w in before if before[w]['report']['models'])}")
    rep.say(f"  {describe(r)}")
    for e in r["examples"]:
        rep.say(f"    failure: {e}")
    seen = "not within 20 s" if lost_after is None else f"{lost_after:.2f} s after the kill"
    rep.say(f"  failed requests: {r['failed']} of {r['ok'] + r['failed']} (target 0: {verdict(r['failed'] == 0)}); "
            f"the manager listed the victim lost {seen}")
    retries = (metric(manager, "infergate_worker_retries_total") or 0) - retries0
    rep.say(f"  requests the manager retried on the other worker (infergate_worker_retries_total): {retries:g}")
    rep.figures["failover"] = {"model": model, "run": r, "victim": victim, "lost_seen_after_s": lost_after,
                               "retries_total": retries}


def metric(server, name):
    host, port = server.hostport.rsplit(":", 1)
    c = http.client.HTTPSConnection(host, int(port), context=server.tls, timeout=30)
    try:
        c.request("GET", "/metrics", headers={"Authorization": f"Bearer {server.admin}"})
        text = c.getresponse().read().decode()
    finally:
        c.close()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values) if values else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "release", "infergate")),
                    help="infergate binary [default: $INFERGATE_BIN or target/release/infergate]")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one measurement")
    ap.add_argument("--failover-seconds", type=float, default=8.0, help="length of the failover run")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--heartbeat-ms", type=int, default=500,
                    help="the manager's [cluster] heartbeat_ms (2000 by default in infergate; shorter here "
                         "so that the second worker's model shows up quickly)")
    ap.add_argument("--phases", default="hop,scale,direct,failover",
                    help="comma-separated subset of hop,scale,direct,failover (direct and failover run "
                         "on the scale phase's cluster)")
    ap.add_argument("--hop-model", default="tiny", choices=sorted(SPECS))
    ap.add_argument("--reference-proxy", default=shutil.which("haproxy") or "",
                    help="HAProxy binary measured as a reference hop in the hop phase [default: haproxy on "
                         "PATH; none: the reference is left out]; '' leaves it out")
    ap.add_argument("--compare-bin", default="",
                    help="another infergate build whose manager + worker join the hop phase's interleaved "
                         "rounds (a before/after of a change)")
    ap.add_argument("--scale-model", default="effnet", choices=sorted(SPECS))
    ap.add_argument("--label", default=time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
                    help="results file name part [default: the UTC time]")
    ap.add_argument("--note", default="", help="free text stored with the results (build, machine)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "workers"))
    args = ap.parse_args()
    args.phases = args.phases.split(",")
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin}: not an executable (build it, or pass --bin)")
    if not shutil.which("taskset") and "scale" in args.phases:
        sys.exit("taskset (util-linux) is needed for the scale phase")
    rep = Report()
    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True).stdout.strip()
    cores = len(os.sched_getaffinity(0))
    rep.say(f"# bench/workers.py: {version} ({args.bin})")
    rep.say(f"# {cores} cores ({platform.processor() or platform.machine()}), load average at start "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; the load generator (this Python process, "
            f"{args.concurrency} connections) shares the cores with the servers")
    if args.note:
        rep.say(f"# {args.note}")
    c = Cluster(args.bin, args.heartbeat_ms)
    try:
        if "hop" in args.phases:
            hop(c, args, rep)
        if {"scale", "direct", "failover"} & set(args.phases):
            pinned_pair(c, args, rep)
    finally:
        c.close()
    rep.say(f"# load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, f"workers-{args.label}")
    with open(base + ".json", "w") as f:
        json.dump({"binary": args.bin, "version": version, "cores": cores, "note": args.note,
                   "seconds": args.seconds, "concurrency": args.concurrency, "figures": rep.figures}, f, indent=1)
    with open(base + ".txt", "w") as f:
        f.write("\n".join(rep.lines) + "\n")
    print(f"wrote {base}.json and {base}.txt")


if __name__ == "__main__":
    main()
