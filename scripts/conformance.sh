#!/usr/bin/env bash
# Prove servewatch on a real vLLM: install (once, cached) the CPU build, generate the tiny model,
# and run the conformance suite. Extra arguments go to pytest (e.g. -k stall).
#   SERVEWATCH_LAB_CACHE=DIR        where the venv (~3.5 GB) and the model live
#   SERVEWATCH_RECORD_FIXTURES=DIR  also write what the suite observed there (neutral paths)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
start=$(date +%s)
"$PY" -m servewatch lab vllm --install-only
status=0
"$PY" -m pytest -m vllm tests/conformance -v -rs "$@" || status=$?
echo "conformance: $(( $(date +%s) - start )) s in total"
exit $status
