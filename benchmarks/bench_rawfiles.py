"""Tokens/s of concat-style sample assembly from raw files, n_bytes 1, 2, 3 and 4,
against the ceiling measured in the same run: slicing a numpy memmap of the same tokens
already decoded (what a .bin would hold).

    .venv/bin/python benchmarks/bench_rawfiles.py [--files 600] [--mean-kb 96] [--seq-length 2048]

Samples are Megatron-style windows of seq_length + 1 tokens over the files' token stream
(each file's tokens then EOF), visited in a shuffled order; when mmidx_builder.megatron.sampling is
there its build_indices / assemble_samples make them, else the same windows are cut here.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter
from mmidx_builder.sources.raw import RawFiles

from bench_format import best_of  # fastest of several timings

try:
    from mmidx_builder.megatron import sampling
    HAVE_SAMPLING = hasattr(sampling, "build_indices") and hasattr(sampling, "assemble_samples")
except ImportError:
    HAVE_SAMPLING = False


def window_pieces(lengths: np.ndarray, window_starts: np.ndarray, window: int):
    """(sequence ids, offsets, piece lengths) of windows over the concatenated sequences."""
    bounds = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    first = np.searchsorted(bounds, window_starts, side="right") - 1
    last = np.searchsorted(bounds, window_starts + window - 1, side="right") - 1
    counts = last - first + 1
    sequence = np.repeat(first, counts) + (np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts))
    begin = np.maximum(bounds[sequence], np.repeat(window_starts, counts))
    end = np.minimum(bounds[sequence + 1], np.repeat(window_starts + window, counts))
    return sequence, begin - bounds[sequence], end - begin


def timed(function, repeat=3) -> float:
    function()  # warm the page cache and the code paths
    return best_of(repeat, function)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=600)
    parser.add_argument("--mean-kb", type=float, default=96)
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--samples", type=int, default=4000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        sizes = rng.integers(1, int(2 * args.mean_kb * 1024), args.files)
        paths = []
        for i, size in enumerate(sizes):
            path = os.path.join(folder, f"f{i:05d}")
            with open(path, "wb") as f:
                f.write(rng.integers(0, 256, int(size), dtype=np.uint8).tobytes())
            paths.append(path)
        how = "sampling.assemble_samples" if HAVE_SAMPLING else "windows cut here (no sampling module)"
        print(f"{args.files} files, {sizes.sum() / 2**20:.0f} MiB, seq_length {args.seq_length}, "
              f"{args.samples} shuffled samples, {how}")
        for n_bytes in (1, 2, 3, 4):
            raw = RawFiles(paths, n_bytes)
            # The same tokens decoded once into a .bin: the memmap ceiling and the Megatron path.
            with IndexedFileWriter(os.path.join(folder, f"decoded{n_bytes}"), dtype=raw.dtype) as writer:
                for i in range(len(paths)):
                    writer.add_document(raw.sequence(i))
            indexed = IndexedFile.open(os.path.join(folder, f"decoded{n_bytes}"))
            ceiling = np.memmap(indexed.bin_path, raw.dtype, "r")
            window = args.seq_length + 1
            if HAVE_SAMPLING:
                indices = sampling.build_indices(raw.sequence_lengths, seq_length=args.seq_length, seed=1234,
                                                 num_epochs=1)
                count = min(args.samples, sampling.count_samples(raw.num_tokens, seq_length=args.seq_length,
                                                                 num_epochs=1)[1])
                ids = np.random.default_rng(1).permutation(count)

                def from_raw():
                    return sampling.assemble_samples(raw, indices, ids)

                def from_bin():
                    return sampling.assemble_samples(indexed, indices, ids)
            else:
                count = min(args.samples, raw.num_tokens // args.seq_length)
                starts = rng.permutation(raw.num_tokens // args.seq_length)[:count] * args.seq_length
                starts = starts[starts + window <= raw.num_tokens]
                pieces = window_pieces(raw.sequence_lengths.astype(np.int64), starts, window)

                def from_raw():
                    return raw.read_pieces(*pieces)

                def from_bin():
                    return indexed.read_pieces(*pieces)
                count = len(starts)
            ceiling_starts = rng.permutation(len(ceiling) // args.seq_length - 1)[:count] * args.seq_length
            out = np.empty((count, window), raw.dtype)

            def from_memmap():
                for k, s in enumerate(ceiling_starts.tolist()):
                    out[k] = ceiling[s:s + window]
                return out

            tokens = count * window
            t_ceiling, t_bin, t_raw = timed(from_memmap), timed(from_bin), timed(from_raw)
            rows.append((n_bytes, raw.dtype.name, tokens / t_ceiling, tokens / t_bin, tokens / t_raw))
            del ceiling, indexed
    print(f"\n{'n_bytes':>7} {'dtype':>6} {'memmap ceiling':>16} {'.bin (IndexedFile)':>19} {'raw files':>14} "
          f"{'raw/ceiling':>12}")
    for n_bytes, dtype, ceiling, from_bin, from_raw in rows:
        print(f"{n_bytes:>7} {dtype:>6} {ceiling / 1e6:>12.1f} M/s {from_bin / 1e6:>15.1f} M/s "
              f"{from_raw / 1e6:>10.1f} M/s {from_raw / ceiling:>12.2f}")


if __name__ == "__main__":
    main()
