#!/usr/bin/env bash
# Installs Triton's load generator perf_analyzer (PyPI perf-analyzer==2.60.0) under
# .cache/perf-analyzer. Its binary needs glibc >= 2.38, newer than Debian bookworm's, so it runs
# through the loader of Debian trixie's libc6/libstdc++6/libgcc-s1, unpacked (not installed)
# into a private sysroot. Prints the command prefix to run it. Idempotent.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR="$ROOT/.cache/perf-analyzer"
PY="$ROOT/.cache/venv/bin/python"
mkdir -p "$DIR"
if [ ! -x "$DIR/pkg/perf_analyzer/bin/perf_analyzer" ]; then
  rm -rf "$DIR/pkg"
  "$PY" -m pip install -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_38_x86_64 --target "$DIR/pkg" perf-analyzer==2.60.0
fi
if [ ! -x "$DIR/sysroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]; then
  APT="$DIR/apt"
  mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$DIR/debs"
  cat > "$APT/trixie.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  O=(-o "Dir::Etc::SourceList=$APT/trixie.sources" -o Dir::Etc::SourceParts=/dev/null
     -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache")
  apt-get "${O[@]}" -qq update
  (cd "$DIR/debs" && apt-get "${O[@]}" -qq download libc6 libstdc++6 libgcc-s1)
  rm -rf "$DIR/sysroot"; mkdir -p "$DIR/sysroot"
  for deb in "$DIR"/debs/*.deb; do dpkg-deb -x "$deb" "$DIR/sysroot"; done
fi
LIB="$DIR/sysroot/usr/lib/x86_64-linux-gnu"
echo "$LIB/ld-linux-x86-64.so.2 --library-path $LIB:/lib/x86_64-linux-gnu $DIR/pkg/perf_analyzer/bin/perf_analyzer"
