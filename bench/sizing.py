#!/usr/bin/env python3
"""Instances x intra-op threads for a compute-bound model (EfficientNet-Lite0, 224x224) at
perf_analyzer concurrency 4 (and 1), each split against ONNX Runtime in process using every core
(one session, intra-op threads = cores), in alternating rounds so that all see the same machine.
What the engine's default split (engine/src/sizing.rs) is chosen from; the serving target is the
default at concurrency 4 >= 0.90 of in process.

It also prints where the CPU goes at concurrency 4, per inference: the server's whole process
(/proc/PID/stat), perf_analyzer's (the children's rusage around its run) and the model's own
(ONNX Runtime in this process, spinning off so that only work is counted), against the server's
inference count. With the cores saturated, served inferences/s cannot exceed
cores / (model + client CPU per inference) whatever the server does, and cannot exceed
cores / (server + client) as measured: the first is the ceiling that the client sharing the
cores imposes, the second what this server reaches.

Usage: bench/sizing.py [--seconds 4] [--rounds 3] [--splits 1x2,2x1]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, a release build (INFERGATE_BIN or
target/release/infergate).
"""
import argparse
import os
import resource
import statistics
import sys
import time

import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_per_request  # noqa: E402
import cpu_per_request_targets as targets  # noqa: E402
import serving  # noqa: E402


def children_cpu():
    """CPU seconds of the children waited for so far (perf_analyzer's runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def model_cpu_per_inference(model, feeds, seconds):
    """Process CPU seconds per inference of ONNX Runtime on every core with spinning off (the
    threads sleep between parallel sections, so the figure is the model's work, not waiting)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    for _ in range(5):
        sess.run(None, feeds)
    n, start, end = 0, time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < end:
        sess.run(None, feeds)
        n += 1
    return (time.process_time() - start) / n


def served_with_cpu(pa, addrs, cert, key, data_file, concurrency, seconds, pid):
    """(inferences/s, server CPU s/inference, client CPU s/inference) of one perf_analyzer run."""
    url = f"https://{addrs['http']}/v2/models/effnet/stats"
    before, server0, client0 = cpu_per_request.stats(cert, url, key), sum(cpu_per_request.cpu_split(pid)), children_cpu()
    served, _, _ = serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "effnet", data_file,
                                         ["input:1,3,224,224"], concurrency, seconds)
    server1, client1, after = sum(cpu_per_request.cpu_split(pid)), children_cpu(), cpu_per_request.stats(cert, url, key)
    done = after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"]
    return served, (server1 - server0) / done, (client1 - client0) / done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--splits", default=f"1x{os.cpu_count()},{os.cpu_count()}x1",
                    help="instances x intra-op threads, comma-separated")
    args = ap.parse_args()
    pa = serving.perf_analyzer_command()
    data, model, image, data_file = targets.effnet_data("infergate-sizing-")
    splits = [tuple(int(x) for x in s.split("x")) for s in args.splits.split(",")]
    results = {s: {1: [], 4: []} for s in splits}
    cpu = {s: [] for s in splits}
    base, model_cpu = [], []
    print(f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}; {args.seconds:g} s windows")
    for r in range(args.rounds):
        base.append(targets.in_process_all_cores(model, {"input": image}, args.seconds))
        model_cpu.append(model_cpu_per_inference(model, {"input": image}, args.seconds / 2))
        for inst, intra in splits:
            proc, addrs = serving.start_server(data, intra_threads=intra, instances=inst)
            try:
                key = open(os.path.join(data, "admin.key")).read().strip()
                cert = os.path.join(data, "tls", "cert.pem")
                served, server_s, client_s = served_with_cpu(pa, addrs, cert, key, data_file, 4, args.seconds,
                                                             proc.pid)
                results[(inst, intra)][4].append(served)
                cpu[(inst, intra)].append((server_s, client_s))
                served, _, _ = serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "effnet",
                                                     data_file, ["input:1,3,224,224"], 1, args.seconds)
                results[(inst, intra)][1].append(served)
            finally:
                proc.terminate()
                proc.wait(timeout=30)
        print(f"round {r + 1}: in process {base[-1]:.1f} inf/s; " + "; ".join(
            f"{i}x{t}: c=4 {results[(i, t)][4][-1]:.1f}, c=1 {results[(i, t)][1][-1]:.1f}" for i, t in splits),
            flush=True)
    b = statistics.median(base)
    print(f"\nmedians of {args.rounds} rounds; in process, {os.cpu_count()} threads: {b:.1f} inf/s")
    print("| instances x threads | c=4 inf/s | c=4 / in process | c=1 inf/s | c=1 / in process |")
    print("| --- | --- | --- | --- | --- |")
    for i, t in splits:
        c4, c1 = statistics.median(results[(i, t)][4]), statistics.median(results[(i, t)][1])
        print(f"| {i} x {t} | {c4:.1f} | {c4 / b:.3f} | {c1:.1f} | {c1 / b:.3f} |")
    cores, m = os.cpu_count(), statistics.median(model_cpu)
    print(f"\nCPU per inference at c=4 (medians; ms), the model's own in process (spinning off): {m * 1e3:.2f}")
    print("| instances x threads | server | of which beyond the model | client (perf_analyzer) "
          "| ceiling cores/(model+client) / in process | cores/(server+client) / in process |")
    print("| --- | --- | --- | --- | --- | --- |")
    for i, t in splits:
        server = statistics.median(x for x, _ in cpu[(i, t)])
        client = statistics.median(y for _, y in cpu[(i, t)])
        print(f"| {i} x {t} | {server * 1e3:.2f} | {(server - m) * 1e3:.2f} | {client * 1e3:.2f} "
              f"| {cores / (m + client) / b:.3f} | {cores / (server + client) / b:.3f} |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
