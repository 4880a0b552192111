#!/usr/bin/env bash
# A throwaway single-node Slurm cluster for the tests (pools on Slurm).
#
#   eval "$(.ci/slurm.sh start)"   # exports REWIND_TEST_SLURM, SLURM_CONF, REWIND_TEST_SLURM_DIR
#   go test ./executor/ ./scheduler/
#   .ci/slurm.sh stop              # stops the daemons in $REWIND_TEST_SLURM_DIR, removes it
#
#   .ci/slurm.sh start --owner PID # also stop it by itself once PID is gone
#
# start: munged, slurmctld and slurmd, all with their configuration, sockets,
# spool, state and logs in a new temporary directory, on 127.0.0.1 at free
# ports. One node ("rewind1", CPUs and memory declared by the configuration,
# not probed), two partitions on it: "debug" (the default) and "large".
# Memory is a consumable resource (select/cons_tres, CR_Core_Memory) and is
# enforced by sampling (jobacct_gather/linux every second, OverMemoryKill):
# a job over its --mem is killed and ends OUT_OF_MEMORY. No slurmdbd: sacct
# has nothing to read, finished jobs stay visible to `scontrol show job` for
# MinJobAge (an hour). It prints the export lines on stdout (everything else
# goes to stderr):
#   REWIND_TEST_SLURM  the default partition's name (the tests use it, and "large")
#   SLURM_CONF         the configuration, which the Slurm commands read
#   REWIND_TEST_SLURM_DIR   the directory, for stop
# slurm-wlm and munge are installed with apt-get when slurmctld is missing.
# With --owner PID a watchdog stops the cluster when process PID has exited,
# so that a killed CI run (no trap runs on SIGKILL) leaves no daemons behind.
# stop [DIR]: stop the daemons of DIR (default $REWIND_TEST_SLURM_DIR), remove DIR.
set -euo pipefail

log() { echo "slurm.sh: $*" >&2; }

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

install() {
  log "slurmctld missing: installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | head -n 1)" ]; then
    apt-get update -qq >&2
  fi
  apt-get install -y -qq --no-install-recommends slurm-wlm munge >&2
}

freeport() {
  local p
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 30000))
    if ! (echo >"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}

start() {
  local owner=
  if [ "${1:-}" = "--owner" ]; then owner=${2:?--owner needs a pid}; fi
  if [ "$(id -u)" -ne 0 ]; then log "start: needs root (slurmd runs jobs as their submitter)"; exit 1; fi
  command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || install
  command -v slurmctld >/dev/null 2>&1 || { log "slurmctld still missing after apt-get install"; exit 1; }

  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rewind-slurm.XXXXXX")
  chmod 755 "$dir"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"

  # munge: a key of our own and a socket in dir, so that a system munged
  # (if any) is neither used nor disturbed.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" >&2 ||
    { cat "$dir/log/munged.log" >&2 || true; rm -rf "$dir"; exit 1; }

  local ctld_port slurmd_port cpus mem
  ctld_port=$(freeport) && slurmd_port=$(freeport) || { log "no free port found"; stop "$dir"; exit 1; }
  while [ "$slurmd_port" = "$ctld_port" ]; do slurmd_port=$(freeport); done
  # More CPUs than the machine has (config_overrides): attempts are mostly
  # waiting, and the tests run several at once. Memory: a share of the
  # machine's, to leave room for everything else.
  cpus=${REWIND_SLURM_CPUS:-16}
  mem=$(awk '/MemTotal/ {m=int($2/1024/2); if (m>8192) m=8192; print m}' /proc/meminfo)
  cat >"$dir/slurm.conf" <<EOF
ClusterName=rewindci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
# batch_sched_delay=0: schedule a batch job at its submission, not up to
# 3 s later (the default, meant for clusters that take thousands of jobs a
# second). default_queue_depth=1000: a scheduling pass considers up to 1000
# pending jobs (the default, 100, started at most 101 elements of a job
# array per pass, leaving CPUs idle on a node with more: bench/slurm_arrays.sh)
SchedulerParameters=batch_sched_delay=0,default_queue_depth=1000
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=3600
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=rewind1 NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=rewind1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=large Nodes=rewind1 Default=NO MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -i -f "$SLURM_CONF" >&2 || { cat "$dir/log/slurmctld.log" >&2 || true; stop "$dir"; exit 1; }
  slurmd -N rewind1 -f "$SLURM_CONF" >&2 || { cat "$dir/log/slurmd.log" >&2 || true; stop "$dir"; exit 1; }
  if [ -n "$owner" ]; then
    # Detached, with no inherited stdout (the caller reads ours to its end).
    nohup setsid bash "$self" watch "$owner" "$dir" </dev/null >/dev/null 2>&1 &
  fi

  # Up once the node takes jobs.
  local state=
  for _ in $(seq 1 300); do
    state=$(sinfo -h -n rewind1 -o %T 2>/dev/null | head -n 1 || true)
    case "$state" in idle | mixed | allocated) break ;; esac
    sleep 0.1
  done
  case "$state" in
  idle | mixed | allocated) ;;
  *)
    log "node not up (state '$state')"
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    stop "$dir"
    exit 1
    ;;
  esac
  log "cluster up in $dir (slurmctld 127.0.0.1:$ctld_port, slurmd :$slurmd_port, partitions debug and large, $cpus CPUs, ${mem}M)"
  echo "export REWIND_TEST_SLURM_DIR=$(printf '%q' "$dir")"
  echo "export SLURM_CONF=$(printf '%q' "$dir/slurm.conf")"
  echo "export REWIND_TEST_SLURM=debug"
}

# pidof_file FILE: the pid in FILE when that process runs.
pidof_file() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

stop() {
  local dir=${1:-${REWIND_TEST_SLURM_DIR:-}}
  if [ -z "$dir" ]; then log "stop: no directory (pass it or set REWIND_TEST_SLURM_DIR)"; exit 1; fi
  if [ ! -d "$dir" ]; then log "stop: $dir is gone"; return 0; fi
  if [ -f "$dir/slurm.conf" ]; then
    # Jobs first, so that no job process outlives its slurmd.
    SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet -u root >/dev/null 2>&1 || true
  fi
  local f pid pids=()
  for f in "$dir"/slurmd-*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if pid=$(pidof_file "$f"); then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  for _ in $(seq 1 100); do
    local left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=1; done
    [ "$left" = 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$dir"
}

# watch PID DIR: stop the cluster in DIR once PID has exited (or DIR is gone).
watch() {
  local owner=$1 dir=$2
  while kill -0 "$owner" 2>/dev/null && [ -d "$dir" ]; do sleep 2; done
  [ -d "$dir" ] && stop "$dir"
  return 0
}

case "${1:-}" in
start) shift; start "$@" ;;
watch) shift; watch "$@" ;;
stop) shift; stop "$@" ;;
*) echo "usage: $0 start [--owner PID] | stop [DIR]" >&2; exit 2 ;;
esac
