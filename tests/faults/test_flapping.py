"""Flapping links under 8 connections of load: the two workers' links cut and healed in turn,
never both at once, each cut and each heal lasting between half and twice the detection budget
(so that some cuts make a worker lost and some end before it is), for `FLAP_S` seconds (20 in the
CI; `scripts/faults.sh` sets `INFERGATE_FAULTS_FLAP_S=60` for a minute). The promise: no
request fails or stays open longer than the hold bound, the manager's memory, open files and
connections to workers do not grow with the flaps, and the registry converges: both workers
ready, no other entry, once the links stay up.

Every time bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`)."""
import os

import pytest

from cluster import Timing
from scenario import worker_fault
from schedule import Fault

FLAP_S = float(os.environ.get("INFERGATE_FAULTS_FLAP_S", "20"))
# Memory the manager may gain over the run beyond its start: allocator pools and the metrics'
# windows fill while the load runs; a leak per flap or per request would pass any such share.
RSS_GROWTH = 1.5


def flaps(serving, other, rng, timing):
    faults, at, turn = [], round(rng.uniform(0, timing.interval), 3), 0
    while at < FLAP_S:
        down = round(rng.uniform(0.5, 2) * timing.budget, 3)
        faults.append(Fault("cut", (serving, other)[turn % 2], at=at, duration=down))
        at = round(at + down + rng.uniform(0.5, 2) * timing.budget, 3)
        turn += 1
    return faults


@pytest.fixture(scope="module")
def flapping(privileged, infergate_bin):
    return worker_fault("flapping links", Timing(), flaps, expect_lost=False, probes=False, measure=True)


def test_no_request_fails_or_is_stuck_while_links_flap(flapping):
    p, t = flapping, flapping.timing
    assert p.report["failed"] == {} and p.report["answered"] == p.report["sent"] > 0, p.report
    stuck = [r for r in p.records if r["end"] - r["start"] > t.hold_bound]
    assert not stuck, (t.hold_bound, stuck[:5])
    r = p.report
    assert 0 <= r["duplicated"] <= r["retried_after_reaching_the_worker"] <= r["retried"] <= r["sent"], r


def test_the_manager_does_not_grow_with_the_flaps(flapping):
    before, after = flapping.report["manager_before"], flapping.report["manager_after"]
    assert after["rss_bytes"] <= RSS_GROWTH * before["rss_bytes"], (before, after)
    # Idle pooled connections: at most one per connection of load and worker, as before.
    limit = 2 * 8
    assert after["worker_connections"] <= limit, (before, after)
    assert after["open_files"] <= before["open_files"] + limit, (before, after)


def test_the_registry_converges_once_the_links_stay_up(flapping):
    p = flapping
    assert p.marks["ready"] is not None, p.report
    assert sorted(w["id"] for w in p.view) == sorted(p.cluster.ids.values()), "no other registry entry"
    assert all(w["state"] == "ready" for w in p.view), p.view
