#!/usr/bin/env bash
# Try crow fully offline against llama.cpp's server with a tiny model (what `crow run --local` does).
#
#   scripts/llama-server.sh            fetch the model if needed, start the server on 127.0.0.1 on a free
#                                      port, print its base URL on stdout once it listens, and keep serving
#                                      until interrupted (Ctrl-C / SIGTERM).
#   scripts/llama-server.sh prepare    check the engine and fetch the model; print nothing else.
#   scripts/llama-server.sh check      exit 0 when the engine and the cached model are present (no work).
#   scripts/llama-server.sh paths      print the model and chat template paths.
#
# The engine is the prebuilt `xllamacpp` wheel (a dependency of crow on Linux x86-64, macOS arm64 and
# Windows x86-64): nothing is compiled. The work is done by crow_cli/local.py (`python -m crow_cli.local`);
# this wrapper runs it from the checkout, with the checkout's .venv when there is one. Cache:
# ${CROW_LLAMA_CACHE:-~/.cache/crow}. Environment: CROW_LLAMA_PORT, CROW_LLAMA_MAX_TOKENS (server-side cap
# per reply, default 96), CROW_LLAMA_THREADS (generation threads, default one per core up to 4). Progress goes to stderr, the server's log to a file under the cache; stdout
# carries only the base URL.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py=python3
if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; fi
export CROW_LLAMA_CACHE="${CROW_LLAMA_CACHE:-$HOME/.cache/crow}"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m crow_cli.local "$@"
