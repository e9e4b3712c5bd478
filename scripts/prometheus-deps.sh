#!/usr/bin/env bash
# Installs what the metrics test (host/tests/metrics.rs) needs: Debian's
# prometheus at /usr/bin/prometheus, which scrapes a real `nexo serve`'s
# /metrics and answers PromQL queries over its HTTP API. Installs it with
# apt-get if it is missing (as root, or with sudo); otherwise says exactly
# what to install.
#
# Idempotent and quick when it is there; .ci/run calls it. The test runs its
# own prometheus on loopback with a generated configuration (the packaged
# service is not used), and fails in CI (skips elsewhere), naming this script,
# if /usr/bin/prometheus is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/prometheus ]; then
  . scripts/apt-install.sh
  apt_install "the metrics test" prometheus
fi
