#!/usr/bin/env bash
# The benchmark record of issues 5 and 8 in one command: the metadata storm
# (meta_bench, twice), then a local cluster (`weft up`, 3 storage servers x 2
# targets, replicas 1) measured through the native client (4 KiB random reads
# x3; W1, W2, W3, W5, W6 beside a local directory; W3 twice more) and through
# a FUSE mount (W1-W3 beside the local directory; W1, W2 through a bindfs
# passthrough of a local directory, FUSE's own ceiling for them; then W3
# alternated with that passthrough, 3 times each); random reads again
# on a cluster with one storage server (pread and submit_reads batches).
# Usage: scripts/bench-session.sh [OUT_DIR]   (default /var/tmp/weft-bench-<UTC time>)
# Writes OUT_DIR/session.log (the printed tables), OUT_DIR/progress.log (the
# benchmarks' progress lines) and OUT_DIR/json/*.json (`--json` of weft bench
# and meta_bench, in ../shared/WORKLOADS.md's format). Every cluster and mount it starts is stopped at the
# end, also on failure or Ctrl-C. Needs a release build (make build), fusermount3,
# and bindfs for the passthrough baseline (skipped without it). Takes ~20 minutes.
# Every command's exit code is written to session.log ("# exit N: ..."); a
# failing command does not stop the session, but the script exits 1 at the
# end when any failed, listing them.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN="$ROOT/build/release"
W="$BIN/src/cli/weft"
OUT="${1:-/var/tmp/weft-bench-$(date -u +%Y%m%dT%H%M%SZ)}"
D="$OUT/cluster"; B="$OUT/baseline"; SRC="$OUT/bind-src"; MNT="$OUT/mnt"; BIND="$OUT/bind"; J="$OUT/json"
[ -x "$W" ] || { echo "bench-session: $W is missing: run 'make build' first" >&2; exit 1; }

cleanup() {
  fusermount3 -u "$MNT" 2>/dev/null
  fusermount3 -u "$BIND" 2>/dev/null
  "$W" down --data-dir "$D" >/dev/null 2>&1
  rm -rf "$D" "$B" "$SRC" "$OUT/mb" "$OUT/mb-posix"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT" "$B" "$SRC" "$MNT" "$BIND" "$J"
exec > >(tee "$OUT/session.log") 2>&1
exec 3>&1  # the session log, whatever a command's own output is redirected to
step() { echo; echo "== $* ($(date -u +%T))"; }
FAILED=()
# Runs a command, records its exit code in the log (and in FAILED when not 0).
run() {
  "$@"
  local rc=$?
  echo "# exit $rc: $*" >&3
  [ "$rc" -eq 0 ] || FAILED+=("exit $rc: $*")
  return "$rc"
}
bench() { run "$W" bench "$@" 2>>"$OUT/progress.log"; }  # tables to the log, progress aside (exit code in the log)

echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown), output $OUT"

for r in 1 2; do
  step "meta_bench --files 10000, run $r"
  run "$BIN/src/meta/meta_bench" --files 10000 --dir "$OUT/mb" --posix-dir "$OUT/mb-posix" --json "$J/meta_bench_$r.json"
  rm -rf "$OUT/mb" "$OUT/mb-posix"
done

step "weft up --storage-servers 3 --targets-per-server 2 --replicas 1"
run "$W" up --data-dir "$D" --storage-servers 3 --targets-per-server 2 --replicas 1 >/dev/null || exit 1
for r in 1 2 3; do
  step "client_randread_bench --file-mib 256 --seconds 8, run $r"
  run "$BIN/bench/client_randread_bench" --config "$D/client.toml" --file-mib 256 --seconds 8 --keep-baseline
  step "client_randread_bench --file-mib 256 --seconds 8 --batch 8 (submit_reads), run $r"
  run "$BIN/bench/client_randread_bench" --config "$D/client.toml" --file-mib 256 --seconds 8 --batch 8 --keep-baseline
done
step "native W1,W2,W3,W5,W6 beside $B"
bench --target weft:///n1 --config "$D/client.toml" --data-dir "$D" --baseline "$B" --workloads W1,W2,W3,W5,W6 --json "$J/native.json"
for r in 2 3; do
  step "native W3, run $r"
  bench --target "weft:///n$r" --config "$D/client.toml" --data-dir "$D" --baseline "$B" --workloads W3 --json "$J/native_w3_$r.json"
done

step "mount W1,W2,W3 beside $B"
run "$W" mount "$MNT" --config "$D/client.toml" --background || exit 1
bench --target "$MNT/m" --baseline "$B" --workloads W1,W2,W3 --json "$J/mount.json"
if command -v bindfs >/dev/null && bindfs -o multithreaded "$SRC" "$BIND"; then
  step "bindfs W1,W2"
  bench --target "$BIND/c" --workloads W1,W2 --json "$J/bindfs_w12.json"
  for r in 1 2 3; do
    step "bindfs W3, run $r"
    bench --target "$BIND/b$r" --workloads W3 --json "$J/bindfs_w3_$r.json"
    step "mount W3, run $r"
    bench --target "$MNT/w$r" --workloads W3 --json "$J/mount_w3_$r.json"
  done
else
  echo "bindfs not available: no FUSE passthrough baseline"
fi
fusermount3 -u "$MNT" 2>/dev/null
fusermount3 -u "$BIND" 2>/dev/null
"$W" down --data-dir "$D" >/dev/null 2>&1
rm -rf "$D"

# One storage server (how the peers of BASELINES.md ran): a read batch is one request.
step "weft up --storage-servers 1 --targets-per-server 2 --replicas 1"
run "$W" up --data-dir "$D" --storage-servers 1 --targets-per-server 2 --replicas 1 >/dev/null || exit 1
for r in 1 2 3; do
  step "one server: client_randread_bench --file-mib 256 --seconds 8 --batch 8, run $r"
  run "$BIN/bench/client_randread_bench" --config "$D/client.toml" --file-mib 256 --seconds 8 --batch 8 --keep-baseline
done
step "one server: client_randread_bench --file-mib 256 --seconds 8 (pread)"
run "$BIN/bench/client_randread_bench" --config "$D/client.toml" --file-mib 256 --seconds 8
step "done"
if [ "${#FAILED[@]}" -gt 0 ]; then
  echo "bench-session: ${#FAILED[@]} command(s) failed:"
  printf '  %s\n' "${FAILED[@]}"
  exit 1
fi
echo "bench-session: every command exited 0"
