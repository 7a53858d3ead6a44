#!/usr/bin/env bash
# Installs mmidx_builder into ./.venv (with test tools and, where it can be had without a
# download of CUDA, the megatron-core oracle), then runs the main job on a small example.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[dev]"

# The differential-test oracle: megatron-core's dataset code needs torch. Only a CPU
# wheel already in the machine's wheel folder (pip's find-links) is accepted: a plain
# `pip install torch` would pull gigabytes of CUDA. Without it the oracle tests skip.
wheels=$(mktemp -d)
if .venv/bin/pip download --quiet --no-index --no-deps -d "$wheels" torch==2.13.0 2>/dev/null; then
    .venv/bin/pip install --quiet "$wheels"/torch-2.13.0*.whl packaging
    .venv/bin/pip install --quiet --no-deps megatron-core==0.16.1
else
    echo "note: no local CPU torch wheel; tests marked 'megatron' will be skipped" >&2
fi
rm -rf "$wheels"

.venv/bin/python examples/quickstart.py "${1:-example}"
