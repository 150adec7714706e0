#!/usr/bin/env bash
# `make demo`: installs the dependencies, builds the `weft` binary (release
# preset, build/release, like `make`), starts a local cluster with `weft up`
# (build/demo-cluster), runs every workload of WORKLOADS.md in its --quick
# sizes against it (native client) and against a plain directory (the
# baseline), prints the table and where the HTML report is, and always stops
# the cluster again (`weft down`), also when a step fails.
# Environment: PRESET (release), DEMO_BASELINE (/var/tmp/weft-demo-baseline),
# DEMO_WORKLOADS (W1,W2,W3,W4,W5,W6,W7), DEMO_BENCH_FLAGS (extra `weft bench` flags),
# WEFT_BIN (use this binary and skip the dependencies and the build).
set -euo pipefail
cd "$(dirname "$0")/.."

PRESET=${PRESET:-release}
BUILD=build/$PRESET
CLUSTER=build/demo-cluster
OUT=build/demo
BASELINE=${DEMO_BASELINE:-/var/tmp/weft-demo-baseline}
WORKLOADS=${DEMO_WORKLOADS:-W1,W2,W3,W4,W5,W6,W7}
WEFT=${WEFT_BIN:-$BUILD/src/cli/weft}
START=$(date +%s)

step() { printf '\n== %s\n' "$*"; }

if [ -z "${WEFT_BIN:-}" ]; then
  step "1/4 dependencies (scripts/install-deps.sh)"
  bash scripts/install-deps.sh

  step "2/4 building $WEFT (preset $PRESET)"
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  if [ ! -f "$BUILD/build.ninja" ]; then cmake --preset "$PRESET" > /dev/null; fi
  cmake --build "$BUILD" -j"$(nproc)" --target weft
else
  step "1-2/4 using $WEFT (WEFT_BIN; no dependencies, no build)"
fi

stop_cluster() {
  local rc=$?
  trap - EXIT INT TERM
  step "stopping the cluster (weft down --data-dir $CLUSTER)"
  "$WEFT" down --data-dir "$CLUSTER" || true
  if [ "$rc" -eq 0 ]; then
    # After every workload (W7 killed and restarted a server under load) the
    # namespace must still be consistent.
    step "checking the namespace (weft admin meta-fsck --config $CLUSTER/conf/meta.toml)"
    "$WEFT" admin meta-fsck --config "$CLUSTER/conf/meta.toml" || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then echo "demo: FAILED (exit $rc) after $(( $(date +%s) - START )) s"; fi
  exit "$rc"
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

step "3/4 starting a local cluster (weft up --data-dir $CLUSTER)"
"$WEFT" up --data-dir "$CLUSTER"

step "4/4 running $WORKLOADS (--quick) on weft:///demo and on $BASELINE"
mkdir -p "$OUT" "$BASELINE"
# shellcheck disable=SC2086
"$WEFT" bench --quick --target weft:///demo --config "$CLUSTER/client.toml" --baseline "$BASELINE" \
  --json "$OUT/results.json" --report "$OUT/report.html" --data-dir "$CLUSTER" \
  --workloads "$WORKLOADS" ${DEMO_BENCH_FLAGS:-}

echo
echo "demo: done in $(( $(date +%s) - START )) s"
echo "  table above; JSON: $OUT/results.json"
echo "  HTML report: file://$PWD/$OUT/report.html"
