#!/usr/bin/env bash
# The servers the distributed-mode tests need, on loopback only: nats-server (the tests start,
# stop and restart their own, with file storage) and PostgreSQL (a cluster of the tests' own,
# started here and left running; a second call reuses it). Installs Debian's `nats-server` and
# `postgresql` with apt when missing (as root, or through sudo). Prints the variables to set:
#
#   eval "$(bash scripts/setup-distributed.sh)"   # HOPFUSE_TEST_POSTGRES_URL, HOPFUSE_TEST_NATS_SERVER
#   bash scripts/setup-distributed.sh stop        # stops the PostgreSQL cluster
#   bash scripts/setup-distributed.sh running     # exit status 0 when it is running
#
# Everything but the final `export` lines goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${HOPFUSE_TEST_PG_PORT:-54329}
# Outside the checkout: as root the cluster belongs to the `postgres` user, which must be able
# to reach its directory.
DIR=${TMPDIR:-/tmp}/hopfuse-test-pg-$PORT
log() { echo "setup-distributed: $*" >&2; }

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
# Debian puts it in /usr/sbin, which a user's PATH may not have.
nats_bin() { command -v nats-server || ls /usr/sbin/nats-server 2>/dev/null || true; }

missing=()
[ -n "$(nats_bin)" ] || missing+=(nats-server)
[ -x "$(pg_bin)/initdb" ] || missing+=(postgresql)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  log "installing ${missing[*]} from Debian (apt)"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >&2
fi
BIN=$(pg_bin)
[ -x "$BIN/initdb" ] || { log "no PostgreSQL server binaries under /usr/lib/postgresql"; exit 1; }

# initdb and postgres refuse to run as root: then the cluster is the `postgres` user's.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

if [ "${1:-}" = running ]; then
  exec "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"
fi
if [ "${1:-}" = stop ]; then
  if [ -f "$DIR/data/postmaster.pid" ]; then
    as_owner "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >&2
  fi
  exit 0
fi

if ! "$BIN/pg_isready" -q -h 127.0.0.1 -p "$PORT"; then
  if [ ! -f "$DIR/data/PG_VERSION" ]; then
    log "creating a PostgreSQL cluster in $DIR (port $PORT, loopback, user hopfuse)"
    rm -rf "$DIR"
    mkdir -p "$DIR"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$DIR"
    as_owner "$BIN/initdb" -D "$DIR/data" -U hopfuse --auth=trust --no-sync >/dev/null
  fi
  log "starting PostgreSQL on 127.0.0.1:$PORT"
  as_owner "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c max_connections=200" \
    start >&2
fi
if ! "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U hopfuse -d postgres -tAc \
  "SELECT 1 FROM pg_database WHERE datname = 'hopfuse_test'" | grep -q 1; then
  "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U hopfuse hopfuse_test
fi
echo "export HOPFUSE_TEST_POSTGRES_URL=postgres://hopfuse@127.0.0.1:$PORT/hopfuse_test"
echo "export HOPFUSE_TEST_NATS_SERVER=$(nats_bin)"
