"""Files and settings that are not what they should be, met with one typed error (issue 25
items 7, 8, 13, 14, 15): never a hang, a traceback, a half-written output or a silent drop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder import provenance
from mmidx_builder.errors import FormatError, MMIdxError
from mmidx_builder.format import write_documents

DEADLINE = 120  # seconds a child may take before the test calls it hung


def _pair(folder, name="train", count=40, seed=0):
    rng = np.random.default_rng(seed)
    return write_documents(folder / name, [rng.integers(1, 60_000, n) for n in rng.integers(1, 30, count)],
                           dtype=np.uint16)


def _in_child(code: str) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter; a hang fails the test instead of stalling the suite."""
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {DEADLINE} s: hung")


# --- item 7: a hostile .mmidx-info sidecar ------------------------------------------------------

@pytest.mark.parametrize("kind, found", [("fifo", "FIFO"), ("directory", "directory"),
                                         ("deep", "nested too deeply"), ("huge", "at most")])
def test_a_hostile_sidecar_is_a_format_error_not_a_hang(tmp_path, kind, found):
    folder = tmp_path / "data"
    prefix = _pair(folder)
    sidecar = provenance.sidecar_path(prefix)
    if kind == "fifo":
        os.mkfifo(sidecar)
    elif kind == "directory":
        os.mkdir(sidecar)
    elif kind == "deep":
        with open(sidecar, "w") as f:
            f.write("[" * 200_000 + "]" * 200_000)
    else:
        with open(sidecar, "w") as f:
            f.write('{"mmidx_info": 1, "pad": "' + "x" * (2 << 20) + '"}')
    result = _in_child(f"""
        import mmidx_builder
        from datasets import load_dataset
        from mmidx_builder.errors import FormatError
        try:
            load_dataset({str(folder)!r}, seq_length=8, cache_dir={str(tmp_path / "c")!r}, split="train")
        except FormatError as error:
            print("FormatError:", error)
        """)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "FormatError:" in result.stdout and sidecar in result.stdout and found in result.stdout
