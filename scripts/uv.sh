# Sourced by the install scripts: puts uv (from PyPI) in .cache/uv once and sets `uv_pip`, the
# command that installs into a venv's python (and `uv`, the tool itself). uv resolves and
# installs in seconds where pip takes minutes (pip's resolver, and its unzip of each wheel:
# torch's three times, once per oracle venv); uv's cache (~/.cache/uv) unpacks a wheel once
# and links it into every venv after.
# pip stays where uv has no equivalent: `pip download` from pip's configured local wheel folder
# (the CPU torch wheel) and `pip wheel` of an sdist against the venv's own torch.
#   source scripts/uv.sh; "${uv_pip[@]}" -p .venv/bin/python numpy
_uv_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cache/uv
if [ ! -x "$_uv_root/bin/uv" ]; then
    mkdir -p "$(dirname "$_uv_root")"
    # Two scripts may start at once (test.sh installs oracles in the background): one builds.
    ( flock 9
      if [ ! -x "$_uv_root/bin/uv" ]; then
          rm -rf "$_uv_root.tmp" && python3 -m venv "$_uv_root.tmp"
          "$_uv_root.tmp/bin/python" -m pip install --quiet --disable-pip-version-check uv
          mv "$_uv_root.tmp" "$_uv_root"  # whole or absent (bin/uv is a native binary: it moves)
      fi
    ) 9>"$_uv_root.lock"
fi
uv=("$_uv_root/bin/uv" --quiet)
# No .pyc is compiled at install (pip compiles every module; uv, by default, none): the test
# scripts unset PYTHONDONTWRITEBYTECODE, so the modules the tests import are compiled once, on
# first import, and the rest of transformers, botocore... never (a minute saved on 2 cores).
uv_pip=("${uv[@]}" pip install)
