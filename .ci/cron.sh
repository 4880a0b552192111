#!/usr/bin/env bash
# Debian's cron daemon, for the test that installs `rewind cron`'s lines in
# a real crontab and waits for them to fire (cmd/rewind/cron_test.go), and
# systemd-analyze, for the test that reads `rewind cron --systemd`'s timer.
#
#   eval "$(.ci/cron.sh start)"   # exports REWIND_TEST_CRON_USER, REWIND_TEST_CRON_TZ, REWIND_TEST_CRON_PID
#   go test -run 'TestCron' ./cmd/rewind/
#   .ci/cron.sh stop              # stops the daemon start started (none when it found one running)
#
#   .ci/cron.sh start --owner PID # also stop it by itself once PID is gone
#
# start: installs cron (and systemd, for systemd-analyze) with apt-get when
# missing, creates the system user rewindcron (the test replaces its
# crontab and nobody else's), and starts `cron -f` with TZ=Asia/Tokyo:
# Debian's cron schedules every entry in the timezone of its environment
# (else /etc/timezone), and ignores CRON_TZ, so the test sees a daemon
# whose zone is neither UTC nor a pipeline's. When a cron daemon already
# runs (its pid in /run/crond.pid), it is used as it is, with the zone it
# schedules in. It prints the export lines on stdout (everything else goes
# to stderr):
#   REWIND_TEST_CRON_USER  the user whose crontab the test may replace
#   REWIND_TEST_CRON_TZ    the timezone the daemon schedules in
#   REWIND_TEST_CRON_PID   the daemon's pid when start started it, for stop
# stop [PID]: stop that daemon (default $REWIND_TEST_CRON_PID); nothing when empty.
set -euo pipefail

log() { echo "cron.sh: $*" >&2; }

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
user=rewindcron
zone=Asia/Tokyo

install() {
  log "installing $*"
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -60 2>/dev/null | head -n 1)" ]; then
    apt-get update -qq >&2
  fi
  apt-get install -y -qq --no-install-recommends "$@" >&2
}

# running: the pid of a cron daemon that runs, from its pid file.
running() {
  local pid
  [ -f /run/crond.pid ] || return 1
  pid=$(tr -dc 0-9 </run/crond.pid)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start() {
  local owner=
  if [ "${1:-}" = "--owner" ]; then owner=${2:?--owner needs a pid}; fi
  if [ "$(id -u)" -ne 0 ]; then log "start: needs root (crontab -u, a system user)"; exit 1; fi
  local pkgs=()
  command -v cron >/dev/null 2>&1 || pkgs+=(cron)
  command -v systemd-analyze >/dev/null 2>&1 || pkgs+=(systemd)
  [ ${#pkgs[@]} -eq 0 ] || install "${pkgs[@]}"
  command -v cron >/dev/null 2>&1 || { log "cron still missing after apt-get install"; exit 1; }
  id "$user" >/dev/null 2>&1 ||
    useradd --system --create-home --home-dir "/var/lib/$user" --shell /bin/sh "$user" >&2

  local pid tz
  if pid=$(running); then
    # Its zone: the TZ it was started with, else /etc/timezone, else /etc/localtime.
    tz=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^TZ=:\{0,1\}//p' | head -n 1)
    [ -n "$tz" ] || tz=$(cat /etc/timezone 2>/dev/null || true)
    [ -n "$tz" ] || tz=$(readlink /etc/localtime | sed 's|.*zoneinfo/||')
    log "a cron daemon runs already (pid $pid, timezone $tz): using it"
    echo "export REWIND_TEST_CRON_USER=$user"
    echo "export REWIND_TEST_CRON_TZ=$(printf '%q' "$tz")"
    echo "export REWIND_TEST_CRON_PID="
    return 0
  fi
  # Detached, with no inherited stdout (the caller reads ours to its end).
  TZ=$zone setsid cron -f </dev/null >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1 50); do
    [ "$(running || true)" = "$pid" ] && break
    kill -0 "$pid" 2>/dev/null || { log "cron exited at start"; exit 1; }
    sleep 0.1
  done
  [ "$(running || true)" = "$pid" ] || { log "cron (pid $pid) wrote no /run/crond.pid"; kill "$pid" 2>/dev/null || true; exit 1; }
  if [ -n "$owner" ]; then
    nohup setsid bash "$self" watch "$owner" "$pid" </dev/null >/dev/null 2>&1 &
  fi
  log "cron up (pid $pid, TZ=$zone), crontabs of user $user for the tests"
  echo "export REWIND_TEST_CRON_USER=$user"
  echo "export REWIND_TEST_CRON_TZ=$zone"
  echo "export REWIND_TEST_CRON_PID=$pid"
}

stop() {
  local pid=${1:-${REWIND_TEST_CRON_PID:-}}
  [ -n "$pid" ] || return 0
  crontab -u "$user" -r 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# watch OWNER PID: stop the daemon PID once OWNER has exited (or PID has).
watch() {
  local owner=$1 pid=$2
  while kill -0 "$owner" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 2; done
  stop "$pid"
}

case "${1:-}" in
start) shift; start "$@" ;;
watch) shift; watch "$@" ;;
stop) shift; stop "$@" ;;
*) echo "usage: $0 start [--owner PID] | stop [PID]" >&2; exit 2 ;;
esac
