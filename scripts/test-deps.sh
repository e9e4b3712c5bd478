#!/usr/bin/env bash
# What the tests need beyond the wasm toolchain: bubblewrap, which the local
# sandbox's shell tests run commands under, and curl, git and python3, which
# the shell's network tests run inside it. Installs them with apt-get when
# running as root (or with sudo); otherwise says exactly what to install.
set -euo pipefail

needed=()
for pair in bwrap:bubblewrap curl:curl git:git python3:python3; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || needed+=("${pair#*:}")
done
if [ "${#needed[@]}" -eq 0 ]; then
  exit 0
fi
. "$(dirname "$0")/apt-install.sh"
apt_install "the shell tests" "${needed[@]}"
