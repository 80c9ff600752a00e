#!/usr/bin/env python3
"""The floor under `bench/cpu_per_request.py`'s figure: what one KServe v2 request over HTTP/1.1
and TLS costs a server on this machine when the server is a dedicated C proxy that does nothing
else, next to what infergate spends on the same requests with the model in the middle.

HAProxy (Debian's) listens with TLS, reads each request perf_analyzer sends (the MLP's
[1,1024] FP32 input, binary tensors, keep-alive, concurrency 8) and answers it from memory with
the bytes infergate answered the same request with (the [1,1000] output), and the metadata and
configuration perf_analyzer asks for first likewise. Its CPU per request (its process's
utime + stime over the run / its own request count) is the cost of the TLS, HTTP and socket
work alone; ONNX Runtime's CPU for the batches infergate ran (in this process, as
`cpu_per_request.py` measures it) is the model's. Their sum is what any server answering these
requests with this model would spend, at the least, with a server as lean as HAProxy;
infergate's figure is measured in the same rounds, alternating with HAProxy's.

Beside them, when built, `bench/floor/floor_server.rs`: tokio, hyper 1 and tokio-rustls
(infergate's own stack) answering from memory the same way, which tells the stack's cost from
what infergate adds on top of it; and the same server holding the inferences in batches the way
the MLP's configuration batches them (at most 16 requests, closing 500 µs after the first), with
no model, no decoding and no engine: what waiting for a batch costs on this machine in sleeps and
wake-ups. At concurrency 8 the requests of a batch arrive one by one while the server has
nothing else to do, so each arrival wakes a sleeping thread, which a server answering at once
mostly avoids. Two designs of the batch clock: a thread of its own (as infergate's instance
threads keep it) and a timerfd on a single tokio worker (the leanest found). The lower of the two
plus ORT's CPU is the batching floor: what any server batching these requests this way spends,
at the least, on this machine.

Usage: bench/http_floor.py [--seconds 4] [--rounds 3] [--concurrency 8] [--haproxy PATH]
                           [--floor-server PATH]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, `cargo build --release -p infergate
--bin infergate --example floor_server`, HAProxy (Debian: `apt-get install haproxy`).
"""
import argparse
import functools
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_per_request as cpr  # noqa: E402  (the MLP, its server measurement, ORT's CPU)
import serving  # noqa: E402  (start_server, perf_analyzer)
import workers  # noqa: E402  (start_haproxy, free_port)

HEADER_LENGTH = "Inference-Header-Content-Length"


def mlp_request():
    """The MLP inference perf_analyzer sends (one [1, IN] row, binary): (JSON head, binary part)."""
    row = np.random.default_rng(1).random(cpr.IN, dtype=np.float32).tobytes()
    head = json.dumps({"inputs": [{"name": "input", "shape": [1, cpr.IN], "datatype": "FP32",
                                   "parameters": {"binary_data_size": len(row)}}],
                       "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}).encode()
    return head, row


def canned_answers(data, workdir, model="mlp", request=None):
    """Asks a running infergate for the answers perf_analyzer will want (server and model metadata,
    the model configuration, one inference of `request`: (JSON head, binary part), the MLP's by
    default) and writes each body to a file: {path: (file, content type, header length or None)}."""
    head, binary = request or mlp_request()
    proc, addrs = serving.start_server(data)
    try:
        key = open(os.path.join(data, "admin.key")).read().strip()
        tls = ssl.create_default_context(cafile=os.path.join(data, "tls", "cert.pem"))
        host, port = addrs["http"].rsplit(":", 1)
        conn = http.client.HTTPSConnection(host, int(port), context=tls, timeout=60)
        auth = {"Authorization": f"Bearer {key}"}
        answers = {}
        conn.request("POST", f"/v2/models/{model}/infer", body=head + binary,
                     headers={**auth, HEADER_LENGTH: str(len(head)),
                              "Content-Type": "application/octet-stream"})
        r = conn.getresponse()
        body = r.read()
        if r.status != 200 or r.getheader(HEADER_LENGTH) is None:
            sys.exit(f"POST infer: {r.status} {body[:200]!r}")
        for path in (f"/v2/models/{model}/infer", f"/v2/models/{model}/versions/1/infer"):
            answers[path] = (body, "application/octet-stream", int(r.getheader(HEADER_LENGTH)))
        # perf_analyzer reads the server's and the model's metadata and configuration first,
        # and the model's statistics around each measurement (server-side figures; frozen here,
        # after one inference so that the loaded version has its entry).
        for path in ("/v2", f"/v2/models/{model}", f"/v2/models/{model}/versions/1",
                     f"/v2/models/{model}/config", f"/v2/models/{model}/versions/1/config",
                     f"/v2/models/{model}/stats", f"/v2/models/{model}/versions/1/stats", "/v2/models/stats"):
            conn.request("GET", path, headers=auth)
            r = conn.getresponse()
            body = r.read()
            if r.status == 200:
                answers[path] = (body, "application/json", None)
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    files = {}
    for i, (path, (body, content_type, header_len)) in enumerate(answers.items()):
        file = os.path.join(workdir, f"answer-{i}")
        with open(file, "wb") as f:
            f.write(body)
        files[path] = (file, content_type, header_len)
    return files


class Haproxy:
    """HAProxy answering `answers` ({path: (file, content type, header length)}) over TLS with
    the certificate and key of the server in `data`; its request count from its stats socket."""

    def __init__(self, binary, data, answers, workdir):
        self.stats = os.path.join(workdir, "stats.sock")
        rules = []
        for i, (path, (file, content_type, header_len)) in enumerate(answers.items()):
            extra = f" hdr {HEADER_LENGTH} {header_len}" if header_len is not None else ""
            rules.append(f"    acl p{i} path {path}\n"
                         f"    http-request return status 200 content-type {content_type} file {file}{extra} if p{i}")
        rules.append('    http-request return status 404 content-type application/json lf-string '
                     '"{\\"error\\": \\"not answered here: %[path]\\"}"')
        self.proc, port = workers.start_haproxy(binary, os.path.join(data, "tls"), workdir, lambda port, pem: f"""global
    maxconn 256
    stats socket {self.stats} level user
defaults
    mode http
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    option http-buffer-request
frontend front
    bind 127.0.0.1:{port} ssl crt {pem}
""" + "\n".join(rules) + "\n")
        self.addr = f"127.0.0.1:{port}"

    def requests(self):
        """HTTP requests served so far (`show info`: CumReq)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(self.stats)
            s.sendall(b"show info\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        for line in out.decode().splitlines():
            if line.startswith("CumReq:"):
                return int(line.split(":")[1])
        sys.exit(f"haproxy's stats have no CumReq: {out[:300]!r}")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


class HyperFloor:
    """`bench/floor/floor_server.rs` (tokio + hyper 1 + tokio-rustls, infergate's own stack
    and nothing else) answering `answers` like `Haproxy`; `busy_us`: how long each inference spins
    on its thread before the answer (a stand-in for the model run). `batch_us` > 0: inferences
    are held and answered in batches of at most `batch_max` that close `batch_us` after their
    first request (a dynamic batcher's queue delay), and `busy_us` is spent once per batch;
    `clock`: what closes a batch, "thread" (a thread of its own) or "timerfd" (on the runtime);
    `workers_n`: tokio worker threads (None: one per core)."""

    def __init__(self, binary, data, answers, workdir, busy_us=0, batch_us=0, batch_max=16, clock="thread",
                 workers_n=None):
        index = os.path.join(workdir, "index.txt")
        with open(index, "w") as f:
            for path, (file, content_type, header_len) in answers.items():
                f.write(f"{path}\t{file}\t{content_type}\t{'-' if header_len is None else header_len}\n")
        port = workers.free_port()
        env = dict(os.environ)
        if workers_n:
            env["TOKIO_WORKER_THREADS"] = str(workers_n)
        self.proc = subprocess.Popen([binary, str(port), os.path.join(data, "tls", "cert.pem"),
                                      os.path.join(data, "tls", "key.pem"), index, str(int(busy_us)),
                                      str(int(batch_us)), str(int(batch_max)), clock],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        if self.proc.stderr.readline().strip() != "listening":
            sys.exit(f"{binary} did not start: {self.proc.stderr.read()[-2000:]}")
        self.addr = f"127.0.0.1:{port}"
        self.tls = ssl.create_default_context(cafile=os.path.join(data, "tls", "cert.pem"))

    def requests(self):
        conn = http.client.HTTPSConnection("127.0.0.1", int(self.addr.rsplit(":", 1)[1]), context=self.tls)
        try:
            conn.request("GET", "/count")
            return int(conn.getresponse().read())
        finally:
            conn.close()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


# The floor server holding inferences in batches the way `cpu_per_request.CONFIG` batches them
# (at most 16, closing 500 µs after the first): {side: (label, HyperFloor arguments)}. Two
# designs: the batch clock on a thread of its own (as infergate's instance threads keep it),
# and on a timerfd with a single tokio worker (the leanest found: no thread beside the worker).
BATCHED = {
    "batched": ("batches of <= 16 / 500 µs, clock on a thread", {"clock": "thread"}),
    "batched-lean": ("same batches, timerfd clock, 1 tokio worker", {"clock": "timerfd", "workers_n": 1}),
}


def batched_floor(side):
    """A HyperFloor constructor for one of BATCHED's designs."""
    _, extra = BATCHED[side]
    delay = cpr.CONFIG["dynamic_batching"]["max_queue_delay_microseconds"]
    return functools.partial(HyperFloor, batch_us=delay, batch_max=cpr.CONFIG["max_batch_size"], **extra)


def measure_haproxy(pa, binary, data, answers, workdir, seconds, concurrency, server=Haproxy):
    """A server answering from memory (`server`: Haproxy or HyperFloor): its CPU µs per request
    (and the kernel's part) over one perf_analyzer run, and the requests it served."""
    proxy = server(binary, data, answers, workdir)
    try:
        key = open(os.path.join(data, "admin.key")).read().strip()
        cert = os.path.join(data, "tls", "cert.pem")
        data_file = os.path.join(data, "mlp-input.json")
        # The version named: without it perf_analyzer picks the version whose statistics
        # moved during the run, and HAProxy's are frozen.
        version = ["-x", "1"]
        serving.perf_analyzer(pa, "http", proxy.addr, cert, key, "mlp", data_file, [f"input:{cpr.IN}"],
                              concurrency, 1.0, version)
        count0, (user0, kernel0) = proxy.requests(), cpr.cpu_split(proxy.proc.pid)
        serving.perf_analyzer(pa, "http", proxy.addr, cert, key, "mlp", data_file, [f"input:{cpr.IN}"],
                              concurrency, seconds, version)
        (user1, kernel1), count1 = cpr.cpu_split(proxy.proc.pid), proxy.requests()
    finally:
        proxy.stop()
    # HAProxy's CumReq counts HTTP requests (its stats queries go over the CLI socket); the
    # floor server does not count its /count queries.
    done = count1 - count0
    return (user1 - user0 + kernel1 - kernel0) / done * 1e6, (kernel1 - kernel0) / done * 1e6, done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--haproxy", default=shutil.which("haproxy") or "")
    ap.add_argument("--floor-server", default=os.path.join(serving.ROOT, "target", "release", "examples", "floor_server"),
                    help="bench/floor/floor_server.rs, built (`cargo build --release -p infergate --example "
                         "floor_server`); left out when absent")
    args = ap.parse_args()
    if not args.haproxy:
        sys.exit("HAProxy is needed (Debian: apt-get install haproxy), or pass --haproxy PATH")
    pa = serving.perf_analyzer_command()
    data = tempfile.mkdtemp(prefix="infergate-floor-")
    workdir = os.path.join(data, "haproxy")
    os.makedirs(workdir)
    model = os.path.join(data, "mlp.onnx")
    cpr.write_mlp(model)
    subprocess.run([serving.BIN, "models", "add", "--data-dir", data, "--name", "mlp",
                    "--config", json.dumps(cpr.CONFIG), model], check=True, capture_output=True)
    answers = canned_answers(data, workdir)
    # perf_analyzer's input, as `cpu_per_request.measure` writes it (HAProxy may go first).
    row = np.random.default_rng(1).random(cpr.IN, dtype=np.float32)
    with open(os.path.join(data, "mlp-input.json"), "w") as f:
        json.dump({"data": [{"input": {"content": row.tolist(), "shape": [cpr.IN]}}]}, f)
    version = subprocess.run([args.haproxy, "-v"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"MLP [N,{cpr.IN}]->[N,{cpr.OUT}], perf_analyzer concurrency {args.concurrency}, HTTP/1.1 over TLS, "
          f"binary tensors, {args.seconds:g} s a run; {version}; load average {os.getloadavg()[0]:.2f}\n")
    hyper = os.access(args.floor_server, os.X_OK)
    sides = ["haproxy", *(["hyper", *BATCHED] if hyper else []), "infergate"]
    print("| round | HAProxy from memory: CPU µs/request (kernel) | "
          + ("hyper + tokio-rustls from memory: CPU µs/request (kernel) | " if hyper else "")
          + ("".join(f"same, {label}: CPU µs/request (kernel) | " for label, _ in BATCHED.values()) if hyper else "")
          + "ORT in process: CPU µs/inference | floor: HAProxy + ORT µs | "
          + ("batching floor: lowest batched + ORT µs | " if hyper else "")
          + "infergate: CPU µs/inference (kernel) | infergate / floor |"
          + (" infergate / batching floor |" if hyper else ""))
    print("| --- " * (6 + (len(BATCHED) + 3) * hyper) + "|")
    for r in range(1, args.rounds + 1):
        # Each round starts one side later, so a machine that slows down mid-round weighs on all.
        order = sides[r % len(sides):] + sides[:r % len(sides)]
        figures = {}
        for side in order:
            if side == "haproxy":
                figures[side] = measure_haproxy(pa, args.haproxy, data, answers, workdir, args.seconds,
                                                args.concurrency)
            elif side == "hyper":
                figures[side] = measure_haproxy(pa, args.floor_server, data, answers, workdir, args.seconds,
                                                args.concurrency, server=HyperFloor)
            elif side in BATCHED:
                figures[side] = measure_haproxy(pa, args.floor_server, data, answers, workdir, args.seconds,
                                                args.concurrency, server=batched_floor(side))
            else:
                figures[side] = cpr.measure(pa, data, model, args.seconds, args.concurrency, [])
        hap_us, hap_kernel, _ = figures["haproxy"]
        server_us, ort_us, _, _, _, kernel_us = figures["infergate"]
        floor = hap_us + ort_us
        cells = batching_cell = batching_ratio = ""
        if hyper:
            cells = "".join(f"{figures[side][0]:.1f} ({figures[side][1]:.1f}) | " for side in ["hyper", *BATCHED])
            batching = min(figures[side][0] for side in BATCHED) + ort_us
            batching_cell, batching_ratio = f"{batching:.1f} | ", f" {server_us / batching:.2f} |"
        print(f"| {r} | {hap_us:.1f} ({hap_kernel:.1f}) | {cells}{ort_us:.1f} | {floor:.1f} | "
              f"{batching_cell}{server_us:.1f} ({kernel_us:.1f}) | {server_us / floor:.2f} |{batching_ratio}",
              flush=True)
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
