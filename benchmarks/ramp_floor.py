"""The fastest a remote stream can be at a given round-trip time, whatever its CPU costs: the
read-ahead's own ramp, replayed with a maker that only sleeps.

    .venv/bin/python benchmarks/ramp_floor.py [--samples 4883] [--latencies 25,100] [--passes 0,400]

A stopped pass must not have fetched much more than its samples hold (issue 41: at most 1.5x),
so the read-ahead holds at most READ_AHEAD_START_BYTES plus READ_AHEAD_GROWTH times what the
pass has read (hf/readahead.py): after N samples, at most ~0.3 N more are on their way, and a
pass grows by at most that much per round trip. Any read-ahead under that bound needs
log(N / first) / log(1.3) round trips to reach N samples (~11 for 400 samples from a first
gather of ~20); the real one, replayed here on the split's real shard layout with every
gather answered after exactly one round trip and no CPU spent anywhere, is that floor for
this package's code. bench_remote.py prints it beside what it measures.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Rows:
    """What ReadAhead needs of a table: its rows, its bytes, its slices."""

    def __init__(self, num_rows: int, row_bytes: int):
        self.num_rows, self.nbytes, self._row_bytes = num_rows, num_rows * row_bytes, row_bytes

    def slice(self, offset: int, length: int) -> "_Rows":
        return _Rows(length, self._row_bytes)


def ramp_floor(split_samples: int, samples: int, latency: float, row_bytes: int, shards: int = 960) -> float:
    """Samples per second of a pass of ``samples`` rows (0: the whole split of ``split_samples``)
    when each gather takes ``latency`` seconds and nothing else takes any time; the split is
    cut into ``shards`` as base_builder cuts it, and walked shard after shard as a stream."""
    from mmidx_builder.hf.readahead import ReadAhead
    from mmidx_builder.hf.tables import ROWS_PER_TABLE

    def answer_after_a_round_trip(rows: np.ndarray) -> _Rows:
        time.sleep(latency)
        return _Rows(len(rows), row_bytes)

    cuts = np.linspace(0, split_samples, min(shards, split_samples) + 1).astype(np.int64)
    layout = list(zip(cuts[:-1].tolist(), cuts[1:].tolist()))
    read_ahead = ReadAhead(answer_after_a_round_trip, layout, ROWS_PER_TABLE, 256 << 20)
    begin, read = time.perf_counter(), 0
    for start, stop in layout:
        for _, table in read_ahead.tables([(None, np.arange(start, stop, dtype=np.int64))]):
            read += table.num_rows
        if samples and read >= samples:
            break
    read_ahead.drop_all()
    return read / (time.perf_counter() - begin)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=4883, help="samples in the split (bench_remote's 10M tokens)")
    parser.add_argument("--latencies", default="25,100", help="ms per round trip")
    parser.add_argument("--passes", default="0,400", help="samples per pass (0: the whole split)")
    parser.add_argument("--row-bytes", type=int, default=(2048 + 1) * 2, help="bytes per sample in a table (uint16 tokens)")
    args = parser.parse_args()
    print("| ms/round trip | samples per pass | floor: samples/s | round trips per pass |\n|---|---|---|---|")
    for latency in (float(x) for x in args.latencies.split(",")):
        for samples in (int(x) for x in args.passes.split(",")):
            rate = ramp_floor(args.samples, samples, latency / 1000, args.row_bytes)
            n = samples or args.samples
            print(f"| {latency:g} | {n:,} | {rate:,.0f} | {n / rate / (latency / 1000):.1f} |")


if __name__ == "__main__":
    main()
