# Sourced by the scripts/*-deps.sh scripts: installs Debian packages with
# apt-get when running as root (or with sudo); otherwise says exactly what to
# install and fails.
#
#   apt_install "what needs them" package...
apt_install() {
  local why="$1"
  shift
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: $why needs $*; install them with your package manager" >&2
    exit 1
  fi
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "error: $why needs $*. Run as root: apt-get install -y $*" >&2
      exit 1
    fi
  fi
  echo "$why: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@"
}
