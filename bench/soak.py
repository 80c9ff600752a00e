#!/usr/bin/env python3
"""Soak: one release gateway under mixed, paced traffic for a bounded time, its resident memory
and open file descriptors sampled every few seconds.

Traffic (each kind its own thread, paced so that the 2-core machine is busy but not saturated):
KServe v2 JSON and binary-tensor inference over HTTP, KServe v2 over gRPC (tritonclient), a
pipeline (pass-through WebAssembly plugin → model), WebSocket streams (`/v2/stream`, a few
requests per connection, then a fresh connection) and the `/v2/events` feed, API keys created,
used and revoked, Server-Sent Events from `/v1/completions` (the textgen model; some streams read
to `[DONE]`, some dropped after a few chunks), the repository changing under load (a model version
uploaded, run and its older versions deleted; a plugin uploaded and deleted, a pipeline's plugins
swapped; the served model's configuration replaced back and forth), and hostile clients: absurd shapes (must be 400), connections that complete
TCP/TLS and then say nothing (the server must close them), and request bodies trickled below the
minimum rate (408 or closed). Anything else a client gets counts as an unexpected error.

Pass: no unexpected error; RSS after warm-up grows by less than --max-growth-mib (median of the
last 5 samples against the median of the first 5 after warm-up); once the load stops and the
hostile connections have been closed, open fds are back to the idle baseline taken before the
load (± --fd-slack). Writes soak.csv and soak.svg (RSS and fds over time) to --out.

Usage: bench/soak.py [--minutes 10] [--interval 5] [--warmup 60] [--out bench/soak-out]
Needs: scripts/setup.sh (models, plugins/dist) and `cargo build --release --locked -p infergate`
(or INFERGATE_BIN pointing at another build).
"""
import argparse
import collections
import csv
import json
import os
import re
import socket
import ssl
import statistics
import subprocess
import tempfile
import threading
import time

import numpy as np
import requests
import tritonclient.grpc as grpcclient
import websocket

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "release", "infergate"))
MODELS = os.environ.get("INFERGATE_MODELS", os.path.join(ROOT, ".cache", "models"))
PLUGINS = os.environ.get("INFERGATE_PLUGINS", os.path.join(ROOT, "plugins", "dist"))

# The OCR orientation classifier: small and fast (FP32 [1, 3, 48, W] → [1, 2]).
SHAPE = [1, 3, 48, 64]
ELEMENTS = 3 * 48 * 64
JSON_BODY = {"inputs": [{"name": "x", "shape": SHAPE, "datatype": "FP32", "data": [0.5] * ELEMENTS}]}
ABSURD = {"inputs": [{"name": "x", "shape": [68719476736, 16], "datatype": "FP32", "data": [1.0]}]}
SILENT_CONNECTIONS = 8


class Tally:
    """Counts per traffic kind: expected outcomes and unexpected ones (with a few examples)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ok = collections.Counter()
        self.bad = collections.Counter()
        self.examples = []

    def good(self, kind):
        with self.lock:
            self.ok[kind] += 1

    def unexpected(self, kind, what):
        with self.lock:
            self.bad[kind] += 1
            if len(self.examples) < 20:
                self.examples.append(f"{kind}: {what}"[:300])


def sample(pid):
    """(RSS KiB, open fds, threads) of the server."""
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def paced(stop, period, fn):
    """Calls fn every `period` seconds (or as fast as it returns) until stop is set."""
    while not stop.is_set():
        started = time.monotonic()
        fn()
        stop.wait(max(0.0, period - (time.monotonic() - started)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds of load before RSS counts")
    ap.add_argument("--max-growth-mib", type=float, default=48.0)
    ap.add_argument("--fd-slack", type=int, default=4)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "soak-out"))
    ap.add_argument("--only", default="", help="comma-separated traffic kinds to run (default all), "
                    "e.g. model-churn,keys: to find which kind a memory growth comes with")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    data = tempfile.mkdtemp(prefix="infergate-soak-")
    run = lambda *a: subprocess.run([BIN, *a], check=True, capture_output=True)
    run("models", "add", "--data-dir", data, "--name", "cls", os.path.join(MODELS, "ocr-cls.onnx"))
    run("models", "add", "--data-dir", data, "--name", "textgen", os.path.join(MODELS, "textgen.onnx"))
    run("plugins", "add", "--data-dir", data, os.path.join(PLUGINS, "passthrough.wasm"))
    run("pipelines", "put", "--data-dir", data, "cls-pipeline", '{"pre": ["passthrough"], "model": "cls"}')
    proc = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                             "--openai-vocab", os.path.join(MODELS, "textgen-vocab.json"),
                             "--data-dir", data], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    addrs = {}
    for line in proc.stderr:
        m = re.search(r"(grpc )?listening on https://(\S+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            addrs["grpc" if m.group(1) else "http"] = m.group(2)
            if len(addrs) == 2:
                break
    # Keep draining the log so the server never blocks on a full pipe.
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    try:
        result = soak(args, data, proc.pid, addrs)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    raise SystemExit(0 if result else 1)


def soak(args, data, pid, addrs):
    http, grpc_addr = addrs["http"], addrs["grpc"]
    url = f"https://{http}"
    admin = open(os.path.join(data, "admin.key")).read().strip()
    cert = os.path.join(data, "tls", "cert.pem")
    tls = ssl.create_default_context(cafile=cert)
    tls.check_hostname = False
    h2 = ssl.create_default_context(cafile=cert)
    h2.check_hostname = False
    h2.set_alpn_protocols(["h2"])
    auth = {"Authorization": f"Bearer {admin}"}
    tally = Tally()
    stop = threading.Event()

    def session():
        s = requests.Session()
        s.headers.update(auth)
        s.verify = cert
        s.trust_env = False  # a CA bundle named in the environment would replace `verify`
        return s

    # Warm up before the baseline: the model loads, the plugin instantiates, connections open.
    s = session()
    for name in ("cls", "cls-pipeline"):
        for _ in range(3):
            s.post(f"{url}/v2/models/{name}/infer", json=JSON_BODY, timeout=60).raise_for_status()
    s.close()
    time.sleep(2)
    idle_rss, idle_fds, _ = sample(pid)

    def expect(kind, response, status=200):
        if response.status_code == status:
            tally.good(kind)
        else:
            tally.unexpected(kind, f"{response.status_code} {response.text[:200]}")

    def guarded(kind, fn):
        def call():
            try:
                fn()
            except Exception as e:  # any transport failure is unexpected here
                if not stop.is_set():
                    tally.unexpected(kind, repr(e))
        return call

    http_session, pipe_session, hostile_session = session(), session(), session()
    binary_header = json.dumps({"inputs": [{"name": "x", "shape": SHAPE, "datatype": "FP32",
                                            "parameters": {"binary_data_size": ELEMENTS * 4}}]}).encode()
    binary_body = binary_header + np.full(ELEMENTS, 0.5, np.float32).tobytes()

    def http_json():
        expect("http-json", http_session.post(f"{url}/v2/models/cls/infer", json=JSON_BODY, timeout=30))

    def http_binary():
        r = http_session.post(f"{url}/v2/models/cls/infer", data=binary_body, timeout=30, headers={
            "Content-Type": "application/octet-stream",
            "Inference-Header-Content-Length": str(len(binary_header))})
        expect("http-binary", r)

    def pipeline():
        expect("pipeline", pipe_session.post(f"{url}/v2/models/cls-pipeline/infer", json=JSON_BODY, timeout=30))

    grpc_client = grpcclient.InferenceServerClient(grpc_addr, ssl=True, root_certificates=cert)
    grpc_input = grpcclient.InferInput("x", SHAPE, "FP32")
    grpc_input.set_data_from_numpy(np.full(SHAPE, 0.5, np.float32))

    def grpc_infer():
        r = grpc_client.infer("cls", [grpc_input], headers={"authorization": f"Bearer {admin}"})
        if r.as_numpy(r.get_response().outputs[0].name).shape == (1, 2):
            tally.good("grpc")
        else:
            tally.unexpected("grpc", "wrong output shape")

    def ws_stream():
        ws = websocket.create_connection(f"wss://{http}/v2/stream", sslopt={"ca_certs": cert, "check_hostname": False},
                                         header=[f"Authorization: Bearer {admin}"], timeout=30)
        try:
            for i in range(5):
                ws.send(json.dumps({"id": i, "model": "cls", **JSON_BODY}))
            answered = set()
            while len(answered) < 5:
                frame = json.loads(ws.recv())
                if "outputs" not in frame:
                    tally.unexpected("websocket", str(frame)[:200])
                    return
                answered.add(frame["id"])
            tally.good("websocket")
        finally:
            ws.close()

    def events():
        ws = websocket.create_connection(f"wss://{http}/v2/events", sslopt={"ca_certs": cert, "check_hostname": False},
                                         header=[f"Authorization: Bearer {admin}"], timeout=30)
        try:
            while json.loads(ws.recv()).get("type") != "tick":
                pass
            tally.good("events")
        finally:
            ws.close()

    def key_churn():
        r = hostile_session.post(f"{url}/api/keys", json={"name": "soak", "scopes": ["infer"]}, timeout=30)
        if r.status_code not in (200, 201):
            return tally.unexpected("keys", f"create: {r.status_code} {r.text[:200]}")
        key = r.json()
        used = requests.post(f"{url}/v2/models/cls/infer", json=JSON_BODY, verify=cert, timeout=30,
                             headers={"Authorization": f"Bearer {key['secret']}"})
        revoked = hostile_session.delete(f"{url}/api/keys/{key['id']}", timeout=30)
        after = requests.post(f"{url}/v2/models/cls/infer", json=JSON_BODY, verify=cert, timeout=30,
                              headers={"Authorization": f"Bearer {key['secret']}"})
        if used.status_code == 200 and revoked.status_code in (200, 204) and after.status_code == 401:
            tally.good("keys")
        else:
            tally.unexpected("keys", f"used {used.status_code}, revoke {revoked.status_code}, after {after.status_code}")

    def absurd_shape():
        r = hostile_session.post(f"{url}/v2/models/cls/infer", json=ABSURD, timeout=30)
        expect("absurd-shape", r, 400)

    def silent(port_addr, kind, context):
        """Opens a connection (TLS when given a context), says nothing, and waits for the server
        to close it."""
        host, port = port_addr.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=60)
        try:
            if context:
                sock = context.wrap_socket(sock, server_hostname="localhost")
            closed = sock.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            closed = True
        except socket.timeout:
            closed = False
        finally:
            sock.close()
        if closed:
            tally.good(kind)
        else:
            tally.unexpected(kind, "still open after 60 s")

    def slow_body():
        """A body trickled at 1 byte/s: 408 (or closed) once the body timeout passes."""
        host, port = http.rsplit(":", 1)
        sock = tls.wrap_socket(socket.create_connection((host, int(port)), timeout=60), server_hostname="localhost")
        try:
            sock.sendall(f"POST /v2/models/cls/infer HTTP/1.1\r\nHost: {http}\r\nAuthorization: Bearer {admin}\r\n"
                         "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n".encode())
            answer = b""
            deadline = time.monotonic() + 90
            sock.settimeout(1)
            while time.monotonic() < deadline and not stop.is_set():
                try:
                    sock.sendall(b" ")
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    answer += chunk
                    if b"\r\n" in answer:
                        break
                except socket.timeout:
                    continue
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                    break
            if stop.is_set():
                return
            if answer.startswith(b"HTTP/1.1 408") or not answer:
                tally.good("slow-body")
            else:
                tally.unexpected("slow-body", answer[:100].decode(errors="replace"))
        finally:
            sock.close()

    def sse():
        """A streamed completion: every other one read to `[DONE]`, the others dropped after three
        chunks (the server must stop generating and free the stream)."""
        sse.n = getattr(sse, "n", 0) + 1
        whole = sse.n % 2 == 0
        with requests.post(f"{url}/v1/completions", headers=auth, verify=cert, stream=True, timeout=60,
                           json={"model": "textgen", "prompt": "The weather", "max_tokens": 48,
                                 "temperature": 0.7, "stream": True}) as r:
            if r.status_code != 200:
                return tally.unexpected("sse", f"{r.status_code} {r.text[:200]}")
            chunks, done = 0, False
            for line in r.iter_lines():
                if line == b"data: [DONE]":
                    done = True
                    break
                if line.startswith(b"data: "):
                    json.loads(line[6:])
                    chunks += 1
                    if not whole and chunks == 3:
                        break
            if (done and chunks > 0) or (not whole and chunks == 3):
                tally.good("sse")
            else:
                tally.unexpected("sse", f"{chunks} chunks, done {done}")

    churn_bytes = open(os.path.join(MODELS, "ocr-cls.onnx"), "rb").read()

    def model_churn():
        """A new version of `churn` uploaded and run; all but the newest two deleted."""
        r = hostile_session.post(f"{url}/api/models/churn/versions", data=churn_bytes, timeout=60)
        if r.status_code not in (200, 201):
            return tally.unexpected("model-churn", f"upload: {r.status_code} {r.text[:200]}")
        version = r.json()["version"]
        expect("model-churn", hostile_session.post(f"{url}/v2/models/churn/versions/{version}/infer",
                                                   json=JSON_BODY, timeout=60))
        listed = hostile_session.get(f"{url}/api/models", timeout=30).json()
        versions = [m["version"] for m in listed["models"] if m["name"] == "churn"]
        for old in sorted(versions)[:-2]:
            gone = hostile_session.delete(f"{url}/api/models/churn/versions/{old}", timeout=30)
            if gone.status_code not in (200, 204):
                tally.unexpected("model-churn", f"delete v{old}: {gone.status_code} {gone.text[:200]}")

    counter_bytes = open(os.path.join(PLUGINS, "counter.wasm"), "rb").read()
    swap = {"n": 0}

    def plugin_swap():
        """A plugin uploaded (compiled) and deleted again, and a pipeline's pre-plugins swapped
        between one and two pass-through stages while requests run through it."""
        swap["n"] += 1
        up = hostile_session.post(f"{url}/api/plugins", data=counter_bytes, timeout=60)
        if up.status_code not in (200, 201):
            return tally.unexpected("plugin-swap", f"upload: {up.status_code} {up.text[:200]}")
        gone = hostile_session.delete(f"{url}/api/plugins/counter/versions/0.1.0", timeout=30)
        if gone.status_code not in (200, 204):
            return tally.unexpected("plugin-swap", f"delete: {gone.status_code} {gone.text[:200]}")
        pre = ["passthrough"] * (1 + swap["n"] % 2)
        put = hostile_session.put(f"{url}/api/pipelines/swapped", json={"pre": pre, "model": "cls"}, timeout=30)
        if put.status_code not in (200, 201):
            return tally.unexpected("plugin-swap", f"pipeline: {put.status_code} {put.text[:200]}")
        expect("plugin-swap", hostile_session.post(f"{url}/v2/models/swapped/infer", json=JSON_BODY, timeout=60))

    configs = [{"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}},
               {"max_batch_size": 4, "instance_group": [{"count": 2, "kind": "KIND_CPU"}]}]
    config_turn = {"n": 0}

    def config_change():
        """The served model's configuration replaced (batching on, then two instances) while the
        other threads send it requests."""
        config_turn["n"] += 1
        r = hostile_session.put(f"{url}/api/models/cls/config", json=configs[config_turn["n"] % 2], timeout=60)
        if r.status_code == 200:
            tally.good("config")
        else:
            tally.unexpected("config", f"{r.status_code} {r.text[:200]}")

    workers = [
        (0.05, http_json, "http-json"), (0.05, http_binary, "http-binary"), (0.05, grpc_infer, "grpc"),
        (0.1, pipeline, "pipeline"), (0.2, ws_stream, "websocket"), (2.0, events, "events"),
        (1.0, key_churn, "keys"), (0.5, absurd_shape, "absurd-shape"), (0, slow_body, "slow-body"),
        (1.0, sse, "sse"), (5.0, model_churn, "model-churn"), (10.0, plugin_swap, "plugin-swap"),
        (7.0, config_change, "config"),
    ]
    workers += [(0, lambda: silent(http, "silent-tls", tls), "silent-tls") for _ in range(SILENT_CONNECTIONS // 2)]
    workers += [(0, lambda: silent(http, "silent-tcp", None), "silent-tcp") for _ in range(SILENT_CONNECTIONS // 4)]
    workers += [(0, lambda: silent(grpc_addr, "silent-grpc", h2), "silent-grpc") for _ in range(SILENT_CONNECTIONS // 4)]
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {kind for _, _, kind in workers}
        if unknown:
            raise SystemExit(f"--only: no traffic kind {sorted(unknown)}")
        workers = [w for w in workers if w[2] in wanted]
    threads = [threading.Thread(target=paced, args=(stop, period, guarded(kind, fn)), daemon=True)
               for period, fn, kind in workers]
    started = time.monotonic()
    for t in threads:
        t.start()

    rows = []
    duration = args.minutes * 60
    print(f"soak: {args.minutes:g} min against pid {pid}; idle baseline {idle_rss / 1024:.1f} MiB RSS, {idle_fds} fds",
          flush=True)
    while time.monotonic() - started < duration:
        rss, fds, nthreads = sample(pid)
        t = time.monotonic() - started
        with tally.lock:
            ok, bad = sum(tally.ok.values()), sum(tally.bad.values())
        rows.append((round(t, 1), rss, fds, nthreads, ok, bad))
        time.sleep(args.interval)
    stop.set()
    for t in threads:
        t.join(timeout=120)
    grpc_client.close()
    for s in (http_session, pipe_session, hostile_session):
        s.close()
    # Whatever the server still holds is closed by its own timeouts (header, keep-alive).
    settle = time.monotonic() + 150
    while time.monotonic() < settle:
        rss, fds, nthreads = sample(pid)
        if fds <= idle_fds + args.fd_slack:
            break
        time.sleep(args.interval)
    end_rss, end_fds, end_threads = sample(pid)
    rows.append((round(time.monotonic() - started, 1), end_rss, end_fds, end_threads,
                 sum(tally.ok.values()), sum(tally.bad.values())))

    with open(os.path.join(args.out, "soak.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "rss_kib", "open_fds", "threads", "ok_total", "unexpected_total"])
        w.writerows(rows)
    write_svg(os.path.join(args.out, "soak.svg"), rows, args.warmup)

    loaded = [r for r in rows[:-1] if r[0] >= args.warmup]
    if len(loaded) < 10:
        print(f"soak: only {len(loaded)} samples after the {args.warmup:g} s warm-up: run longer")
        return False
    head = statistics.median(r[1] for r in loaded[:5])
    tail = statistics.median(r[1] for r in loaded[-5:])
    xs = np.array([r[0] for r in loaded]) / 60
    slope = np.polyfit(xs, np.array([r[1] for r in loaded]) / 1024, 1)[0]
    growth = (tail - head) / 1024
    max_rss = max(r[1] for r in rows)
    print(f"requests: {dict(sorted(tally.ok.items()))}")
    print(f"unexpected: {dict(sorted(tally.bad.items()))}")
    for e in tally.examples:
        print(f"  {e}")
    print(f"RSS MiB: idle {idle_rss / 1024:.1f}, after warm-up {head / 1024:.1f}, end of load {tail / 1024:.1f}, "
          f"max {max_rss / 1024:.1f}, settled {end_rss / 1024:.1f}; slope after warm-up {slope:+.2f} MiB/min")
    print(f"open fds: idle {idle_fds}, max under load {max(r[2] for r in rows)}, settled {end_fds}; "
          f"threads: max {max(r[3] for r in rows)}, settled {end_threads}")
    checks = [
        (sum(tally.bad.values()) == 0, "no unexpected errors"),
        (growth < args.max_growth_mib, f"RSS growth after warm-up {growth:+.1f} MiB < {args.max_growth_mib:g} MiB"),
        (end_fds <= idle_fds + args.fd_slack, f"fds back to baseline: {end_fds} <= {idle_fds} + {args.fd_slack}"),
    ]
    for passed, what in checks:
        print(f"{'PASS' if passed else 'FAIL'}: {what}")
    print(f"wrote {args.out}/soak.csv and {args.out}/soak.svg")
    return all(p for p, _ in checks)


def write_svg(path, rows, warmup):
    """RSS (MiB, left axis) and open fds (right axis) over time, as a plain SVG."""
    w, h, pad = 720, 320, 50
    t_max = max(r[0] for r in rows) or 1
    rss = [r[1] / 1024 for r in rows]
    fds = [r[2] for r in rows]
    r_max = max(rss) * 1.1 or 1
    f_max = max(fds) * 1.1 or 1
    x = lambda t: pad + (w - 2 * pad) * t / t_max
    y = lambda v, top: h - pad - (h - 2 * pad) * v / top
    line = lambda vals, top: " ".join(f"{x(r[0]):.1f},{y(v, top):.1f}" for r, v in zip(rows, vals))
    ticks = "".join(
        f'<text x="{pad - 6}" y="{y(r_max * i / 4, r_max) + 4:.1f}" text-anchor="end">{r_max * i / 4:.0f}</text>'
        f'<text x="{w - pad + 6}" y="{y(f_max * i / 4, f_max) + 4:.1f}">{f_max * i / 4:.0f}</text>'
        for i in range(5))
    ticks += "".join(f'<text x="{x(t_max * i / 5):.1f}" y="{h - pad + 16}" text-anchor="middle">{t_max * i / 5 / 60:.1f}</text>'
                     for i in range(6))
    svg = f"""<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">
<rect width="{w}" height="{h}" fill="white"/>
<text x="{w / 2}" y="18" text-anchor="middle" font-size="13">infergate soak: RSS (MiB, blue, left) and open fds (orange, right)</text>
<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>
<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>
<line x1="{w - pad}" y1="{pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>
<line x1="{x(min(warmup, t_max)):.1f}" y1="{pad}" x2="{x(min(warmup, t_max)):.1f}" y2="{h - pad}" stroke="gray" stroke-dasharray="4"/>
<text x="{x(min(warmup, t_max)) + 4:.1f}" y="{pad + 12}" fill="gray">warm-up ends</text>
{ticks}
<text x="{w / 2}" y="{h - 12}" text-anchor="middle">minutes</text>
<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{line(rss, r_max)}"/>
<polyline fill="none" stroke="#ff7f0e" stroke-width="1.5" points="{line(fds, f_max)}"/>
</svg>
"""
    with open(path, "w") as f:
        f.write(svg)


if __name__ == "__main__":
    main()
