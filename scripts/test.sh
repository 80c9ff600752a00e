#!/usr/bin/env bash
# Sets everything up and runs every test: formatting and lints, Rust unit and end-to-end tests
# (real binary, TLS, SQLite, ONNX Runtime, models), and the Python client tests (tritonclient,
# exporters) against the real server.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
# shellcheck source=/dev/null
source .cache/env.sh
export REQUIRE_NVRTC=1

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "layers: no import circle between files (module_cycles.py --files); what each crate must not depend on"
python3 scripts/module_cycles.py --files --check gateway/*/src engine/src protocol/src cluster/src \
    kernels/src plugins/host/src api-types/src redis-limit/src llm/src
bash scripts/check_layers.sh

# One build for the tests: `cargo test` builds proc-macros and build scripts in its own profile,
# so a separate `cargo build --all-targets` would compile those (wasmtime and cranelift among
# them) twice. Benchmarks are type-checked by clippy below.
step "build (debug, optimised dependencies)"
cargo test --locked --workspace --no-run

step "cargo test"
cargo test --locked --workspace

step "python client tests"
export INFERGATE_BIN="$ROOT/target/debug/infergate"
"$INFERGATE_PYTHON" -m pytest -q -p no:cacheprovider tests/python scripts/test_exports.py \
    scripts/test_module_cycles.py

# Needs root (network namespaces, nftables): without it the run fails, it is never skipped.
# -s prints each scenario's fault schedule (with its seed) and its report.
step "fault tests between hosts (network namespaces)"
"$INFERGATE_PYTHON" -m pytest -q -s -p no:cacheprovider tests/faults

step "the book: build, links, examples"; bash scripts/docs.sh

step "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "cargo deny (licenses, bans, sources; offline)"
bash scripts/deny.sh
