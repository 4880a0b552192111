#!/usr/bin/env bash
# Idle cost of `rewind scheduler`: the CPU time (user + system, all threads,
# from /proc/PID/stat) a scheduler uses between ticks, over a window of wall
# time once its start-up execution is over, with N daily pipelines (default
# 1,000) in two layouts, 100 pipelines per file and one file per pipeline
# (the scheduler stats every *.hcl file at each --poll), against the
# baseline of a scheduler of 1 pipeline measured over the same window, in the
# same run, so that the per-pipeline cost shows. The target: under 2 % of
# one core with 1,000 pipelines.
# Usage: bench/scheduler_idle.sh [N] [SECONDS]   (default 1000 60)
# Each pipeline is "@daily", start_date 3 days ago, catchup = false, one task
# `true`; a `rewind run --catchup` makes its runs first, so the scheduler's
# start-up execution has nothing to run. The schedulers' state is SQLite
# (the default); TMPDIR picks the filesystem of the workspaces.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
window=${2:-60}
work=$(mktemp -d)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/rewind" ./cmd/rewind
tck=$(getconf CLK_TCK)
start_date=$(date -u -d '3 days ago' +%F)

# gen DIR COUNT PER_FILE: COUNT pipelines, PER_FILE to a file.
gen() {
  local dir=$1 count=$2 per=$3 i
  mkdir -p "$dir"
  for i in $(seq 1 "$count"); do
    printf 'pipeline "p%05d" {\n  schedule   = "@daily"\n  start_date = "%s"\n  catchup    = false\n  task "t" { command = ["true"] }\n}\n' \
      "$i" "$start_date" >> "$dir/p$(( (i - 1) / per )).hcl"
  done
}
# ticks PID: user + system clock ticks of PID (fields 14 and 15 of its stat;
# the command name, field 2, has no space here).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
secs() { date +%s.%N; }

names=(base grouped split)
declare -A label count per pid startup settled
label[base]="1 pipeline (baseline)"; count[base]=1; per[base]=1
label[grouped]="$n pipelines, 100 per file"; count[grouped]=$n; per[grouped]=100
label[split]="$n pipelines, 1 per file"; count[split]=$n; per[split]=1

for k in "${names[@]}"; do
  ws="$work/$k"
  gen "$ws" "${count[$k]}" "${per[$k]}"
  "$work/rewind" run --catchup --quiet "$ws" >/dev/null
  ok=$("$work/rewind" runs --path "$ws" | grep -c ' success ' || true)
  bad=$("$work/rewind" runs --path "$ws" --failed | grep -c ' failed ' || true)
  [ "$ok" -ge "${count[$k]}" ] && [ "$bad" = 0 ] ||
    { echo "$k: setup: $ok successful runs, $bad failed (want >= ${count[$k]}, 0)" >&2; exit 1; }
  echo "setup: ${label[$k]}: $(ls "$ws"/*.hcl | wc -l) files, $ok runs made by rewind run --catchup" >&2
done

# Tick check: the @daily tick (00:00 UTC) must not fall in the measurement.
now_s=$(date -u +%s)
to_midnight=$(( $(date -u -d 'tomorrow 00:00' +%s) - now_s ))
if [ "$to_midnight" -lt $(( window + 150 )) ]; then
  echo "warning: 00:00 UTC (every pipeline's tick) is ${to_midnight}s away: the window may include an execution" >&2
fi

t_start=$(secs)
for k in "${names[@]}"; do
  "$work/rewind" scheduler --quiet "$work/$k" 2>"$work/$k.log" &
  pid[$k]=$!
  pids+=("$!")
done

# Start-up is over once a scheduler's CPU use per 2-second poll is steady:
# three consecutive 2 s deltas within 2 ticks (or 25 %) of each other, and
# at least 6 s after the start; at most 120 s. The schedulers are sampled
# together.
declare -A last deltas
for k in "${names[@]}"; do last[$k]=$(ticks "${pid[$k]}"); deltas[$k]=; done
left=${#names[@]}
while [ "$left" -gt 0 ]; do
  sleep 2
  el=$(echo "$(secs) - $t_start" | bc -l)
  for k in "${names[@]}"; do
    [ -z "${settled[$k]:-}" ] || continue
    p=${pid[$k]}
    kill -0 "$p" 2>/dev/null || { echo "$k: scheduler exited during start-up:" >&2; cat "$work/$k.log" >&2; exit 1; }
    cur=$(ticks "$p")
    deltas[$k]="${deltas[$k]} $((cur - last[$k]))"
    last[$k]=$cur
    read -r -a d <<<"${deltas[$k]}"
    steady=0
    if [ "${#d[@]}" -ge 3 ]; then
      lo=$(printf '%s\n' "${d[@]: -3}" | sort -n | head -1)
      hi=$(printf '%s\n' "${d[@]: -3}" | sort -n | tail -1)
      tol=$(( (hi + 3) / 4 )); [ "$tol" -lt 2 ] && tol=2
      [ $((hi - lo)) -le "$tol" ] && [ "$(echo "$el >= 6" | bc)" = 1 ] && steady=1
    fi
    if [ "$steady" = 0 ] && [ "$(echo "$el >= 120" | bc)" = 1 ]; then
      echo "warning: $k: CPU use not steady after 120 s (last 2 s deltas: ${d[*]: -3} ticks); measuring anyway" >&2
      steady=1
    fi
    if [ "$steady" = 1 ]; then
      startup[$k]=$cur settled[$k]=$el left=$((left - 1))
    fi
  done
done

declare -A c0 c1
for k in "${names[@]}"; do c0[$k]=$(ticks "${pid[$k]}"); done
w0=$(secs)
sleep "$window"
for k in "${names[@]}"; do
  kill -0 "${pid[$k]}" 2>/dev/null || { echo "$k: scheduler exited during the measurement:" >&2; cat "$work/$k.log" >&2; exit 1; }
  c1[$k]=$(ticks "${pid[$k]}")
done
w1=$(secs)
wall=$(echo "$w1 - $w0" | bc -l)
declare -A rss
for k in "${names[@]}"; do rss[$k]=$(awk '/^VmRSS/ {print $2}' "/proc/${pid[$k]}/status"); done

# Stop them: SIGTERM, exit 0 expected; anything they logged (--quiet: only
# warnings and errors) is shown.
for k in "${names[@]}"; do kill -TERM "${pid[$k]}"; done
for k in "${names[@]}"; do
  rc=0; wait "${pid[$k]}" || rc=$?
  [ "$rc" = 0 ] || echo "warning: $k: scheduler exited $rc on SIGTERM" >&2
  if [ -s "$work/$k.log" ]; then echo "$k: scheduler log:" >&2; sed 's/^/  /' "$work/$k.log" >&2; fi
done
pids=()

declare -A pct
for k in "${names[@]}"; do
  pct[$k]=$(echo "(${c1[$k]} - ${c0[$k]}) / $tck / $wall * 100" | bc -l)
  printf 'start-up: %-28s %.2fs CPU, steady after %.0fs\n' "${label[$k]}:" "$(echo "${startup[$k]} / $tck" | bc -l)" "${settled[$k]}"
done
for k in "${names[@]}"; do
  printf 'idle CPU: %.3f%% of one core over %.0f s (%s; %d ticks of 1/%d s; RSS %.1f MiB)\n' \
    "${pct[$k]}" "$wall" "${label[$k]}" "$((c1[$k] - c0[$k]))" "$tck" "$(echo "${rss[$k]} / 1024" | bc -l)"
done
printf 'resolution: 1 tick over %.0f s = %.3f%% of one core\n' "$wall" "$(echo "100 / $tck / $wall" | bc -l)"
if [ "$n" -gt 1 ]; then
  for k in grouped split; do
    printf 'per pipeline (%s): %+.5f%% of one core over the baseline (%+.3f%% per 1,000)\n' "${label[$k]}" \
      "$(echo "(${pct[$k]} - ${pct[base]}) / ($n - 1)" | bc -l)" "$(echo "(${pct[$k]} - ${pct[base]}) / ($n - 1) * 1000" | bc -l)"
  done
fi
for k in grouped split; do
  if [ "$(echo "${pct[$k]} < 2" | bc -l)" = 1 ]; then v=met; else v="NOT met"; fi
  [ "$n" = 1000 ] || v="$v (measured with $n pipelines, not 1,000)"
  printf 'target (< 2%% of one core with 1,000 pipelines): %s for %s (%.3f%%)\n' "$v" "${label[$k]}" "${pct[$k]}"
done
