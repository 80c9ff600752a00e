#!/usr/bin/env bash
# Builds the plugin SDK, the example plugins and the hostile test plugins and
# wraps them into WebAssembly components in plugins/dist/*.wasm. Idempotent:
# a second run only rebuilds what changed.
#
# Needs: rustup target wasm32-unknown-unknown, and two files from the setup
# step (override with the variables below):
#   INFERGATE_TOKENIZER_JSON  BERT tokenizer.json (default .cache/models/minilm-tokenizer.json)
#   INFERGATE_OCR_REC_MODEL   PP-OCRv4 recognition model (default .cache/models/ocr-rec.onnx)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
models=${INFERGATE_MODELS_DIR:-$root/.cache/models}
export INFERGATE_TOKENIZER_JSON=${INFERGATE_TOKENIZER_JSON:-$models/minilm-tokenizer.json}
export INFERGATE_OCR_REC_MODEL=${INFERGATE_OCR_REC_MODEL:-$models/ocr-rec.onnx}
for input in "$INFERGATE_TOKENIZER_JSON" "$INFERGATE_OCR_REC_MODEL"; do
  if [[ ! -f $input ]]; then
    echo "plugins/build.sh: $input is missing: run scripts/setup.sh first" >&2
    exit 1
  fi
done

examples=$root/plugins/examples
guest_target=$examples/target
locked=()
[[ -f $examples/Cargo.lock ]] && locked=(--locked)

echo "plugins/build.sh: building guest modules (wasm32-unknown-unknown)" >&2
# The host's RUSTFLAGS/target dir must not leak into the guest build.
env -u RUSTFLAGS -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET \
  cargo build --release "${locked[@]}" \
    --manifest-path "$examples/Cargo.toml" \
    --target wasm32-unknown-unknown \
    --target-dir "$guest_target"

modules=()
for manifest in "$examples"/*/Cargo.toml "$examples"/testing/*/Cargo.toml; do
  name=$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -n1)
  modules+=("$guest_target/wasm32-unknown-unknown/release/${name//-/_}.wasm")
done

echo "plugins/build.sh: wrapping ${#modules[@]} modules into components" >&2
cargo run --quiet --manifest-path "$root/Cargo.toml" -p infergate-plugin-build -- \
  "$root/plugins/dist" "${modules[@]}"
