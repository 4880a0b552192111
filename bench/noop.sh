#!/usr/bin/env bash
# Scheduler overhead: 2,000 attempts of `true` at concurrency 8, against the
# baseline of xargs -P 8 spawning 2,000 `true` processes, in the same run;
# and the same attempts with skew routing and memory enforcement on (a
# hot_when rule evaluated per attempt, a memory limit watched per attempt),
# against plain rewind.
# Usage: bench/noop.sh [ROUNDS]   (prints wall times and the ratios)
# TMPDIR picks the filesystem of the workspace (state, logs, run directories):
# TMPDIR=/dev/shm bench/noop.sh shows the cost without a disk filesystem.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
now=2025-03-25T08:00:00Z # 2,000 hourly intervals after start_date

plain='pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" { command = ["true"] }
}'
routed='pool "default" { memory = "1GiB" }
pool "large" { memory = "8GiB" }
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  skew {
    hot_when = run.month == 11 && run.weekday == "Friday"
    pool     = "large"
  }
  task "t" { command = ["true"] }
}'

secs() { date +%s.%N; }
# run NAME HCL: a fresh workspace (no earlier round's files), timed; prints
# "wall cpu" (cpu = user + system seconds of rewind and its children, which a
# busy machine disturbs less than wall time).
run() {
  local ws="$work/$1"
  mkdir -p "$ws"
  printf '%s\n' "$2" > "$ws/noop.hcl"
  local t0 t1 n cpu
  t0=$(secs)
  cpu=$(cd "$ws" && /usr/bin/time -f '%U %S' "$work/rewind" run --catchup --quiet --now "$now" . 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
  t1=$(secs)
  n=$(cd "$ws" && "$work/rewind" runs | grep -c ' success ')
  [ "$n" = 2000 ] || { echo "expected 2000 successful runs, got $n" >&2; exit 1; }
  echo "$(echo "$t1 - $t0" | bc -l) $cpu"
}
min() { echo "if ($1 < $2) $1 else $2" | bc -l; }

best_r=999 best_m=999 best_x=999 best_rc=999 best_mc=999
for i in $(seq "$rounds"); do
  read -r r rc < <(run "plain$i" "$plain")
  read -r m mc < <(run "routed$i" "$routed")
  t0=$(secs); seq 2000 | xargs -P 8 -n 1 true; t1=$(secs)
  x=$(echo "$t1 - $t0" | bc -l)
  printf 'round %d: rewind %.2fs (cpu %.2fs)  with routing+memory %.2fs (cpu %.2fs)  xargs -P 8 %.2fs\n' "$i" "$r" "$rc" "$m" "$mc" "$x"
  best_r=$(min "$r" "$best_r"); best_m=$(min "$m" "$best_m"); best_x=$(min "$x" "$best_x")
  best_rc=$(min "$rc" "$best_rc"); best_mc=$(min "$mc" "$best_mc")
done
printf 'best: rewind %.2fs  xargs -P 8 %.2fs  ratio %.2f (2,000 attempts, concurrency 8)\n' "$best_r" "$best_x" "$(echo "$best_r / $best_x" | bc -l)"
printf 'best: with routing+memory %.2fs wall (%+.1f%%), %.2fs cpu vs %.2fs (%+.1f%%) over plain rewind\n' \
  "$best_m" "$(echo "($best_m / $best_r - 1) * 100" | bc -l)" "$best_mc" "$best_rc" "$(echo "($best_mc / $best_rc - 1) * 100" | bc -l)"
