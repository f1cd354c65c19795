#!/usr/bin/env bash
# shellcheck disable=SC2317 # trap handlers and helpers are reached indirectly
# scripts/run.sh — what `make run` runs (after `make build`): the whole
# service on one machine, without Docker.
#
#   1. PostgreSQL: DATABASE_URL when set; else a throwaway local cluster in
#      .dev/pg (initdb/pg_ctl from PATH or /usr/lib/postgresql/*/bin), on
#      127.0.0.1:55432 (or the next free port). Its database
#      pcp_route_processing is dropped and created afresh on every run, so
#      every run starts from the same empty state as the new dev broker.
#   2. Kafka: KAFKA_BOOTSTRAP_SERVERS when set; else scripts/devbroker (an
#      in-memory broker) on 127.0.0.1:59092 (or the next free port) with the
#      four topics, 3 partitions each. Its data is gone when it stops.
#   3. bin/ingestor migrate, then bin/ingestor and bin/outbox-relay in the
#      background, logs prefixed [ingestor] / [relay].
#   4. Waits for both /readyz, sends scripts/samples/ with
#      scripts/devwatch produce, and prints every output event and
#      dead-lettered record with scripts/devwatch watch ([watch]).
#   5. Runs until Ctrl-C (or RUN_SECONDS / --for N seconds after the
#      samples were sent), then stops everything it started and waits for it.
#
# Usage: bash scripts/run.sh [--for SECONDS]
# Environment: DATABASE_URL, KAFKA_BOOTSTRAP_SERVERS, RUN_SECONDS,
#   READY_TIMEOUT (seconds, default 90), NO_COLOR, any variable of
#   docs/contract.md §5 (passed through to both binaries).
# Logs of this run: .dev/run/*.log
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
DEV=$ROOT/.dev
RUN=$DEV/run
GO=${GO:-go}
DB_NAME=pcp_route_processing
TOPIC_INPUT=${TOPIC_INPUT:-pcp.request.survey-georeference.v1}
TOPIC_INPUT_DLQ=${TOPIC_INPUT_DLQ:-pcp.request.survey-georeference-dlq.v1}
TOPIC_PROCESSED_ROUTE=${TOPIC_PROCESSED_ROUTE:-pcp.route.in.v1}
TOPIC_ROUTE_GEOREFERENCE=${TOPIC_ROUTE_GEOREFERENCE:-pcp.route.georeference.v1}
RUN_SECONDS=${RUN_SECONDS:-0}
READY_TIMEOUT=${READY_TIMEOUT:-90}

usage() { sed -n '3,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --for) RUN_SECONDS=${2:?--for needs a number of seconds}; shift 2 ;;
    --for=*) RUN_SECONDS=${1#--for=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
case $RUN_SECONDS in ''|*[!0-9]*) echo "run.sh: RUN_SECONDS / --for must be a whole number of seconds, not '$RUN_SECONDS'" >&2; exit 2 ;; esac
case $READY_TIMEOUT in ''|*[!0-9]*) echo "run.sh: READY_TIMEOUT must be a whole number of seconds" >&2; exit 2 ;; esac

# ---------------------------------------------------------------- output

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ]; then
  C_RESET=$'\e[0m' C_BOLD=$'\e[1m' C_DIM=$'\e[2m' C_RED=$'\e[31m' C_GREEN=$'\e[32m'
  C_YELLOW=$'\e[33m' C_BLUE=$'\e[34m' C_MAGENTA=$'\e[35m' C_CYAN=$'\e[36m'
  WATCH_COLOR=always
  export FORCE_COLOR=1 # the binaries' text logs go through a pipe, but end on this terminal
else
  C_RESET='' C_BOLD='' C_DIM='' C_RED='' C_GREEN='' C_YELLOW='' C_BLUE='' C_MAGENTA='' C_CYAN=''
  WATCH_COLOR=never
fi
T0=$EPOCHREALTIME
elapsed() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }
say() { printf '%s[run %s]%s %s%s%s\n' "$C_GREEN" "$(elapsed)" "$C_RESET" "$C_BOLD" "$*" "$C_RESET"; }
note() { printf '%s[run %s]%s %s\n' "$C_GREEN" "$(elapsed)" "$C_RESET" "$*"; }
warn() { printf '%s[run %s] warning:%s %s\n' "$C_YELLOW" "$(elapsed)" "$C_RESET" "$*" >&2; }
die() { printf '%s[run %s] error:%s %s\n' "$C_RED" "$(elapsed)" "$C_RESET" "$*" >&2; exit 1; }

tag_of() {
  case $1 in
    ingestor) printf '%s[ingestor]%s ' "$C_CYAN" "$C_RESET" ;;
    relay) printf '%s[relay]%s ' "$C_MAGENTA" "$C_RESET" ;;
    broker) printf '%s[broker]%s ' "$C_BLUE" "$C_RESET" ;;
    watch) printf '%s[watch]%s ' "$C_YELLOW" "$C_RESET" ;;
    *) printf '[%s] ' "$1" ;;
  esac
}

# mawk reads a pipe in blocks unless told -W interactive; gawk reads lines.
AWK=(awk)
case $(awk -W version 2>&1 || true) in *mawk*) AWK=(awk -W interactive) ;; esac

# prefix NAME: copy stdin to the terminal, each line prefixed, line by line.
prefix() { "${AWK[@]}" -v p="$(tag_of "$1")" '{ print p $0; fflush() }'; }

# ---------------------------------------------------------------- processes
#
# Every long-running program is started with setsid: it leads its own
# process group, so a Ctrl-C on the terminal reaches only this script (and
# make), and cleanup stops the programs in order — consumers first, then the
# broker, then PostgreSQL — each one by its process group, and waits for it.
# Their output goes through a FIFO to an awk that prefixes it and appends it
# to .dev/run/NAME.log; the awk ignores INT/TERM and ends at EOF, so a
# program's last log lines during shutdown are never lost to a broken pipe.

declare -a PIDS=() PREFIXERS=()
declare -A NAME_OF=()
PG_PID=''
CLEANED=''
EXIT_CODE=0

start_bg() { # NAME COMMAND...
  local name=$1 fifo=$RUN/$1.fifo log=$RUN/$1.log
  shift
  rm -f "$fifo"
  mkfifo "$fifo"
  : >"$log"
  (
    trap '' INT TERM HUP
    exec "${AWK[@]}" -v p="$(tag_of "$name")" -v f="$log" '{ print p $0; fflush(); print >> f; fflush(f) }'
  ) <"$fifo" &
  PREFIXERS+=("$!")
  (trap - PIPE; exec setsid "$@") >"$fifo" 2>&1 </dev/null &
  local pid=$!
  PIDS+=("$pid")
  NAME_OF[$pid]=$name
  remember "$pid" "$name" "$1"
  LAST_PID=$pid
}

# remember PID NAME EXE: for the next run, in case this one is killed with
# SIGKILL. The start time tells a reused pid from ours.
remember() {
  echo "$1 $2 $(starttime "$1") $(readlink -f "$3" 2>/dev/null || echo "$3")" >>"$RUN/pids"
}
starttime() { # PID: clock ticks since boot when it started (Linux), or -
  local st
  st=$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20) || true
  echo "${st:--}"
}

alive() { # PID: running and not a zombie
  local s
  s=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [[ $s != Z* ]]
}

group_alive() { # PGID
  ps -eo pgid=,stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

# stop_group PID NAME SECONDS [signalled]: SIGTERM to the process group
# (unless already sent), then SIGKILL after SECONDS; reaps the leader.
stop_group() {
  local pid=$1 name=$2 limit=$3 start=$EPOCHREALTIME rc
  if group_alive "$pid"; then
    [ -n "${4:-}" ] || kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local n=0
    while group_alive "$pid" && [ $n -lt $((limit * 10)) ]; do sleep 0.1; n=$((n + 1)); done
    if group_alive "$pid"; then
      warn "$name did not stop within ${limit}s; killing it"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null && rc=0 || rc=$?
  note "stopped $name (exit $rc, took $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'))"
}

# kill_leftovers stops what a previous run left behind when it was killed
# without its cleanup (SIGKILL, closed terminal). Only processes whose
# executable and start time are still the ones recorded are touched.
kill_leftovers() {
  [ -f "$RUN/pids" ] || return 0
  local pid name started exe cur sig
  while read -r pid name started exe; do
    [ -n "$pid" ] || continue
    cur=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    if [ -n "$cur" ] && [ "${cur% (deleted)}" = "$exe" ] && [ "$(starttime "$pid")" = "$started" ]; then
      warn "stopping $name (pid $pid) left running by an earlier run"
      sig=TERM
      [ "$name" != postgres ] || sig=INT # fast shutdown
      kill -"$sig" -- "-$pid" 2>/dev/null || kill -"$sig" "$pid" 2>/dev/null || true
      local n=0
      while alive "$pid" && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  done < <(tac "$RUN/pids") # last started, first stopped
  rm -f "$RUN/pids"
}

cleanup() {
  local rc=$?
  set +e
  [ -n "$CLEANED" ] && return
  CLEANED=1
  # A second Ctrl-C must not leave half of it running: finish the cleanup.
  trap '' INT TERM HUP
  [ "$EXIT_CODE" -ne 0 ] && rc=$EXIT_CODE
  if [ ${#PIDS[@]} -gt 0 ] || [ -n "$PG_PID" ]; then
    say "stopping everything this run started"
  fi
  local pid
  # Watcher first, then the two services together (they finish in-flight
  # work within 30 s by contract), then the broker they talk to.
  for pid in "${PIDS[@]}"; do [ "${NAME_OF[$pid]}" = watch ] && stop_group "$pid" watch 5; done
  local svc=()
  for pid in "${PIDS[@]}"; do
    case ${NAME_OF[$pid]} in ingestor|relay) svc+=("$pid"); kill -TERM -- "-$pid" 2>/dev/null ;; esac
  done
  for pid in "${svc[@]}"; do stop_group "$pid" "${NAME_OF[$pid]}" 35 signalled; done
  for pid in "${PIDS[@]}"; do
    case ${NAME_OF[$pid]} in watch|ingestor|relay) ;; *) stop_group "$pid" "${NAME_OF[$pid]}" 10 ;; esac
  done
  if [ -n "$PG_PID" ]; then
    local start=$EPOCHREALTIME how='pg_ctl stop -m fast'
    if alive "$PG_PID"; then
      as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 || {
        how='SIGQUIT (immediate) after pg_ctl stop -m fast failed'
        kill -QUIT "$PG_PID" 2>/dev/null
      }
      local n=0
      while alive "$PG_PID" && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
      alive "$PG_PID" && { how='SIGKILL'; kill -KILL -- "-$PG_PID" 2>/dev/null; }
    fi
    wait "$PG_PID" 2>/dev/null && rc_pg=0 || rc_pg=$?
    note "stopped postgres ($how, exit $rc_pg, took $(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'))"
  fi
  # The prefixers end at EOF once their program is gone.
  for pid in "${PREFIXERS[@]}"; do
    local n=0
    while alive "$pid" && [ $n -lt 30 ]; do sleep 0.1; n=$((n + 1)); done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -f "$RUN"/*.fifo "$RUN/pids"
  if [ ${#PIDS[@]} -gt 0 ] || [ -n "$PG_PID" ]; then
    say "all stopped; logs of this run are in .dev/run/"
  fi
  exit "$rc"
}

on_signal() {
  printf '\n'
  say "$1 received"
  EXIT_CODE=$2
  exit "$2"
}
trap cleanup EXIT
# A closed output pipe (make run | head) must not kill the script before its cleanup.
trap '' PIPE
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGTERM 143' TERM
trap 'on_signal SIGHUP 129' HUP

# sleep_interruptibly SECONDS: a signal interrupts `wait` at once (a
# foreground sleep would delay the trap until it ends).
sleep_interruptibly() {
  sleep "$1" &
  local s=$!
  wait "$s" || true
}

# make's SIGTERM reaches only the recipe's shell, not this script: notice
# that the parent is gone (re-parented) and stop as on SIGTERM.
ORIG_PPID=$PPID
parent_gone() {
  local pp
  pp=$(ps -o ppid= -p $$ 2>/dev/null | tr -d ' ') || return 1
  [ -n "$pp" ] && [ "$pp" != "$ORIG_PPID" ]
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() { # FIRST: the first port from FIRST on that nobody listens on
  local p=$1
  while port_busy "$p"; do
    p=$((p + 1))
    [ "$p" -lt $(($1 + 100)) ] || die "no free port in $1..$(($1 + 99))"
  done
  echo "$p"
}

http_ok() { # URL → 0 when it answers 200
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null -m 2 "$1" 2>/dev/null
  else
    local hp=${1#http://}
    local host=${hp%%:*} rest=${hp#*:}
    timeout 3 bash -c 'exec 3<>"/dev/tcp/$0/$1" && printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$0" >&3 && read -r _ code _ <&3 && [ "$code" = 200 ]' \
      "$host" "${rest%%/*}" "/${rest#*/}" 2>/dev/null
  fi
}

as_pg() { # run as the postgres user when root (initdb and postgres refuse root)
  if [ "$(id -u)" -eq 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    "$@"
  fi
}

find_pg_bin() { # a directory holding initdb, pg_ctl and postgres
  local d
  if command -v initdb >/dev/null 2>&1; then
    d=$(dirname "$(readlink -f "$(command -v initdb)")")
    if [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"
      return
    fi
  fi
  for d in $(ls -d /usr/lib/postgresql/*/bin /usr/pgsql-*/bin /usr/local/pgsql/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/postgres" ]; then
      echo "$d"
      return
    fi
  done
  return 1
}

pg_up() { # PORT: the dev server accepts connections
  if [ -x "$PGBIN/pg_isready" ]; then
    "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$1" -d postgres -U postgres
  else
    "$PSQL" "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable&connect_timeout=2" -XqAt -c 'SELECT 1' >/dev/null 2>&1
  fi
}

# ---------------------------------------------------------------- start

mkdir -p "$RUN" "$DEV/bin"
kill_leftovers
rm -f "$RUN"/*.fifo

[ -x bin/ingestor ] && [ -x bin/outbox-relay ] || die "bin/ingestor and bin/outbox-relay are missing: run 'make build' (make run does it first)"
command -v "$GO" >/dev/null 2>&1 || die "go is not on PATH (needed to build scripts/devwatch and scripts/devbroker)"

# Fail fast, before any build, when there is no PostgreSQL to run.
if [ -z "${DATABASE_URL:-}" ]; then
  PGBIN=$(find_pg_bin) || {
    printf '%s[run] error:%s no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql/*/bin.\n' "$C_RED" "$C_RESET" >&2
    printf '  Install them, e.g.:  sudo apt-get install -y postgresql   (Debian/Ubuntu)\n' >&2
    printf '                       sudo dnf install -y postgresql-server   (Fedora/RHEL)\n' >&2
    printf '  or point DATABASE_URL at a PostgreSQL of your own.\n' >&2
    exit 1
  }
fi

build_tools=(./scripts/devwatch)
[ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] || build_tools+=(./scripts/devbroker)
if [ ! -d scripts/devbroker ] && [ -z "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  die "scripts/devbroker is missing; set KAFKA_BOOTSTRAP_SERVERS to use a broker of your own"
fi
say "building ${build_tools[*]} into .dev/bin"
"$GO" build -o "$DEV/bin/" "${build_tools[@]}"
DEVWATCH=$DEV/bin/devwatch

# ---------------------------------------------------------------- PostgreSQL

PSQL=''
if [ -n "${DATABASE_URL:-}" ]; then
  say "PostgreSQL: using DATABASE_URL (not reset; migrations are applied)"
  PSQL=$(command -v psql || true)
else
  PSQL=$PGBIN/psql
  [ -x "$PSQL" ] || PSQL=$(command -v psql) || die "psql not found (it comes with the PostgreSQL client package)"
  PGBASE=$DEV/pg
  if [ "$(id -u)" -eq 0 ]; then
    id postgres >/dev/null 2>&1 || die "running as root, but there is no 'postgres' user to run PostgreSQL as (apt-get install -y postgresql creates it; or set DATABASE_URL)"
    mkdir -p "$PGBASE"
    chown postgres: "$PGBASE"
    if ! runuser -u postgres -- test -w "$PGBASE"; then
      # The checkout is not reachable by the postgres user (e.g. under /root).
      PGBASE=${TMPDIR:-/tmp}/pcp-route-processing-dev-pg-$(printf '%s' "$ROOT" | cksum | cut -d' ' -f1)
      mkdir -p "$PGBASE"
      chown postgres: "$PGBASE"
      chmod 700 "$PGBASE"
      note "the postgres user cannot reach $DEV; the dev cluster lives in $PGBASE"
    fi
  else
    mkdir -p "$PGBASE"
  fi
  PGDATA=$PGBASE/data
  PGSOCK=$PGBASE/sock
  if [ ${#PGSOCK} -gt 90 ]; then # unix socket paths are limited to ~107 bytes
    PGSOCK=$(mktemp -d "${TMPDIR:-/tmp}/pcp-pgsock.XXXXXX")
    [ "$(id -u)" -ne 0 ] || chown postgres: "$PGSOCK"
  fi
  as_pg mkdir -p "$PGSOCK"
  pg_version=$("$PGBIN/pg_ctl" --version | awk '{ print $NF }' | cut -d. -f1)

  # A server left running by a killed run: stop it. A stale postmaster.pid
  # (its process is gone, or the pid now belongs to another program): remove
  # it, or postgres may refuse to start.
  if [ -f "$PGDATA/postmaster.pid" ]; then
    oldpid=$(head -n 1 "$PGDATA/postmaster.pid" 2>/dev/null || true)
    if [ -n "$oldpid" ] && [ "$(basename "$(readlink -f "/proc/$oldpid/exe" 2>/dev/null)")" = postgres ]; then
      warn "stopping the dev PostgreSQL (pid $oldpid) left running by an earlier run"
      as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m fast -w -t 30 stop >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" -D "$PGDATA" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
    else
      note "removing the stale postmaster.pid of a killed run"
      rm -f "$PGDATA/postmaster.pid"
    fi
  fi
  rm -f "$PGSOCK"/.s.PGSQL.*
  # A data dir from another PostgreSQL version, or a half-made one: start over.
  if [ -d "$PGDATA" ] && [ "$(cat "$PGDATA/PG_VERSION" 2>/dev/null)" != "$pg_version" ]; then
    note "recreating .dev PostgreSQL data dir (missing or from another version)"
    rm -rf "$PGDATA"
  fi
  if [ ! -d "$PGDATA" ]; then
    say "PostgreSQL $pg_version: initdb $PGDATA"
    as_pg "$PGBIN/initdb" -D "$PGDATA" -U postgres --auth=trust -E UTF8 --no-locale --no-sync >"$RUN/initdb.log" 2>&1 ||
      { cat "$RUN/initdb.log" >&2; die "initdb failed"; }
  fi
  PGPORT_DEV=$(free_port 55432)
  say "PostgreSQL $pg_version: starting on 127.0.0.1:$PGPORT_DEV (socket in $PGSOCK)"
  # postgres runs as a child of this script (not daemonized by pg_ctl start),
  # in its own process group; cleanup stops it with pg_ctl stop -m fast and
  # reaps it.
  pg_cmd=("$PGBIN/postgres" -D "$PGDATA" -c listen_addresses=127.0.0.1 -p "$PGPORT_DEV" -k "$PGSOCK"
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off)
  [ "$(id -u)" -ne 0 ] || pg_cmd=(setpriv --reuid=postgres --regid=postgres --init-groups "${pg_cmd[@]}")
  PGLOG=$RUN/postgres.log
  (trap - PIPE; cd / && exec setsid "${pg_cmd[@]}") >"$PGLOG" 2>&1 </dev/null &
  PG_PID=$!
  remember "$PG_PID" postgres "$PGBIN/postgres"
  n=0
  until pg_up "$PGPORT_DEV"; do
    if ! alive "$PG_PID" || [ $n -ge 600 ]; then
      tail -n 20 "$PGLOG" >&2
      EXIT_CODE=1
      die "PostgreSQL did not start (log: .dev/run/postgres.log)"
    fi
    sleep 0.1
    n=$((n + 1))
  done
  admin_url="postgres://postgres@127.0.0.1:$PGPORT_DEV/postgres?sslmode=disable"
  "$PSQL" "$admin_url" -X -q -v ON_ERROR_STOP=1 \
    -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $DB_NAME WITH (FORCE)" -c "CREATE DATABASE $DB_NAME" >/dev/null ||
    die "could not (re)create database $DB_NAME"
  note "database $DB_NAME reset (dropped and created: the dev broker's offsets restart at 0 every run)"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$PGPORT_DEV/$DB_NAME?sslmode=disable"
fi

# ---------------------------------------------------------------- Kafka

EXTERNAL_KAFKA=''
if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
  EXTERNAL_KAFKA=1
  say "Kafka: using KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS (its topics must exist)"
else
  broker_port=$(free_port 59092)
  ready_file=$RUN/broker.ready
  rm -f "$ready_file"
  say "Kafka: starting scripts/devbroker on 127.0.0.1:$broker_port (in memory, 3 partitions per topic)"
  start_bg broker "$DEV/bin/devbroker" -addr "127.0.0.1:$broker_port" -partitions 3 \
    -topics "$TOPIC_INPUT,$TOPIC_INPUT_DLQ,$TOPIC_PROCESSED_ROUTE,$TOPIC_ROUTE_GEOREFERENCE" \
    -ready-file "$ready_file"
  broker_pid=$LAST_PID
  n=0
  until [ -s "$ready_file" ]; do
    alive "$broker_pid" || { EXIT_CODE=1; die "devbroker exited before it was ready (log: .dev/run/broker.log)"; }
    [ $n -lt 300 ] || { EXIT_CODE=1; die "devbroker not ready after 30s (log: .dev/run/broker.log)"; }
    sleep 0.1
    n=$((n + 1))
  done
  addr=$(head -n 1 "$ready_file" | tr -d '[:space:]')
  export KAFKA_BOOTSTRAP_SERVERS=${addr:-127.0.0.1:$broker_port}
fi

# ---------------------------------------------------------------- services

export LOG_FORMAT=text
export TOPIC_INPUT TOPIC_INPUT_DLQ TOPIC_PROCESSED_ROUTE TOPIC_ROUTE_GEOREFERENCE

say "migrating: bin/ingestor migrate"
bin/ingestor migrate 2>&1 | prefix migrate || { EXIT_CODE=1; die "bin/ingestor migrate failed"; }

ingestor_port=$(free_port 8081)
relay_port=$(free_port $((ingestor_port + 1)))
INGESTOR_HTTP=127.0.0.1:$ingestor_port
RELAY_HTTP=127.0.0.1:$relay_port
say "starting bin/ingestor (http://$INGESTOR_HTTP) and bin/outbox-relay (http://$RELAY_HTTP)"
HTTP_ADDR=$INGESTOR_HTTP start_bg ingestor "$ROOT/bin/ingestor"
ingestor_pid=$LAST_PID
HTTP_ADDR=$RELAY_HTTP start_bg relay "$ROOT/bin/outbox-relay"
relay_pid=$LAST_PID

ready_start=$SECONDS
while :; do
  ingestor_ready='' relay_ready=''
  http_ok "http://$INGESTOR_HTTP/readyz" && ingestor_ready=1
  http_ok "http://$RELAY_HTTP/readyz" && relay_ready=1
  [ -n "$ingestor_ready" ] && [ -n "$relay_ready" ] && break
  for pid in "$ingestor_pid" "$relay_pid"; do
    if ! alive "$pid"; then
      EXIT_CODE=1
      printf '%s--- last lines of .dev/run/%s.log ---%s\n' "$C_DIM" "${NAME_OF[$pid]}" "$C_RESET" >&2
      tail -n 20 "$RUN/${NAME_OF[$pid]}.log" >&2
      die "${NAME_OF[$pid]} exited during start-up"
    fi
  done
  if [ $((SECONDS - ready_start)) -ge "$READY_TIMEOUT" ]; then
    EXIT_CODE=1
    for name in ingestor relay; do
      printf '%s--- last lines of .dev/run/%s.log ---%s\n' "$C_DIM" "$name" "$C_RESET" >&2
      tail -n 15 "$RUN/$name.log" >&2
    done
    state() { if [ -n "$1" ]; then echo 200; else echo "not 200"; fi; }
    die "not ready after ${READY_TIMEOUT}s: ingestor /readyz $(state "$ingestor_ready"), relay /readyz $(state "$relay_ready") (logs above and in .dev/run/; READY_TIMEOUT=$READY_TIMEOUT)"
  fi
  parent_gone && { EXIT_CODE=143; die "the parent process (make) went away"; }
  sleep_interruptibly 0.25
done
say "both ready after $((SECONDS - ready_start))s"

# ---------------------------------------------------------------- samples

watch_args=(watch -brokers "$KAFKA_BOOTSTRAP_SERVERS" -group-less -color "$WATCH_COLOR")
# On a cluster of one's own, show only what this run produces.
[ -z "$EXTERNAL_KAFKA" ] || watch_args+=(-since-ms "$(($(date +%s) * 1000 - 1000))")
start_bg watch "$DEVWATCH" "${watch_args[@]}"

shopt -s nullglob
samples=(scripts/samples/valid-* scripts/samples/invalid-*)
updates=(scripts/samples/update-*)
shopt -u nullglob
say "sending ${#samples[@]} sample passports (scripts/samples/) to $TOPIC_INPUT"
"$DEVWATCH" produce -brokers "$KAFKA_BOOTSTRAP_SERVERS" -topic "$TOPIC_INPUT" "${samples[@]}" 2>&1 | prefix produce ||
  { EXIT_CODE=1; die "devwatch produce failed"; }
for f in "${updates[@]}"; do
  key=$(basename "$f")
  key=${key#update-}
  # Same key as the record it updates: same partition, so it is processed after it.
  "$DEVWATCH" produce -brokers "$KAFKA_BOOTSTRAP_SERVERS" -topic "$TOPIC_INPUT" -key "$key" "$f" 2>&1 | prefix produce ||
    { EXIT_CODE=1; die "devwatch produce failed"; }
done
SENT_AT=$SECONDS
note "valid-*: 2 output events each ([watch] OUT); invalid-*: 1 DLQ record each ([watch] DLQ); update-*: the route row is updated, no new events"

# Show the tables once the samples are through (or after 20 s).
if [ -n "$PSQL" ] && [ -x "$PSQL" ]; then
  want=0
  for f in "${samples[@]}"; do case $(basename "$f") in valid-*) want=$((want + 1)) ;; esac; done
  q() { "$PSQL" "$DATABASE_URL" -X -qAt -v ON_ERROR_STOP=1 -c "$1" 2>/dev/null; }
  n=0
  while [ $n -lt 80 ]; do
    got=$(q "SELECT (SELECT count(*) FROM route_passports) || ' ' || (SELECT count(*) FROM route_passports WHERE updated_at > created_at) || ' ' || (SELECT count(*) FROM route_passport_outbox WHERE status = 'PUBLISHED')" || echo "0 0 0")
    read -r got_rows got_updated got_published <<<"$got"
    [ "${got_rows:-0}" -ge "$want" ] && [ "${got_updated:-0}" -ge "${#updates[@]}" ] && [ "${got_published:-0}" -ge $((want * 2)) ] && break
    sleep_interruptibly 0.25
    n=$((n + 1))
  done
  say "route_passports after the samples (outbox: ${got_published:-0} published):"
  "$PSQL" "$DATABASE_URL" -X -q -P pager=off -c "SELECT route_id, route_name_short AS short, left(route_name_full, 44) AS route_name_full, split_part(geometry_wkt, '(', 1) AS geometry, source_partition AS p, source_offset AS off, updated_at > created_at AS updated FROM route_passports ORDER BY created_at" 2>&1 | prefix db || true
  "$PSQL" "$DATABASE_URL" -X -q -P pager=off -c "SELECT event_type, status, count(*) FROM route_passport_outbox GROUP BY 1, 2 ORDER BY 1, 2" 2>&1 | prefix db || true
fi

psql_cmd=$PSQL
[ "$(command -v psql 2>/dev/null)" = "" ] || psql_cmd=psql
psql_hint="$psql_cmd '$DATABASE_URL'"
[ -n "$PG_PID" ] || psql_hint="psql \"\$DATABASE_URL\""
cat <<EOF
${C_BOLD}Running.${C_RESET}
  ingestor   http://$INGESTOR_HTTP/metrics   /healthz   /readyz
  relay      http://$RELAY_HTTP/metrics   /healthz   /readyz
  tables     $psql_hint -c 'TABLE route_passport_outbox'
             (route_passports, route_passport_outbox)
  more input $DEVWATCH produce -brokers $KAFKA_BOOTSTRAP_SERVERS FILE...
  logs       .dev/run/ingestor.log  relay.log  watch.log  postgres.log
EOF
if [ "$RUN_SECONDS" -gt 0 ]; then
  say "stopping by itself ${RUN_SECONDS}s after the samples were sent (RUN_SECONDS); Ctrl-C stops it sooner"
else
  say "Ctrl-C stops everything"
fi

# ---------------------------------------------------------------- wait

while :; do
  if [ "$RUN_SECONDS" -gt 0 ] && [ $((SECONDS - SENT_AT)) -ge "$RUN_SECONDS" ]; then
    say "RUN_SECONDS=$RUN_SECONDS elapsed"
    break
  fi
  for pid in "${PIDS[@]}"; do
    if ! alive "$pid"; then
      wait "$pid" 2>/dev/null && rc=0 || rc=$?
      EXIT_CODE=1
      die "${NAME_OF[$pid]} exited unexpectedly (status $rc); log: .dev/run/${NAME_OF[$pid]}.log"
    fi
  done
  if [ -n "$PG_PID" ] && ! alive "$PG_PID"; then
    EXIT_CODE=1
    die "PostgreSQL stopped unexpectedly; log: .dev/run/postgres.log"
  fi
  if parent_gone; then
    say "the parent process (make) went away"
    EXIT_CODE=143
    exit 143
  fi
  sleep_interruptibly 1
done
exit 0
