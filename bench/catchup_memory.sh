#!/usr/bin/env bash
# Peak memory (max RSS) of a 10,000-run catchup of a no-op hourly pipeline,
# against the baseline of the same binary only loading and validating the
# same workspace, in the same run.
# Usage: bench/catchup_memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
mkdir -p "$work/ws"
cat > "$work/ws/noop.hcl" <<'HCL'
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 16
  task "t" { command = ["true"] }
}
HCL
now=2026-02-21T16:00:00Z # 10,000 hourly intervals after start_date
cd "$work/ws"
rss() { /usr/bin/time -f '%M %e' "$@" 2>&1 >/dev/null | tail -1; }
read -r base_kb base_s < <(rss "$work/rewind" validate .)
read -r run_kb run_s < <(rss "$work/rewind" run --catchup --quiet --now "$now" .)
n=$("$work/rewind" runs | grep -c ' success ')
[ "$n" = 10000 ] || { echo "expected 10000 successful runs, got $n" >&2; exit 1; }
printf 'validate (baseline): %6.1f MiB in %5.2fs\n' "$(echo "$base_kb/1024" | bc -l)" "$base_s"
printf 'catchup 10,000 runs: %6.1f MiB in %5.2fs\n' "$(echo "$run_kb/1024" | bc -l)" "$run_s"
