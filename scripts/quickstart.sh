#!/usr/bin/env bash
# Installs mmidx_builder into ./.venv (with test tools and, where it can be had without a
# download of CUDA, the megatron-core oracle), then runs the main job on a small example.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
.venv/bin/pip install --quiet -e ".[dev]"

# The differential-test oracle (megatron-core 0.19.2 on CPU torch; see the script for why
# each step). Without a local CPU torch wheel it is skipped and so are the oracle tests.
bash scripts/install_oracle.sh .venv
bash scripts/install_oracle_extras.sh .venv
# megatron-core 0.16.1 beside it, for Megatron-LM's own tools/preprocess_data.py (core_v0.16.1).
bash scripts/install_preprocess_data_oracle.sh .venv
bash scripts/install_training_test_deps.sh .venv
# fairseq itself, for the max_tokens batch tests: its own venv (about 4 minutes the first
# time on a machine, seconds after that: the built wheel is cached).
bash scripts/install_fairseq_oracle.sh .venv-fairseq
# megatron-core 0.16.1, with Megatron-LM core_v0.16.1 the older oracle of the Megatron-LM
# differential test (the newer, 0.19.2, is in .venv): its own venv, about 30 s.
bash scripts/install_megatron016_oracle.sh .venv-megatron016

.venv/bin/python examples/quickstart.py "${1:-example}"
