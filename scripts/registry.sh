#!/usr/bin/env bash
# An OCI registry for the registry tests and benchmarks: Debian's
# docker-registry (the CNCF distribution registry) as a plain process, its
# storage and config in target/registry, on 127.0.0.1:55000
# (NEXO_REGISTRY_PORT to change it), plain HTTP. Installs the package if it
# is missing, starts the registry if it is not answering; safe to run any
# number of times. Prints HOST:PORT on stdout; everything else goes to stderr:
#
#   NEXO_TEST_REGISTRY=$(./scripts/registry.sh) cargo test -p nexo --test registry
#
# `registry.sh auth` starts a second one that asks for a password (htpasswd,
# user `nexo`, password in target/registry-auth/password) on port+1.
# NEXO_REGISTRY_DIR puts one elsewhere; `registry.sh stop` stops it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
auth=""
port="${NEXO_REGISTRY_PORT:-55000}"
dir="${NEXO_REGISTRY_DIR:-$root/target/registry}"
if [ "${1:-}" = "auth" ]; then
  auth=1
  port=$((port + 1))
  dir="${NEXO_REGISTRY_DIR:-$root/target/registry-auth}"
  shift
fi
address="127.0.0.1:$port"

say() { echo "registry.sh: $*" >&2; }

answering() { curl -s -o /dev/null -w '%{http_code}' "http://$address/v2/" 2>/dev/null | grep -qE '^(200|401)$'; }

if [ "${1:-}" = "stop" ]; then
  if [ -s "$dir/pid" ]; then kill "$(cat "$dir/pid")" 2>/dev/null || true; rm -f "$dir/pid"; fi
  exit 0
fi

if ! command -v docker-registry >/dev/null 2>&1; then
  . "$(dirname "$0")/apt-install.sh"
  apt_install "the registry tests" docker-registry >&2
fi
command -v curl >/dev/null 2>&1 || { . "$(dirname "$0")/apt-install.sh"; apt_install "the registry tests" curl >&2; }

if answering; then
  echo "$address"
  exit 0
fi

mkdir -p "$dir/data"
auth_section=""
if [ -n "$auth" ]; then
  # A test password, not a secret: the registry listens on loopback only.
  password="nexo-registry-test"
  if [ ! -s "$dir/htpasswd" ]; then
    python3 -c 'import crypt, sys; print("nexo:" + crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))' \
      "$password" 2>/dev/null >"$dir/htpasswd"
  fi
  echo "$password" >"$dir/password"
  auth_section="auth:
  htpasswd:
    realm: nexo-test
    path: $dir/htpasswd"
fi
cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: $address
$auth_section
YAML

say "starting a registry on $address (storage in $dir/data)"
setsid docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 </dev/null &
echo $! >"$dir/pid"
for _ in $(seq 1 100); do
  if answering; then
    echo "$address"
    exit 0
  fi
  if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then break; fi
  sleep 0.1
done
say "error: the registry did not answer on $address; see $dir/registry.log"
exit 1
