#!/usr/bin/env bash
# GPU checks of the kernels crate on a machine that has a GPU but no Rust toolchain and no
# network (a lent test machine), built on a CPU-only machine.
#
#   scripts/gpu-check.sh pack DIR   (here)  builds the kernels' test and bench binaries and puts
#                                   them, stripped, into DIR with NVRTC 12.9 from its PyPI wheel
#                                   (xz-compressed, 31 MB) and this script
#   DIR/gpu-check.sh run [OUT]      (on the GPU machine) runs the CUDA-vs-reference tests
#                                   (INFERGATE_GPU_TESTS=1: a GPU that cannot be opened fails
#                                   them), the CPU tests, and with BENCH=1 the benchmark;
#                                   logs go to OUT (default: DIR/out)
set -euo pipefail
case "${1:-}" in
pack)
  DIR=$(mkdir -p "${2:?pack DIR}" && cd "$2" && pwd)
  ROOT=$(cd "$(dirname "$0")/.." && pwd)
  cd "$ROOT"
  # shellcheck source=/dev/null
  source .cache/env.sh
  mkdir -p "$DIR/bin"
  stage() { # cargo subcommand, then the binaries it builds: target-name:file-name
    local json
    json=$(cargo "$1" --locked -p infergate-kernels --no-run --message-format=json)
    shift
    for pair in "$@"; do
      exe=$(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "${pair%%:*}" <<<"$json" | tail -1)
      strip --strip-debug -o "$DIR/bin/${pair#*:}" "$exe"
    done
  }
  stage test gpu:kernels-gpu nvrtc:kernels-nvrtc cpu_equivalence:kernels-cpu-equivalence \
    infergate_kernels:kernels-unit
  stage bench kernels:kernels-bench
  lib=.cache/pkgs/nvidia-cuda-nvrtc-cu12/nvidia/cuda_nvrtc/lib
  [ -f "$DIR/libnvrtc.so.12.xz" ] || xz -T0 -6 -c "$lib/libnvrtc.so.12" > "$DIR/libnvrtc.so.12.xz"
  xz -c "$lib"/libnvrtc-builtins.so.12.9 > "$DIR/libnvrtc-builtins.so.12.9.xz"
  cp "$0" "$DIR/gpu-check.sh"
  du -sh "$DIR"
  ;;
run)
  cd "$(dirname "$0")"
  S=$PWD
  OUT=${2:-${OUT:-$S/out}}
  mkdir -p "$OUT" lib
  exec > >(tee "$OUT/log.txt") 2>&1
  echo "== host"; date -u; nproc
  nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv || true
  xz -T0 -dc libnvrtc.so.12.xz > lib/libnvrtc.so.12 && ln -sf libnvrtc.so.12 lib/libnvrtc.so
  xz -dc libnvrtc-builtins.so.12.9.xz > lib/libnvrtc-builtins.so.12.9
  export LD_LIBRARY_PATH="$S/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export INFERGATE_GPU_TESTS=1 INFERGATE_PTX_CACHE="$S/ptx" RUST_BACKTRACE=1
  failed=0
  for t in bin/kernels-gpu bin/kernels-nvrtc bin/kernels-cpu-equivalence bin/kernels-unit; do
    echo "== $t"
    timeout 300 "$t" --test-threads=1 --nocapture > "$OUT/$(basename "$t").txt" 2>&1 || failed=1
    grep -E "^test |max diff|GpuInfo|test result" "$OUT/$(basename "$t").txt"
  done
  if [ -n "${BENCH:-}" ]; then
    echo "== bench"; timeout 300 bin/kernels-bench 2>&1 | tee "$OUT/kernels-bench.txt"
  fi
  exit "$failed"
  ;;
*)
  sed -n 2,12p "$0"; exit 2
  ;;
esac
