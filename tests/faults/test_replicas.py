"""Two gateway replicas (`r1`, `r2`, each serving the identity model on its own engine) on one
PostgreSQL (`pg`) sharing rate limits through one Redis (`redis`), each in its own namespace,
with load from a client namespace. Two scenarios run one after the other on the same replicas:

- **r1 partitioned from PostgreSQL** (its traffic to port 5432 dropped both ways) while
  clients reach both replicas. The promise: r1 goes on serving inference with its cached keys
  for at least `keys_stale_s` after the partition began and at most `resync_s + keys_stale_s`
  after its last reload (then every request is refused with 503, the store unavailable); a write
  on r1 (creating a key) is refused with 503 within the store's round-trip deadline; a key
  revoked on r2 during the partition works on r1 no longer than that bound, and is refused on
  r1 within `resync_s` plus the store's reconnection time after the heal; r2 never notices.
- **Both replicas partitioned from Redis** (its link cut) under load with a rate-limited key,
  r1 failing open (`[limits] shared_failure = "open"`: its own limiter takes over), r2 failing
  closed (503). The promise: over the whole run, the key's requests admitted by both replicas
  together stay within its shared budget plus the documented excess: one burst and
  `rps × partition` for each replica that fails open; r2 admits nothing while Redis is away and
  refuses with a clear 503; both share the budget again after the heal.

Every time bound is derived from the replicas' settings, never a fixed figure."""
import dataclasses
import os
import time
import types

import pytest

from cluster import show_logs
from netns import Network
from replicas import PG_PORT, Postgres, Redis, Replicas, ready_for
from report import percentile, show
from schedule import Fault, Faults, Run, Schedule, seed_from_env
from workload import LoadRun

# The store's deadline for one round trip to PostgreSQL (gateway/store/src/pg_io.rs ROUND_TRIP),
# and the longest pause between two connection attempts of a replica's key listener
# (gateway/store/src/replica_keys.rs): what a write and a reconnection may wait.
ROUND_TRIP_S = 5
RECONNECT_PAUSE_S = 2
# The shared limiter's response deadline (infergate-redis-limit Settings::default).
REDIS_TIMEOUT_S = 0.25


@dataclasses.dataclass(frozen=True)
class Settings:
    resync_s: int = 1
    keys_stale_s: int = 3
    rps: float = 20.0
    burst: int = 5

    @property
    def slack(self):
        """Generous: the machines these tests run on are shared and slow."""
        return 2 * (self.resync_s + RECONNECT_PAUSE_S)

    @property
    def honoured_at_least(self):
        """Cached keys work this long after the partition begins (the last reload came at most
        one resync interval earlier)."""
        return self.keys_stale_s

    @property
    def refused_by(self):
        """Every key is refused by then after the partition begins: the last reload's age passed
        resync + stale (a reload under way when it began may still succeed)."""
        return self.resync_s + self.keys_stale_s + ROUND_TRIP_S + self.slack

    @property
    def back_within(self):
        """After the heal: the listener's next connection (its pause, a connection attempt under
        way), then a full reload."""
        return self.resync_s + ROUND_TRIP_S + RECONNECT_PAUSE_S + ROUND_TRIP_S + self.slack

    def toml(self, redis_url, failure):
        return (f"[store]\nresync_s = {self.resync_s}\nkeys_stale_s = {self.keys_stale_s}\n"
                f"[limits]\nshared_url = \"{redis_url}\"\nshared_failure = \"{failure}\"\n")


SETTINGS = Settings()


@pytest.fixture(scope="module")
def replicas(privileged, infergate_bin):
    with Network() as net:
        pg_node, redis_node, r1, r2, client = (net.add(n) for n in ("pg", "redis", "r1", "r2", "client"))
        net.wait_connected()
        pg = Postgres(pg_node, net.tmp)
        redis = Redis(redis_node, net.tmp)
        failure = {"r1": "open", "r2": "closed"}
        cluster = Replicas(net, pg, [r1, r2], client, lambda node: SETTINGS.toml(redis.url, failure[node.name]))
        try:
            for node in (r1, r2):
                ready_for(cluster, node, cluster.key, 90)
            yield types.SimpleNamespace(net=net, cluster=cluster, r1=r1, r2=r2, seed=seed_from_env(),
                                        processes={**cluster.processes, "pg": pg.process, "redis": redis.process})
        except BaseException:
            show_logs(cluster.processes)
            raise
        finally:
            cluster.stop()


def until(check, what, timeout, every=0.1):
    """Polls `check()` until true: the moment it was (None after `timeout` s, printed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(every)
    print(f"not seen within {timeout:.1f} s: {what}")
    return None


def whoami(cluster, node, key):
    return cluster.call(node, "GET", "/api/whoami", key, timeout=ROUND_TRIP_S + 5)[0]


@pytest.fixture(scope="module")
def pg_partition(replicas):
    s, c, r1, r2 = SETTINGS, replicas.cluster, replicas.r1, replicas.r2
    partition_s = s.refused_by + 2 * s.resync_s
    revoked = c.create_key(r2, "revoked-during-the-partition")
    assert until(lambda: whoami(c, r1, revoked["secret"]) == 200, "r1 knows r2's new key", s.back_within)
    deadline = partition_s + s.back_within + 60
    loads = {node.name: LoadRun(c, 4, max_requests=200_000, max_seconds=deadline, timeout=ROUND_TRIP_S + 30,
                                seed=replicas.seed, hosts=[node.ip], name=f"pg-{node.name}", pause=0.01)
             for node in (r1, r2)}
    try:
        for load in loads.values():
            load.wait_answered(20, 60)
        run = Run(Schedule(replicas.seed, [Fault("block", "r1", at=0.0, duration=partition_s,
                                                 params={"peer": "pg", "port": PG_PORT})]),
                  Faults(replicas.net, replicas.processes, replicas.seed)).start()
        cut_at = run.wait_applied(0, 10)
        # A write on r1 while PostgreSQL is away from it.
        write_status, _, write_took = c.call(r1, "POST", "/api/keys", c.admin_key,
                                             {"name": "written-during-the-partition", "scopes": ["infer"]},
                                             timeout=ROUND_TRIP_S + 10)
        delete_status, _, _ = c.call(r2, "DELETE", f"/api/keys/{revoked['id']}", c.admin_key)
        revoked_at = time.monotonic()
        seen = []
        while len(run.undone) < 1 and time.monotonic() < cut_at + partition_s + 30:
            seen.append((time.monotonic(), whoami(c, r1, revoked["secret"])))
            time.sleep(0.1)
        run.wait(partition_s + 30)
        healed_at = run.undone[0]
        refused_again = until(lambda: whoami(c, r1, revoked["secret"]) == 401, "r1 refuses the revoked key",
                              s.back_within)
        serving_again = until(lambda: c.infer(r1, c.key)[0] == 200, "r1 serves again", s.back_within)
        time.sleep(s.resync_s)
    finally:
        records = {name: load.stop() for name, load in loads.items()}
        run.stop()
    honoured_until = max((t for t, status in seen if status == 200), default=None)
    refused_from = min((t for t, status in seen if status == 503), default=None)
    since = lambda t, origin: None if t is None else round(t - origin, 3)

    def summary(rs, start, end):
        inside = [r for r in rs if start <= r["start"] < end]
        causes = {}
        for r in inside:
            causes[r["cause"]] = causes.get(r["cause"], 0) + 1
        return {"sent": len(inside), "causes": causes}
    report = {
        "scenario": "replica partitioned from PostgreSQL", "seed": replicas.seed,
        "settings": dataclasses.asdict(s), "partition_s": round(healed_at - cut_at, 3),
        "write_on_r1": {"status": write_status, "took_s": round(write_took, 3)},
        "revoke_on_r2": delete_status,
        "revoked_key_on_r1_last_honoured_s": since(honoured_until, cut_at),
        "every_key_refused_on_r1_from_s": since(refused_from, cut_at),
        "revocation_applied_on_r1_after_heal_s": since(refused_again, healed_at),
        "r1_serving_after_heal_s": since(serving_again, healed_at),
        "r1": {"before": summary(records["r1"], 0, cut_at), "partitioned": summary(records["r1"], cut_at, healed_at),
               "after": summary(records["r1"], healed_at, float("inf"))},
        "r2": summary(records["r2"], 0, float("inf")),
    }
    show(report)
    return types.SimpleNamespace(report=report, records=records, cut_at=cut_at, healed_at=healed_at,
                                 revoked_at=revoked_at, seen=seen, write=(write_status, write_took),
                                 refused_again=refused_again, serving_again=serving_again)


def test_inference_goes_on_with_cached_keys_for_the_promised_time_then_503(pg_partition):
    p, s = pg_partition, SETTINGS
    r1 = p.records["r1"]
    early = [r for r in r1 if p.cut_at <= r["start"] < p.cut_at + s.honoured_at_least]
    assert early and all(r["cause"] == "ok" for r in early), [r for r in early if r["cause"] != "ok"][:5]
    late = [r for r in r1 if p.cut_at + s.refused_by <= r["start"] < p.healed_at]
    assert late, "the partition outlasts the bound"
    assert all(r["cause"] == "http-503" and "store" in r["error"] for r in late), \
        [(r["cause"], r["error"]) for r in late if r["cause"] != "http-503" or "store" not in r["error"]][:5]
    assert not [r for r in r1 if r["cause"] == "wrong-answer"]


def test_a_write_on_the_partitioned_replica_is_refused_with_503_within_the_round_trip(pg_partition):
    status, took = pg_partition.write
    assert status == 503, status
    assert took <= ROUND_TRIP_S + SETTINGS.slack, took


def test_a_key_revoked_elsewhere_stops_within_the_bound_and_is_refused_after_the_heal(pg_partition):
    p, s = pg_partition, SETTINGS
    assert p.report["revoke_on_r2"] == 200
    honoured = [t for t, status in p.seen if status == 200]
    assert not honoured or max(honoured) - p.cut_at <= s.refused_by, p.report
    assert p.refused_again is not None and p.refused_again - p.healed_at <= s.back_within, p.report
    assert p.serving_again is not None and p.serving_again - p.healed_at <= s.back_within, p.report


def test_the_other_replica_never_notices(pg_partition):
    r2 = pg_partition.records["r2"]
    assert r2 and all(r["cause"] == "ok" for r in r2), [r for r in r2 if r["cause"] != "ok"][:5]


@pytest.fixture(scope="module")
def redis_partition(replicas, pg_partition):
    s, c, r1, r2 = SETTINGS, replicas.cluster, replicas.r1, replicas.r2
    window_s = float(os.environ.get("INFERGATE_FAULTS_REDIS_S", "8"))
    key = c.create_key(r1, "limited", rate_limit={"rps": s.rps, "burst": s.burst})
    assert until(lambda: whoami(c, r2, key["secret"]) == 200, "r2 knows the limited key", s.back_within)
    load = LoadRun(c, 8, max_requests=200_000, max_seconds=3 * window_s + 60, timeout=30, seed=replicas.seed,
                   hosts=[r1.ip, r2.ip], key=key["secret"], name="redis", pause=0.02)
    try:
        run = Run(Schedule(replicas.seed, [Fault("cut", "redis", at=window_s, duration=window_s)]),
                  Faults(replicas.net, replicas.processes, replicas.seed)).start()
        cut_at = run.wait_applied(0, window_s + 10)
        run.wait(window_s + 30)
        healed_at = run.undone[0]
        time.sleep(window_s)
    finally:
        records = load.stop()
        run.stop()
    ended = max(r["end"] for r in records if r["end"] is not None)
    first = min(r["start"] for r in records)

    def phase(host, start, end):
        inside = [r for r in records if r["host"] == host and start <= r["start"] < end]
        causes = {}
        for r in inside:
            causes[r["cause"]] = causes.get(r["cause"], 0) + 1
        latencies = [r["end"] - r["start"] for r in inside]
        return {"sent": len(inside), "causes": causes,
                "p50_ms": round(1000 * percentile(latencies, 0.5), 1) if latencies else None}
    admitted = sum(r["cause"] == "ok" for r in records)
    run_s = ended - first
    budget = s.rps * run_s + s.burst
    excess = s.rps * (healed_at - cut_at) + s.burst
    report = {
        "scenario": "replicas partitioned from Redis", "seed": replicas.seed, "settings": dataclasses.asdict(s),
        "run_s": round(run_s, 3), "partition_s": round(healed_at - cut_at, 3), "admitted": admitted,
        "shared_budget": round(budget, 1), "documented_excess": round(excess, 1),
        "r1_open": {p: phase(r1.ip, a, b) for p, (a, b) in
                    {"before": (first, cut_at), "partitioned": (cut_at, healed_at), "after": (healed_at, ended)}.items()},
        "r2_closed": {p: phase(r2.ip, a, b) for p, (a, b) in
                      {"before": (first, cut_at), "partitioned": (cut_at, healed_at), "after": (healed_at, ended)}.items()},
    }
    show(report)
    return types.SimpleNamespace(report=report, records=records, cut_at=cut_at, healed_at=healed_at,
                                 budget=budget, excess=excess, r1=r1, r2=r2)


def test_the_keys_budget_over_the_run_stays_within_the_documented_excess(redis_partition):
    p = redis_partition
    admitted = p.report["admitted"]
    assert admitted <= p.budget + p.excess, p.report
    # The limit held at all: the load offered far more than the budget.
    assert sum(r["cause"] == "http-429" for r in p.records) > 0, p.report


def test_the_fail_closed_replica_refuses_while_redis_is_away_and_shares_again_after(redis_partition):
    p, s = redis_partition, SETTINGS
    # Requests that began once Redis's absence had shown (one response deadline after the cut).
    during = [r for r in p.records if r["host"] == p.r2.ip and p.cut_at + s.slack <= r["start"] < p.healed_at]
    assert during and all(r["cause"] == "http-503" and "Redis" in r["error"] for r in during), \
        [r for r in during if r["cause"] != "http-503"][:5]
    after = [r for r in p.records if r["host"] == p.r2.ip and r["start"] >= p.healed_at + s.slack]
    assert any(r["cause"] == "ok" for r in after), p.report


def test_the_fail_open_replica_serves_under_its_own_limit_while_redis_is_away(redis_partition):
    p, s = redis_partition, SETTINGS
    during = [r for r in p.records if r["host"] == p.r1.ip and p.cut_at + s.slack <= r["start"] < p.healed_at]
    assert any(r["cause"] == "ok" for r in during), p.report
    assert all(r["cause"] in ("ok", "http-429") for r in during), [r for r in during if r["cause"] not in ("ok", "http-429")][:5]
