"""Data integrity (issue 25): what a damaged, truncated, replaced or concurrently written
file does. Each test fails on the code before the fix; signals and races are real (child
processes, real truncation), never simulated."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import numpy as np
import pytest

from mmidx_builder.format import IndexedFile, write_documents

# --- truncation of mapped files while streaming: a FormatError, not SIGBUS ---------------

_STREAM_THEN_TRUNCATE = """
import os, sys, numpy as np, mmidx_builder
from datasets import load_dataset
from mmidx_builder.errors import FormatError
kind, folder, victim = sys.argv[1:]
if kind == "raw":
    files = dict(data_files={"train": os.path.join(folder, "*.dat")}, n_bytes=1)
    stream = load_dataset("mmidx", **files, seq_length=64, cache_dir=folder + "-c", split="train", streaming=True,
                          num_shards=8)
else:
    stream = load_dataset(folder, seq_length=64, cache_dir=folder + "-c", split="train", streaming=True, num_shards=8)
rows = iter(stream)
next(rows)
os.truncate(victim, 100)
try:
    for _ in rows:
        pass
except FormatError as error:
    print("FormatError:", error)
"""


@pytest.mark.parametrize("kind", ["megatron", "fairseq", "raw"])
def test_truncating_a_mapped_index_or_raw_file_while_streaming_is_an_error_not_sigbus(tmp_path, kind):
    rng = np.random.default_rng(0)
    folder = tmp_path / "data"
    if kind == "raw":
        folder.mkdir()
        for i in range(40):
            (folder / f"f{i:02}.dat").write_bytes(rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes())
        victim = folder / "f07.dat"
    else:
        # Enough sequences that the index spans many pages, so a truncation loses pages still to be read.
        prefix = write_documents(folder / "train", [rng.integers(0, 60_000, 50) for _ in range(50_000)],
                                 dtype=np.uint16, flavour=kind)
        victim = prefix + ".idx"
    result = subprocess.run([sys.executable, "-c", _STREAM_THEN_TRUNCATE, kind, str(folder), str(victim)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])  # -7 was SIGBUS
    assert f"FormatError: {victim}: file size" in result.stdout and "truncated while in use" in result.stdout


# --- opening a large index costs no memory per sequence --------------------------------

def _spec_idx(path, lengths, flavour):
    """An .idx written from the spec (shared/FORMAT.md), not by the package's writer."""
    pointers = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1] * 2, out=pointers[1:])
    with open(path, "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQ", 1, 8 if flavour == "megatron" else 8, len(lengths)))
        if flavour == "megatron":
            f.write(struct.pack("<Q", len(lengths) + 1))
        f.write(lengths.astype("<i4").tobytes())
        f.write(pointers.astype("<i8").tobytes())
        if flavour == "megatron":
            f.write(np.arange(len(lengths) + 1, dtype="<i8").tobytes())


@pytest.mark.parametrize("flavour", ["megatron", "fairseq"])
def test_opening_an_index_of_4m_sequences_costs_no_memory_per_sequence(tmp_path, flavour):
    count = 1 << 22
    lengths = np.ones(count, np.int32)
    _spec_idx(tmp_path / "big.idx", lengths, flavour)
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(count * 2)  # uint16 (code 8 in both tables), sparse
    tracemalloc.start()
    try:
        indexed = IndexedFile.open(tmp_path / "big")
        tokens = indexed.num_tokens
        pieces = indexed.read_pieces([0, count - 1], [0, 0], [1, 1])
        documents = indexed.num_documents
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tokens, documents, pieces.tolist()) == (count, count, [0, 0])
    # The file is 12-20 bytes a sequence (50-84 MiB); before, opening allocated 16-32 bytes a
    # sequence beyond it (64-128 MiB). Now only the validation's bounded chunks.
    assert peak < 12 * 2**20, f"opening allocated {peak / 2**20:.1f} MiB for {count} sequences"
