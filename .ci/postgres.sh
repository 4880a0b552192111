#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests.
#
#   eval "$(.ci/postgres.sh start)"   # exports REWIND_TEST_POSTGRES and REWIND_PG_DIR
#   go test ./store/...
#   .ci/postgres.sh stop              # stops the server in $REWIND_PG_DIR, removes it
#
#   .ci/postgres.sh start --owner PID # also stop it by itself once PID is gone
#
# start: initdb into a new temporary directory, trust authentication, listen on
# a Unix socket in that directory and on 127.0.0.1 at a free port. It prints
# the export lines on stdout (everything else goes to stderr). The server runs
# as a non-root user (postgres when it exists, else a rewindci user made for
# it; $REWIND_PG_USER overrides). PostgreSQL is installed with apt-get when no initdb is found.
# With --owner PID a watchdog stops the server when process PID has exited,
# so that a killed CI run (no trap runs on SIGKILL) leaves no server behind.
# stop [DIR]: pg_ctl stop and remove DIR (default $REWIND_PG_DIR).
# restart DIR: pg_ctl restart -m fast, same address (the fault tests).
set -euo pipefail

log() { echo "postgres.sh: $*" >&2; }

self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")

find_bindir() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ]; then echo "$d"; return 0; fi
  done
  return 1
}

# as USER CMD...: run CMD as USER (we are root) or as ourselves.
as() {
  local user=$1; shift
  if [ "$(id -u)" -eq 0 ]; then
    su -s /bin/sh "$user" -c "$(printf '%q ' "$@")"
  else
    "$@"
  fi
}

# server_opts DIR PORT: the server's settings.
server_opts() {
  echo "-c listen_addresses=127.0.0.1 -c port=$2 -c unix_socket_directories=$1 \
    -c max_connections=500 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
    -c shared_buffers=128MB -c wal_level=minimal -c max_wal_senders=0 -c wal_buffers=16MB \
    -c max_wal_size=2GB -c checkpoint_timeout=30min"
}

start() {
  local owner=
  if [ "${1:-}" = "--owner" ]; then owner=${2:?--owner needs a pid}; fi
  local bindir
  if ! bindir=$(find_bindir); then
    log "no initdb under /usr/lib/postgresql: installing postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update >&2
    apt-get install -y --no-install-recommends postgresql-15 >&2 || apt-get install -y --no-install-recommends postgresql >&2
    bindir=$(find_bindir) || { log "initdb still missing after apt-get install"; exit 1; }
  fi

  local user
  user=$(id -un)
  if [ "$(id -u)" -eq 0 ]; then
    if [ -n "${REWIND_PG_USER:-}" ]; then
      user=$REWIND_PG_USER
    elif id postgres >/dev/null 2>&1; then
      user=postgres
    else
      user=rewindci
    fi
    id "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  fi

  local dir
  dir=$(mktemp -d "${TMPDIR:-/tmp}/rewind-pg.XXXXXX")
  chmod 755 "$dir"
  mkdir "$dir/data"
  [ "$(id -u)" -eq 0 ] && chown -R "$user" "$dir"

  as "$user" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
    as "$user" "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --no-locale >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; rm -rf "$dir"; exit 1; }

  # A scratch server for tests: durability is not wanted, speed and many
  # connections (each test database gets its own pools) are.
  local port try
  for try in $(seq 1 20); do
    port=$((20000 + RANDOM % 30000))
    if as "$user" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start -o "$(server_opts "$dir" "$port")" >&2; then
      break
    fi
    if grep -q "could not bind\|already in use" "$dir/server.log" 2>/dev/null; then
      log "port $port is taken, trying another"
      : >"$dir/server.log"
      port=
      continue
    fi
    cat "$dir/server.log" >&2 || true
    rm -rf "$dir"
    exit 1
  done
  if [ -z "$port" ]; then log "no free port found"; rm -rf "$dir"; exit 1; fi
  echo "$port" >"$dir/port"
  if [ -n "$owner" ]; then
    # Detached, with no inherited stdout (the caller reads ours to its end).
    nohup setsid bash "$self" watch "$owner" "$dir" </dev/null >/dev/null 2>&1 &
  fi
  log "server up in $dir (socket $dir/.s.PGSQL.$port, tcp 127.0.0.1:$port, user $user)"
  echo "export REWIND_PG_DIR=$(printf '%q' "$dir")"
  echo "export REWIND_TEST_POSTGRES=$(printf '%q' "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable")"
  echo "export REWIND_TEST_POSTGRES_SOCKET=$(printf '%q' "postgres://postgres@/postgres?host=$dir&port=$port&sslmode=disable")"
}

stop() {
  local dir=${1:-${REWIND_PG_DIR:-}}
  if [ -z "$dir" ]; then log "stop: no directory (pass it or set REWIND_PG_DIR)"; exit 1; fi
  if [ ! -d "$dir" ]; then log "stop: $dir is gone"; return 0; fi
  local bindir owner
  if bindir=$(find_bindir) && [ -f "$dir/data/postmaster.pid" ]; then
    owner=$(stat -c %U "$dir/data")
    as "$owner" "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >&2 || log "stop: pg_ctl stop failed"
  fi
  rm -rf "$dir"
}

# restart DIR: pg_ctl restart -m fast (every connection is cut; the server
# comes back at the same address).
restart() {
  local dir=${1:?restart needs the server directory}
  local bindir owner
  bindir=$(find_bindir)
  owner=$(stat -c %U "$dir/data")
  as "$owner" "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart \
    -o "$(server_opts "$dir" "$(cat "$dir/port")")" >&2
}

# watch PID DIR: stop the server in DIR once PID has exited (or DIR is gone).
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
restart) shift; restart "$@" ;;
*) echo "usage: $0 start [--owner PID] | stop [DIR] | restart DIR" >&2; exit 2 ;;
esac
