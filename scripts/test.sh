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

step "gateway modules: no import cycle, lib.rs lists them top to bottom"
python3 scripts/module_cycles.py gateway/src --check

# One build for the tests: `cargo test` builds proc-macros and build scripts in its own profile,
# so a separate `cargo build --all-targets` would compile those (wasmtime and cranelift among
# them) twice. Benchmarks are type-checked by clippy below.
step "build (debug, optimised dependencies)"
cargo test --locked --workspace --no-run

step "cargo test"
cargo test --locked --workspace

step "python client tests"
export INFERGATE_BIN="$ROOT/target/debug/infergate"
"$INFERGATE_PYTHON" -m pytest -q -p no:cacheprovider tests/python scripts/test_exports.py

step "the book: build, links, examples"; bash scripts/docs.sh

step "cargo clippy"
cargo clippy --locked --workspace --all-targets -- -D warnings

step "cargo deny (licenses, bans, sources; offline)"
bash scripts/deny.sh
