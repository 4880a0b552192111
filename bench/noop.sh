#!/usr/bin/env bash
# Scheduler overhead: 2,000 attempts of `true` at concurrency 8, against the
# baseline of xargs -P 8 spawning 2,000 `true` processes, in the same run.
# Usage: bench/noop.sh [ROUNDS]   (prints wall times and the ratio)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
mkdir -p "$work/ws"
cat > "$work/ws/noop.hcl" <<'HCL'
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" { command = ["true"] }
}
HCL
now=2025-03-25T08:00:00Z # 2,000 hourly intervals after start_date

secs() { date +%s.%N; }
best_r=999 best_x=999
for i in $(seq "$rounds"); do
  rm -rf "$work/ws/.rewind"
  t0=$(secs)
  (cd "$work/ws" && "$work/rewind" run --catchup --quiet --now "$now" .)
  t1=$(secs)
  seq 2000 | xargs -P 8 -n 1 true
  t2=$(secs)
  r=$(echo "$t1 - $t0" | bc -l); x=$(echo "$t2 - $t1" | bc -l)
  n=$(cd "$work/ws" && "$work/rewind" runs | grep -c ' success ')
  [ "$n" = 2000 ] || { echo "expected 2000 successful runs, got $n" >&2; exit 1; }
  printf 'round %d: rewind %.2fs  xargs -P 8 %.2fs  ratio %.2f\n' "$i" "$r" "$x" "$(echo "$r / $x" | bc -l)"
  best_r=$(echo "if ($r < $best_r) $r else $best_r" | bc -l)
  best_x=$(echo "if ($x < $best_x) $x else $best_x" | bc -l)
done
printf 'best: rewind %.2fs  xargs -P 8 %.2fs  ratio %.2f (2,000 attempts, concurrency 8)\n' "$best_r" "$best_x" "$(echo "$best_r / $best_x" | bc -l)"
