"""The format layer's speed against a numpy memmap ceiling measured in the same run.

    .venv/bin/python benchmarks/bench_format.py [--tokens 100e6] [--lengths lognormal|uniform] [--workdir /tmp/mmidx-bench]

The corpus (uint16 tokens; document lengths lognormal with median 612 tokens by default, or
uniform 1..2,000 with --lengths uniform; 100M tokens is a 200 MB .bin) is generated once and
cached under --workdir.

Rows:
  ceiling                  numpy memmap slicing of 2,049-token windows at random starts into a
                           preallocated array (tokens/s); also slicing the np.memmap object itself
  ceiling: same pieces     a plain numpy copy of the pieces read_pieces is given below (same
                           sequences, offsets, lengths, order) into a preallocated buffer: the
                           shuffled-gather limit with numpy, no bounds check (second ratio column)
  open + validate          IndexedFile.open, header to last pointer check (s per million documents)
  read_pieces              batched gather of 2,049-token samples made of several pieces, as
                           sampling makes them (tokens/s, ratio to the ceilings): memcpy out of
                           the map under a read lease (mapped.py), so a file truncated
                           meanwhile is an error, not SIGBUS
  read_pieces (kernel)     the same where no lease is granted: the kernel copies the runs out
                           of the map (process_vm_readv)
  read_pieces (pread)      the same through pread, mapped.py's way where process_vm_readv is
                           refused too
and a second table for pieces of a fixed length: read_pieces (each way) against numpy slice
copies of the same pieces from the map.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np

from mmidx_builder.storage import mapped, read_lease
from mmidx_builder.errors import MMIdxError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

WINDOW = 2049  # seq_length 2048 + 1, what one GPT sample reads
SAMPLES_PER_BATCH = 1024


@dataclass
class Row:
    name: str
    value: float
    unit: str
    ratio: float | None = None  # to the ceiling, where the unit is tokens/s
    note: str = ""
    pieces_ratio: float | None = None  # to the same-pieces ceiling


# Document lengths: real corpora are heavy-tailed (web text: lognormal-like, median ~600
# tokens, many short documents, a few very long ones); uniform lengths hide the per-piece
# gather cost and are kept only as a second case.
LENGTH_DISTRIBUTIONS = ("lognormal", "uniform")


def document_lengths(rng, count: int, distribution: str = "lognormal") -> np.ndarray:
    if distribution == "lognormal":
        return np.maximum(1, np.exp(rng.normal(np.log(612), 1.2, size=count))).astype(np.int64)
    if distribution == "uniform":
        return rng.integers(1, 2001, size=count)
    raise ValueError(f"distribution must be one of {LENGTH_DISTRIBUTIONS}, got {distribution!r}")


def make_corpus(workdir: str, tokens: int, distribution: str = "lognormal") -> str:
    prefix = os.path.join(workdir, f"bench_{distribution}_{tokens}")
    try:
        if IndexedFile.open(prefix).num_tokens >= tokens:
            return prefix
    except (MMIdxError, OSError):
        pass
    print(f"generating {tokens:,} tokens ({distribution} document lengths) under {prefix} (once) ...", flush=True)
    rng = np.random.default_rng(0)
    lengths = document_lengths(rng, tokens // 300 + 1000, distribution)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    with IndexedFileWriter(prefix, dtype=np.uint16) as writer:
        # Chunks of ~1,000 documents: one random draw each, then one add_document per document.
        for first in range(0, len(lengths), 1000):
            chunk = lengths[first:first + 1000]
            data = rng.integers(0, 50257, size=int(chunk.sum()), dtype=np.uint16)
            ends = np.cumsum(chunk)
            for begin, end in zip((ends - chunk).tolist(), ends.tolist()):
                writer.add_document(data[begin:end])
    return prefix


def best_of(repeats: int, run) -> float:
    """The shortest of ``repeats`` timings of ``run()`` (noise on a shared machine only adds)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def sample_pieces(indexed: IndexedFile, rng, count: int):
    """Pieces of ``count`` samples of WINDOW tokens, each starting at a random token of a random
    sequence and running on through the following sequences, as GPTDataset's samples do."""
    lengths = indexed.sequence_lengths.astype(np.int64)
    ids, offsets, sizes = [], [], []
    first = rng.integers(0, len(lengths) - 10, size=count)
    for sequence in first.tolist():
        offset = int(rng.integers(0, lengths[sequence]))
        need = WINDOW
        while need:
            take = min(need, int(lengths[sequence]) - offset)
            if take:
                ids.append(sequence)
                offsets.append(offset)
                sizes.append(take)
            need -= take
            sequence, offset = sequence + 1, 0
    return np.array(ids), np.array(offsets), np.array(sizes)


def fixed_pieces(indexed: IndexedFile, rng, length: int, total: int):
    long_enough = np.flatnonzero(indexed.sequence_lengths >= length)
    count = total // length
    ids = rng.choice(long_enough, size=count)
    offsets = rng.integers(0, indexed.sequence_lengths[ids] - length + 1)
    return ids, offsets, np.full(count, length)


@contextlib.contextmanager
def through_kernel(pread: bool = False):
    """mapped.py's reads where no read lease is granted: process_vm_readv, or with ``pread``
    pread, as where that call is missing or refused too. Readers opened inside take no lease."""
    saved = read_lease.USABLE, mapped._READV
    read_lease.USABLE = False
    if pread:
        mapped._READV = None
    try:
        yield
    finally:
        read_lease.USABLE, mapped._READV = saved


def slices_of(tokens: np.ndarray, indexed: IndexedFile, ids, offsets, sizes, out: np.ndarray):
    """A numpy slice copy of each piece straight from the map, into ``out``."""
    starts, lengths = (indexed.sequence_starts[ids] + offsets).tolist(), sizes.tolist()

    def run():
        position = 0
        for start, length in zip(starts, lengths):
            out[position:position + length] = tokens[start:start + length]
            position += length
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=100e6)
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", choices=LENGTH_DISTRIBUTIONS, default="lognormal",
                        help="document lengths: heavy-tailed (the main case) or uniform 1-2000")
    args = parser.parse_args()
    prefix = make_corpus(args.workdir, int(args.tokens), args.lengths)
    rows: list[Row] = []

    indexed = IndexedFile.open(prefix)
    mapped = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    # The ceiling slices a plain ndarray view of the map: slicing the np.memmap subclass pays
    # ~1 us per slice in __array_finalize__ (its own row below), which no reader needs to pay.
    tokens = mapped.view(np.ndarray)
    # Warm the page cache so that every row reads from memory, as a training epoch does.
    for begin in range(0, len(tokens), 50_000_000):
        int(tokens[begin:begin + 50_000_000][::4096].sum())
    rng = np.random.default_rng(1)

    # Ceiling: slicing WINDOW-token windows of the memmap into a preallocated batch.
    window_starts = rng.integers(0, len(tokens) - WINDOW, size=SAMPLES_PER_BATCH).tolist()
    batch = np.empty((SAMPLES_PER_BATCH, WINDOW), np.uint16)

    def ceiling():
        for row, start in enumerate(window_starts):
            batch[row] = tokens[start:start + WINDOW]

    def memmap_subclass():
        for row, start in enumerate(window_starts):
            batch[row] = mapped[start:start + WINDOW]

    ceiling_rate = SAMPLES_PER_BATCH * WINDOW / best_of(args.repeats, ceiling)
    rows.append(Row("ceiling: memmap slices of 2,049", ceiling_rate, "tokens/s", 1.0))
    rate = SAMPLES_PER_BATCH * WINDOW / best_of(args.repeats, memmap_subclass)
    rows.append(Row("  same, slicing np.memmap itself", rate, "tokens/s", rate / ceiling_rate))

    seconds = best_of(args.repeats, lambda: IndexedFile.open(prefix))
    rows.append(Row("open + validate", seconds / indexed.num_documents * 1e6, "s / M documents",
                    note=f"{indexed.num_documents:,} documents, {seconds * 1e3:.1f} ms"))

    indexed.sequence_lengths  # copied once, as sampling does before any read
    ids, offsets, sizes = sample_pieces(indexed, rng, SAMPLES_PER_BATCH)
    out = np.empty(int(sizes.sum()), np.uint16)
    pieces_rate = out.size / best_of(args.repeats, slices_of(tokens, indexed, ids, offsets, sizes, out))
    rows.append(Row("ceiling: same pieces, numpy slices", pieces_rate, "tokens/s", pieces_rate / ceiling_rate,
                    f"{len(ids) / SAMPLES_PER_BATCH:.1f} pieces per sample, mean run {sizes.mean():.0f}", 1.0))
    ways = {"read_pieces": contextlib.nullcontext, "read_pieces (kernel)": through_kernel,
            "read_pieces (pread)": lambda: through_kernel(pread=True)}
    for label, way in ways.items():
        with way():
            reader = IndexedFile.open(prefix)  # opened in the way's own state
            reader.sequence_lengths
            rate = out.size / best_of(args.repeats, lambda: reader.read_pieces(ids, offsets, sizes, out))
        rows.append(Row(label, rate, "tokens/s", rate / ceiling_rate, pieces_ratio=rate / pieces_rate))

    print_table(f"bench_format: {indexed.num_tokens:,} uint16 tokens, {indexed.num_documents:,} documents, "
                f"{SAMPLES_PER_BATCH} samples of {WINDOW} per batch", rows)

    # What each way costs against slices of the map, by piece length.
    by_length = []
    with through_kernel():
        by_kernel = IndexedFile.open(prefix)
        by_kernel.sequence_lengths
    for length in (4, 16, 64, 256, 1024, 4096):
        ids, offsets, sizes = fixed_pieces(indexed, rng, length, total=2_000_000)
        out = np.empty(int(sizes.sum()), np.uint16)
        slices = out.size / best_of(3, slices_of(tokens, indexed, ids, offsets, sizes, out))
        for label, reader, way in (("", indexed, contextlib.nullcontext), (" (kernel)", by_kernel, through_kernel)):
            with way():
                rate = out.size / best_of(3, lambda: reader.read_pieces(ids, offsets, sizes, out))
            by_length.append(Row(f"pieces of {length}: read_pieces{label}", rate, "tokens/s", rate / ceiling_rate,
                                 note=f"numpy slices of the map {slices / 1e6:,.0f} M tokens/s; "
                                      f"read_pieces{label} {rate / slices:.2f}x of them", pieces_ratio=rate / slices))
    print_table("read_pieces by piece length, against numpy slices of the same pieces from the map", by_length)


def print_table(title: str, rows: list[Row]) -> None:
    print(f"\n{title}")
    print(f"{'row':<34} {'value':>16} {'unit':<16} {'x ceiling':>9} {'x same pieces':>13}  note")
    for row in rows:
        value = f"{row.value / 1e6:,.1f} M" if row.unit == "tokens/s" else f"{row.value:.4f}"
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        pieces = f"{row.pieces_ratio:.2f}" if row.pieces_ratio is not None else ""
        print(f"{row.name:<34} {value:>16} {row.unit:<16} {ratio:>9} {pieces:>13}  {row.note}")


if __name__ == "__main__":
    main()
