"""What the scenarios between a manager and its workers share: a manager and two workers on a
bridge with 8 connections of load on a unary model through the manager, a fault on the link of
the worker serving the model, and what is observed meanwhile (when the worker is lost, ready
again, serving again), then the report.

Every bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import random
import time
import types

from cluster import WORKER_PORT, Cluster, show_logs, stop_all
from netns import Network
from report import build, show
from schedule import Faults, Run, Schedule, seed_from_env
from workload import LoadRun, probe

CONNECTIONS = 8
# The first requests fetch the model to a worker and load it (a debug build on a shared machine).
START_S = 60


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


def serving_node(cluster):
    """The node of the worker that serves the most of the model (as its heartbeats report)."""
    serving = []

    def busiest(view, _):
        rates = dict(holding(view, cluster.model))
        if any(rate > 0 for rate in rates.values()):
            serving.append(max(rates, key=rates.get))
        return bool(serving)
    timing = cluster.timing
    if poll(cluster, "a worker serving the model", 10 * timing.interval + 10, busiest) is None:
        raise AssertionError(f"no worker reported serving '{cluster.model}': {cluster.view()}")
    return next(name for name, wid in cluster.ids.items() if wid == serving[0])


def reported_after(cluster, moment):
    """The workers' view once every worker has reported after `moment` (its heartbeat carries
    what it answered until then)."""
    def fresh(view, now):
        return len(view) == len(cluster.ids) and all(now - w["last_seen_ms"] / 1000 > moment for w in view)
    if poll(cluster, "a heartbeat from every worker", cluster.timing.recover_bound + 4 * cluster.timing.interval,
            fresh) is None:
        raise AssertionError(f"not every worker reported after the load stopped: {cluster.view()}")
    return cluster.view()


def answered_by_workers(view):
    """Requests the workers answered since they started, together."""
    return sum(int(w["report"].get("answered_total", 0)) for w in view)


def resources(cluster):
    """What the manager holds: resident memory, open files, TCP connections to workers."""
    def connections():
        from netns import sh
        out = sh("ip", "netns", "exec", cluster.manager_node.ns, "ss", "-Htn", "state", "established",
                 f"( dport = :{WORKER_PORT} )")
        return len([line for line in out.splitlines() if line.strip()])
    return {"rss_bytes": cluster.manager.rss_bytes(), "open_files": cluster.manager.open_files(),
            "worker_connections": connections()}


def worker_fault(network_name, timing, fault, expect_lost, probes=True, measure=False):
    """Runs one scenario: the cluster, its load, `fault(serving, other, rng, timing)` (a list of
    `Fault`s, `serving` the node of the worker serving the model, `other` the other worker's) as
    a schedule, and what was observed. `expect_lost`: the manager must declare the serving
    worker lost (its heartbeats stop reaching it). `measure`: the manager's resources are read
    before the fault and after the load (`resources`). Returns a namespace with the records, the
    marks (monotonic times), the report and the cluster's final view; the cluster is stopped
    and the network removed when it returns or fails."""
    seed = seed_from_env()
    with Network() as net:
        mgr, w1, w2, client = (net.add(name) for name in ("mgr", "w1", "w2", "client"))
        net.wait_connected()
        cluster = Cluster(net, mgr, [w1, w2], client, timing)
        load = run = None
        try:
            # A client gives up on a request only after the manager's own deadline for it.
            request_deadline = timing.request_timeout_s + timing.hold_bound
            # The schedule's random parts come from the seed alone, whichever node it strikes.
            length = max(f.at + f.duration for f in fault("w1", "w2", random.Random(seed), timing))
            max_seconds = START_S + length + 2 * timing.recover_bound + request_deadline
            load = LoadRun(cluster, CONNECTIONS, max_requests=int(2000 * max_seconds), max_seconds=max_seconds,
                           timeout=request_deadline, seed=seed)
            load.wait_answered(50, START_S)
            node = serving_node(cluster)
            other = next(name for name in cluster.ids if name != node)
            faults = fault(node, other, random.Random(seed), timing)
            metrics_before = cluster.metrics()
            before = resources(cluster) if measure else None
            schedule = Schedule(seed, faults)
            run = Run(schedule, Faults(net, cluster.processes, seed)).start()
            fault_at = run.wait_applied(0, timing.interval + 10)
            marks = {}
            if expect_lost:
                marks["lost"] = poll(cluster, f"{node} lost", length,
                                     lambda view, _: cluster.state(view, node) == "lost")
            # Requests on fresh connections while the fault lasts: the other worker answers them.
            sent_probes = []
            healed_due = run.started + length
            while probes and len(sent_probes) < 50 and time.monotonic() < healed_due - timing.hold_bound:
                if expect_lost and marks["lost"] is None:
                    break
                started = time.monotonic()
                status, took = probe(cluster, f"probe-{len(sent_probes)}", healed_due - started)
                sent_probes.append({"status": status, "start": started, "end": started + took})
                time.sleep(timing.interval / 5)
            run.wait(length + 30)
            healed_at = max(run.undone.values())
            marks["ready"] = poll(cluster, f"{node} ready again", 2 * timing.recover_bound,
                                  lambda view, _: cluster.state(view, node) == "ready")
            # Traffic again: a heartbeat whose whole window began after every request sent before
            # the heal had ended.
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
            records = load.stop()
            stopped_at = time.monotonic()
            metrics = cluster.metrics()
            delta = {name: cluster.counter(metrics, name) - cluster.counter(metrics_before, name)
                     for name in ("infergate_worker_retries", "infergate_worker_retries_sent",
                                  "infergate_worker_requests_cut")}
            final_view = reported_after(cluster, stopped_at)
            after = resources(cluster) if measure else None
            answered_here = sum(r["cause"] == "ok" for r in records) + sum(p["status"] == 200 for p in sent_probes)
            reasons = [e["fields"].get("error", "") for e in cluster.manager_events("trying another")]
            report = build(network_name, records, fault_at, healed_at, seed, delta["infergate_worker_retries"],
                           reasons, marks)
            report["retried_after_reaching_the_worker"] = int(delta["infergate_worker_retries_sent"])
            report["cut_when_lost"] = int(delta["infergate_worker_requests_cut"])
            # Every request the workers ran beyond those answered here ran twice.
            report["duplicated"] = answered_by_workers(final_view) - answered_here
            report["probes_during_fault"] = {"sent": len(sent_probes),
                                             "answered": sum(p["status"] == 200 for p in sent_probes)}
            if measure:
                report["manager_before"], report["manager_after"] = before, after
            show(report)
            return types.SimpleNamespace(timing=timing, node=node, cluster=cluster, records=records, marks=marks,
                                         fault_at=fault_at, healed_at=healed_at, view=final_view, report=report,
                                         probes=sent_probes, manager=cluster.manager)
        except BaseException:
            show_logs(cluster.processes)
            raise
        finally:
            stop_all(run, load, cluster)
