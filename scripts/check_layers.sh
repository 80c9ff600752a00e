#!/usr/bin/env bash
# The layering Cargo cannot state by itself: what a crate must not pull in among its normal
# dependencies (dev-dependencies are the tests' business). Fails naming the crate, what it
# reaches and the path to it.
#   infergate-store:   no wasmtime, ONNX Runtime, llama.cpp or tonic (the store builds and tests alone)
#   infergate-limits:  no I/O stack at all (tokio, hyper, the store)
#   infergate-service: no transport (axum, tonic): the HTTP and gRPC mappings are the server's
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
forbid() {
  local crate=$1; shift
  local tree
  tree=$(cargo tree --locked --offline -p "$crate" -e normal --prefix none --format '{p}' 2>/dev/null \
    | awk '{print $1}' | sort -u)
  for banned in "$@"; do
    if grep -qx "$banned" <<<"$tree"; then
      echo "check_layers: $crate depends on $banned:" >&2
      cargo tree --locked --offline -p "$crate" -e normal -i "$banned" >&2 || true
      status=1
    fi
  done
}
forbid infergate-store wasmtime ort ort-sys llama-cpp-2 llama-cpp-sys-2 tonic infergate-engine infergate-plugin-host
forbid infergate-limits tokio hyper infergate-store
forbid infergate-service axum tonic infergate-server infergate-kserve infergate-worker
[ "$status" = 0 ] && echo "check_layers: store, limits and service keep to their layers"
exit "$status"
