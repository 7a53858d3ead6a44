#!/usr/bin/env bash
# megatron-core 0.16.1 for the tests that run Megatron-LM's own tools/preprocess_data.py
# (tag core_v0.16.1, from shared/oracles/megatron-lm/): that tag's preprocess_data imports
# megatron.core.tokenizers.text.utils, which 0.19 (the venv's oracle) no longer has.
# 0.16.1 is laid over the venv with `pip install --target` and no dependencies: torch,
# transformers, tokenizers, sentencepiece and tiktoken are the venv's own, so the tokenizers
# compared are the very ones the project runs with. tests/preprocess_data_oracle.py puts the
# folder first on PYTHONPATH. A .venv-megatron016 (or MMIDX_MEGATRON016_PYTHON) holding
# megatron-core 0.16.1, transformers and tiktoken is used instead when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
target=.cache/megatron-core-0.16.1
if [ -f "$target/megatron/core/__init__.py" ]; then
    exit 0  # already there
fi
rm -rf "$target.tmp"
"$venv/bin/pip" install --quiet --no-deps --only-binary=:all: --target "$target.tmp" megatron-core==0.16.1
"$venv/bin/pip" install --quiet regex tiktoken  # gpt2_tokenization imports regex; TikTokenizer needs tiktoken
mv "$target.tmp" "$target"
