#!/usr/bin/env bash
# The cost of a `rewind run` that has nothing to do, as cron calls it every
# night: N pipelines (default 10,000) whose runs all exist already. Prints
# the wall time of a no-op `rewind run`, and of `rewind validate` on the same
# workspace (the floor: loading the HCL). The 10-year refresh is
# TestRefreshTouchesNoHistory in scheduler/.
# Usage: bench/pipelines.sh [N] [ROUNDS]
# REWIND_STATE=postgres://... runs it on PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
rounds=${2:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
secs() { date +%s.%N; }

ws="$work/many"
mkdir -p "$ws"
for i in $(seq 1 "$n"); do
  printf 'pipeline "p%05d" {\n  schedule   = "@daily"\n  start_date = "2025-01-01"\n  end_date   = "2025-01-01"\n  task "t" { command = ["true"] }\n}\n' "$i"
done > "$ws/many.hcl"
echo "setup: $n pipelines, one run each" >&2
(cd "$ws" && "$work/rewind" run --quiet --now 2025-01-02T00:00:00Z .)

for r in $(seq 1 "$rounds"); do
  t0=$(secs); (cd "$ws" && "$work/rewind" validate . >/dev/null); t1=$(secs)
  (cd "$ws" && "$work/rewind" run --quiet --now 2025-01-02T00:00:00Z .)
  t2=$(secs)
  printf 'round %d: %d pipelines: validate %.2fs, no-op run %.2fs\n' "$r" "$n" \
    "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t1" | bc)"
done
