#!/usr/bin/env bash
# Try crow fully offline against a real llama.cpp server with a tiny model (what `crow run --local` does).
#
#   scripts/llama-server.sh            build or reuse llama-server, install the model, start the server on
#                                      127.0.0.1 on a free port, print its base URL on stdout once it is
#                                      healthy, and keep serving until interrupted (Ctrl-C / SIGTERM).
#   scripts/llama-server.sh prepare    build or reuse the server and install the model; print nothing else.
#   scripts/llama-server.sh check      exit 0 when the cached server binary and model are present (no work).
#   scripts/llama-server.sh paths      print the binary, model and chat template paths.
#
# The work is done by crow_cli/local.py (`python -m crow_cli.local`, standard library only), so that an
# installed crow finds it too; this wrapper runs it from the checkout, with the checkout's .venv when there
# is one. Cache: ${CROW_LLAMA_CACHE:-~/.cache/crow}. Environment: CROW_LLAMA_PORT, CROW_LLAMA_MAX_TOKENS
# (server-side cap per reply, default 96), CROW_LLAMA_JOBS (build parallelism). Progress and server logs go
# to stderr / the log file; stdout carries only the base URL.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py=python3
if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; fi
export CROW_LLAMA_CACHE="${CROW_LLAMA_CACHE:-$HOME/.cache/crow}"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m crow_cli.local "$@"
