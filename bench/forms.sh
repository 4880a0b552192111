#!/usr/bin/env bash
# Per-attempt overhead by command form: 1,000 hourly runs of one no-op task at
# concurrency 8 (max_active_runs = 8, a pool of 8 slots), once with the argv
# form (command = ["true"]) and once with the string form (command = "true",
# run with /bin/sh -c), each on a fresh state, against its baseline in the
# same run: `xargs -P 8 -n1 true` for argv, `xargs -P 8 -I{} sh -c true` for
# the string (a shell per attempt, as the string form needs).
# Usage: bench/forms.sh [ROUNDS]   (default 3)
# Prints, per round and best of the rounds, wall times and their ratios, and
# CPU times (user + system of the process and its children, which a busy
# machine disturbs less) and theirs.
# TMPDIR picks the filesystem of the workspaces (state, logs, run directories).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/rewind" ./cmd/rewind
now=2025-02-11T16:00:00Z # 1,000 hourly intervals after start_date
runs=1000

# hcl COMMAND: the workspace's one file.
hcl() {
  cat <<HCL
pool "default" { slots = 8 }
pipeline "noop" {
  schedule        = "@hourly"
  start_date      = "2025-01-01"
  max_active_runs = 8
  task "t" { command = $1 }
}
HCL
}
argv_hcl=$(hcl '["true"]')
string_hcl=$(hcl '"true"')

secs() { date +%s.%N; }
# timed DIR CMD: runs the shell command CMD in DIR; prints "wall cpu".
timed() {
  local t0 t1 cpu
  t0=$(secs)
  cpu=$(cd "$1" && /usr/bin/time -f '%U %S' bash -c "$2" 2>&1 >/dev/null | tail -1 | awk '{print $1 + $2}')
  t1=$(secs)
  echo "$(echo "$t1 - $t0" | bc -l) $cpu"
}
# run NAME HCL: rewind in a fresh workspace (no earlier round's state or
# logs); prints "wall cpu". Workspaces are removed only at exit: on ext4
# without a journal, creating files is much slower for ~30 s after many were
# deleted (the inode allocator skips recently deleted inodes), which would
# tax the next round.
run() {
  local ws="$work/$1" out n
  mkdir -p "$ws"
  printf '%s\n' "$2" > "$ws/noop.hcl"
  out=$(timed "$ws" "'$work/rewind' run --catchup --quiet --now $now .")
  n=$(cd "$ws" && "$work/rewind" runs | grep -c ' success ')
  [ "$n" = "$runs" ] || { echo "$1: expected $runs successful runs, got $n" >&2; exit 1; }
  echo "$out"
}
min() { echo "if ($1 < $2) $1 else $2" | bc -l; }
ratio() { echo "$1 / $2" | bc -l; }

best_a=999 best_s=999 best_xa=999 best_xs=999
best_ac=999 best_sc=999 best_xac=999 best_xsc=999
for i in $(seq "$rounds"); do
  read -r a ac < <(run "argv$i" "$argv_hcl")
  read -r xa xac < <(timed "$work" "seq $runs | xargs -P 8 -n1 true")
  read -r s sc < <(run "string$i" "$string_hcl")
  read -r xs xsc < <(timed "$work" "seq $runs | xargs -P 8 -I{} sh -c true")
  printf 'round %d: argv: rewind %.2fs (cpu %.2fs), xargs -n1 true %.2fs (cpu %.2fs), ratio %.2f | string: rewind %.2fs (cpu %.2fs), xargs sh -c true %.2fs (cpu %.2fs), ratio %.2f\n' \
    "$i" "$a" "$ac" "$xa" "$xac" "$(ratio "$a" "$xa")" "$s" "$sc" "$xs" "$xsc" "$(ratio "$s" "$xs")"
  best_a=$(min "$a" "$best_a"); best_s=$(min "$s" "$best_s")
  best_xa=$(min "$xa" "$best_xa"); best_xs=$(min "$xs" "$best_xs")
  best_ac=$(min "$ac" "$best_ac"); best_sc=$(min "$sc" "$best_sc")
  best_xac=$(min "$xac" "$best_xac"); best_xsc=$(min "$xsc" "$best_xsc")
done
printf 'best of %d: argv   ["true"]: rewind %.2fs  xargs -P 8 -n1 true        %.2fs  ratio %.2f   (cpu %.2fs vs %.2fs, ratio %.2f)\n' \
  "$rounds" "$best_a" "$best_xa" "$(ratio "$best_a" "$best_xa")" "$best_ac" "$best_xac" "$(ratio "$best_ac" "$best_xac")"
printf 'best of %d: string "true":   rewind %.2fs  xargs -P 8 -I{} sh -c true %.2fs  ratio %.2f   (cpu %.2fs vs %.2fs, ratio %.2f)\n' \
  "$rounds" "$best_s" "$best_xs" "$(ratio "$best_s" "$best_xs")" "$best_sc" "$best_xsc" "$(ratio "$best_sc" "$best_xsc")"
