#!/usr/bin/env bash
# Sets everything up, builds infergate (release), registers the demo models, and runs the
# gateway on https://127.0.0.1:8443 with its data under ./data. Extra arguments go to
# `infergate serve` (see `infergate serve --help`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
# shellcheck source=/dev/null
source .cache/env.sh
cargo build --release --locked -p infergate
BIN="$ROOT/target/release/infergate"
DATA="${INFERGATE_DATA_DIR:-$ROOT/data}"

# Demo models: registered once; re-registered only when the file changed.
while read -r name file; do
  "$BIN" models add --if-changed --data-dir "$DATA" --name "$name" "$INFERGATE_MODELS/$file"
done <<'MODELS'
ocr-rec ocr-rec.onnx
ocr-det ocr-det.onnx
ocr-cls ocr-cls.onnx
minilm minilm.onnx
efficientnet-lite0 efficientnet-lite0.onnx
textgen textgen.onnx
smollm2 smollm2.gguf
MODELS

# Demo plugins (built by setup into plugins/dist) and the pipelines that use them.
"$BIN" plugins add --data-dir "$DATA" "$ROOT"/plugins/dist/{image-decode,imagenet-topk,ctc-decode,wordpiece-tokenizer,mean-pool,passthrough}.wasm
for spec in "$ROOT"/scripts/demo/*.json; do
  "$BIN" pipelines put --data-dir "$DATA" "$(basename "$spec" .json)" "@$spec"
done

if [ -f "$DATA/admin.key" ]; then
  echo "infergate: admin API key is in $DATA/admin.key"
fi
# The OpenAI-compatible API answers with the chat model `smollm2` by default
# ([openai] completions_model); `textgen` (the character LSTM) needs its vocabulary.
exec "$BIN" serve --data-dir "$DATA" --listen 127.0.0.1:8443 \
  --openai-vocab "$INFERGATE_MODELS/textgen-vocab.json" "$@"
