"""One gather for several small shards, when a stream asks for them one at a time.

A split is cut into up to 960 shards (``common.DEFAULT_NUM_SHARDS``) so that ranks and workers
get whole shards; on a small corpus a shard is a few dozen rows (100M tokens at seq_length
2048: 51 rows). Streaming asks the builder for one shard per call, and a gather per shard pays
its fixed costs (index lookups, the bounds check, a table, a trip through ``datasets``) every
few dozen rows: measured, about 40% of the streaming time on such a corpus.

:class:`ShardReadAhead` serves those calls. When the shards asked for walk the split's shard
layout with a steady stride (one process reading every shard in order: stride 1; each of n
DataLoader workers or ranks reading every n-th shard: stride n), the next shards on that stride
are gathered together with the one asked for, up to ``limit`` rows, and kept for the calls
that ask for them. Any other order (shuffled shards, resharded ranges, a resumed iterator)
gets one gather per call, as without read-ahead. Either way a call's table holds exactly the
rows asked for, in order: what is read ahead only changes how many gathers make them.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Callable, Sequence

import numpy as np


class ShardReadAhead:
    """Tables of rows ``make(rows)``, gathered several shards at a time when calls walk
    ``layout`` (the split's shard ranges, in order) with a steady stride. Thread-safe."""

    def __init__(self, make: Callable[[np.ndarray], object], layout: Sequence[tuple[int, int]], limit: int):
        self._make = make
        self._layout = [tuple(map(int, r)) for r in layout]
        self._starts = [start for start, _ in self._layout]
        self._limit = limit
        self._lock = threading.Lock()
        self._last = None  # the shard asked for last
        self._stride = 0  # the step between the last two shards asked for
        self._held = {}  # shard -> (offset, rows) in self._table, gathered ahead and not served yet
        self._table = None

    def _shard_of(self, rows: np.ndarray) -> int | None:
        """The layout shard whose rows these are, or None."""
        if len(rows) == 0:
            return None
        start, stop = int(rows[0]), int(rows[-1]) + 1
        i = bisect_left(self._starts, start)
        if i == len(self._layout) or self._layout[i] != (start, stop) or len(rows) != stop - start:
            return None
        return i if np.array_equal(rows, np.arange(start, stop)) else None

    def __call__(self, rows: np.ndarray):
        shard = self._shard_of(rows)
        if shard is None:
            return self._make(rows)
        with self._lock:
            step = shard - self._last if self._last is not None else 0
            steady = step > 0 and step == self._stride
            self._last, self._stride = shard, step
            held = self._held.pop(shard, None)
            if held is not None:
                return self._table.slice(*held)
            shards, total = [shard], len(rows)
            if steady:
                following = shard + step
                while following < len(self._layout):
                    size = self._layout[following][1] - self._layout[following][0]
                    if total + size > self._limit:
                        break
                    shards.append(following)
                    total += size
                    following += step
            if len(shards) == 1:
                self._held, self._table = {}, None
                return self._make(rows)
            table = self._make(np.concatenate([np.arange(*self._layout[s], dtype=np.int64) for s in shards]))
            offsets = np.cumsum([0] + [self._layout[s][1] - self._layout[s][0] for s in shards]).tolist()
            self._held = {s: (offsets[k], offsets[k + 1] - offsets[k]) for k, s in enumerate(shards) if k}
            self._table = table
            return table.slice(0, offsets[1])


__all__ = ["ShardReadAhead"]
