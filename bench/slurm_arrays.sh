#!/usr/bin/env bash
# Attempts per second of one-second tasks on the Slurm executor: one hourly
# pipeline with N due runs (default 1000), one task `sleep 1` on a Slurm pool
# (SLOTS slots, default 256; max_active_runs = SLOTS; 30MiB, 1 cpu), run by
# one `rewind run --catchup` on a fresh SQLite state, with two binaries in
# the same run, interleaved round by round:
#   arrays    this checkout: a pass's attempts of the pool go as job arrays
#   baseline  rewind built from BASELINE (default 64b650f, the last commit
#             with one sbatch per attempt), on BASE_N runs (default N)
#   floor     no rewind: N one-second jobs submitted by hand as job arrays
#             (sbatch --array=0-K%SLOTS, the same --mem and --cpus-per-task),
#             waited for with squeue: what the cluster itself starts and
#             ends per second on this machine, the ceiling of the others
# Prints a line per round, then the median and the worst of each, and the
# load average before and after.
# Usage: bench/slurm_arrays.sh [ROUNDS] [N]   (default 3 1000)
# Cluster: REWIND_TEST_SLURM (+ SLURM_CONF) names a running one (its node
# needs SLOTS CPUs declared and SLOTS x 30MiB of memory); otherwise the
# script starts its own with .ci/slurm.sh (root), REWIND_SLURM_CPUS=SLOTS,
# and stops it at exit. SLURM_TIMEOUT (default 120 s + 1 s per run)
# interrupts a stuck round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n=${2:-1000}
slots=${SLOTS:-256}
base_n=${BASE_N:-$n}
baseline=${BASELINE:-64b650f}
timeout_s=${SLURM_TIMEOUT:-$((120 + n))}
unset REWIND_STATE
work=$(mktemp -d)
slurm_started=
cleanup() {
  if [ -n "$slurm_started" ]; then .ci/slurm.sh stop "$REWIND_TEST_SLURM_DIR" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/rewind" ./cmd/rewind
mkdir -p "$work/base-src"
git archive "$baseline" | tar -x -C "$work/base-src"
(cd "$work/base-src" && go build -o "$work/rewind-base" ./cmd/rewind)

if [ -z "${REWIND_TEST_SLURM:-}" ]; then
  out=$(REWIND_SLURM_CPUS=$slots .ci/slurm.sh start --owner $$)
  eval "$out"
  slurm_started=1
fi
echo "slurm: partition $REWIND_TEST_SLURM, $(sinfo -h -p "$REWIND_TEST_SLURM" -o '%D node(s), %c CPUs, %m MB, state %T' | head -1)${slurm_started:+ (started by this script)}; $(scontrol show config | grep -E '^(MaxArraySize|MaxJobCount|SchedulerParameters) ' | tr -s ' ' | paste -sd ';')" >&2
echo "load average before: $(cat /proc/loadavg)" >&2

start=2025-01-01
now_after() { date -u -d "@$(($(date -u -d "$start" +%s) + $1 * 3600))" +%Y-%m-%dT%H:%M:%SZ; }
hcl="pool \"slurm\" {
  executor  = \"slurm\"
  partition = \"$REWIND_TEST_SLURM\"
  memory    = \"30MiB\"
  cpus      = 1
  slots     = $slots
}
pipeline \"sleeper\" {
  schedule         = \"@hourly\"
  start_date       = \"$start\"
  max_active_runs  = $slots
  max_active_tasks = $slots
  default_pool     = \"slurm\"
  task \"t\" { command = [\"sleep\", \"1\"] }
}"

secs() { date +%s.%N; }
# run NAME BINARY COUNT: one catchup of a fresh workspace; checks that every
# run succeeded with one attempt; prints "attempts wall".
run() {
  local name=$1 bin=$2 count=$3 ws="$work/$1" t0 t1 rc=0 att good
  mkdir -p "$ws"
  printf '%s\n' "$hcl" >"$ws/sleeper.hcl"
  t0=$(secs)
  (cd "$ws" && timeout -s INT -k 30 "$timeout_s" "$bin" run --catchup --quiet --now "$(now_after "$count")" . >/dev/null 2>&1) || rc=$?
  t1=$(secs)
  att=$("$work/rewind" runs --path "$ws" | grep -cE '^ +t +try [0-9]+ ' || true)
  good=$("$work/rewind" runs --path "$ws" | grep -cE '^ +t +try 1 +slurm +exit 0 ' || true)
  if [ "$att" != "$count" ] || [ "$good" != "$count" ]; then
    echo "$name: expected $count attempts exiting 0; got $att attempts, $good good (rewind run: exit $rc)" >&2
    "$work/rewind" runs --path "$ws" | grep -vE '^ +t +try 1 +slurm +exit 0 |^sleeper .* success ' | head -20 >&2 || true
    exit 1
  fi
  left=$(squeue -h -o %i | wc -l)
  [ "$left" = 0 ] || echo "warning: $name: $left jobs still in squeue after the run" >&2
  echo "$att $(echo "$t1 - $t0" | bc -l)"
}

# Every job stays in slurmctld for MinJobAge (an hour on the test cluster)
# and counts against MaxJobCount; squeue's cost grows with them too, so
# later rounds run against a fuller slurmctld than the first.
max_jobs=$(scontrol show config | awk '$1 == "MaxJobCount" {print $3}')
if [ $((rounds * (2 * n + base_n))) -gt "$max_jobs" ]; then
  echo "warning: $rounds rounds submit $((rounds * (2 * n + base_n))) jobs, over MaxJobCount $max_jobs: sbatch will refuse some" >&2
fi

# floor COUNT: COUNT one-second jobs as bare job arrays (MaxArraySize at
# most each), SLOTS at once at most; prints "jobs wall".
max_array=$(scontrol show config | awk '$1 == "MaxArraySize" {print $3}')
floor() {
  local count=$1 t0 t1 ids=() k lo=0
  printf '#!/bin/sh\nsleep 1\n' >"$work/floor.sh"
  t0=$(secs)
  while [ "$lo" -lt "$count" ]; do
    k=$((count - lo < max_array ? count - lo : max_array))
    ids+=("$(sbatch --parsable --array=0-$((k - 1))%$slots --mem=30M --cpus-per-task=1 --partition="$REWIND_TEST_SLURM" -o /dev/null "$work/floor.sh")")
    lo=$((lo + k))
  done
  local jobs
  jobs=$(IFS=,; echo "${ids[*]}")
  while [ "$(squeue -h -r -j "$jobs" -t PD,R,CG,CF,S | wc -l)" != 0 ]; do sleep 0.2; done
  t1=$(secs)
  echo "$count $(echo "$t1 - $t0" | bc -l)"
}

declare -A rates
for i in $(seq "$rounds"); do
  line="round $i:"
  for s in arrays baseline floor; do
    case $s in
    arrays) read -r a w < <(run "arrays$i" "$work/rewind" "$n") || true ;;
    baseline) read -r a w < <(run "baseline$i" "$work/rewind-base" "$base_n") || true ;;
    floor) read -r a w < <(floor "$n") || true ;;
    esac
    [ -n "${a:-}" ] || { echo "$s round $i failed" >&2; exit 1; }
    r=$(echo "$a / $w" | bc -l)
    rates[$s]="${rates[$s]:-} $r"
    line="$line $(printf '%s %d attempts %.2fs %.1f/s |' "$s" "$a" "$w" "$r")"
    unset a w
  done
  echo "${line% |}"
done
echo "load average after: $(cat /proc/loadavg)" >&2

median() { printf '%s\n' $1 | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
worst() { printf '%s\n' $1 | sort -g | head -1; }
printf '\n%d rounds, one-second tasks, %d slots (median, worst):\n' "$rounds" "$slots"
printf '%-44s %10s %14s %10s\n' setup attempts "attempts/s" "(worst)"
printf '%-44s %10d %14.1f %10.1f\n' "job arrays (this checkout)" "$n" "$(median "${rates[arrays]}")" "$(worst "${rates[arrays]}")"
printf '%-44s %10d %14.1f %10.1f\n' "one sbatch per attempt ($baseline)" "$base_n" "$(median "${rates[baseline]}")" "$(worst "${rates[baseline]}")"
printf '%-44s %10d %14.1f %10.1f\n' "floor: bare sbatch --array, no rewind" "$n" "$(median "${rates[floor]}")" "$(worst "${rates[floor]}")"
printf 'arrays / baseline: %.1fx; arrays / floor: %.2f (medians)\n' \
  "$(echo "$(median "${rates[arrays]}") / $(median "${rates[baseline]}")" | bc -l)" \
  "$(echo "$(median "${rates[arrays]}") / $(median "${rates[floor]}")" | bc -l)"
