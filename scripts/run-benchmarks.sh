#!/usr/bin/env bash
# Runs every micro-benchmark of a build directory, each printing its own
# same-run baseline. Usage: scripts/run-benchmarks.sh [BUILD_DIR]
# Results go to stdout; record them (with this command) in docs/BENCHMARKS.md.
set -euo pipefail
BUILD="${1:-build/release}"
SECONDS_PER_FIGURE="${WEFT_BENCH_SECONDS:-3}"
DATA_DIR="${WEFT_BENCH_DIR:-/var/tmp}"

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

run() {
  local bin="$1"; shift
  if [ -x "$BUILD/$bin" ]; then
    echo; echo "## $bin $*"
    "$BUILD/$bin" "$@"
  else
    echo; echo "## $bin: not built (skipped)"
  fi
}

run bench/rpc_bench --seconds "$SECONDS_PER_FIGURE"
run src/storage/chunk_engine_bench --dir "$DATA_DIR" --dataset-mib 256 --seconds "$SECONDS_PER_FIGURE"
run src/storage/storage_server_bench --dir "$DATA_DIR" --dataset-mib 256 --threads 4 --seconds "$SECONDS_PER_FIGURE"
run src/meta/meta_store_bench --raw --files "${WEFT_BENCH_META_FILES:-2000}"
run src/meta/meta_bench --files "${WEFT_BENCH_META_FILES:-2000}"
