"""Slow, lossy links to both workers under 8 connections of load: every packet on each worker's
link delayed by `DELAY_MS` in each direction and `LOSS_PCT` of them dropped, for `DEGRADED_S`
seconds, between two windows of the same length on clean links. The promise: throughput falls
and latency grows as the links make them (a request needs at least one round trip of
2 × `DELAY_MS` more; a lost packet costs a retransmission), and nothing worse: no request
fails, the manager retries a request at most once (no retry storm), no worker is declared lost
(its heartbeats get through, late), and after the heal throughput is back.

Every time bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import os
import time

import pytest

from cluster import Cluster, Timing, show_logs, stop_all
from netns import Network
from report import build, percentile, show
from scenario import CONNECTIONS, START_S
from schedule import Fault, Faults, Run, Schedule, seed_from_env
from workload import LoadRun

DELAY_MS = 200
LOSS_PCT = 5
# 10 s in the CI; `scripts/faults.sh` sets `INFERGATE_FAULTS_DEGRADED_S=20`.
DEGRADED_S = float(os.environ.get("INFERGATE_FAULTS_DEGRADED_S", "10"))
# Heartbeats every second and the hop's default deadlines: a link this slow needs more than
# the other scenarios' fast settings (a TLS handshake alone is three round trips, 1.2 s).
TIMING = Timing(heartbeat_ms=1000, link_timeout_ms=10_000, connect_timeout_ms=3000)


def window(records, start, end):
    """Throughput and latency of the requests that started in [start, end)."""
    inside = [r for r in records if start <= r["start"] < end]
    latencies = [r["end"] - r["start"] for r in inside]
    return {"requests": len(inside), "per_s": round(len(inside) / (end - start), 1),
            "p50_ms": round(1000 * percentile(latencies, 0.5), 1) if latencies else None,
            "p99_ms": round(1000 * percentile(latencies, 0.99), 1) if latencies else None,
            "max_ms": round(1000 * max(latencies), 1) if latencies else None,
            "failed": sum(r["cause"] != "ok" for r in inside)}


@pytest.fixture(scope="module")
def degraded(privileged, infergate_bin):
    timing, seed = TIMING, seed_from_env()
    with Network() as net:
        mgr, w1, w2, client = (net.add(name) for name in ("mgr", "w1", "w2", "client"))
        net.wait_connected()
        cluster = Cluster(net, mgr, [w1, w2], client, timing)
        load = run = None
        try:
            request_deadline = timing.request_timeout_s + timing.hold_bound
            max_seconds = START_S + 3 * DEGRADED_S + request_deadline + 30
            load = LoadRun(cluster, CONNECTIONS, max_requests=int(2000 * max_seconds), max_seconds=max_seconds,
                           timeout=request_deadline, seed=seed)
            load.wait_answered(50, START_S)
            metrics_before = cluster.metrics()
            clean_from = time.monotonic()
            faults = [Fault("delay", node, at=DEGRADED_S, duration=DEGRADED_S,
                            params={"direction": "both", "delay_ms": DELAY_MS, "loss_pct": LOSS_PCT})
                      for node in ("w1", "w2")]
            run = Run(Schedule(seed, faults), Faults(net, cluster.processes, seed)).start()
            states = []
            fault_at = run.wait_applied(1, DEGRADED_S + 30)
            while len(run.undone) < 2 and time.monotonic() < fault_at + DEGRADED_S + 30:
                states.append({w["id"]: (w["state"], w["last_seen_ms"]) for w in cluster.view()})
                time.sleep(timing.interval / 10)
            run.wait(DEGRADED_S + 30)
            healed_at = max(run.undone.values())
            time.sleep(DEGRADED_S)
            records = load.stop()
            metrics = cluster.metrics()
            retried = (cluster.counter(metrics, "infergate_worker_retries")
                       - cluster.counter(metrics_before, "infergate_worker_retries"))
            reasons = [e["fields"].get("error", "") for e in cluster.manager_events("trying another")]
            report = build("200 ms delay and 5 % loss on worker links", records, fault_at, healed_at, seed,
                           retried, reasons, {})
            # Degraded: from the moment both links were slow until one began to heal (a delayer
            # lets its held packets go as it stops, and the other link is still slow meanwhile).
            report["windows"] = {
                "before": window(records, clean_from, min(run.applied.values())),
                "degraded": window(records, fault_at, min(run.undoing.values())),
                "after": window(records, healed_at, healed_at + DEGRADED_S),
            }
            report["lost_while_degraded"] = sorted({wid for s in states for wid, (st, _) in s.items() if st == "lost"})
            # The longest a worker went unheard while its link was slow, against the budget.
            report["longest_silence_s"] = max((seen / 1000 for s in states for _, seen in s.values()), default=0)
            report["silence_budget_s"] = timing.budget
            if report["lost_while_degraded"]:
                show_logs(cluster.processes, 60)
            show(report)
            yield report
        except BaseException:
            show_logs(cluster.processes)
            raise
        finally:
            stop_all(run, load, cluster)


def test_slow_lossy_links_slow_requests_down_and_fail_none(degraded):
    w = degraded["windows"]
    assert degraded["failed"] == {}, degraded
    assert w["degraded"]["requests"] > 0, "requests still complete over the slow links"
    # A request crosses a worker's link at least once each way.
    assert w["degraded"]["p50_ms"] >= 2 * DELAY_MS, w
    assert w["degraded"]["per_s"] < w["before"]["per_s"], w


def test_no_retry_storm_and_no_worker_lost(degraded):
    assert degraded["retried"] <= degraded["sent"], "a request is tried on two workers at most"
    assert degraded["lost_while_degraded"] == [], "heartbeats get through slow links"


def test_throughput_is_back_after_the_heal(degraded):
    w = degraded["windows"]
    assert w["after"]["failed"] == 0 and w["after"]["requests"] > 0, w
    # Back to the clean figures' order: more than half of the throughput before the fault.
    assert w["after"]["per_s"] > w["before"]["per_s"] / 2, w
