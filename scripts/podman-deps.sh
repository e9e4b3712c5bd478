#!/usr/bin/env bash
# Installs what the container sandbox's real-engine tests (sandbox/tests/podman.rs)
# need: Debian's podman (with runc and catatonit), and the image they run, built here with no
# registry: a root filesystem made of Debian's busybox-static package (unpacked
# with dpkg-deb, not installed) and given to `podman import`. Installs the
# packages with apt-get if they are missing (as root, or with sudo); otherwise
# says exactly what to install.
#
# Then it runs one container. Inside a VM without CAP_SYS_RESOURCE podman's
# default rlimits cannot be set, and crun refuses hybrid cgroups; on those
# errors it writes a containers.conf drop-in (runc, lower default ulimits) and
# tries again. It fails, with podman's message, if no container can run.
#
# Idempotent and quick when the image is there; .ci/run and `make test` call it.
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests name this image too (testkit/src/podman.rs); change both together.
IMAGE="localhost/nexo-sandbox-test:1"

missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
# The init `--init` runs as PID 1 (podman recommends it; a minimal install may lack it).
command -v catatonit >/dev/null 2>&1 || missing+=(catatonit)
if [ ${#missing[@]} -gt 0 ]; then
  . scripts/apt-install.sh
  apt_install "the container sandbox's podman tests" "${missing[@]}"
fi

if ! podman image exists "$IMAGE"; then
  echo "podman deps: building $IMAGE from Debian's busybox-static"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # apt's download sandbox user cannot write a private temporary directory.
  sandbox_user=()
  [ "$(id -u)" -eq 0 ] && sandbox_user=(-o APT::Sandbox::User=root)
  (cd "$work" && apt-get download -qq "${sandbox_user[@]}" busybox-static)
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
  root="$work/rootfs"
  mkdir -p "$root/bin" "$root/etc" "$root/tmp"
  cp "$work/deb/bin/busybox" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  tar --numeric-owner --owner=0 --group=0 -C "$root" -cf - . |
    podman import --quiet --change 'CMD ["/bin/sh"]' - "$IMAGE" >/dev/null
fi

probe() {
  podman run --rm --network none "$IMAGE" true 2>&1
}

if ! error=$(probe); then
  if ! grep -q -E 'rlimit|hybrid mode' <<<"$error"; then
    echo "error: podman cannot run a container from $IMAGE: $error" >&2
    exit 1
  fi
  if [ "$(id -u)" -eq 0 ]; then conf=/etc/containers/containers.conf.d; else
    conf="${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf.d"
  fi
  echo "podman deps: podman cannot start containers here ($error); writing $conf/nexo-tests.conf"
  mkdir -p "$conf"
  cat >"$conf/nexo-tests.conf" <<'EOF'
# Written by nexo's scripts/podman-deps.sh: without CAP_SYS_RESOURCE podman's
# default rlimits cannot be set, and crun refuses hybrid cgroups.
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]

[engine]
runtime = "runc"
EOF
  if ! error=$(probe); then
    echo "error: podman cannot run a container from $IMAGE, even with $conf/nexo-tests.conf: $error" >&2
    exit 1
  fi
fi
