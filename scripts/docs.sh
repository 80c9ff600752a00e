#!/usr/bin/env bash
# The book: builds it with mdBook into docs/book (with a copy of the OpenAPI document), checks
# every link and anchor of README.md and the built book offline (lychee), and runs every
# example of README.md and the book against a real server (scripts/docs_examples.py). The
# reference pages' generated parts are checked by `cargo test -p infergate`. Needs
# scripts/setup.sh's tools and a built binary: INFERGATE_BIN, default target/debug/infergate.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=/dev/null
[ -n "${INFERGATE_PYTHON:-}" ] || source .cache/env.sh
MDBOOK="$ROOT/.cache/tools/bin/mdbook"
LYCHEE="${LYCHEE:-$(dirname "$INFERGATE_PYTHON")/lychee}"

export INFERGATE_BIN="${INFERGATE_BIN:-$ROOT/target/debug/infergate}"

"$MDBOOK" build docs
# The HTTP API page links a copy of the OpenAPI document as this binary serves it.
"$INFERGATE_BIN" reference openapi > docs/book/reference/openapi.json
"$LYCHEE" --offline --include-fragments --no-progress --exclude-path docs/book/404.html \
  README.md SECURITY.md bench/results/README.md 'docs/book/**/*.html'
"$INFERGATE_PYTHON" scripts/docs_examples.py "$@"
