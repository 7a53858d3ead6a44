#!/usr/bin/env bash
# Optional test dependencies of the training helpers: torchdata's StatefulDataLoader, and
# accelerate (with psutil, its one dependency not already here), which transformers' Trainer
# needs for the Trainer recipe the docs run (the `trainer` extra). Installed without dependencies, after the oracle script put the CPU torch wheel in
# place, so that pip cannot pull a CUDA build of torch. Without torch there is nothing to do.
set -euo pipefail
venv=${1:-.venv}
if ! "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "note: torch is not installed; torchdata is not needed" >&2
    exit 0
fi
source "$(dirname "$0")/uv.sh"
"${uv_pip[@]}" -p "$venv/bin/python" --no-deps "torchdata==0.11.0" "accelerate==1.15.0" "psutil"
