#!/usr/bin/env bash
# The fault scenarios at full length (flapping for a minute, slow links for 20 s) and the
# worker partition under several heartbeat settings, each scenario's report kept as data:
# bench/results/faults-<date>.jsonl (one JSON object a line, as the tests print them). The CI
# (scripts/test.sh) runs the same scenarios shortened; docs/src/reliability.md quotes these.
#
# Needs root (network namespaces, nftables) and a built binary (INFERGATE_BIN, default
# target/debug/infergate). Bounded: each pytest run has its own time limit.
set -euo pipefail
cd "$(dirname "$0")/.."
source .cache/env.sh
export INFERGATE_BIN="${INFERGATE_BIN:-target/debug/infergate}"
out="bench/results/faults-$(date -u +%F).jsonl"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

run() {
    # The report lines of one pytest run, appended to $out; its failures fail this script.
    local status=0
    timeout 1800 "$INFERGATE_PYTHON" -m pytest -q -s -p no:cacheprovider "$@" | tee "$log" || status=$?
    sed -n 's/^fault report: //p' "$log" >> "$out"
    return "$status"
}

: > "$out"
INFERGATE_FAULTS_FLAP_S=60 INFERGATE_FAULTS_DEGRADED_S=20 run tests/faults
# Detection and recovery against the heartbeat interval (lost after 3 missed).
for ms in 250 1000 2000; do
    INFERGATE_FAULTS_HEARTBEAT_MS=$ms run tests/faults/test_partition.py
done
echo "reports: $out"
