#!/usr/bin/env bash
# Installs fairseq 0.12 (the `fairseq-fixed` 0.12.3.1 release, which builds on Python
# 3.11) into its own virtual environment (default .venv-fairseq), the oracle of the
# fairseq differential tests (tests/fairseq_oracle.py runs under it in a subprocess).
#   - its own venv: fairseq pins hydra-core/omegaconf and pulls torchaudio and
#     scikit-learn, none of which the project's venv should carry;
#   - only a CPU torch 2.13.0 wheel already in pip's local wheel folder is accepted (a
#     plain `pip install torch` would pull gigabytes of CUDA); without it, a note and exit 0
#     (the fairseq tests then skip, or fail under MMIDX_REQUIRE_ORACLE=1);
#   - fairseq compiles C++/Cython extensions against torch (a minute or two): the built wheel is
#     kept in this script's own cache folder, keyed by Python and torch version, so a
#     second run on the same machine only installs.
# Idempotent: a venv that already imports this fairseq and its Cython helpers is left alone.
set -euo pipefail
venv=${1:-.venv-fairseq}
version=0.12.3.1
torch_version=2.13.0
cache=${MMIDX_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mmidx-ci}/wheels

# Without importing fairseq (seconds): its version and its compiled batch_by_size on disk.
if [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$version" 2>/dev/null <<'PY'
import sys, importlib.metadata as m
files = m.files("fairseq-fixed") or []
compiled = [f for f in files if f.name.startswith("data_utils_fast.") and f.name.endswith(".so")]
sys.exit(m.version("fairseq-fixed") != sys.argv[1] or not any(f.locate().exists() for f in compiled))
PY
then
    exit 0  # already there
fi

what="the fairseq oracle"
source "$(dirname "$0")/cpu_torch_venv.sh"
"${uv_pip[@]}" -p "$py" "$torch_wheel" cython numpy setuptools wheel

tag=$("$py" -c "import sys; print(f'cp{sys.version_info.major}{sys.version_info.minor}')")
wheels="$cache/fairseq-$version-$tag-torch$torch_version"
if ! ls "$wheels"/fairseq_fixed-"$version"-*.whl >/dev/null 2>&1; then
    # Built from its sdist against the torch just installed, hence no build isolation, with
    # the extensions the oracle imports: fairseq.data's two Cython helpers (batch_by_size,
    # token blocks) and libbleu. setup.py's three torch C++ extensions (libbase, libnat,
    # alignment_train: imported lazily, by models and scorers the tests never touch) took ~4 of
    # the build's ~6 minutes on 2 cores; they are cut from the unpacked setup.py.
    "${pip[@]}" download --no-deps --no-binary :all: --no-build-isolation -d "$work/sdist" "fairseq-fixed==$version"
    tar -xzf "$work"/sdist/fairseq_fixed-"$version".tar.gz -C "$work"
    "$py" - "$work/fairseq_fixed-$version/setup.py" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
torch_block = re.compile(r"\nextensions\.extend\(\n    \[\n        cpp_extension\.CppExtension\(.*?\n\)\n", re.S)
cut, found = torch_block.subn("\n", text, count=1)
assert found == 1, f"{path}: the block of torch C++ extensions was not found where 0.12.3.1 has it"
open(path, "w").write(cut)
PY
    "${pip[@]}" wheel --no-deps --no-build-isolation -w "$work/built" "$work/fairseq_fixed-$version"
    mkdir -p "$wheels"
    for built in "$work"/built/fairseq_fixed-*.whl; do
        cp "$built" "$wheels/.$(basename "$built").tmp-$$"
        mv "$wheels/.$(basename "$built").tmp-$$" "$wheels/$(basename "$built")"  # atomic
    done
fi
"${uv_pip[@]}" -p "$py" "$wheels"/fairseq_fixed-"$version"-*.whl "$torch_wheel"

"$py" - <<'PY'
import logging; logging.disable(logging.WARNING)  # fairseq's import logs optional extras
import numpy as np
from fairseq.data import data_utils
# Four sentences of 3 tokens fit 12 tokens; a multiple of 2 keeps that.
batches = data_utils.batch_by_size(np.arange(6), lambda i: 3, max_tokens=12,
                                   required_batch_size_multiple=2)
assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5]], batches
PY
