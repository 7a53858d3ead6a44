"""What one DataLoader worker delivers per micro-batch, for each set of Megatron's flags, and
how many workers keep up with a training step.

    .venv/bin/python benchmarks/bench_collator.py [--micro-batch 8] [--batches 24] [--step-ms 100]

One rank (world size 1), seq_length 2048, a uint16 corpus of lognormal document lengths
(bench_format's, generated once), read as a worker reads it: ``megatron_rank_stream`` over our
builder's stream (``document_structure=True``), rows grouped into micro-batches and given to
``MegatronCollator``. Every row is milliseconds per micro-batch in one process (best of
--repeats), against a ceiling measured in the same run: memmap windows of the same sample
count turned into int64 ``tokens``/``labels`` tensors, the least any loader does.

  arrow rows    ``stream.with_format("arrow")``: the collator views the fixed-size list
  python rows   the stream as it comes (dicts of lists): what a loop without with_format gets
  collate only  the collator alone, on rows already read as one Arrow table

"workers for a step of T ms": how many DataLoader workers deliver one micro-batch per step
(``ceil(ms per micro-batch / T)``), with the main process only training. Measured on CPU; a
GPU host's cores differ, so measure there with the same script.
"""

from __future__ import annotations

import argparse
import itertools
import math

import numpy as np

from bench_format import best_of, make_corpus

SEQ_LENGTH = 2048
EOD = 50256  # the corpus is random ids below 50,257: EODs occur about once per 50k tokens

FLAG_SETS = {
    "no flags (tokens, labels, loss_mask, position_ids)": {},
    "reset_position_ids + eod_mask_loss": {"reset_position_ids": True, "eod_mask_loss": True},
    "create_attention_mask (causal, dense)": {"create_attention_mask": True},
    "reset_attention_mask + create_attention_mask (dense)": {"reset_attention_mask": True,
                                                             "create_attention_mask": True},
    "inter_document_masking (cu_seqlens)": {"reset_position_ids": True, "inter_document_masking": True},
}


def ceiling(prefix: str, micro_batch: int, batches: int):
    import torch

    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r").view(np.ndarray)
    starts = np.random.default_rng(1).integers(0, len(tokens) - SEQ_LENGTH - 1, size=(batches, micro_batch))

    def run():
        for row_starts in starts.tolist():
            text = np.stack([tokens[s:s + SEQ_LENGTH + 1] for s in row_starts]).astype(np.int64)
            torch.from_numpy(text[:, :-1].copy()), torch.from_numpy(text[:, 1:].copy())

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=20e6)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--batches", type=int, default=24, help="micro-batches per timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-ms", type=float, default=100.0, help="a training step's time, for the workers column")
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    args = parser.parse_args()

    from mmidx_builder import MegatronCollator, MMIdx, megatron_rank_stream

    prefix = make_corpus(args.workdir, int(args.tokens))
    builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=SEQ_LENGTH, document_structure=True,
                    cache_dir=args.workdir + "/hf")
    stream = builder.as_streaming_dataset("train")
    mbs, batches = args.micro_batch, args.batches
    rows_needed = mbs * batches
    table = next(iter(stream.with_format("arrow").iter(batch_size=mbs)))  # one micro-batch, for "collate only"

    def loader(view, collate):
        def run():
            rows = iter(megatron_rank_stream(view, 0, 1, mbs))
            for _ in range(batches):
                collate(list(itertools.islice(rows, mbs)))
        return run

    base = best_of(args.repeats, ceiling(prefix, mbs, batches)) / batches * 1e3
    print(f"micro-batch {mbs} x {SEQ_LENGTH + 1} tokens, {batches} micro-batches ({rows_needed} samples) per timing, "
          f"best of {args.repeats}; one process, CPU")
    print()
    header = ("flags", "rows", "ms / micro-batch", "x ceiling", f"workers for a {args.step_ms:g} ms step")
    lines = [("ceiling: memmap windows -> int64 tokens/labels tensors", "", f"{base:.2f}", "1.00",
              str(math.ceil(base / args.step_ms)))]
    for name, flags in FLAG_SETS.items():
        collate = MegatronCollator(EOD, **flags)
        only = best_of(args.repeats, lambda: [collate(table) for _ in range(batches)]) / batches * 1e3
        for form, view in (("arrow", stream.with_format("arrow")), ("python", stream)):
            ms = best_of(args.repeats, loader(view, collate)) / batches * 1e3
            lines.append((name, form, f"{ms:.1f}", f"{ms / base:.2f}", str(math.ceil(ms / args.step_ms))))
        lines.append((name, "collate only", f"{only:.1f}", f"{only / base:.2f}", ""))
    widths = [max(len(str(line[i])) for line in (header, *lines)) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |")


if __name__ == "__main__":
    main()
