#!/usr/bin/env bash
# Attempts per second of no-op tasks by state backend and executor: one
# hourly pipeline with N due runs (default 400), max_active_runs = 8, one
# task `true`, run by one `rewind run --catchup` on a fresh state, on three
# setups in the same run, interleaved round by round:
#   sqlite    SQLite state, local executor (pool "default", 8 slots): the baseline
#   postgres  PostgreSQL state (a new database per round), local executor
#   pglink    as postgres, through bench/delayproxy: a TCP hop that holds
#             each chunk PG_LINK_DELAY (default 0) each way, for the cost of
#             round trips over a network (the script prints the round trip
#             it measured through it: 500 SELECT 1 from psql)
#   slurm     SQLite state, a pool with executor = "slurm" (8 slots, 50MiB,
#             1 cpu, partition $REWIND_TEST_SLURM): every attempt a Slurm job
# Prints a line per round and a table (setup, attempts, best wall s,
# attempts/s, ratio to SQLite; CPU is rewind's user + system, its children
# included: sbatch and scontrol, not the Slurm jobs).
# Usage: bench/attempts.sh [ROUNDS] [N]   (default 3 400)
# SETUPS picks the setups, in order (default "sqlite postgres slurm"; e.g.
# SETUPS="sqlite postgres" runs no Slurm and starts no Slurm cluster). The
# table also gives each setup's median attempts/s and the median of the
# per-round ratios to SQLite (when sqlite is among the setups).
# Servers: REWIND_TEST_POSTGRES (a DSN whose user may CREATE DATABASE) and
# REWIND_TEST_SLURM (+ SLURM_CONF) name running ones; otherwise the script
# starts its own with .ci/postgres.sh and .ci/slurm.sh (root) and stops them
# at exit. Slurm starts each job in about a second, so the slurm setup runs
# SLURM_N runs (default: N, at most 100; SLURM_N=400 for the full N);
# SLURM_TIMEOUT (default 60 s + 3 s per run) interrupts a stuck Slurm round.
# TMPDIR picks the filesystem of the workspaces (state, logs, run directories).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
n=${2:-400}
slurm_n=${SLURM_N:-$((n < 100 ? n : 100))}
slurm_timeout=${SLURM_TIMEOUT:-$((60 + 3 * slurm_n))}
unset REWIND_STATE # the sqlite and slurm setups use their workspace's state
work=$(mktemp -d)
pg_started= slurm_started= pg_dbs=() proxy_pid=
cleanup() {
  if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi
  local db
  if [ -n "$pg_started" ]; then
    .ci/postgres.sh stop "$REWIND_PG_DIR" || true
  elif [ "${#pg_dbs[@]}" -gt 0 ]; then
    for db in "${pg_dbs[@]}"; do "$psql" -q "$REWIND_TEST_POSTGRES" -c "DROP DATABASE IF EXISTS $db" 2>/dev/null || true; done
  fi
  if [ -n "$slurm_started" ]; then .ci/slurm.sh stop "$REWIND_TEST_SLURM_DIR" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/rewind" ./cmd/rewind

psql=
for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
  [ -x "$d/psql" ] && { psql=$d/psql; break; }
done
[ -n "$psql" ] || psql=psql
setups=(${SETUPS:-sqlite postgres slurm})
for s in "${setups[@]}"; do
  case $s in sqlite | postgres | pglink | slurm) ;; *) echo "unknown setup $s in SETUPS (sqlite, postgres, pglink, slurm)" >&2; exit 2 ;; esac
done
has() { [[ " ${setups[*]} " == *" $1 "* ]]; }
if { has postgres || has pglink; } && [ -z "${REWIND_TEST_POSTGRES:-}" ]; then
  out=$(.ci/postgres.sh start --owner $$)
  eval "$out"
  pg_started=1
fi
if has slurm && [ -z "${REWIND_TEST_SLURM:-}" ]; then
  out=$(.ci/slurm.sh start --owner $$)
  eval "$out"
  slurm_started=1
fi
! has postgres || echo "postgres: $("$psql" -Atc 'show server_version' "$REWIND_TEST_POSTGRES") at ${REWIND_TEST_POSTGRES%%\?*}, fsync=$("$psql" -Atc 'show fsync' "$REWIND_TEST_POSTGRES")${pg_started:+ (started by this script)}" >&2
link=
if has pglink; then
  go build -o "$work/delayproxy" ./bench/delayproxy
  server=$(printf '%s' "$REWIND_TEST_POSTGRES" | sed -E 's#^postgres(ql)?://([^@/]*@)?([^/?]*).*#\3#')
  "$work/delayproxy" -to "$server" -delay "${PG_LINK_DELAY:-0}" > "$work/link" &
  proxy_pid=$!
  for _ in $(seq 50); do [ -s "$work/link" ] && break; sleep 0.1; done
  link=$(cat "$work/link")
  link_dsn() { printf '%s' "$1" | sed -E "s#^(postgres(ql)?://([^@/]*@)?)[^/?]*#\\1$link#"; }
  for _ in $(seq 500); do echo "SELECT 1;"; done > "$work/ping.sql"
  t0=$(date +%s.%N); "$psql" -q "$(link_dsn "$REWIND_TEST_POSTGRES")" -f "$work/ping.sql" > /dev/null; t1=$(date +%s.%N)
  echo "pglink: through $link to $server, delay ${PG_LINK_DELAY:-0} each way, measured round trip $(printf '%.3f' "$(echo "($t1 - $t0) * 2" | bc -l)") ms" >&2
fi
! has slurm || echo "slurm: partition $REWIND_TEST_SLURM, $(sinfo -h -p "$REWIND_TEST_SLURM" -o '%D node(s), %c CPUs, %m MB, state %T' | head -1)${slurm_started:+ (started by this script)}" >&2

start=2025-01-01
# now_after COUNT: the clock at which COUNT hourly intervals from start are due.
now_after() { date -u -d "@$(( $(date -u -d "$start" +%s) + $1 * 3600 ))" +%Y-%m-%dT%H:%M:%SZ; }
# pipeline POOL: the one pipeline, its tasks on POOL.
pipeline() {
  cat <<HCL
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "$start"
  max_active_runs = 8
  default_pool    = "$1"
  task "t" { command = ["true"] }
}
HCL
}
local_hcl="pool \"default\" { slots = 8 }
$(pipeline default)"
slurm_hcl="pool \"slurm\" {
  executor  = \"slurm\"
  partition = \"${REWIND_TEST_SLURM:-}\"
  memory    = \"50MiB\"
  cpus      = 1
  slots     = 8
}
$(pipeline slurm)"

secs() { date +%s.%N; }
# slurm_jobs: the jobs slurmctld knows of that rewind submitted (ended ones
# stay for MinJobAge).
slurm_jobs() { scontrol show job -o 2>/dev/null | grep -c 'JobName=rewind:' || true; }
# run NAME COUNT POOL HCL [ARGS...]: one `rewind run --catchup` of a fresh
# workspace with COUNT due runs; checks that every run succeeded with one
# attempt on POOL; prints "attempts wall cpu".
run() {
  local name=$1 count=$2 pool=$3 hcl=$4 limit=600; shift 4
  [ "$pool" = slurm ] && limit=$slurm_timeout
  local ws="$work/$name" t0 t1 cpu rc=0 ok att good
  mkdir -p "$ws"
  printf '%s\n' "$hcl" > "$ws/noop.hcl"
  t0=$(secs)
  cpu=$( (cd "$ws" && /usr/bin/time -f '%U %S' timeout -s INT -k 30 "$limit" "$work/rewind" run --catchup --quiet --now "$(now_after "$count")" "$@" . 2>&1 >/dev/null) | tail -1 | awk '{print $1 + $2}') || rc=$?
  t1=$(secs)
  ok=$("$work/rewind" runs --path "$ws" "$@" | grep -c ' success ' || true)
  att=$("$work/rewind" runs --path "$ws" "$@" | grep -cE '^ +t +try [0-9]+ ' || true)
  good=$("$work/rewind" runs --path "$ws" "$@" | grep -cE "^ +t +try 1 +$pool +exit 0 " || true)
  if [ "$ok" != "$count" ] || [ "$att" != "$count" ] || [ "$good" != "$count" ]; then
    echo "$name: expected $count successful runs, each with one attempt exiting 0 on pool $pool; got $ok runs, $att attempts, $good good (rewind run: exit $rc)" >&2
    "$work/rewind" runs --path "$ws" "$@" | grep -vE "^ +t +try 1 +$pool +exit 0 |^noop .* success " | head -20 >&2 || true
    exit 1
  fi
  echo "$att $(echo "$t1 - $t0" | bc -l) $cpu"
}
max() { echo "if ($1 > $2) $1 else $2" | bc -l; }
min() { echo "if ($1 < $2) $1 else $2" | bc -l; }

[ "$slurm_n" = "$n" ] || ! has slurm || echo "note: the slurm setup runs $slurm_n runs, not $n (each Slurm job takes about a second to start; SLURM_N=$n for the full workload)" >&2
declare -A best_rate best_wall cpu_at att_of lo_rate rates ratios
for s in "${setups[@]}"; do best_rate[$s]=0; lo_rate[$s]=999999; done
for i in $(seq "$rounds"); do
  line="round $i:"
  for s in "${setups[@]}"; do
    case $s in
    sqlite) read -r a w c < <(run "sqlite$i" "$n" default "$local_hcl") || true ;;
    postgres)
      db=rewind_attempts_$$_$i
      "$psql" -q "$REWIND_TEST_POSTGRES" -c "CREATE DATABASE $db"
      pg_dbs+=("$db")
      dsn=$(printf '%s' "$REWIND_TEST_POSTGRES" | sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\\1/$db#")
      read -r a w c < <(run "postgres$i" "$n" default "$local_hcl" --state "$dsn") || true
      ;;
    pglink)
      db=rewind_attempts_link_$$_$i
      "$psql" -q "$REWIND_TEST_POSTGRES" -c "CREATE DATABASE $db"
      pg_dbs+=("$db")
      dsn=$(link_dsn "$(printf '%s' "$REWIND_TEST_POSTGRES" | sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\\1/$db#")")
      read -r a w c < <(run "pglink$i" "$n" default "$local_hcl" --state "$dsn") || true
      ;;
    slurm)
      j0=$(slurm_jobs)
      read -r a w c < <(run "slurm$i" "$slurm_n" slurm "$slurm_hcl") || true
      j1=$(slurm_jobs)
      [ $((j1 - j0)) = "$a" ] || echo "warning: round $i: $a Slurm attempts but $((j1 - j0)) new rewind jobs in scontrol" >&2
      left=$(squeue -h -o %i | wc -l)
      [ "$left" = 0 ] || echo "warning: round $i: $left jobs still in squeue after the run" >&2
      ;;
    esac
    [ -n "${a:-}" ] || { echo "$s round $i failed" >&2; exit 1; }
    r=$(echo "$a / $w" | bc -l)
    line="$line $(printf '%s %d attempts %.2fs (cpu %.2fs) %.0f/s |' "$s" "$a" "$w" "$c" "$r")"
    if [ "$(echo "$r > ${best_rate[$s]}" | bc -l)" = 1 ]; then
      best_rate[$s]=$r best_wall[$s]=$w cpu_at[$s]=$c
    fi
    lo_rate[$s]=$(min "$r" "${lo_rate[$s]}")
    rates[$s]="${rates[$s]:-} $r"
    [ "$s" = sqlite ] && sqlite_r=$r
    if [ "$s" != sqlite ] && [ -n "${sqlite_r:-}" ]; then ratios[$s]="${ratios[$s]:-} $(echo "$r / $sqlite_r" | bc -l)"; fi
    att_of[$s]=$a
    unset a w c
  done
  echo "${line% |}"
  unset sqlite_r
done
# median VALUES...: the median of the values (the mean of the middle two
# for an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

printf '\nbest of %d rounds (one rewind run --catchup, max_active_runs = 8, 8 slots, no-op task):\n' "$rounds"
printf '%-36s %8s %8s %8s %12s %12s %9s %9s %12s\n' setup attempts "wall s" "cpu s" attempts/s "(worst)" "vs SQLite" median/s "median ratio"
for s in "${setups[@]}"; do
  case $s in
  sqlite) d="sqlite state, local executor" ;;
  postgres) d="postgres state, local executor" ;;
  pglink) d="postgres through delayproxy, local" ;;
  slurm) d="sqlite state, slurm executor" ;;
  esac
  vs=- mr=-
  if has sqlite; then
    vs=$(printf '%.3f' "$(echo "${best_rate[$s]} / ${best_rate[sqlite]}" | bc -l)")
    mr=1.000
    [ "$s" = sqlite ] || mr=$(printf '%.3f' "$(median ${ratios[$s]})")
  fi
  printf '%-36s %8d %8.2f %8.2f %12.1f %12.1f %9s %9.1f %12s\n' "$d" "${att_of[$s]}" "${best_wall[$s]}" "${cpu_at[$s]}" \
    "${best_rate[$s]}" "${lo_rate[$s]}" "$vs" "$(median ${rates[$s]})" "$mr"
done
