#!/usr/bin/env bash
# Installs megatron-core 0.16.1 into its own virtual environment (default .venv-megatron016):
# with Megatron-LM core_v0.16.1's training code (../shared/oracles/megatron-lm/), the older of
# the two Megatron-LM oracles of tests/test_megatron_lm_oracle.py (the newer, megatron-core
# 0.19.2, is in .venv: install_oracle.sh).
#   - its own venv: one Python environment holds one megatron-core;
#   - 0.16.1 is the newest wheel built for CPython 3.11, its helpers_cpp included: no build;
#   - only a CPU torch 2.13.0 wheel already in pip's local wheel folder is accepted (a plain
#     `pip install torch` would pull gigabytes of CUDA); without it, a note and exit 0 (the
#     tests then skip, or fail under MMIDX_REQUIRE_ORACLE=1);
#   - `import megatron.core` imports triton (transformer/custom_layers): the plain wheel, no
#     deps; Megatron-LM's training package imports six, regex, yaml and pydantic.
# Idempotent: a venv that already imports this megatron-core and its helpers is left alone.
set -euo pipefail
venv=${1:-.venv-megatron016}
version=0.16.1
torch_version=2.13.0

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$version" 2>/dev/null <<'PY'
import sys, importlib.metadata as m, importlib.util as u
sys.exit(m.version("megatron-core") != sys.argv[1] or u.find_spec("pydantic") is None
         or u.find_spec("triton") is None)
PY
then
    exit 0  # already there
fi

what="megatron-core $version"
source "$(dirname "$0")/cpu_torch_venv.sh"
"${uv_pip[@]}" -p "$py" "$torch_wheel" numpy packaging typing_extensions six regex pyyaml pydantic
"${uv_pip[@]}" -p "$py" --no-deps "megatron-core==$version" triton==3.9.0

"$py" - <<'PY'
import warnings; warnings.simplefilter('ignore')
from megatron.core.datasets import helpers
import numpy as np
sizes = np.array([20, 50, 60, 30, 100, 5], np.int32)
out = helpers.build_sample_idx(sizes, np.arange(6, dtype=np.int32), 30, 1, 265, True, 1)
assert out.tolist() == [[0,0],[1,10],[1,40],[2,20],[2,50],[3,20],[4,20],[4,50],[4,80]], out.tolist()
PY
