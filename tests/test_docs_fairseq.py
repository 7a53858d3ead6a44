"""docs/fairseq.md runs as written: its bash blocks in order in an empty folder (``mmidx``
being this checkout's CLI), then its python blocks in one interpreter."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

DOC = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "fairseq.md")


def _blocks():
    text = open(DOC, encoding="utf-8").read()
    return [(m.group(1), m.group(2)) for m in re.finditer(r"```(bash|python)\n(.*?)```", text, re.S)]


def test_the_doc_has_both_kinds_of_blocks_bash_first():
    kinds = [kind for kind, _ in _blocks()]
    assert kinds.count("bash") >= 2 and kinds.count("python") >= 4
    assert kinds == sorted(kinds)   # every bash block before the python ones: they make the data


def test_docs_fairseq_blocks_run(tmp_path, torch):
    pytest.importorskip("datasets")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), os.pardir))   # this checkout's package
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, HF_DATASETS_CACHE=str(tmp_path / "hf-cache"), HF_DATASETS_OFFLINE="1", PYTHONPATH=path)
    mmidx = f'mmidx() {{ "{sys.executable}" -m mmidx_builder.cli "$@"; }}\n'
    work = tmp_path / "work"
    work.mkdir()
    python = []
    for kind, code in _blocks():
        if kind == "bash":
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", mmidx + code], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{code}\n{done.stderr}"
        else:
            python.append(code)
    done = subprocess.run([sys.executable, "-c", "\n".join(python)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch.Size" in done.stdout   # the loader served collated steps
