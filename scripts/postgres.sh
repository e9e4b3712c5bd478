#!/usr/bin/env bash
# A PostgreSQL server for the tests and benchmarks: a cluster of its own in
# target/postgres, on 127.0.0.1:55432 (NEXO_PG_PORT to change it) with
# password logins, and a role and database `nexo` that may create databases.
# Installs Debian's postgresql package if its programs are missing, creates
# the cluster the first time, starts it if it is not running; safe to run
# any number of times. Prints the URL on stdout (and writes it to
# target/postgres/url); everything else goes to stderr:
#
#   NEXO_TEST_POSTGRES=$(./scripts/postgres.sh) cargo test -p nexo-store
#
# NEXO_PG_DIR puts a cluster elsewhere (the chaos test makes its own, to
# restart it); `postgres.sh stop` stops the cluster at once, as a crash
# would (pg_ctl's immediate mode: the next start recovers from its WAL).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${NEXO_PG_DIR:-$root/target/postgres}"
data="$dir/data"
port="${NEXO_PG_PORT:-55432}"
# A test password, not a secret: the server listens on loopback only.
password="nexo-test-secret"
url="postgres://nexo:$password@127.0.0.1:$port/nexo"

say() { echo "postgres.sh: $*" >&2; }

# Debian keeps the server programs out of PATH, one directory per major
# version: take the newest, else whatever PATH has.
find_bin() {
  local candidate
  for candidate in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -n -r); do
    if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
      echo "$candidate"
      return
    fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
  fi
}

bin="$(find_bin)"
if [ -z "$bin" ]; then
  . "$(dirname "$0")/apt-install.sh"
  apt_install "the PostgreSQL tests" postgresql >&2
  bin="$(find_bin)"
  [ -n "$bin" ] || { say "error: installed postgresql but found no initdb or pg_ctl under /usr/lib/postgresql/*/bin"; exit 1; }
fi

# PostgreSQL refuses to run as root: as root, the cluster belongs to the
# `postgres` user (the package creates it).
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || { say "error: running as root needs a 'postgres' user to own the server (the postgresql package creates it)"; exit 1; }
  as_owner() { runuser -u postgres -- "$@"; }
fi

if [ "${1:-}" = "stop" ]; then
  if [ -s "$data/PG_VERSION" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    as_owner "$bin/pg_ctl" -D "$data" -m immediate -w stop >&2
  fi
  exit 0
fi

mkdir -p "$dir"
if [ "$(id -u)" -eq 0 ]; then
  chown postgres: "$dir"
fi
as_owner test -w "$dir" || { say "error: $(as_owner id -un) cannot write to $dir (is a parent directory closed to it?)"; exit 1; }

if [ ! -s "$data/PG_VERSION" ]; then
  say "creating a cluster in $data"
  pwfile="$(as_owner mktemp)"
  as_owner sh -c "printf '%s\n' postgres >'$pwfile'"
  as_owner "$bin/initdb" -D "$data" -U postgres --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
    --encoding=UTF8 >"$dir/initdb.log" 2>&1 || { as_owner rm -f "$pwfile"; say "error: initdb failed; see $dir/initdb.log"; exit 1; }
  as_owner rm -f "$pwfile"
fi

if ! as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  say "starting PostgreSQL on 127.0.0.1:$port"
  # The socket goes in $dir too, so no system directory is needed.
  as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >&2 \
    || { say "error: the server did not start; see $dir/server.log"; exit 1; }
fi

psql() { as_owner "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"; }
if [ "$(psql -c "SELECT 1 FROM pg_roles WHERE rolname = 'nexo'")" != "1" ]; then
  psql -c "CREATE ROLE nexo LOGIN CREATEDB PASSWORD '$password'"
fi
# DROP DATABASE ... WITH (FORCE) must end every session in the database,
# an autovacuum worker's included; without this role the tests' clean-up
# fails whenever autovacuum happens to be visiting the database.
if [ "$(psql -c "SELECT 1 FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid JOIN pg_roles u ON u.oid = m.member WHERE r.rolname = 'pg_signal_backend' AND u.rolname = 'nexo'")" != "1" ]; then
  psql -c "GRANT pg_signal_backend TO nexo"
fi
if [ "$(psql -c "SELECT 1 FROM pg_database WHERE datname = 'nexo'")" != "1" ]; then
  psql -c "CREATE DATABASE nexo OWNER nexo"
fi

echo "$url" >"$dir/url"
echo "$url"
