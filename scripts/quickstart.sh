#!/usr/bin/env bash
# Command 1 of the README: installs mmidx_builder, without extras, into ./.venv and runs the
# example (examples/quickstart.py) on a small corpus it writes into DIR (default ./example).
# Under a minute. What the tests need besides (the test tools, the
# optional extras, the megatron-core and fairseq oracles) is command 2's: scripts/test.sh.
# Idempotent. PYTHON picks the interpreter (default python3; 3.10 or newer).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

if [ ! -x .venv/bin/python ]; then
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
        echo "mmidx_builder needs Python 3.10 or newer; $python is $("$python" -V 2>&1). Set PYTHON=python3.11 (say)." >&2
        exit 1
    }
    "$python" -m venv .venv
fi
# An editable install of pyproject.toml needs pip 21.3 or newer (Python 3.10.0 shipped 21.2).
# Through uv (scripts/uv.sh: fetched from PyPI once; seconds where pip takes most of a minute).
# uv compiles no .pyc: the modules the example imports are compiled as it imports them, once,
# even where PYTHONDONTWRITEBYTECODE is set (else every run would compile them again).
source scripts/uv.sh
"${uv_pip[@]}" -p .venv/bin/python -e .
unset PYTHONDONTWRITEBYTECODE

.venv/bin/python examples/quickstart.py "${1:-example}"
