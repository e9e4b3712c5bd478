#!/usr/bin/env bash
# Installs PyPI's opentelemetry-proto (the official OTLP protobuf definitions)
# into a virtualenv at target/tools/otel (override with NEXO_OTEL_TOOLS), for
# the OTLP/HTTP receiver the telemetry tests export to (testkit/otlp_receiver.py).
# Installs python3 and its venv module with apt-get first if they are missing
# (as root, or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick when the pinned version is already there; `make test`
# and .ci/run call it.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="1.45.2"
VENV="${NEXO_OTEL_TOOLS:-target/tools/otel}"

installed() {
  "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("opentelemetry-proto") != sys.argv[1])' \
    "$VERSION" >/dev/null 2>&1
}

if [ -x "$VENV/bin/python" ] && installed; then
  exit 0
fi

if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  . scripts/apt-install.sh
  apt_install "the telemetry tests' OTLP receiver" python3 python3-venv
fi

echo "otel deps: installing opentelemetry-proto $VERSION into $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet --disable-pip-version-check "opentelemetry-proto==$VERSION"
installed
echo "opentelemetry-proto $VERSION"
