#!/usr/bin/env python3
"""Instances x intra-op threads for a compute-bound model (EfficientNet-Lite0, 224x224) at
perf_analyzer concurrency 4 (and 1), each split against ONNX Runtime in process using every core
(one session, intra-op threads = cores), in alternating rounds so that all see the same machine.
What the engine's default split (engine/src/sizing.rs) is chosen from; issue 16's target is the
default at concurrency 4 >= 0.90 of in process.

Usage: bench/sizing.py [--seconds 4] [--rounds 3] [--splits 1x2,2x1]
Needs: scripts/setup.sh, bench/setup-perf-analyzer.sh, a release build (INFERGATE_BIN or
target/release/infergate).
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_per_request_targets as targets  # noqa: E402
import serving  # noqa: E402


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
    base = []
    print(f"{os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}; {args.seconds:g} s windows")
    for r in range(args.rounds):
        base.append(targets.in_process_all_cores(model, {"input": image}, args.seconds))
        for inst, intra in splits:
            proc, addrs = serving.start_server(data, intra_threads=intra, instances=inst)
            try:
                key = open(os.path.join(data, "admin.key")).read().strip()
                cert = os.path.join(data, "tls", "cert.pem")
                for c in (4, 1):
                    served, _, _ = serving.perf_analyzer(pa, "http", addrs["http"], cert, key, "effnet",
                                                         data_file, ["input:1,3,224,224"], c, args.seconds)
                    results[(inst, intra)][c].append(served)
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
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
