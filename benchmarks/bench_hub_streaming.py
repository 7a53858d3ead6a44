"""What streaming from a Hub dataset repo reads: bytes of ``.bin`` per sample and HTTP
requests per 1,000 samples, against what the samples need, measured in the same run.

    .venv/bin/python benchmarks/bench_hub_streaming.py [--tokens 20e6] [--samples 2000]

The repo is served by the local Hub test server (tests/hub_server.py) on 127.0.0.1, and
the clients find it the way a user points them at any Hub: ``HF_ENDPOINT`` set before
huggingface_hub and datasets are imported. Every connection elsewhere is refused.

Rows: two document-length mixes (short web-like documents, long book-like ones) x two
sequence lengths. Columns:
  bytes/sample       .bin bytes the server sent for ranged reads, per sample streamed
  x needed           over the bytes the samples hold (sample_length x 2 for uint16)
  requests/1,000     ranged GETs of the .bin per 1,000 samples
  x needed           over the contiguous runs the samples' pieces form in the order the
                     builder reads them (one table per shard): the fewest requests a
                     reader that merges neighbouring pieces, as FileBinReader does, can make
  .idx GETs          downloads of the .idx during the stream (1 expected)
Wall time is not shown: on loopback it says nothing about the real Hub, where each of
these requests is a round trip of tens of milliseconds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from hub_server import LocalHub, loopback_only  # noqa: E402  (stdlib only: imports nothing of HF)


class _Patch:
    """The ``setattr`` of pytest's monkeypatch, for loopback_only outside pytest."""

    def setattr(self, target, name, value):
        setattr(target, name, value)


def make_documents(rng, tokens: int, mean_length: float) -> list[np.ndarray]:
    lengths = np.maximum(1, rng.lognormal(np.log(mean_length) - 0.5, 1.0, size=int(2 * tokens / mean_length)))
    lengths = lengths.astype(np.int64)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    return [rng.integers(0, 50_000, n).astype(np.uint16) for n in lengths]


def runs_needed(source, indices, first: int, stop: int, ranges) -> int:
    """Contiguous byte runs of the samples [first, stop), merged within each shard's table
    in read order, exactly as FileBinReader.gather merges neighbours."""
    from mmidx_builder.megatron import sampling

    total = 0
    for start, end in ranges:
        if end <= first or start >= stop:
            continue
        sequence_ids, offsets, lengths, _ = sampling.sample_pieces(indices, source.sequence_lengths,
                                                                   np.arange(start, end))
        starts = source.sequence_starts[sequence_ids] + offsets
        total += 1 + int(np.count_nonzero(starts[1:] != starts[:-1] + lengths[:-1])) if len(starts) else 0
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=20e6, help="tokens per corpus (default 20M, a 40 MB .bin)")
    parser.add_argument("--samples", type=int, default=2000, help="samples streamed per row (whole shards)")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="mmidx-bench-hub-")

    server = LocalHub().start()
    os.environ.update(HF_ENDPOINT=server.url, HF_HOME=os.path.join(workdir, "hf_home"),
                      HF_UPDATE_DOWNLOAD_COUNTS="0", HF_HUB_DISABLE_PROGRESS_BARS="1")
    refused = loopback_only(_Patch())

    import datasets  # noqa: E402  (after HF_ENDPOINT, as a user would)

    import mmidx_builder  # noqa: F401,E402
    from mmidx_builder import IndexedFile, write_documents  # noqa: E402
    from mmidx_builder.megatron import sampling  # noqa: E402
    from mmidx_builder.hf.base_builder import DEFAULT_NUM_SHARDS# noqa: E402
    from mmidx_builder.hf.tables import shard_ranges

    datasets.disable_progress_bars()
    rng = np.random.default_rng(0)
    header = ("| documents | seq_length | samples | bytes/sample | x needed | requests/1,000 samples | x needed "
              "| .idx GETs |")
    rows = []
    for mix, mean_length in (("web-like, mean ~500 tokens", 500), ("book-like, mean ~8,000 tokens", 8000)):
        folder = os.path.join(workdir, f"corpus-{mean_length}")
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        write_documents(os.path.join(folder, "train"), make_documents(rng, int(args.tokens), mean_length),
                        dtype=np.uint16)
        repo_id = f"bench/tokens-{mean_length}"
        server.commit(repo_id, {name: open(os.path.join(folder, name), "rb").read() for name in os.listdir(folder)})
        source = IndexedFile.open(os.path.join(folder, "train"))
        for seq_length in (2048, 512):
            indices = sampling.build_indices(source.sequence_lengths, seq_length=seq_length, seed=1234)
            ranges = shard_ranges(indices.num_samples, DEFAULT_NUM_SHARDS)
            # Whole shards: a table is read for the whole shard even when take() stops inside it.
            ends = [end for _, end in ranges]
            taken = ends[min(int(np.searchsorted(ends, args.samples)), len(ends) - 1)]
            first = len(server.downloads)
            stream = datasets.load_dataset(repo_id, split="train", streaming=True, seq_length=seq_length,
                                           cache_dir=os.path.join(workdir, "cache"))
            started = time.perf_counter()
            streamed = sum(1 for _ in stream.take(taken))
            elapsed = time.perf_counter() - started
            served = server.downloads[first:]
            bins = [d for d in served if d.name == "train.bin"]
            idx_gets = sum(1 for d in served if d.name == "train.idx")
            assert streamed == taken and not any(d.whole_file for d in bins), "short stream or a whole .bin"
            bin_bytes = sum(d.sent for d in bins)
            need_bytes = streamed * (seq_length + 1) * 2
            need_runs = runs_needed(source, indices, 0, streamed, ranges)
            rows.append(f"| {mix} | {seq_length:,} | {streamed:,} | {bin_bytes / streamed:,.0f} | "
                        f"{bin_bytes / need_bytes:.2f} | {len(bins) * 1000 / streamed:,.0f} | "
                        f"{len(bins) / need_runs:.2f} | {idx_gets} |")
            print(f"{mix}, seq_length {seq_length}: {streamed:,} samples, {len(bins):,} ranged requests, "
                  f"{elapsed:.1f} s on loopback", flush=True)
    server.stop()
    # The one lookup datasets makes elsewhere for a Hub id: its dataset viewer (refused, as offline).
    assert set(refused) <= {"datasets-server.127.0.0.1"}, f"connections outside 127.0.0.1 were attempted: {refused}"
    print()
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    print("\n".join(rows))
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
