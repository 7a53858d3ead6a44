#!/usr/bin/env bash
# Installs the differential-test oracle into the given virtual environment (default .venv):
# megatron-core 0.19.2 (GPTDataset, BlendedDataset, tokenizers, inter_document_masking) on
# CPU torch 2.13.0, the route shared/MEGATRON_CORE.md measured for Python 3.11:
#   - only a CPU torch wheel already in pip's local wheel folder is accepted (a plain
#     `pip install torch` would pull gigabytes of CUDA); without it the oracle is skipped;
#   - 0.17+ publishes cp312 wheels only: the pure-Python wheel is re-tagged for this Python;
#   - its C++ helpers (helpers_cpp) are compiled here as its wheels are built (setuptools
#     passes -DNDEBUG: the asserts on seq_length > 1 are off in the shipped binaries);
#   - `import megatron.core` imports triton unconditionally: the plain wheel, no deps.
set -euo pipefail
venv=${1:-.venv}
py="$venv/bin/python"
pip="$venv/bin/pip"
version=0.19.2

if "$py" -c "import megatron.core, sys; sys.exit(megatron.core.__version__ != '$version')" 2>/dev/null \
   && "$py" -c "from megatron.core.datasets import helpers_cpp" 2>/dev/null; then
    exit 0  # already there
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "$pip" download --quiet --no-index --no-deps -d "$work" torch==2.13.0 2>/dev/null; then
    echo "note: no local CPU torch wheel; tests marked 'megatron' will be skipped" >&2
    exit 0
fi
source "$(dirname "$0")/uv.sh"
"${uv_pip[@]}" -p "$py" "$work"/torch-2.13.0*.whl numpy packaging pybind11 wheel
"${uv_pip[@]}" -p "$py" --no-deps triton==3.9.0
"$pip" download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --abi cp312 --platform manylinux_2_28_x86_64 "megatron-core==$version" -d "$work/w"
tag=$("$py" -c "import sys; print(f'cp{sys.version_info.major}{sys.version_info.minor}')")
"$py" -m wheel tags --python-tag "$tag" --abi-tag "$tag" --remove "$work"/w/megatron_core-*.whl >/dev/null
# pip: uv has no --ignore-requires-python (the wheel says Python >= 3.12; it runs on 3.10+)
"$pip" install --quiet --no-deps --ignore-requires-python "$work"/w/megatron_core-*"$tag"*.whl
datasets_dir=$("$py" -c "import os, megatron.core.datasets as d; print(os.path.dirname(d.__file__))")
suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
g++ -O3 -DNDEBUG -Wall -shared -std=c++17 -fPIC $("$py" -m pybind11 --includes) \
    "$datasets_dir/helpers.cpp" -o "$datasets_dir/helpers_cpp$suffix"
"$py" - <<'PY'
import warnings; warnings.simplefilter('ignore')
from megatron.core.datasets import helpers
import numpy as np
sizes = np.array([20, 50, 60, 30, 100, 5], np.int32)
out = helpers.build_sample_idx(sizes, np.arange(6, dtype=np.int32), 30, 1, 265, True, 1)
assert out.tolist() == [[0,0],[1,10],[1,40],[2,20],[2,50],[3,20],[4,20],[4,50],[4,80]], out.tolist()
PY
