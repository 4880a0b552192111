#!/usr/bin/env bash
# Scheduler overhead: 2,000 attempts of `true` at concurrency 8, against the
# baseline of xargs -P 8 spawning 2,000 `true` processes, in the same run.
# Usage: bench/noop.sh [ROUNDS]   (prints wall times and the ratio)
# TMPDIR picks the filesystem of the workspace (state, logs, run directories):
# TMPDIR=/dev/shm bench/noop.sh shows the cost without a disk filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
now=2025-03-25T08:00:00Z # 2,000 hourly intervals after start_date

secs() { date +%s.%N; }
best_r=999 best_x=999
for i in $(seq "$rounds"); do
  ws="$work/ws$i" # a fresh workspace each round: no earlier round's files
  mkdir -p "$ws"
  cat > "$ws/noop.hcl" <<'HCL'
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" { command = ["true"] }
}
HCL
  t0=$(secs)
  (cd "$ws" && "$work/rewind" run --catchup --quiet --now "$now" .)
  t1=$(secs)
  seq 2000 | xargs -P 8 -n 1 true
  t2=$(secs)
  r=$(echo "$t1 - $t0" | bc -l); x=$(echo "$t2 - $t1" | bc -l)
  n=$(cd "$ws" && "$work/rewind" runs | grep -c ' success ')
  [ "$n" = 2000 ] || { echo "expected 2000 successful runs, got $n" >&2; exit 1; }
  printf 'round %d: rewind %.2fs  xargs -P 8 %.2fs  ratio %.2f\n' "$i" "$r" "$x" "$(echo "$r / $x" | bc -l)"
  best_r=$(echo "if ($r < $best_r) $r else $best_r" | bc -l)
  best_x=$(echo "if ($x < $best_x) $x else $best_x" | bc -l)
done
printf 'best: rewind %.2fs  xargs -P 8 %.2fs  ratio %.2f (2,000 attempts, concurrency 8)\n' "$best_r" "$best_x" "$(echo "$best_r / $best_x" | bc -l)"
