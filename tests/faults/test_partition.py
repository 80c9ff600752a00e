"""A manager and two workers on a bridge, 8 connections of load on a unary model through the
manager, and the link of the worker serving the model cut for twice the detection bound, then
healed. The promise: the worker leaves routing within its heartbeat budget (interval × missed
heartbeats) and the other worker serves meanwhile; the requests in flight to it end as soon as
it is declared lost (each run again on the other worker: none fails); after the heal it is
ready again and gets traffic; no answer is wrong and every failed request has a clear error;
the requests that ran twice (on the lost worker, then again) are counted from the workers' own
statistics, and are no more than the manager's retries of requests that had reached a worker.

Every bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import pytest

from cluster import Timing
from report import in_flight_at
from scenario import worker_fault
from schedule import Fault

# The cut lasts this many detection bounds: long against the bound, so that a request held
# for the whole cut cannot pass for one that ended in time.
CUT_FACTOR = 2


def cut(node, _other, rng, timing):
    return [Fault("cut", node, at=round(rng.uniform(0, timing.interval), 3), duration=CUT_FACTOR * timing.detect_bound)]


@pytest.fixture(scope="module")
def partition(privileged, infergate_bin):
    timing = Timing.from_env()
    return worker_fault(f"manager-worker partition under load (heartbeat {timing.heartbeat_ms} ms x "
                        f"{timing.missed_heartbeats})", timing, cut, expect_lost=True)


def test_the_lost_worker_leaves_routing_in_its_heartbeat_budget_and_comes_back(partition):
    p, t = partition, partition.timing
    lost, ready, traffic = p.marks["lost"], p.marks["ready"], p.marks["traffic"]
    assert lost is not None and lost - p.fault_at <= t.detect_bound, \
        f"declared lost {None if lost is None else round(lost - p.fault_at, 2)} s after the cut (bound {t.detect_bound} s)"
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


def test_requests_in_flight_to_the_lost_worker_end_within_the_detection_bound(partition):
    p, t = partition, partition.timing
    open_at_cut = in_flight_at(p.records, p.fault_at)
    held = sorted(((r["end"] if r["end"] is not None else float("inf")) - r["start"], r["id"])
                  for r in p.records if (r["end"] if r["end"] is not None else float("inf")) - r["start"] > t.detect_bound)
    assert not held, (f"{len(held)} requests stayed open longer than {t.detect_bound} s (budget {t.budget} s + "
                      f"slack {t.slack} s), up to {held[-1][0]:.1f} s, with the cut lasting "
                      f"{p.healed_at - p.fault_at:.1f} s; {len(open_at_cut)} were in flight at the cut")
    # Each ended by the lost signal ran again on the other worker: no acknowledged request lost.
    assert p.report["failed"] == {}, p.report["failed"]
    assert p.report["cut_when_lost"] >= 1, "the requests on the cut worker were ended when it was lost"


def test_requests_that_ran_twice_are_counted_and_bounded_by_the_retries(partition):
    r = partition.report
    assert 0 <= r["duplicated"] <= r["retried_after_reaching_the_worker"] <= r["retried"], r
    # No retry storm: a request is tried on two workers at most.
    assert r["retried"] <= r["sent"] + r["probes_during_fault"]["sent"], r
