#!/usr/bin/env bash
# Debug build times of two revisions, measured in one run: a clean `cargo build --workspace`,
# then the incremental rebuild after a whitespace change in one HTTP handler (the KServe infer
# handler) and after one in a store file (the key queries). Each revision builds in its own copy
# of the tree with its own target directory, so neither warms the other's.
#
#   bench/build_times.sh [--skip-clean | --clean-ours] [--repeat N] [--csv FILE] OLD_REV NEW_REV
#
#   --skip-clean  no clean build: reuse each revision's target directory from an earlier run
#                 (an untimed `cargo build --workspace` first brings it up to date). A clean
#                 build takes 20 minutes or more per revision on 2 cores.
#   --clean-ours  the clean build of the workspace's own crates only: the target is brought up
#                 to date (untimed), every workspace member's artifacts are removed (`cargo
#                 clean -p`), and the build of them all is timed, the dependencies already
#                 built. The layout changes only this part; the dependencies are the same.
#   --repeat N    incremental builds N times per revision (alternating revisions, so a busy
#                 machine slows both alike); the median is reported. Default 3.
#   --csv FILE    also append the medians to FILE (date, host cores, revision, step, seconds).
#
# The copies (`git archive`) and their targets live under $BUILD_TIMES_DIR (default
# /tmp/infergate-build-times/SHA, the revision's first 12 hex digits), kept between runs. To
# start a revision's target warm, hard-link a target built from the same Cargo.lock into it
# before the first run: `cp -al SOME/target $BUILD_TIMES_DIR/SHA/target`.
# The dashboard is embedded when $INFERGATE_DASHBOARD_DIR (or this checkout's dashboard/dist)
# holds a built one, so the server's build script does not rerun on every build.
#
# Goal (docs/src/contributing/architecture.md): the incremental handler rebuild at least 2x
# faster on the new revision, the clean build no slower.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

skip_clean=0
clean_ours=0
repeat=3
csv=""
revs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-clean) skip_clean=1 ;;
    --clean-ours) clean_ours=1 ;;
    --repeat) repeat=${2:?--repeat needs a count}; shift ;;
    --csv) csv=${2:?--csv needs a file}; shift ;;
    -h|--help) usage ;;
    -*) echo "build_times: unknown option $1" >&2; usage ;;
    *) revs+=("$1") ;;
  esac
  shift
done
[ ${#revs[@]} = 2 ] || usage
case "$repeat" in ''|*[!0-9]*|0) echo "build_times: --repeat takes a positive count" >&2; exit 2 ;; esac

repo=$(git rev-parse --show-toplevel)
base=${BUILD_TIMES_DIR:-/tmp/infergate-build-times}
dashboard=${INFERGATE_DASHBOARD_DIR:-$repo/dashboard/dist}
mkdir -p "$base"

# The handler and store file of a revision: the layout moved them when the gateway became a
# folder of crates.
first_of() {
  local dir=$1; shift
  for path in "$@"; do
    if [ -f "$dir/$path" ]; then echo "$path"; return; fi
  done
  echo "build_times: none of $* in $dir" >&2
  exit 1
}

declare -A dir_of handler_of store_of main_of sha_of
for rev in "${revs[@]}"; do
  sha=$(git -C "$repo" rev-parse --verify "$rev^{commit}")
  dir="$base/${sha:0:12}"
  # The revision's files, exported (no worktree registered in the repository); a target
  # directory already there is kept.
  mkdir -p "$dir"
  git -C "$repo" archive "$sha" | tar -x -C "$dir"
  sha_of[$rev]=$sha
  if [ -f "$dashboard/index.html" ] && [ ! -e "$dir/dashboard/dist" ]; then
    ln -s "$dashboard" "$dir/dashboard/dist"
  fi
  # A target hard-linked from another must not share cargo's lock file with it.
  for lock in "$dir/target/debug/.cargo-lock"; do
    if [ -f "$lock" ] && [ "$(stat -c %h "$lock")" -gt 1 ]; then
      rm "$lock" && touch "$lock"
    fi
  done
  dir_of[$rev]=$dir
  handler_of[$rev]=$(first_of "$dir" gateway/server/src/api/kserve.rs gateway/src/api/kserve.rs)
  store_of[$rev]=$(first_of "$dir" gateway/store/src/keys.rs gateway/src/store/keys.rs)
  main_of[$rev]=$(first_of "$dir" gateway/infergate/src/main.rs gateway/src/main.rs)
done

# Seconds (two decimals) that `cargo build --workspace` takes in revision $1's worktree; its
# output goes to a log beside the worktree, shown if the build fails.
build() {
  local dir=${dir_of[$1]} log start end
  log="$dir.build.log"
  start=$(date +%s.%N)
  if ! (cd "$dir" && CARGO_TARGET_DIR="$dir/target" cargo build --locked --workspace) >"$log" 2>&1; then
    echo "build_times: cargo build failed in $dir (revision $1):" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.2f", b - a }'
}

# A change the compiler must read but that means nothing: one more newline at the end.
nudge() {
  printf '\n' >>"${dir_of[$1]}/$2"
}

restore() {
  for rev in "${!dir_of[@]}"; do
    for path in "${handler_of[$rev]:-}" "${store_of[$rev]:-}" "${main_of[$rev]:-}"; do
      [ -n "$path" ] && git -C "$repo" show "${sha_of[$rev]}:$path" >"${dir_of[$rev]}/$path"
    done
  done
  return 0
}
trap restore EXIT

median() {
  tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
    if (NR % 2) printf "%.2f", v[(NR + 1) / 2]; else printf "%.2f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

declare -A clean handler store floor
for rev in "${revs[@]}"; do
  if [ "$skip_clean" = 1 ]; then
    echo "build_times: bringing $rev's target up to date (untimed)" >&2
    build "$rev" >/dev/null
    clean[$rev]="-"
  elif [ "$clean_ours" = 1 ]; then
    echo "build_times: bringing $rev's target up to date (untimed), then its own crates clean" >&2
    build "$rev" >/dev/null
    members=$(cd "${dir_of[$rev]}" && cargo metadata --locked --no-deps --format-version 1 \
      | "${PYTHON:-python3}" -c 'import json, sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"]))')
    for member in $members; do
      (cd "${dir_of[$rev]}" && CARGO_TARGET_DIR="${dir_of[$rev]}/target" cargo clean --locked -p "$member" -q)
    done
    clean[$rev]=$(build "$rev")
    echo "build_times: $rev, its own crates from clean: ${clean[$rev]} s" >&2
  else
    echo "build_times: clean build of $rev" >&2
    rm -rf "${dir_of[$rev]}/target"
    clean[$rev]=$(build "$rev")
  fi
  handler[$rev]=""
  store[$rev]=""
  floor[$rev]=""
done

for i in $(seq "$repeat"); do
  for rev in "${revs[@]}"; do
    nudge "$rev" "${handler_of[$rev]}"
    t=$(build "$rev")
    handler[$rev]+=" $t"
    echo "build_times: round $i, $rev, handler touched: $t s" >&2
  done
  for rev in "${revs[@]}"; do
    nudge "$rev" "${store_of[$rev]}"
    t=$(build "$rev")
    store[$rev]+=" $t"
    echo "build_times: round $i, $rev, store touched: $t s" >&2
  done
  # The floor of any change: the binary's own main.rs, so little more than the link.
  for rev in "${revs[@]}"; do
    nudge "$rev" "${main_of[$rev]}"
    t=$(build "$rev")
    floor[$rev]+=" $t"
    echo "build_times: round $i, $rev, main.rs touched: $t s" >&2
  done
done

old=${revs[0]}
new=${revs[1]}
printf '%-14s %10s %12s %12s %12s\n' revision clean_s handler_s store_s main_rs_s
declare -A med_handler med_store med_floor
for rev in "${revs[@]}"; do
  med_handler[$rev]=$(median <<<"${handler[$rev]}")
  med_store[$rev]=$(median <<<"${store[$rev]}")
  med_floor[$rev]=$(median <<<"${floor[$rev]}")
  printf '%-14s %10s %12s %12s %12s\n' "$rev" "${clean[$rev]}" "${med_handler[$rev]}" \
    "${med_store[$rev]}" "${med_floor[$rev]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "-") printf "%.2fx", a / b; else printf "-" }'; }
printf 'old/new: clean %s, handler %s, store %s (median of %s; %s cores, load %s)\n' \
  "$(ratio "${clean[$old]}" "${clean[$new]}")" \
  "$(ratio "${med_handler[$old]}" "${med_handler[$new]}")" \
  "$(ratio "${med_store[$old]}" "${med_store[$new]}")" \
  "$repeat" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "$csv" ]; then
  # The columns of bench/results/README.md.
  [ -s "$csv" ] || echo "date,machine,build,command,case,metric,value,unit,note" >"$csv"
  day=$(date -u +%Y-%m-%d)
  cmd="bash bench/build_times.sh $([ "$clean_ours" = 1 ] && echo '--clean-ours ')--repeat $repeat ${revs[*]}"
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  row() { echo "$day,vm-2core,debug ${sha_of[$1]:0:12},\"$cmd\",$2,seconds,$3,s,\"$4; load $load\"" >>"$csv"; }
  for rev in "${revs[@]}"; do
    if [ "${clean[$rev]}" != "-" ]; then
      if [ "$clean_ours" = 1 ]; then
        row "$rev" "clean build of the workspace's own crates" "${clean[$rev]}" "dependencies built; 1 run"
      else
        row "$rev" "clean build of the workspace" "${clean[$rev]}" "1 run"
      fi
    fi
    row "$rev" "incremental: one HTTP handler touched" "${med_handler[$rev]}" "median of $repeat"
    row "$rev" "incremental: one store file touched" "${med_store[$rev]}" "median of $repeat"
    row "$rev" "incremental: the binary's main.rs touched (floor)" "${med_floor[$rev]}" "median of $repeat"
  done
fi
