#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders (fuzz/, cargo-fuzz + libFuzzer on nightly): builds
# every target once, then runs each for SECONDS (default 60) on a scratch copy of its corpus
# (fuzz/corpus/TARGET, kept small and committed). A crash leaves its input in
# fuzz/artifacts/TARGET/ and fails the script: copy it to fuzz/regressions/TARGET/ so the
# stable `cargo test -p infergate-engine --test fuzz_corpus` replays it from then on.
# Installs what it needs, idempotently: the nightly toolchain (rustup) and cargo-fuzz (pinned).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_PER_TARGET=${1:-60}
shift || true
TOOLCHAIN=${FUZZ_TOOLCHAIN:-nightly}
CARGO_FUZZ_VERSION=0.13.2
log() { printf '\033[1mfuzz:\033[0m %s\n' "$*" >&2; }

if ! rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1; then
  log "installing the $TOOLCHAIN toolchain"
  rustup toolchain install "$TOOLCHAIN" --profile minimal
fi
if [ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

cd "$ROOT/fuzz"
mapfile -t TARGETS < <(if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cargo +"$TOOLCHAIN" fuzz list; fi)
log "building ${#TARGETS[@]} targets"
cargo +"$TOOLCHAIN" fuzz build

SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
# Inputs up to 64 KiB; a single allocation over 64 MiB for one of them counts as a crash
# (the decoders reserve at most a small multiple of what they were sent).
for target in "${TARGETS[@]}"; do
  mkdir -p "$SCRATCH/$target"
  log "$target: ${SECONDS_PER_TARGET}s"
  cargo +"$TOOLCHAIN" fuzz run "$target" "$SCRATCH/$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -malloc_limit_mb=64 -rss_limit_mb=2048 \
    -print_final_stats=1 2>"$SCRATCH/$target.log" || {
    tail -40 "$SCRATCH/$target.log" >&2
    log "$target FAILED: the crashing input is in fuzz/artifacts/$target/"
    exit 1
  }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$SCRATCH/$target.log" | grep -o '[0-9]*$')
  per_second=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$SCRATCH/$target.log" | grep -o '[0-9]*$')
  log "$target: $runs executions, $per_second/s, no crash"
done
