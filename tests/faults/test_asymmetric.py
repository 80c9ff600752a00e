"""Asymmetric partitions between the manager and the worker serving the model, under 8
connections of load, each for twice the detection bound:

- heartbeats lost while answers flow: the worker's traffic to the manager's port is dropped
  (its heartbeats), the manager's requests to the worker's port go through. The manager cannot
  tell this from a dead worker: it declares the worker lost within its heartbeat budget and ends
  the requests in flight there, which run again on the other worker (the worker had run them:
  they count as run twice). After the heal its heartbeats arrive and it serves again.
- requests lost while heartbeats flow: the manager's traffic to the worker's port is dropped,
  the worker's heartbeats arrive, so it stays `ready` in the registry. A request sent there ends
  within the hop's own deadlines (`link_timeout_ms` on a connection that went silent,
  `connect_timeout_ms` for a new one) and runs on the other worker; the failed hop also takes
  the worker out of routing until its next heartbeat after a deadline (`infergate_worker_
  suspect`), so the load does not keep feeding it.

Every bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import pytest

from cluster import MANAGER_PORT, WORKER_PORT, Timing
from scenario import worker_fault
from schedule import Fault

FACTOR = 2


def heartbeats_lost(node, _other, rng, timing):
    return [Fault("block", node, at=round(rng.uniform(0, timing.interval), 3), duration=FACTOR * timing.detect_bound,
                  params={"peer": "mgr", "port": MANAGER_PORT, "toward_peer": True})]


def requests_lost(node, _other, rng, timing):
    return [Fault("block", node, at=round(rng.uniform(0, timing.interval), 3), duration=FACTOR * timing.hold_bound,
                  params={"peer": "mgr", "port": WORKER_PORT, "toward_peer": False})]


@pytest.fixture(scope="module")
def no_heartbeats(privileged, infergate_bin):
    return worker_fault("heartbeats lost, answers flow", Timing(), heartbeats_lost, expect_lost=True)


@pytest.fixture(scope="module")
def no_requests(privileged, infergate_bin):
    return worker_fault("requests lost, heartbeats flow", Timing(), requests_lost, expect_lost=False)


def held_longer_than(records, bound):
    return sorted(r["end"] - r["start"] for r in records if r["end"] - r["start"] > bound)


def test_a_worker_whose_heartbeats_are_lost_leaves_routing_and_its_requests_run_elsewhere(no_heartbeats):
    p, t = no_heartbeats, no_heartbeats.timing
    lost = p.marks["lost"]
    assert lost is not None and lost - p.fault_at <= t.detect_bound, p.report
    assert not held_longer_than(p.records, t.detect_bound), p.report
    assert p.report["failed"] == {} and p.report["answered"] == p.report["sent"], p.report
    assert all(q["status"] == 200 for q in p.probes), p.probes
    assert p.marks["ready"] is not None and p.marks["traffic"] is not None, p.report
    assert sorted(w["id"] for w in p.view) == sorted(p.cluster.ids.values()), "no other registry entry"
    # Its answers flowed: what it ran before it was declared lost was answered there, and what
    # was cut ran again: counted, and never more than the retries of requests it had.
    r = p.report
    assert 0 <= r["duplicated"] <= r["retried_after_reaching_the_worker"] <= r["retried"] <= r["sent"], r


def test_a_worker_the_manager_cannot_reach_costs_a_request_at_most_the_hops_deadlines(no_requests):
    p, t = no_requests, no_requests.timing
    assert p.marks.get("lost") is None, "its heartbeats arrive: it is not lost"
    assert not held_longer_than(p.records, t.link_bound), (t.link_bound, p.report)
    assert p.report["failed"] == {} and p.report["answered"] == p.report["sent"], p.report
    assert p.report["retried"] >= 1, "requests sent there were tried on the other worker"
    assert p.report["retried"] <= p.report["sent"] + p.report["probes_during_fault"]["sent"], p.report
    assert p.marks["ready"] is not None and p.marks["traffic"] is not None, p.report
    assert sorted(w["id"] for w in p.view) == sorted(p.cluster.ids.values()), "no other registry entry"
