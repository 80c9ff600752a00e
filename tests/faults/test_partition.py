"""A manager and two workers on a bridge, 8 connections of load on a unary model through the
manager, and the link of the worker serving the model cut for twice the detection bound, then
healed. The promise: the worker leaves routing within its heartbeat budget (interval × missed
heartbeats) and the other worker serves meanwhile; after the heal it is ready again and gets
traffic; no answer is wrong and every failed request has a clear error; and no request in
flight to the lost worker stays open beyond the detection budget plus slack.

Every bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import random
import time
import types

import pytest

from cluster import Cluster, Timing
from netns import Network
from report import build, in_flight_at, show
from schedule import Fault, Faults, Run, Schedule, seed_from_env
from workload import LoadRun, probe

CONNECTIONS = 8
# The cut lasts this many detection bounds: long against the bound, so that a request held
# for the whole cut cannot pass for one that ended in time.
CUT_FACTOR = 2


def holding(view, model):
    """(worker id, requests/s) of the workers that report `model` loaded."""
    return [(w["id"], w["report"]["requests_per_s"]) for w in view
            if any(m["name"] == model for m in w["report"].get("models", []))]


def poll(cluster, what, timeout, test):
    """Polls the workers' view (every fifth of a heartbeat interval) until `test(view, now)` is
    true: the moment it was; None when `timeout` s passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.monotonic()
        if test(cluster.view(), now):
            return now
        time.sleep(cluster.timing.interval / 5)
    print(f"not seen within {timeout:.1f} s: {what}")
    return None


@pytest.fixture(scope="module")
def partition(privileged, infergate_bin):
    timing = Timing()
    seed = seed_from_env()
    rng = random.Random(seed)
    cut_s = CUT_FACTOR * timing.detect_bound
    # A client gives up on a request only after the manager's own deadline for it.
    request_deadline = timing.request_timeout_s + timing.detect_bound
    start_s = 60  # the first requests fetch the model to a worker and load it (debug build)
    max_seconds = start_s + cut_s + 2 * timing.recover_bound + request_deadline
    with Network() as net:
        mgr, w1, w2, client = (net.add(name) for name in ("mgr", "w1", "w2", "client"))
        net.wait_connected()
        cluster = Cluster(net, mgr, [w1, w2], client, timing)
        load = run = None
        try:
            load = LoadRun(cluster, CONNECTIONS, max_requests=int(2000 * max_seconds), max_seconds=max_seconds,
                           timeout=request_deadline, seed=seed)
            load.wait_answered(50, start_s)
            serving = []

            def busiest(view, _):
                rates = dict(holding(view, cluster.model))
                if any(rate > 0 for rate in rates.values()):
                    serving.append(max(rates, key=rates.get))
                return bool(serving)
            if poll(cluster, "a worker serving the model", 10 * timing.interval + 10, busiest) is None:
                raise AssertionError(f"no worker reported serving '{cluster.model}': {cluster.view()}")
            node = next(name for name, wid in cluster.ids.items() if wid == serving[0])
            retries_before = cluster.counter(cluster.metrics(), "infergate_worker_retries")

            schedule = Schedule(seed, [Fault("cut", node, at=round(rng.uniform(0, timing.interval), 3), duration=cut_s)])
            run = Run(schedule, Faults(net, cluster.processes, seed)).start()
            cut_at = run.wait_applied(0, timing.interval + 10)
            marks = {}
            marks["lost"] = poll(cluster, f"{node} lost", cut_s,
                                 lambda view, _: cluster.state(view, node) == "lost")
            # Requests on fresh connections while the worker is out of routing: the other worker
            # answers them (the load's own connections may be held by the cut worker).
            probes = []
            heal_due = cut_at + cut_s
            while marks["lost"] is not None and len(probes) < 50 and time.monotonic() < heal_due - timing.interval:
                started = time.monotonic()
                status, took = probe(cluster, f"probe-{len(probes)}", heal_due - started)
                probes.append({"status": status, "start": started, "end": started + took})
                time.sleep(timing.interval / 5)
            run.wait(cut_s + 30)
            healed_at = run.undone[0]
            marks["ready"] = poll(cluster, f"{node} ready again", 2 * timing.recover_bound,
                                  lambda view, _: cluster.state(view, node) == "ready")
            # Traffic again: a heartbeat whose whole window began after every request sent before
            # the heal had ended (those that hung through the cut end after it, and count there).
            settled = None
            deadline = time.monotonic() + request_deadline + 5
            while settled is None and time.monotonic() < deadline:
                settled = load.none_open_from_before(healed_at)
                time.sleep(0.1)

            def traffic(view, now):
                row = next((w for w in view if w["id"] == cluster.ids[node]), None)
                if row is None or row["state"] != "ready" or settled is None:
                    return False
                reported_at = now - row["last_seen_ms"] / 1000
                return reported_at - timing.interval >= settled and row["report"]["requests_per_s"] > 0
            marks["traffic"] = poll(cluster, f"{node} serving again", timing.recover_bound + 4 * timing.interval,
                                    traffic)
            final_view = cluster.view()
            retries = cluster.counter(cluster.metrics(), "infergate_worker_retries") - retries_before
            records = load.stop()
            reasons = [e["fields"].get("error", "") for e in cluster.manager_events("trying another")]
            report = build("manager-worker partition under load", records, cut_at, healed_at, seed,
                           retries, reasons, marks)
            report["probes_during_cut"] = {"sent": len(probes), "answered": sum(p["status"] == 200 for p in probes)}
            show(report)
            yield types.SimpleNamespace(timing=timing, node=node, cluster=cluster, records=records, marks=marks,
                                        cut_at=cut_at, healed_at=healed_at, view=final_view, report=report,
                                        probes=probes)
        except BaseException:
            for name, process in cluster.processes.items():
                print(f"--- last lines of {name}'s log:\n" + "\n".join(process.lines()[-15:]))
            raise
        finally:
            if run is not None:
                run.stop()
            if load is not None:
                load.stop()
            cluster.stop()


def test_the_lost_worker_leaves_routing_in_its_heartbeat_budget_and_comes_back(partition):
    p, t = partition, partition.timing
    lost, ready, traffic = p.marks["lost"], p.marks["ready"], p.marks["traffic"]
    assert lost is not None and lost - p.cut_at <= t.detect_bound, \
        f"declared lost {None if lost is None else round(lost - p.cut_at, 2)} s after the cut (bound {t.detect_bound} s)"
    assert p.probes and all(q["status"] == 200 and q["end"] < p.healed_at for q in p.probes), \
        f"requests sent while the worker was lost are answered (by the other worker): {p.probes}"
    assert ready is not None and ready - p.healed_at <= t.recover_bound, \
        f"ready {None if ready is None else round(ready - p.healed_at, 2)} s after the heal (bound {t.recover_bound} s)"
    assert traffic is not None, "the healed worker got traffic again"
    assert sorted(w["id"] for w in p.view) == sorted(p.cluster.ids.values()), "no other registry entry"
    assert all(w["state"] == "ready" for w in p.view), p.view


def test_no_answer_is_wrong_and_every_failure_is_a_clear_error(partition):
    records = partition.records
    assert len(records) == partition.report["sent"] and records
    assert not [r for r in records if r["cause"] == "wrong-answer"]
    unclear = [r for r in records if r["cause"] != "ok" and not (r["cause"].startswith("http-5") and r["error"])]
    # A request the client gave up on (no answer by the manager's own deadline) is unclear too.
    assert not unclear, unclear[:5]


class HeldTooLong(AssertionError):
    """The known bug's failure, told apart from any other so that only it is expected."""


@pytest.mark.xfail(strict=True, raises=HeldTooLong, reason=(
    "known bug: nothing ends a request in flight to a worker when the manager declares the worker "
    "lost; it stays open until the partition heals (or request_timeout_s). Remove this mark with the "
    "fix (in-flight requests retried or failed as soon as their worker is lost, a hop deadline)"))
def test_requests_in_flight_to_the_lost_worker_end_within_the_detection_bound(partition):
    p, t = partition, partition.timing
    open_at_cut = in_flight_at(p.records, p.cut_at)
    held = sorted(((r["end"] if r["end"] is not None else float("inf")) - r["start"], r["id"])
                  for r in p.records if (r["end"] if r["end"] is not None else float("inf")) - r["start"] > t.detect_bound)
    if held:
        raise HeldTooLong(f"{len(held)} requests stayed open longer than {t.detect_bound} s (budget {t.budget} s + "
                          f"slack {t.slack} s), up to {held[-1][0]:.1f} s, with the cut lasting "
                          f"{p.healed_at - p.cut_at:.1f} s; {len(open_at_cut)} were in flight at the cut")
