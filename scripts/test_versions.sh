#!/usr/bin/env bash
# The suites that depend on datasets and on the interpreter, at the edges of what
# pyproject.toml supports, each in a virtual environment of its own under .cache/versions/:
#   Python 3.10 with the oldest supported datasets (4.5.0, hf/registry.py's OLDEST_DATASETS),
#   Python 3.13 with the newest datasets release;
# (Python 3.11 with the newest datasets is the main suite's, scripts/test.sh) and
#   with no extra installed (Python 3.11): the tests of the code that reaches an optional package
#   (a test of an extra skips, saying which) and the core's loading.
# Torch has no CPU wheel here for 3.10 and 3.13 (its tests skip there; CI's main suite runs them).
# Interpreters come from PATH (python3.10, python3.13) or pyenv; a missing one is skipped with a
# note. The environments are made with uv (from PyPI), which installs in seconds where pip takes
# minutes. Run by .ci/run after the main suite; by hand: bash scripts/test_versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), no .pyc would ever be written
# for what uv installed (scripts/uv.sh), and every test process would compile torch's and
# megatron-core's sources again on import (~20 s each): here they are written once.
unset PYTHONDONTWRITEBYTECODE
root=.cache/versions
mkdir -p "$root"
# Not MMIDX_REQUIRE_ORACLE: these environments lack torch and the oracles by design.
unset MMIDX_REQUIRE_ORACLE

source scripts/uv.sh

find_python() {  # find_python 3.10 -> the path of a python3.10 that runs, or nothing
    local candidate  # (a pyenv shim on PATH may name a version it will not run)
    for candidate in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null | sort -V -r) \
                     $(command -v "python$1" 2>/dev/null); do
        if "$candidate" -c 'import sys' >/dev/null 2>&1; then
            echo "$candidate"
            return
        fi
    done
}

# The test files that exercise datasets' internals and the interpreter: registration and its
# hooks, the builders, every documented block, the remote reader.
# On every core, a test file's tests on one worker, as scripts/test.sh runs them: the blocks
# of one documentation page build on each other (a later block reads what an earlier one
# wrote), and dealt one by one they landed on different workers (docs/format.md:56 found no
# data/tiny in one CI run).
WORKERS=(-n "${MMIDX_TEST_WORKERS:-auto}" --dist loadfile)

SUITES=(tests/test_registry.py tests/test_kind_settings.py tests/test_pair_paths.py tests/test_builder.py
        tests/test_docs.py tests/test_remote.py)

run_edge() {  # run_edge NAME PYTHON_VERSION DATASETS_REQUIREMENT
    local name=$1 version=$2 datasets=$3 python venv
    python=$(find_python "$version")
    if [ -z "$python" ]; then
        echo "note: no Python $version on this machine; the $name suites are not run" >&2
        return
    fi
    venv=$root/$name
    [ -x "$venv/bin/python" ] || "${uv[@]}" venv -p "$python" "$venv"
    "${uv_pip[@]}" -p "$venv/bin/python" --upgrade -e ".[test,remote,tokenizers]" "$datasets"
    echo "== $name: $("$venv/bin/python" -c 'import sys, datasets; print(f"Python {sys.version.split()[0]}, datasets {datasets.__version__}")')"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${WORKERS[@]}" "${SUITES[@]}"
}

run_edge oldest 3.10 "datasets==4.5.0"
run_edge newest 3.13 "datasets"

# No extra: only the package's own dependencies, plus the test runner. What it checks is what
# changes without an extra: the package imports and loads without any, and the code that takes
# an optional package (tokenizers, remote clients, codecs, torch...) says what to install or
# takes its other path, while the tests of an extra skip saying which. So it runs the test files
# that name an optional package (their code reaches one), and the core's import, registration
# and loading tests; a file that names none runs the very same code with or without extras,
# and runs once, in the main suite (scripts/test.sh).
OPTIONAL='importorskip|requires:|require_remote_extra|tokenizers|sentencepiece|transformers|tiktoken|nltk|aiohttp|pycurl|uvloop|s3fs|moto|trustme|torch|accelerate|zstandard|zstd|brotli|snappy|PIL|cramjam'
CORE=(tests/test_layers.py tests/test_registry.py tests/test_kind_settings.py tests/test_pair_paths.py
      tests/test_builder.py tests/test_cli_inspect.py tests/test_cli_samples.py tests/test_missing_shards.py)
mapfile -t NO_EXTRAS < <({ grep -lE "$OPTIONAL" tests/test_*.py; printf '%s\n' "${CORE[@]}"; } | sort -u)
venv=$root/no-extras
python=$(find_python 3.11)
[ -x "$venv/bin/python" ] || "${uv[@]}" venv -p "${python:-python3}" "$venv"
"${uv_pip[@]}" -p "$venv/bin/python" -e . pytest pytest-xdist hypothesis
echo "== no extras: ${#NO_EXTRAS[@]} test files (those that reach an optional package, and the core's loading), oracle and slow tests deselected"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${WORKERS[@]}" -m "not oracle and not slow" "${NO_EXTRAS[@]}"
