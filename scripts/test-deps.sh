#!/usr/bin/env bash
# What the tests need beyond the wasm toolchain: bubblewrap, which the local
# sandbox's shell tests run commands under. Installs it with apt-get when
# running as root (or with sudo); otherwise says exactly what to install.
set -euo pipefail

if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install "the shell tests" bubblewrap
