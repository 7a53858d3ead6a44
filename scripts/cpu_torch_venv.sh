# Sourced by the install scripts of oracles that live in a venv of their own (fairseq,
# megatron-core 0.16.1), after they set venv, torch_version and what (the oracle's name):
# creates "$venv" if needed, sets py and pip, and fetches the CPU torch wheel from pip's local
# wheel folder into "$work" (torch_wheel; a plain `pip install torch` would pull gigabytes of
# CUDA). Without that wheel: a note, and the calling script exits 0 (the oracle's tests then
# skip, or fail under MMIDX_REQUIRE_ORACLE=1).
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip --quiet --disable-pip-version-check)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! "${pip[@]}" download --no-index --no-deps -d "$work" "torch==$torch_version" 2>/dev/null; then
    echo "note: no local CPU torch $torch_version wheel; $what is not installed" >&2
    exit 0
fi
torch_wheel=$(ls "$work"/torch-"$torch_version"*.whl)
source "$(dirname "${BASH_SOURCE[0]}")/uv.sh"
