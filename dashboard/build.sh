#!/usr/bin/env bash
# Builds the dashboard into dashboard/dist (idempotent):
#   1. wasm-opt from npm binaryen 132.0.0 (pinned by tools/package-lock.json) into .cache/binaryen,
#      never Debian's binaryen (its wasm-opt 108 writes output that breaks in the browser);
#   2. the Leptos app for wasm32-unknown-unknown (release);
#   3. the JS glue with the in-workspace xtask (wasm-bindgen-cli-support, same version as the app);
#   4. wasm-opt -Oz;
#   5. content-hashed files under dist/assets/ (+ .gz twins the gateway serves), dist/index.html;
#   6. prints the bundle size (wasm + js, gzip) and fails over 1 MB.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
TOOLS="$ROOT/.cache/binaryen"
WASM_OPT="$TOOLS/node_modules/binaryen/bin/wasm-opt"
LIMIT=1000000
started=$(date +%s)

if ! "$WASM_OPT" --version 2>/dev/null | grep -q "version 132"; then
    echo "dashboard: installing wasm-opt (npm binaryen 132.0.0) into $TOOLS"
    mkdir -p "$TOOLS"
    cp "$HERE/tools/package.json" "$HERE/tools/package-lock.json" "$TOOLS/"
    (cd "$TOOLS" && npm ci --no-audit --no-fund --loglevel=error)
fi

cd "$HERE"
cargo build --locked --release --target wasm32-unknown-unknown -p infergate-dashboard
STAGE="$HERE/target/stage"
rm -rf "$STAGE"
cargo run --locked --quiet -p xtask -- bindgen \
    target/wasm32-unknown-unknown/release/infergate-dashboard.wasm "$STAGE"

# The features rustc enables by default for wasm32-unknown-unknown; nothing beyond them.
"$WASM_OPT" -Oz \
    --enable-bulk-memory --enable-mutable-globals --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-reference-types --enable-multivalue \
    "$STAGE/infergate-dashboard_bg.wasm" -o "$STAGE/app.wasm"

hash() { sha256sum "$1" | cut -c1-16; }
rm -rf "$HERE/dist"
mkdir -p "$HERE/dist/assets"
WASM="app-$(hash "$STAGE/app.wasm").wasm"
JS="app-$(hash "$STAGE/infergate-dashboard.js").js"
STYLE="style-$(hash "$HERE/style.css").css"
cp "$STAGE/app.wasm" "$HERE/dist/assets/$WASM"
cp "$STAGE/infergate-dashboard.js" "$HERE/dist/assets/$JS"
cp "$HERE/style.css" "$HERE/dist/assets/$STYLE"
printf "import init from './%s';\ninit({ module_or_path: '/assets/%s' });\n" "$JS" "$WASM" > "$STAGE/boot.js"
BOOT="boot-$(hash "$STAGE/boot.js").js"
cp "$STAGE/boot.js" "$HERE/dist/assets/$BOOT"
sed -e "s/{{STYLE}}/$STYLE/" -e "s/{{JS}}/$JS/" -e "s/{{WASM}}/$WASM/" -e "s/{{BOOT}}/$BOOT/" \
    "$HERE/index.html" > "$HERE/dist/index.html"
for f in "$HERE"/dist/assets/* "$HERE/dist/index.html"; do
    gzip -9 -n -k -f "$f"
done

gz() { stat -c %s "$HERE/dist/assets/$1.gz"; }
raw() { stat -c %s "$HERE/dist/assets/$1"; }
bundle=$(( $(gz "$WASM") + $(gz "$JS") + $(gz "$BOOT") ))
echo "dashboard: wasm $(raw "$WASM") B ($(gz "$WASM") B gzip), js $(( $(raw "$JS") + $(raw "$BOOT") )) B ($(( $(gz "$JS") + $(gz "$BOOT") )) B gzip), css $(raw "$STYLE") B ($(gz "$STYLE") B gzip)"
echo "dashboard: bundle (wasm + js, gzip) = $bundle bytes (limit $LIMIT); built in $(( $(date +%s) - started )) s -> $HERE/dist"
if (( bundle > LIMIT )); then
    echo "dashboard: the bundle is over the $LIMIT-byte limit" >&2
    exit 1
fi
