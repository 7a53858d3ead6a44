#!/usr/bin/env bash
# Command 2 of the README: installs what the tests need into ./.venv (made by command 1,
# scripts/quickstart.sh, or here if missing) and runs the whole suite. Arguments go to pytest:
#   bash scripts/test.sh                          # everything
#   bash scripts/test.sh tests/test_registry.py -x
#   MMIDX_TEST_WORKERS=0 bash scripts/test.sh     # one process (default: a worker per core)
# Installs: the package with its test and optional extras ([dev]) and, where a CPU torch wheel
# is in pip's local wheel folder, the differential-test oracles (docs/testing.md): megatron-core
# 0.19.2 in .venv with its tokenizer extras, megatron-core 0.16.1 for preprocess_data.py,
# torchdata and accelerate, mosaicml-streaming 0.13.0 and Composer 0.9.0's legacy streaming,
# fairseq in .venv-fairseq (2 minutes the first time, its wheel cached after), megatron-core
# 0.16.1 in .venv-megatron016. Without that wheel the oracles' tests skip,
# except under MMIDX_REQUIRE_ORACLE=1 (CI), where they fail.
# Idempotent: once everything is installed, a second run goes straight to the tests (the
# record is .venv/.mmidx-test-deps, the sha256 of pyproject.toml and these scripts).
set -euo pipefail
cd "$(dirname "$0")/.."
# Where PYTHONDONTWRITEBYTECODE is set (this machine sets it), no .pyc would ever be written
# for what uv installed (scripts/uv.sh), and every test process would compile torch's and
# megatron-core's sources again on import (~20 s each): here they are written once.
unset PYTHONDONTWRITEBYTECODE
python=${PYTHON:-python3}

[ -x .venv/bin/python ] || "$python" -m venv .venv
record=.venv/.mmidx-test-deps
wanted=$(cat pyproject.toml scripts/test.sh scripts/install_*.sh scripts/cpu_torch_venv.sh scripts/uv.sh | sha256sum | cut -d' ' -f1)
if [ "$(cat "$record" 2>/dev/null)" != "$wanted" ]; then
    # The oracles in venvs of their own install meanwhile (fairseq compiles for minutes the
    # first time): each in the background, its output kept, its failure failing this script.
    logs=$(mktemp -d)
    bash scripts/install_fairseq_oracle.sh .venv-fairseq > "$logs/fairseq" 2>&1 & fairseq=$!
    bash scripts/install_megatron016_oracle.sh .venv-megatron016 > "$logs/megatron016" 2>&1 & megatron016=$!
    source scripts/uv.sh
    "${uv_pip[@]}" -p .venv/bin/python -e ".[dev]"
    bash scripts/install_oracle.sh .venv
    bash scripts/install_oracle_extras.sh .venv
    bash scripts/install_preprocess_data_oracle.sh .venv
    bash scripts/install_training_test_deps.sh .venv
    bash scripts/install_mosaic_oracle.sh .venv
    for job in fairseq megatron016; do
        if ! wait "${!job}"; then
            cat "$logs/$job" >&2
            echo "test.sh: installing the $job oracle failed (its output is above)" >&2
            exit 1
        fi
        cat "$logs/$job"
    done
    rm -rf "$logs"
    echo "$wanted" > "$record"
fi

# On every core (pytest-xdist); a test file's tests stay on one worker, so its module
# fixtures (an oracle's build, a server) are made once. MMIDX_TEST_WORKERS=0: one process.
.venv/bin/python -m pytest -q -n "${MMIDX_TEST_WORKERS:-auto}" --dist loadfile "$@"
