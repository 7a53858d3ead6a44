"""Builder throughput and memory against a memmap ceiling measured in the same run.

    .venv/bin/python benchmarks/bench_builder.py [--tokens 200e6] [--lengths lognormal|uniform] [--workdir DIR]

Rows (tokens/s, and the ratio to the ceiling):
  ceiling              numpy memmap slicing of sample windows into a preallocated array (the
                       issue's ceiling), and the same through a plain ndarray view of the map
  download_and_prepare the Arrow cache written by load_dataset (goal >= 0.4x)
  cached read          the prepared dataset, numpy format with the file dtype, batches of 1,000 (goal >= 1x)
  streaming            streaming=True, arrow-format batches of 1,000 converted to numpy (goal >= 0.5x)
and the anonymous (heap) memory of the process while streaming, sampled every batch
(goal: flat, under 300 MB), which excludes the page cache of the memory-mapped files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

import numpy as np

from bench_format import LENGTH_DISTRIBUTIONS, make_corpus  # corpora generated once per workdir

SEQ_LENGTH = 2048
BATCH = 1000


def rss_anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def ceiling(prefix: str, num_samples: int, plain_view: bool) -> float:
    """Random sample windows copied into a preallocated batch. ``plain_view`` slices an
    ndarray view of the map instead of the ``np.memmap`` object, whose per-slice Python
    overhead makes it about 3x slower (both are zero-copy maps of the same file)."""
    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    if plain_view:
        tokens = tokens.view(np.ndarray)
    starts = np.random.default_rng(1).integers(0, len(tokens) - SEQ_LENGTH - 1, size=num_samples)
    out = np.empty((BATCH, SEQ_LENGTH + 1), np.uint16)
    t = time.perf_counter()
    for i, start in enumerate(starts.tolist()):
        out[i % BATCH] = tokens[start:start + SEQ_LENGTH + 1]
    return num_samples * (SEQ_LENGTH + 1) / (time.perf_counter() - t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=200e6)
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    parser.add_argument("--lengths", choices=LENGTH_DISTRIBUTIONS, default="lognormal",
                        help="document lengths: heavy-tailed (the main case) or uniform 1-2000")
    args = parser.parse_args()

    import datasets
    import mmidx_builder  # noqa: F401  registers the builder

    datasets.disable_progress_bars()
    prefix = make_corpus(args.workdir, int(args.tokens), args.lengths)
    cache = os.path.join(args.workdir, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    kwargs = dict(data_files={"train": prefix + ".bin"}, seq_length=SEQ_LENGTH, seed=1234, cache_dir=cache,
                  split="train")

    rows = []
    # Build the sampling indices once so that no row below pays for them.
    next(iter(datasets.load_dataset("mmidx", streaming=True, **kwargs)))
    ceiling_rate = ceiling(prefix, 200_000, plain_view=False)
    fast_ceiling = ceiling(prefix, 200_000, plain_view=True)
    rows.append(("ceiling: np.memmap window slicing", ceiling_rate))
    rows.append(("ceiling: ndarray view of the map", fast_ceiling))

    t = time.perf_counter()
    ds = datasets.load_dataset("mmidx", **kwargs)
    total_tokens = len(ds) * (SEQ_LENGTH + 1)
    rows.append(("download_and_prepare (Arrow cache)", total_tokens / (time.perf_counter() - t)))

    t = time.perf_counter()
    seen = 0
    for batch in ds.with_format("numpy", dtype=np.uint16).iter(BATCH):
        seen += batch["input_ids"].size
    rows.append(("cached read, numpy uint16, batches of 1000", seen / (time.perf_counter() - t)))

    memory = []
    t = time.perf_counter()
    seen = 0
    for batch in datasets.load_dataset("mmidx", streaming=True, **kwargs).with_format("arrow").iter(BATCH):
        array = batch.column("input_ids").combine_chunks()
        values = array.values.to_numpy(zero_copy_only=False).reshape(len(array), -1)
        seen += values.size
        memory.append(rss_anon_mb())
    rows.append(("streaming, arrow batches -> numpy", seen / (time.perf_counter() - t)))

    print(f"\n{args.lengths} document lengths; {len(ds):,} samples of {SEQ_LENGTH + 1} tokens, {total_tokens / 1e6:,.0f}M tokens "
          f"(.bin {os.path.getsize(prefix + '.bin') / 2**20:,.0f} MiB)\n")
    print(f"| {'path':<44} | {'M tokens/s':>10} | {'x memmap ceiling':>16} | {'x view ceiling':>14} |")
    print(f"|{'-' * 46}|{'-' * 12}|{'-' * 18}|{'-' * 16}|")
    for name, rate in rows:
        print(f"| {name:<44} | {rate / 1e6:>10,.0f} | {rate / ceiling_rate:>16.2f} | {rate / fast_ceiling:>14.2f} |")
    quarter = max(1, len(memory) // 4)
    print(f"\nstreaming heap (RssAnon) MB: first quarter max {max(memory[:quarter]):.0f}, "
          f"last quarter max {max(memory[-quarter:]):.0f}, overall max {max(memory):.0f}")


if __name__ == "__main__":
    main()
