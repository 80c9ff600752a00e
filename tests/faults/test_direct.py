"""Direct mode while the manager is partitioned from everything: a client holding a direct
token (`POST /v2/models/{m}/assign`, lifetime `TTL_S`) talks to its worker itself, and the
manager's link is cut from just after the grant until well after the token expires. The
promise: the client's requests to its worker succeed for as long as its token is valid (the
worker checks it offline, and serves the model it holds without the manager); once the token
has expired the worker refuses it (401, saying so); a new grant cannot be had while the
manager is away; after the heal the workers report again and a new grant (re-assignment)
works within the recovery bound. Also: a token outlives the revocation of the key it was
granted to by up to its lifetime (the worker never asks the manager).

Every time bound is derived from the cluster's `[cluster]` settings (`cluster.Timing`) and the
token's lifetime."""
import json
import threading
import time
import types

import pytest

import tls_client
from cluster import Cluster, Timing, show_logs, stop_all
from netns import Network
from report import show
from scenario import serving_node
from schedule import Fault, Faults, Run, Schedule, seed_from_env
from workload import LoadRun

TTL_S = 6
# Token expiry counts whole seconds (`exp`): a token is valid until exp, checked with a clock
# of one-second resolution.
CLOCK_S = 1


def direct_call(cluster, grant, timeout=10):
    """One inference sent straight to the grant's worker with its token: (status, error)."""
    host, port = grant["worker"].removeprefix("https://").rsplit(":", 1)

    def once():
        conn = tls_client.ManagerConnection(host, int(port), None, timeout, name=host, ca_pem=grant["ca_pem"])
        try:
            body = tls_client.identity_body("direct", [1.0] * cluster.width)
            status, _, raw = tls_client.request(
                conn, "POST", f"/v2/models/{grant['model']}/versions/{grant['version']}/infer",
                key=grant["token"], body=body)
        except OSError as e:
            return type(e).__name__, str(e)
        finally:
            conn.close()
        try:
            return status, json.loads(raw).get("error") if status != 200 else None
        except ValueError:
            return status, raw[:200]
    return cluster.client.call(once, timeout=timeout + 5)


def assign(cluster, key, timeout):
    return cluster.call("POST", f"/v2/models/{cluster.model}/assign", key=key, body={"ttl_s": TTL_S},
                        timeout=timeout)


@pytest.fixture(scope="module")
def direct(privileged, infergate_bin):
    timing, seed = Timing(), seed_from_env()
    with Network() as net:
        mgr, w1, w2, client = (net.add(name) for name in ("mgr", "w1", "w2", "client"))
        net.wait_connected()
        cluster = Cluster(net, mgr, [w1, w2], client, timing)
        run = None
        try:
            # The model loaded on a worker first, through the manager.
            warm = LoadRun(cluster, 2, max_requests=100_000, max_seconds=120, timeout=30, seed=seed, name="warm")
            warm.wait_answered(20, 90)
            serving_node(cluster)
            warm.stop()
            status, grant = assign(cluster, cluster.key, 10)
            assert status == 200, (status, grant)
            # A second key's grant, the key revoked at once: its token still works.
            status, other = cluster.call("POST", "/api/keys", body={"name": "revoked", "scopes": ["infer"]})
            assert status in (200, 201), (status, other)
            _, revoked_grant = assign(cluster, other["secret"], 10)
            revoke_status, _ = cluster.call("DELETE", f"/api/keys/{other['id']}")
            after_revocation = direct_call(cluster, revoked_grant)

            expires = grant["expires_at"]
            # Cut from now until the token has expired and a few failed grants were tried.
            cut_s = (expires - time.time()) + CLOCK_S + 2 * timing.detect_bound
            run = Run(Schedule(seed, [Fault("cut", "mgr", at=0.0, duration=cut_s)]),
                      Faults(net, cluster.processes, seed)).start()
            cut_at = run.wait_applied(0, 10)
            calls, stop = [], threading.Event()

            def client_loop():
                while not stop.is_set():
                    started = time.time()
                    status, error = direct_call(cluster, grant)
                    calls.append({"at": started, "status": status, "error": error})
                    stop.wait(0.05)
            looping = threading.Thread(target=client_loop, daemon=True)
            looping.start()
            # A new grant while the manager is away (after the token expired).
            while time.time() < expires + CLOCK_S:
                time.sleep(0.1)
            during_status, _ = assign(cluster, cluster.key, timing.interval + 1)
            run.wait(cut_s + 30)
            healed_at = run.undone[0]
            stop.set()
            looping.join(30)
            regrant, refused = None, None
            deadline = time.monotonic() + timing.recover_bound + 2 * timing.interval
            while time.monotonic() < deadline:
                status, answer = assign(cluster, cluster.key, 5)
                refused = (status, answer)
                if status == 200:
                    regrant = (time.monotonic(), answer)
                    break
                time.sleep(timing.interval / 5)
            new_call = direct_call(cluster, regrant[1]) if regrant else None
            if regrant is None:
                # The evidence: what the manager sees, and what each process said.
                print("workers after the heal:", [(w["id"], w["state"], w["report"].get("models"))
                                                  for w in cluster.view()])
                show_logs(cluster.processes, lines=40)
            report = {
                "scenario": "manager partitioned, direct-mode client", "seed": seed, "token_ttl_s": TTL_S,
                "direct_calls": len(calls),
                "answered_before_expiry": sum(c["status"] == 200 and c["at"] < expires for c in calls),
                "refused_after_expiry": sum(c["status"] == 401 and c["at"] >= expires for c in calls),
                "other_outcomes": [c for c in calls if c["status"] not in (200, 401)][:5],
                "grant_while_partitioned": during_status,
                "regrant_after_heal_s": None if regrant is None else round(regrant[0] - healed_at, 3),
                "last_regrant_answer": None if regrant is not None else refused,
                "call_with_the_new_grant": new_call,
                "revoked_key_token": {"revocation": revoke_status, "then_direct_call": after_revocation},
                "cut_s": round(healed_at - cut_at, 3),
            }
            show(report)
            yield types.SimpleNamespace(report=report, calls=calls, expires=expires, timing=timing,
                                        regrant=regrant, healed_at=healed_at, during=during_status,
                                        new_call=new_call, after_revocation=after_revocation,
                                        revoke_status=revoke_status)
        except BaseException:
            show_logs(cluster.processes)
            raise
        finally:
            stop_all(run, cluster)


def test_a_direct_client_works_without_the_manager_until_its_token_expires(direct):
    calls, expires = direct.calls, direct.expires
    valid = [c for c in calls if c["at"] < expires - CLOCK_S]
    assert valid and all(c["status"] == 200 for c in valid), [c for c in valid if c["status"] != 200][:5]
    expired = [c for c in calls if c["at"] >= expires + CLOCK_S]
    assert expired and all(c["status"] == 401 and "expired" in (c["error"] or "") for c in expired), \
        [c for c in expired if c["status"] != 401][:5]


def test_no_grant_while_the_manager_is_away(direct):
    assert direct.during != 200, direct.report


def test_a_new_grant_after_the_heal(direct):
    # The workers' connections to the manager went silent during the cut: they are given up
    # within the hop's deadline, so heartbeats do not queue behind TCP's retransmission backoff.
    assert direct.regrant is not None, f"no grant within the recovery bound after the heal: {direct.report}"
    assert direct.regrant[0] - direct.healed_at <= direct.timing.recover_bound + 2 * direct.timing.interval
    assert direct.new_call[0] == 200, direct.new_call


def test_a_token_outlives_the_revocation_of_its_key_until_it_expires(direct):
    assert direct.revoke_status == 200
    assert direct.after_revocation[0] == 200, direct.after_revocation

