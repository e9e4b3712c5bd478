#!/usr/bin/env bash
# Makes sure a Rust toolchain that builds wasm32-wasip2 components is present.
#
# - rustup with the wasm32-wasip2 target: nothing to do.
# - otherwise Debian's rustc-web (std from source, -Zbuild-std): installs the
#   packages with apt-get when running as root (or with sudo), else prints the
#   exact command and fails.
#
# Idempotent; `make demo`, `make test` and .ci/run all call it.
set -euo pipefail

DEBIAN_PACKAGES="rustc-web cargo-web rust-web-src rust-web-llvm lld-22 wasi-libc"

rustup_ready() {
  command -v rustc >/dev/null 2>&1 || return 1
  local libdir
  libdir=$(rustc --print target-libdir --target wasm32-wasip2 2>/dev/null) || return 1
  compgen -G "$libdir/libstd-*" >/dev/null
}

debian_linker_present() {
  [ -x /usr/bin/rustc ] && [ -d /usr/lib/rustlib/src/rust/library ] && [ -d /usr/lib/wasm32-wasi ] \
    && find /usr/lib -name 'wasm-component-ld*' -type f 2>/dev/null | grep -q .
}

if rustup_ready; then
  echo "wasm toolchain: rustup (wasm32-wasip2 installed)"
  exit 0
fi
if debian_linker_present; then
  echo "wasm toolchain: Debian rustc-web"
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
      echo "error: no wasm32-wasip2 toolchain. Run as root:" >&2
      echo "  apt-get update && apt-get install -y $DEBIAN_PACKAGES" >&2
      echo "or, with rustup: rustup target add wasm32-wasip2" >&2
      exit 1
    fi
  fi
  echo "wasm toolchain: installing Debian packages: $DEBIAN_PACKAGES"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO apt-get install -y -qq $DEBIAN_PACKAGES
  if debian_linker_present; then
    echo "wasm toolchain: Debian rustc-web"
    exit 0
  fi
fi

echo "error: no Rust toolchain can build wasm32-wasip2 components here." >&2
echo "  With rustup:  rustup target add wasm32-wasip2" >&2
echo "  On Debian:    apt-get install -y $DEBIAN_PACKAGES" >&2
exit 1
