"""A scenario's report: requests sent, answered, failed by cause, retried and possibly run
twice, time to detect and to recover, and the requests that were in flight when the fault
struck. Printed as one JSON line (`fault report: {...}`) that the docs quote."""
import collections
import json
import re

# A retry whose first attempt never reached the worker: nothing can have run there. Any other
# failure (reset, closed, timed out after the request was written) may have run it.
NOT_SENT = ("connecting:", "TLS handshake", "HTTP handshake", "no connection within")


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def in_flight_at(records, moment):
    """Requests open at `moment`: started before it, ended after it (or never)."""
    return [r for r in records if r["start"] <= moment and (r["end"] is None or r["end"] > moment)]


def build(scenario, records, fault_at, healed_at, seed, retries, retry_reasons, marks):
    """`records`: the load client's; `retries`: the manager's retry counter over the run;
    `retry_reasons`: the error of each retry the manager logged; `marks`: observed moments
    (monotonic) by name, e.g. {"lost": t, "ready": t, "traffic": t}."""
    causes = collections.Counter(r["cause"] for r in records)
    latencies = [r["end"] - r["start"] for r in records if r["end"] is not None]
    open_at_fault = in_flight_at(records, fault_at)
    # Longest time a request stayed open after the fault struck (never-ended ones: till stop).
    held = [(r["end"] if r["end"] is not None else float("inf")) - fault_at for r in open_at_fault]
    possibly_twice = [why for why in retry_reasons if not any(marker in why for marker in NOT_SENT)]
    # Reasons without addresses and figures, so that alike ones count together.
    reasons = collections.Counter(re.sub(r"[0-9.:]+[0-9]", "N", why) for why in retry_reasons)
    since = lambda name, origin: None if marks.get(name) is None or origin is None else round(marks[name] - origin, 3)
    return {
        "scenario": scenario,
        "seed": seed,
        "sent": len(records),
        "answered": causes.get("ok", 0),
        "failed": {cause: n for cause, n in sorted(causes.items()) if cause != "ok"},
        "retried": int(retries),
        "retry_reasons": dict(reasons.most_common()),
        "possibly_run_twice": len(possibly_twice),
        "time_to_detect_s": since("lost", fault_at),
        "time_to_ready_after_heal_s": since("ready", healed_at),
        "time_to_traffic_after_heal_s": since("traffic", healed_at),
        "fault_lasted_s": None if healed_at is None else round(healed_at - fault_at, 3),
        "in_flight_at_fault": len(open_at_fault),
        "longest_held_after_fault_s": round(max(held), 3) if held else None,
        "latency_p50_ms": None if not latencies else round(1000 * percentile(latencies, 0.5), 2),
        "latency_p99_ms": None if not latencies else round(1000 * percentile(latencies, 0.99), 2),
        "latency_max_s": None if not latencies else round(max(latencies), 3),
    }


def show(report):
    print("fault report: " + json.dumps(report), flush=True)
    return report
