"""MDS token shards written by mmidx against mosaicml-streaming's own MDSWriter (the peer),
for the same samples, in one run; and the way back against megatron-core's IndexedDatasetBuilder.

    .venv/bin/python benchmarks/bench_mds_convert.py [--megabytes 64] [--workdir /tmp/mmidx-bench]

A uint16 .bin/.idx pair of --megabytes of token ids (document lengths lognormal, median 612
ids) is generated once under --workdir. For each case (one sample a document; LLM Foundry's
2,048-id samples, uncompressed and zstd) the samples are made once, in memory, as int32 arrays,
and written by (each row the best of --repeats runs, the rows taking turns):

  MDSWriter                  streaming.MDSWriter(columns={"tokens": "ndarray:int32"}).write(sample)
                             for every sample (the peer; samples already in memory)
  ShardWriter.write          mmidx's writer, the same calls on the same samples
  pairs_to_mds               mmidx convert --to mds end to end: the .bin/.idx read, packed, encoded
                             in batches and written

MB/s are MB of the samples' int32 ids per second (the same bytes for every row of a case);
"x MDSWriter" is MDSWriter's time over the row's. Every row's folder is checked to hold the
bytes of MDSWriter's. The way back (one document a sample, no compression): mds_to_pairs from
the uncompressed folder against streaming.LocalDataset read sample by sample into megatron-core's
IndexedDatasetBuilder (add_document), the pair checked equal.

MDSWriter needs the oracle's import of ``streaming`` (tests/mosaic_oracle.py: a torchvision
stand-in); megatron-core is optional (the last table is skipped without it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np

from mmidx_builder.convert import mds_to_pairs, pairs_to_mds
from mmidx_builder.mosaic.writer import ShardWriter
from mmidx_builder.sources.indexed import IndexedFile, write_documents

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))


def corpus(workdir: str, megabytes: float) -> str:
    prefix = os.path.join(workdir, f"mds-bench-{megabytes:g}mb_text_document")
    if not os.path.exists(prefix + ".idx"):
        rng = np.random.default_rng(0)
        tokens = int(megabytes * 1e6 / 2)
        lengths = np.maximum(1, rng.lognormal(np.log(612), 1.0, tokens // 300).astype(np.int64))
        lengths = lengths[:np.searchsorted(np.cumsum(lengths), tokens) + 1]
        ids = rng.integers(1, 50_000, int(lengths.sum())).astype(np.uint16)
        write_documents(prefix, np.split(ids, np.cumsum(lengths)[:-1]), dtype=np.uint16)
    return prefix


def samples_of(prefix: str, concat: int | None) -> list[np.ndarray]:
    source = IndexedFile.open(prefix)
    ids = source.read_pieces(np.arange(source.num_sequences), np.zeros(source.num_sequences, np.int64),
                             source.sequence_lengths).astype(np.int32)
    if concat is None:
        return np.split(ids, np.cumsum(source.document_lengths())[:-1])
    whole = len(ids) // concat * concat
    return list(ids[:whole].reshape(-1, concat))


def best_times(functions: list, repeats: int) -> list[float]:
    """Each function's best of ``repeats`` runs, the functions taking turns (a shared
    machine's noise only ever adds time, and falls on every row alike)."""
    best = [float("inf")] * len(functions)
    for _ in range(repeats):
        for k, function in enumerate(functions):
            started = time.perf_counter()
            function()
            best[k] = min(best[k], time.perf_counter() - started)
    return best


def same_folder(a: str, b: str) -> bool:
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read() for n in names)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=64, help="MB of uint16 token ids in the pair")
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    parser.add_argument("--repeats", type=int, default=3, help="each row's best of this many runs")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    from mosaic_oracle import streaming_or_skip

    streaming = streaming_or_skip()
    prefix = corpus(args.workdir, args.megabytes)
    source = IndexedFile.open(prefix)
    out = os.path.join(args.workdir, "mds-bench-out")
    print(f"{source.num_documents:,} documents, {source.num_tokens:,} uint16 ids ({source.num_tokens * 2 / 1e6:,.0f} MB "
          f"of .bin), {os.cpu_count()} CPUs\n")
    print(f"{'case':<30} {'writer':<16} {'seconds':>8} {'MB/s':>8} {'x MDSWriter':>12}  same bytes")
    for label, concat, compression in (("one sample a document", None, None),
                                       ("concat 2048", 2048, None), ("concat 2048, zstd", 2048, "zstd")):
        samples = samples_of(prefix, concat)
        megabytes = sum(s.nbytes for s in samples) / 1e6
        folders = {name: os.path.join(out, f"{name}-{concat}-{compression}") for name in ("mdswriter", "write", "convert")}
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)

        def peer():
            shutil.rmtree(folders["mdswriter"], ignore_errors=True)
            with streaming.MDSWriter(out=folders["mdswriter"], columns={"tokens": "ndarray:int32"},
                                     compression=compression) as writer:
                for sample in samples:
                    writer.write({"tokens": sample})

        def ours_write():
            shutil.rmtree(folders["write"], ignore_errors=True)
            with ShardWriter(folders["write"], {"tokens": "ndarray:int32"}, compression=compression) as writer:
                for sample in samples:
                    writer.write({"tokens": sample})

        def ours_convert():
            pairs_to_mds(prefix, folders["convert"], concat_tokens=concat, compression=compression, overwrite=True)

        rows = list(zip(("MDSWriter", "ShardWriter.write", "pairs_to_mds"),
                        best_times([peer, ours_write, ours_convert], args.repeats)))
        for name, seconds in rows:
            folder = {"MDSWriter": "mdswriter", "ShardWriter.write": "write", "pairs_to_mds": "convert"}[name]
            same = "-" if name == "MDSWriter" else ("yes" if same_folder(folders[folder], folders["mdswriter"]) else "NO")
            print(f"{label:<30} {name:<16} {seconds:>8.2f} {megabytes / seconds:>8.0f} {rows[0][1] / seconds:>11.2f}x  "
                  f"{same}")
        if concat is None:
            back_from = folders["mdswriter"]
        del samples
    try:
        from megatron.core.datasets import indexed_dataset
    except ImportError:
        print("\nmegatron-core not installed: the way back is not measured")
        return
    back = os.path.join(out, "back")
    shutil.rmtree(back, ignore_errors=True)

    def peer_back():
        builder = indexed_dataset.IndexedDatasetBuilder(os.path.join(out, "megatron.bin"), dtype=np.int32)
        dataset = streaming.LocalDataset(back_from)
        for k in range(len(dataset)):
            tokens = dataset[k]["tokens"]
            builder.add_document(tokens, [len(tokens)])
        builder.finalize(os.path.join(out, "megatron.idx"))

    rows = list(zip(("LocalDataset + IndexedDatasetBuilder", "mds_to_pairs"),
                    best_times([peer_back, lambda: mds_to_pairs(back_from, back, overwrite=True)], args.repeats)))
    same = all(open(back + "_tokens_document" + ext, "rb").read() == open(os.path.join(out, "megatron" + ext), "rb").read()
               for ext in (".bin", ".idx"))
    megabytes = source.num_tokens * 4 / 1e6
    print(f"\n{'MDS -> .bin/.idx (one document a sample)':<42} {'seconds':>8} {'MB/s':>8} {'x peer':>8}")
    for name, seconds in rows:
        print(f"{name:<42} {seconds:>8.2f} {megabytes / seconds:>8.0f} {rows[0][1] / seconds:>7.2f}x")
    print(f"same bytes: {'yes' if same else 'NO'}")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
