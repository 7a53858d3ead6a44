"""Index build time and peak memory: mmidx_builder.megatron.sampling against megatron-core.

    .venv/bin/python benchmarks/bench_sampling.py                 # 5M sequences, 3 epochs, L 2048
    .venv/bin/python benchmarks/bench_sampling.py --lengths lognormal   # heavy-tailed, median 612
    .venv/bin/python benchmarks/bench_sampling.py --sequences 1000000   # a quick run

Lengths are drawn with numpy, no .bin needed: geometric (mean ~1,000 tokens, some empty
sequences) or lognormal (bench_format's heavy-tailed corpus, median 612). Every row is the
best of --repeats builds, the implementations taking turns. Rows:
  * numpy ceiling: the two RandomState shuffles alone (the part every exact
    implementation must spend, since megatron's order of random draws is the contract);
  * megatron-core: _build_document_index + helpers.build_sample_idx (C++) + _build_shuffle_index,
    as GPTDataset calls them (skipped when megatron-core is not installed);
  * mmidx_builder.build_indices.
Peak memory is tracemalloc's peak of numpy allocations during a build of its own, not timed
(numpy reports its buffers to tracemalloc; the C++ helper's array is allocated with new[] and
is invisible to it, so its row adds the sample index's size by hand): tracing every allocation
slowed this package's build, thousands of small numpy calls, 2x, and megatron-core's few large
ones not at all. "output" is the size of the three arrays returned; the goal is a peak within
2x of it.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
import tracemalloc

import numpy as np

from mmidx_builder.megatron import sampling


def timed(build):
    gc.collect()
    begin = time.perf_counter()
    result = build()
    return result, time.perf_counter() - begin


def traced_peak(build) -> int:
    """tracemalloc's peak during one build (not timed: tracing slows allocations down)."""
    gc.collect()
    tracemalloc.start()
    try:
        build()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def numpy_ceiling(num_sequences, num_epochs, total, seed):
    rng = np.random.RandomState(seed)
    document_index = np.tile(np.arange(num_sequences, dtype=np.int32), num_epochs)
    rng.shuffle(document_index)
    shuffle_index = np.arange(total, dtype=np.uint32)
    rng.shuffle(shuffle_index)
    return document_index, shuffle_index


def megatron_build(sizes, num_epochs, seq_length, seed):
    from megatron.core.datasets import helpers
    from megatron.core.datasets.gpt_dataset import _build_document_index, _build_shuffle_index

    rng = np.random.RandomState(seed)
    tokens_per_epoch = int(sizes.sum(dtype=np.int64))
    document_index = _build_document_index(np.arange(len(sizes), dtype=np.int32), num_epochs, rng, False)
    sample_index = helpers.build_sample_idx(sizes, document_index, seq_length, num_epochs, tokens_per_epoch,
                                            True, True)
    shuffle_index = _build_shuffle_index(len(sample_index) - 1, len(sample_index) - 1, rng)
    return document_index, sample_index, shuffle_index


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequences", type=int, default=5_000_000)
    parser.add_argument("--lengths", choices=("geometric", "lognormal"), default="geometric")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    if args.lengths == "lognormal":
        from bench_format import document_lengths
        sizes = document_lengths(rng, args.sequences, "lognormal").astype(np.int32)
    else:
        # Mean ~1,000 tokens, a long tail, some empty sequences: roughly what tokenised web text looks like.
        sizes = np.minimum(rng.geometric(1 / 1000, args.sequences) - 1, 2**31 - 1).astype(np.int32)
    tokens = int(sizes.sum(dtype=np.int64))
    print(f"{args.sequences:,} sequences ({args.lengths} lengths), {tokens:,} tokens, {args.epochs} epochs, "
          f"seq_length {args.seq_length}, best of {args.repeats}")

    try:
        import megatron.core.datasets.helpers  # noqa: F401
    except ImportError as error:
        print(f"(megatron-core not installed: {error}; its row is skipped)")
        have_megatron = False
    else:
        have_megatron = True
    best = {}  # name -> (seconds, peak, result)

    def keep(name, build, extra_bytes=lambda result: 0):
        result, seconds = timed(build)
        old = best.get(name)
        peak = old[1] if old else traced_peak(build) + extra_bytes(result)
        best[name] = (min(seconds, old[0]) if old else seconds, peak, result)

    for _ in range(args.repeats):
        keep("ours", lambda: sampling.build_indices(sizes, seq_length=args.seq_length, seed=args.seed,
                                                    num_epochs=args.epochs))
        total = best["ours"][2].total_samples
        keep("ceiling", lambda: numpy_ceiling(len(sizes), args.epochs, total, args.seed))
        if have_megatron:
            # The C++ helper's sample index is allocated with new[], invisible to tracemalloc.
            keep("megatron", lambda: megatron_build(sizes, args.epochs, args.seq_length, args.seed),
                 lambda result: result[1].nbytes)
    ours_s, ours_peak, ours = best["ours"]
    ceiling_s = best["ceiling"][0]
    output = ours.document_index.nbytes + ours.sample_index.nbytes + ours.shuffle_index.nbytes
    rows = [("numpy shuffles only (ceiling)",) + best["ceiling"][:2]]
    megatron = None
    if have_megatron:
        megatron_s, megatron_peak, megatron = best["megatron"]
        rows.append(("megatron-core (C++ sample index)", megatron_s, megatron_peak))
    rows.append(("mmidx_builder.build_indices", ours_s, ours_peak))

    if megatron is not None:
        same = all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in
                   zip((ours.document_index, ours.sample_index, ours.shuffle_index), megatron))
        print(f"identical arrays: {same}")
    print(f"output arrays: {output / 2**20:,.0f} MiB ({ours.total_samples:,} samples)")
    print()
    print(f"{'':36} {'seconds':>8} {'x ceiling':>9} {'peak MiB':>9} {'peak/output':>11}")
    for name, seconds, peak in rows:
        print(f"{name:36} {seconds:8.2f} {seconds / ceiling_s:9.2f} {peak / 2**20:9.0f} {peak / output:11.2f}")
    if megatron is not None:
        print(f"\nmmidx_builder / megatron-core: time {ours_s / megatron_s:.2f}x, peak memory "
              f"{ours_peak / megatron_peak:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
