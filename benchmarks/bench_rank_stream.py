"""One rank's share of a stream: reading only its samples against reading everything.

    .venv/bin/python benchmarks/bench_rank_stream.py [--tokens 50e6] [--world-size 8] [--workdir /tmp/mmidx-bench]

Rank 0 of --world-size ranks, micro-batch 4, seq_length 2048, one epoch of a uint16 corpus
(bench_format's, generated once). Every row is rank 0's samples per second of wall time, as
tokens/s, against a ceiling measured in the same run (numpy memmap windows of the same
number of samples copied into a preallocated batch):

  megatron_rank_stream, builder stream   our builder's table generator asked for only this
                                         rank's micro-batch ranges (arrow, numpy, python rows)
  megatron_rank_stream, generic stream   the path for streams that are not our builder's own
                                         (after map(), skip() ...): everything read as Arrow
                                         batches, only this rank's rows formatted
  whole stream, keep 1 of W              what a rank pays when it reads every sample and keeps
                                         its own (split_dataset_by_node when the shard count
                                         does not divide by the world size)
  global stream, accelerate shard        megatron_global_stream as accelerate's IterableDatasetShard
                                         reads it on process 0 (dispatch_batches=False): the
                                         other ranks' rows are placeholders, never gathered
                                         (needs accelerate)
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from bench_format import best_of, make_corpus

SEQ_LENGTH = 2048
MICRO_BATCH = 4


def ceiling(prefix: str, num_samples: int) -> float:
    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r").view(np.ndarray)
    starts = np.random.default_rng(1).integers(0, len(tokens) - SEQ_LENGTH - 1, size=num_samples).tolist()
    out = np.empty((MICRO_BATCH, SEQ_LENGTH + 1), np.uint16)

    def run():
        for i, start in enumerate(starts):
            out[i % MICRO_BATCH] = tokens[start:start + SEQ_LENGTH + 1]

    return best_of(3, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=50e6)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    args = parser.parse_args()

    from mmidx_builder import MMIdx, megatron_rank_stream
    from mmidx_builder.training import rank_stream

    prefix = make_corpus(args.workdir, int(args.tokens))
    builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=SEQ_LENGTH, cache_dir=args.workdir + "/hf")
    stream = builder.as_streaming_dataset("train")
    ranked = megatron_rank_stream(stream, 0, args.world_size, MICRO_BATCH)
    mine = len(ranked)
    tokens = mine * (SEQ_LENGTH + 1)
    print(f"{ranked.total_samples:,} samples of {SEQ_LENGTH + 1} tokens; rank 0 of {args.world_size} reads "
          f"{mine:,} ({tokens / 1e6:,.1f} M tokens)")

    def drain(iterable):
        for _ in iterable:
            pass

    def generic(view):
        ranked_view = megatron_rank_stream(view, 0, args.world_size, MICRO_BATCH)
        ranked_view._rows = rank_stream._StreamRows(view)  # force the path other streams take
        return ranked_view

    base = ceiling(prefix, mine)
    rows = [("ceiling: memmap windows, same sample count", base, "")]
    for name in ("arrow", "numpy", None):
        view = stream.with_format(name) if name else stream
        seconds = best_of(2, lambda: drain(megatron_rank_stream(view, 0, args.world_size, MICRO_BATCH)))
        rows.append((f"rank stream, builder stream, {name or 'python'} rows", seconds,
                     f"gathers {mine:,} samples"))
    for name in ("arrow", "numpy"):
        view = stream.with_format(name)
        seconds = best_of(2, lambda: drain(generic(view)))
        rows.append((f"rank stream, generic stream, {name} rows", seconds,
                     f"gathers all {ranked.total_samples:,} samples"))
    try:
        from accelerate.data_loader import IterableDatasetShard
    except ImportError:
        IterableDatasetShard = None
    if IterableDatasetShard is not None:
        from mmidx_builder import megatron_global_stream

        def shard():
            dealt = IterableDatasetShard(megatron_global_stream(stream.with_format("arrow"), args.world_size,
                                                                MICRO_BATCH), batch_size=MICRO_BATCH,
                                         num_processes=args.world_size, process_index=0)
            dealt.set_epoch(0)
            return dealt

        seconds = best_of(2, lambda: drain(shard()))
        rows.append(("global stream, accelerate shard, arrow rows", seconds, f"gathers {mine:,} samples"))
    whole = best_of(2, lambda: drain(itertools.islice(stream.with_format("arrow").iter(1000), None)))
    rows.append((f"whole stream as arrow, keep 1 of {args.world_size}", whole,
                 f"gathers all {ranked.total_samples:,} samples"))

    print(f"\n{'row':<46} {'seconds':>8} {'M tokens/s':>11} {'x ceiling':>9}  note")
    for name, seconds, note in rows:
        rate = tokens / seconds
        print(f"{name:<46} {seconds:>8.3f} {rate / 1e6:>11,.1f} {base / seconds:>9.3f}  {note}")


if __name__ == "__main__":
    main()
