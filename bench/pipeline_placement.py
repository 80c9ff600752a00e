#!/usr/bin/env python3
"""Where a pipeline's native op runs when its model stage goes to a worker: the same
pipeline through a manager (`serve --no-local-engine`) + 1 worker with `[cluster] pipeline_ops =
"worker"` (the manager sends the decoded image; the worker resizes, normalizes and runs the model)
vs `"manager"` (the manager resizes and normalizes and sends the model's FP32 input), both
clusters up at once and measured in alternating rounds so that load drifts hit both alike.

The pipeline is the demo `classify` (scripts/demo/classify.json: image-decode → resize/normalize
224x224 → EfficientNet-Lite0 → imagenet-topk) on a JPEG (or PNG) posted to
/api/pipelines/classify/run.
Reported per placement: requests/s and p50 at the given concurrency, request bytes the manager
sent the worker per request (`infergate_worker_request_bytes_total`), CPU ms per request of the
manager and the worker, and the plugins' stage times (`Server-Timing` pre and post, on the
manager) with the encoded and the decoded image's sizes: the figures that decide where the WASM
plugins run (they stay on the manager in both placements).

Usage: bench/pipeline_placement.py [--bin target/release/infergate] [--seconds 4] [--rounds 3]
                                   [--concurrency 8] [--width 640 --height 480] [--format jpeg|png]
Needs: scripts/setup.sh (models, plugins/dist, ORT library, Python venv with Pillow).
"""
import argparse
import http.client
import io
import json
import os
import re
import statistics
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workers import ROOT, Call, Cluster, load_calls, metric, through  # noqa: E402

PLUGINS = os.environ.get("INFERGATE_PLUGINS", os.path.join(ROOT, "plugins", "dist"))
PLACEMENTS = ("worker", "manager")
TIMING = re.compile(r"(\w+);dur=([0-9.]+)")


def photo(width, height, fmt):
    """An encoded image (JPEG quality 90 or PNG) that compresses like a photo more than like a
    test card: smooth gradients, a block of colour and mild noise (fixed seed)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1)
    img[height // 4:height // 2, width // 3:width // 2] = [230, 200, 40]
    img = np.clip(img + rng.normal(0, 6, img.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(img, "RGB").save(out, format=fmt.upper(), **({"quality": 90} if fmt == "jpeg" else {}))
    return out.getvalue()


def send(server, method, path, body, content_type):
    host, port = server.hostport.rsplit(":", 1)
    c = http.client.HTTPSConnection(host, int(port), context=server.tls, timeout=30)
    try:
        c.request(method, path, body=body, headers={"Authorization": f"Bearer {server.admin}",
                                                    "Content-Type": content_type})
        r = c.getresponse()
        data = r.read()
        if r.status // 100 != 2:
            sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
    finally:
        c.close()


def classify_pipeline(server):
    """The demo plugins and `classify`, on the bench's model name."""
    for plugin in ("image-decode", "imagenet-topk"):
        with open(os.path.join(PLUGINS, f"{plugin}.wasm"), "rb") as f:
            send(server, "POST", "/api/plugins", f.read(), "application/wasm")
    with open(os.path.join(ROOT, "scripts", "demo", "classify.json")) as f:
        spec = json.load(f)
    spec["model"] = "effnet"
    send(server, "PUT", "/api/pipelines/classify", json.dumps(spec).encode(), "application/json")


def classify_call(image, fmt, stages):
    """Posts the image to the classify pipeline; keeps each answer's Server-Timing in `stages`."""
    def check(r, data):
        if r.status != 200:
            return f"{r.status} {data[:200]!r}"
        if b"label" not in data:
            return f"no label in {data[:200]!r}"
        stages.append({k: float(v) for k, v in TIMING.findall(r.getheader("Server-Timing", ""))})
        return None
    return Call("/api/pipelines/classify/run", image, {"Content-Type": f"image/{fmt}"}, check)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("INFERGATE_BIN", os.path.join(ROOT, "target", "release", "infergate")))
    ap.add_argument("--seconds", type=float, default=4.0, help="length of one measurement")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per placement (medians reported)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--format", default="jpeg", choices=("jpeg", "png"))
    args = ap.parse_args()
    if not os.access(args.bin, os.X_OK):
        sys.exit(f"{args.bin}: not an executable (build it, or pass --bin)")
    image = photo(args.width, args.height, args.format)
    decoded = args.width * args.height * 3
    print(f"# bench/pipeline_placement.py: {args.bin}; {len(os.sched_getaffinity(0))} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; concurrency {args.concurrency}, "
          f"{args.rounds} rounds x {args.seconds} s per placement")
    print(f"# image {args.width}x{args.height}: {args.format.upper()} {len(image)} bytes, decoded RGB8 {decoded} bytes, "
          f"model input FP32 {3 * 224 * 224 * 4} bytes")
    c = Cluster(args.bin, heartbeat_ms=500)
    try:
        clusters = {}
        for placement in PLACEMENTS:
            c.config = os.path.join(c.base, f"{placement}.toml")
            with open(c.config, "w") as f:
                f.write(f'[cluster]\nheartbeat_ms = 500\npipeline_ops = "{placement}"\n')
            manager = c.serve(f"manager-{placement}", ["effnet"], manager=True)
            worker = c.worker(manager, f"worker-{placement}")
            manager.wait_workers(1)
            classify_pipeline(manager)
            clusters[placement] = (manager, worker)
        rounds = {p: [] for p in PLACEMENTS}
        for i in range(args.rounds + 1):  # round 0 warms up (model load, connections)
            for placement in (PLACEMENTS if i % 2 else PLACEMENTS[::-1]):
                manager, worker = clusters[placement]
                stages = []
                sent0 = metric(manager, "infergate_worker_request_bytes_total") or 0.0
                cpu0 = (manager.proc.cpu_s(), worker.cpu_s())
                r = load_calls(classify_call(image, args.format, stages), through(manager, args.concurrency),
                               1.0 if i == 0 else args.seconds)
                if r["failed"]:
                    sys.exit(f"{placement}: {r['failed']} failed: {r['examples']}")
                if i == 0:
                    continue
                n = max(r["ok"], 1)
                r["sent_bytes"] = ((metric(manager, "infergate_worker_request_bytes_total") or 0.0) - sent0) / n
                r["cpu_ms"] = [(manager.proc.cpu_s() - cpu0[0]) * 1e3 / n, (worker.cpu_s() - cpu0[1]) * 1e3 / n]
                r["pre_ms"] = statistics.median(s.get("pre", 0.0) for s in stages)
                r["post_ms"] = statistics.median(s.get("post", 0.0) for s in stages)
                rounds[placement].append(r)
        med = {p: {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_us", "sent_bytes", "pre_ms", "post_ms")}
               for p, rs in rounds.items()}
        for p in PLACEMENTS:
            m = med[p]
            cpu = [statistics.median(r["cpu_ms"][i] for r in rounds[p]) for i in (0, 1)]
            print(f"pipeline_ops = {p:8s}: {m['rps']:.1f} req/s, p50 {m['p50_us'] / 1e3:.2f} ms, "
                  f"{m['sent_bytes']:.0f} bytes/request to the worker; CPU ms/request manager {cpu[0]:.2f}, "
                  f"worker {cpu[1]:.2f}; on the manager: pre-plugin (image-decode) p50 {m['pre_ms']:.2f} ms, "
                  f"post-plugin (imagenet-topk) p50 {m['post_ms']:.2f} ms")
        w, mgr = med["worker"], med["manager"]
        print(f"worker / manager: throughput {w['rps'] / mgr['rps']:.3f}, p50 {w['p50_us'] / mgr['p50_us']:.3f}, "
              f"bytes sent {w['sent_bytes'] / mgr['sent_bytes']:.3f}")
        print(f"plugins on the worker too would send the {args.format.upper()} instead of the decoded image: "
              f"{len(image)} vs {decoded} bytes ({len(image) / decoded:.3f}), and move the image-decode call "
              f"(p50 {w['pre_ms']:.2f} ms here) onto the worker's CPU")
    finally:
        c.close()


if __name__ == "__main__":
    main()
