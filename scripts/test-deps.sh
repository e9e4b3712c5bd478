#!/usr/bin/env bash
# What the tests need beyond the wasm toolchain: bubblewrap, which the local
# sandbox's shell tests run commands under. Installs it with apt-get when
# running as root (or with sudo); otherwise says exactly what to install.
set -euo pipefail

if command -v bwrap >/dev/null 2>&1; then
  exit 0
fi
if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "error: the tests need bubblewrap. Run as root: apt-get install -y bubblewrap" >&2
      exit 1
    fi
  fi
  echo "test dependencies: installing bubblewrap"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq bubblewrap
  exit 0
fi
echo "error: the tests need bubblewrap (the \`bwrap\` command); install it with your package manager" >&2
exit 1
