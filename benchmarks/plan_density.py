"""Requests per sample that plan_runs makes of bench_remote.py's corpus, by gather size and by
read-ahead ramp: no server, no network, only the planner over the samples' own pieces.

    .venv/bin/python benchmarks/plan_density.py [--tokens 10e6]

A gather's pieces are planned together (storage/remote/planning.py): the more of the file a
gather covers, the smaller the gaps between its pieces and the more of them one request
fetches within the byte budget. The read-ahead's ramp (hf/readahead.py) sizes the gathers of a
pass: at most READ_AHEAD_START_BYTES plus READ_AHEAD_GROWTH times what the pass has read, so
that a pass stopping anywhere fetches at most ~1.3x its samples' bytes. "ramp" rows replay a
whole pass as consecutive gathers of ``fraction`` of what the ramp allows (a stream read alone
plans half, a DataLoader worker all of it); their requests per sample are what
bench_remote.py's whole passes send (4.29 measured against 4.23 here, 10M tokens).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_remote import SAMPLE_BYTES, SEQ, make_corpus  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=10e6, help="corpus tokens (bench_remote.py's default)")
    args = parser.parse_args()

    from mmidx_builder.hf.readahead import READ_AHEAD_GROWTH, READ_AHEAD_START_BYTES
    from mmidx_builder.megatron import sampling
    from mmidx_builder.sources.indexed import IndexedFile
    from mmidx_builder.storage.remote.planning import MERGE_BUDGET, plan_runs

    prefix = make_corpus(tempfile.mkdtemp(prefix="mmidx-plan-density-"), args.tokens)
    source = IndexedFile.open(prefix)
    lengths = np.asarray(source.sequence_lengths, np.int64)
    itemsize = 2
    pointers = np.concatenate(([0], np.cumsum(lengths)[:-1])) * itemsize
    size = int(lengths.sum()) * itemsize
    indices = sampling.build_indices(source.sequence_lengths, seq_length=SEQ, seed=1234)
    samples = indices.total_samples
    ids, offsets, counts, per_sample = sampling.sample_pieces(indices, source.sequence_lengths, np.arange(samples))
    first = np.concatenate(([0], np.cumsum(per_sample)))

    def requests(begin: int, end: int, budget: float) -> int:
        piece = slice(first[begin], first[end])
        starts = pointers[ids[piece]] + offsets[piece] * itemsize
        return len(plan_runs(np.zeros(len(starts), np.int64), starts, starts + counts[piece] * itemsize, [size],
                             budget)[1])

    print(f"{args.tokens / 1e6:g}M tokens ({size / 1e6:.0f} MB .bin), {samples:,} samples of seq_length {SEQ}, "
          f"{len(ids) / samples:.2f} pieces a sample\n")
    print("| gathers of | merge budget | requests / sample |")
    print("|---|---|---|")
    for gather in (32, 100, 300, 600, 1200, 2400):
        for budget in (MERGE_BUDGET, 0.25):
            total = sum(requests(a, min(samples, a + gather), budget) for a in range(0, samples, gather))
            print(f"| {gather:,} samples ({gather / samples:.0%} of the file) | {budget:.2f} | {total / samples:.2f} |")
    ramps = ((READ_AHEAD_GROWTH, 0.5, MERGE_BUDGET), (READ_AHEAD_GROWTH, 1.0, MERGE_BUDGET), (0.3, 1.0, MERGE_BUDGET),
             (READ_AHEAD_GROWTH, 1.0, 0.25), (1.0, 0.5, MERGE_BUDGET))
    for growth, fraction, budget in ramps:
        read, total, gathers = 0, 0, 0
        while read < samples:
            allowed = (READ_AHEAD_START_BYTES + growth * read * SAMPLE_BYTES) / SAMPLE_BYTES
            end = min(samples, read + max(1, int(fraction * allowed)))
            total, read, gathers = total + requests(read, end, budget), end, gathers + 1
        print(f"| ramp: growth {growth:g}, gathers of {fraction:g} of it ({gathers} a pass) | {budget:.2f} | "
              f"{total / samples:.2f} |")


if __name__ == "__main__":
    main()
