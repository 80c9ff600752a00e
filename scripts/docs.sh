#!/usr/bin/env bash
# The book: builds it with mdBook into docs/book, checks every link and anchor of README.md and
# the built book offline (lychee), and runs every example of README.md and the book against a
# real server (scripts/docs_examples.py). Needs scripts/setup.sh's tools and a built binary:
# INFERGATE_BIN, default target/debug/infergate.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
# shellcheck source=/dev/null
[ -n "${INFERGATE_PYTHON:-}" ] || source .cache/env.sh
MDBOOK="$ROOT/.cache/tools/bin/mdbook"
LYCHEE="${LYCHEE:-$(dirname "$INFERGATE_PYTHON")/lychee}"

"$MDBOOK" build docs
"$LYCHEE" --offline --include-fragments --no-progress --exclude-path docs/book/404.html \
  README.md SECURITY.md bench/results/README.md 'docs/book/**/*.html'
INFERGATE_BIN="${INFERGATE_BIN:-$ROOT/target/debug/infergate}" \
  "$INFERGATE_PYTHON" scripts/docs_examples.py "$@"
