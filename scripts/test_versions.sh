#!/usr/bin/env bash
# The suites that depend on datasets and on the interpreter, at the edges of what
# pyproject.toml supports, each in a virtual environment of its own under .cache/versions/:
#   Python 3.10 with the oldest supported datasets (4.5.0, hf/registry.py's OLDEST_DATASETS),
#   Python 3.13 with the newest datasets release;
# (Python 3.11 with the newest datasets is the main suite's, scripts/test.sh) and
#   the core suite with no extra installed (Python 3.11): a test of an extra skips, saying which.
# Torch has no CPU wheel here for 3.10 and 3.13 (its tests skip there; CI's main suite runs them).
# Interpreters come from PATH (python3.10, python3.13) or pyenv; a missing one is skipped with a
# note. The environments are made with uv (from PyPI), which installs in seconds where pip takes
# minutes. Run by .ci/run after the main suite; by hand: bash scripts/test_versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=.cache/versions
mkdir -p "$root"
# Not MMIDX_REQUIRE_ORACLE: these environments lack torch and the oracles by design.
unset MMIDX_REQUIRE_ORACLE

if [ ! -x "$root/uv/bin/uv" ]; then
    python3 -m venv "$root/uv"
    "$root/uv/bin/python" -m pip install --quiet --disable-pip-version-check uv
fi
uv=("$root/uv/bin/uv" --quiet)

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
# On every core, a test file's tests on one worker (as scripts/test.sh runs the main suite).
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
    "${uv[@]}" pip install -p "$venv/bin/python" --upgrade -e ".[test,remote,tokenizers]" "$datasets"
    echo "== $name: $("$venv/bin/python" -c 'import sys, datasets; print(f"Python {sys.version.split()[0]}, datasets {datasets.__version__}")')"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider "${WORKERS[@]}" "${SUITES[@]}"
}

run_edge oldest 3.10 "datasets==4.5.0"
run_edge newest 3.13 "datasets"

# No extra: only the package's own dependencies, plus the test runner.
venv=$root/no-extras
python=$(find_python 3.11)
[ -x "$venv/bin/python" ] || "${uv[@]}" venv -p "${python:-python3}" "$venv"
"${uv[@]}" pip install -p "$venv/bin/python" -e . pytest pytest-xdist hypothesis
echo "== no extras: the core suite, oracle and slow tests deselected (tests of extras skip, with the reason)"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${WORKERS[@]}" -m "not oracle and not slow"
