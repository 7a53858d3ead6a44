"""Hundreds of prefixes within the file limit (issue 31, item 4): descriptors per prefix are
bounded (the pool of open files in storage/mapped.py parks the least recently read; cached
index arrays are maps that hold no descriptor), a blend past ``ulimit -n`` files loads and
streams, hitting the limit anyway is a typed error naming it, and nothing is printed at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.storage import mapped

ROOT = Path(__file__).resolve().parents[1]


def _prefixes(folder: Path, count: int) -> list[str]:
    rng = np.random.default_rng(0)
    return [write_documents(folder / f"p{k:04d}_text_document", [rng.integers(0, 100, size=40) for _ in range(12)],
                            dtype=np.uint16) for k in range(count)]


def _descriptors_by_prefix() -> dict[str, int]:
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith((".bin", ".idx", ".npy")):
            found[target] = found.get(target, 0) + 1
    by_prefix = {}
    for target, count in found.items():
        key = target.rsplit(".", 1)[0] if not target.endswith(".npy") else "index cache"
        by_prefix[key] = by_prefix.get(key, 0) + count
    return by_prefix


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_descriptors_per_prefix_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(mapped._POOL, "limit", 16)
    prefixes = _prefixes(tmp_path / "data", 60)
    for warm in (False, True):  # the first builds the index caches, the second maps them
        stream = load_dataset("mmidx", data_path=prefixes, split_ratios="1,0,0", seq_length=16, streaming=True,
                              cache_dir=str(tmp_path / "cache"), split="train")
        rows, read_from = 0, set()
        for row in stream:
            rows += 1
            read_from.add(row["dataset_id"])
            if rows % 50 == 0:
                held = _descriptors_by_prefix()
                assert "index cache" not in held, held  # cached arrays are maps without a descriptor
                assert max(held.values(), default=0) <= 2, held  # a .bin: its descriptor and its map's
                # 16 files of two descriptors, and a few maps whose views the collector has yet
                # to free (earlier tests' files, a map closed while a view was alive)
                assert sum(held.values()) <= 2 * 16 + 8, held
        assert read_from == set(range(60)), (warm, sorted(read_from))


def _child(code: str, nofile: int, **env) -> subprocess.CompletedProcess:
    prelude = f"import resource\nresource.setrlimit(resource.RLIMIT_NOFILE, ({nofile}, {nofile}))\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=900)


def test_a_blend_of_more_files_than_the_limit_streams_and_exits_without_a_traceback(tmp_path):
    """300 prefixes (600 files) under ``ulimit -n 256``: as 1,000 prefixes under 1,024."""
    prefixes = _prefixes(tmp_path / "data", 300)
    result = _child(f"""
        import datasets, mmidx_builder
        prefixes = {prefixes!r}
        stream = datasets.load_dataset("mmidx", data_path=prefixes, split_ratios="1,0,0", seq_length=16,
                                       streaming=True, cache_dir={str(tmp_path / "cache")!r}, split="train")
        ids = set()
        for row in stream:
            ids.add(row["dataset_id"])
        print("PREFIXES", len(ids))
        """, nofile=256)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "PREFIXES 300" in result.stdout  # every prefix was read from
    assert "Traceback" not in result.stderr and "Exception ignored" not in result.stderr, result.stderr[-3000:]


def test_hitting_the_limit_anyway_is_a_typed_error_naming_it(tmp_path):
    prefixes = _prefixes(tmp_path / "data", 60)
    result = _child(f"""
        import datasets, mmidx_builder
        from mmidx_builder.errors import MMIdxError
        try:
            stream = datasets.load_dataset("mmidx", data_path={prefixes!r}, split_ratios="1,0,0", seq_length=16,
                                           streaming=True, split="train")
            for row in stream:
                pass
        except MMIdxError as error:
            print("REFUSED", type(error).__name__, error)
        """, nofile=60, MMIDX_MAX_OPEN_FILES="1000")
    assert "REFUSED OpenFilesLimitError" in result.stdout, (result.stdout, result.stderr[-3000:])
    assert "limit of 60 open files" in result.stdout and "ulimit -n" in result.stdout
    assert "MMIDX_MAX_OPEN_FILES" in result.stdout
