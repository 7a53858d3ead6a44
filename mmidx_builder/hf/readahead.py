"""One gather for several small shards, when a stream asks for them one at a time.

A split is cut into up to 960 shards (``base_builder.DEFAULT_NUM_SHARDS``) so that ranks and workers
get whole shards; on a small corpus a shard is a few dozen rows (100M tokens at seq_length
2048: 51 rows). Streaming asks the builder for one shard per call, and a gather per shard pays
its fixed costs (index lookups, the bounds check, a table, a trip through ``datasets``) every
few dozen rows: measured, about 40% of the streaming time on such a corpus.

:class:`ShardReadAhead` serves those calls. When the shards asked for walk the split's shard
layout with a steady stride (one process reading every shard in order: stride 1; each of n
DataLoader workers or ranks reading every n-th shard: stride n), the next shards on that stride
are gathered together with the one asked for, up to ``gather_bytes`` of rows (16 MiB for a
local stream), and kept for the calls that ask for them. Any other order (shuffled shards,
resharded ranges, a resumed iterator) gets one gather per call, as without read-ahead. Either
way a call's table holds exactly the rows asked for, in order: what is read ahead only changes
how many gathers make them.

:class:`ReadAhead` is for files read over the network, where a gather waits on round trips
rather than on memory: the table asked for is made at once (the first sample comes fast) and
the tables the stream will ask for next are made meanwhile in background threads, within a
byte bound. "Next" is the rest of the rows of the call (the batches of the shard asked for,
or the row batches a rank stream says it will read) and, when the calls walk the shard
layout with a steady stride, the following shards on that stride. Again a call's table holds
exactly the rows asked for, in order; a prediction that the stream does not follow is dropped.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np

from ..storage.remote import background_fetches


class ShardReadAhead:
    """Tables of rows ``make(rows)``, gathered several shards at a time when calls walk
    ``layout`` (the split's shard ranges, in order) with a steady stride: a gather holds up to
    ``limit`` rows, or ``gather_bytes`` of rows once a gather has shown their size. Thread-safe."""

    def __init__(self, make: Callable[[np.ndarray], object], layout: Sequence[tuple[int, int]], limit: int,
                 gather_bytes: int = 0):
        self._make = make
        self._layout = [tuple(map(int, r)) for r in layout]
        self._starts = [start for start, _ in self._layout]
        self._limit = limit
        self._gather_bytes = gather_bytes
        self._row_bytes = 0  # the largest bytes per row of the gathers made so far
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
        # Consecutive: strictly increasing from start to stop - 1 (cheaper than comparing with
        # an arange, once per shard of a stream).
        return i if len(rows) < 2 or bool((rows[1:] > rows[:-1]).all()) else None

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
                limit = _rows_in(self._gather_bytes, self._row_bytes, at_least=self._limit)
                following = shard + step
                while following < len(self._layout):
                    size = self._layout[following][1] - self._layout[following][0]
                    if total + size > limit:
                        break
                    shards.append(following)
                    total += size
                    following += step
            if len(shards) == 1:
                self._held, self._table = {}, None
                return self._measured(self._make(rows))
            table = self._measured(self._make(np.concatenate([np.arange(*self._layout[s], dtype=np.int64)
                                                              for s in shards])))
            offsets = np.cumsum([0] + [self._layout[s][1] - self._layout[s][0] for s in shards]).tolist()
            self._held = {s: (offsets[k], offsets[k + 1] - offsets[k]) for k, s in enumerate(shards) if k}
            self._table = table
            return table.slice(0, offsets[1])

    def _measured(self, table):
        """``table``, its bytes per row remembered (the largest seen) to size the next gathers."""
        self._row_bytes = max(self._row_bytes, _bytes_per_row(table))
        return table


def _bytes_per_row(table) -> int:
    """A made table's bytes per row, rounded up."""
    return -(-table.nbytes // max(1, table.num_rows))


def _rows_in(gather_bytes: int, row_bytes: int, at_least: int) -> int:
    """Rows of ``row_bytes`` each that ``gather_bytes`` holds, at least ``at_least`` (also
    while no row has been seen: ``row_bytes`` 0)."""
    return max(at_least, gather_bytes // row_bytes) if row_bytes else at_least


_SUBMISSIONS = itertools.count(1)  # gathers in the order submitted: the order their requests go out

# Tables made at once in the background: each is a gather whose pieces a remote reader fetches
# concurrently, so a few tables in flight keep many requests in flight.
READ_AHEAD_THREADS = 8
# The read-ahead ramps: in each pass it holds at most READ_AHEAD_START_BYTES plus
# READ_AHEAD_GROWTH times the bytes the pass has handed out (and never more than its bound).
# What it holds when the consumer stops is fetched for nothing, so a pass of N samples fetches
# at most (1 + G) N + START of samples' bytes (times the gaps plan_runs bridges), whatever N
# is: 1.2-1.4x the bytes for 400 samples at seq_length 2048 on a 20 MB .bin, where the
# read-ahead of before (1 MiB plus twice what was handed out) fetched 3.2x. The ramp is
# geometric (what is ahead is what can be fetched per round trip): a stream has 1,000 rows
# ahead after reading ~4,000. A new pass (a call at a shard at or before the last one, or
# a call that is not at a shard's start: a rank's own rows) ramps again.
READ_AHEAD_START_BYTES = 64 << 10
READ_AHEAD_GROWTH = 0.25
# Rows made ahead are gathered together up to this many bytes of samples (a table is still
# cut at ``rows_per_table``): the pieces of one gather are planned together, and the more of a
# file a plan covers, the closer its pieces and the more of them one request fetches
# (remote.plan_runs). Measured on a 20 MB .bin at 25 ms per request: 3.2 requests per sample
# with gathers of 1,000 rows (4 MB), ~0.2 with 8,000.
GATHER_BYTES = 32 << 20

# A local stream's shards walked in order are gathered up to this many bytes of samples at a
# time (at least ROWS_PER_TABLE rows). The shards' tables are then slices of one buffer, so
# the batches datasets joins from them are consecutive rows of it, which numpy_batches views
# without a copy (training/as_numpy.py). Batches that span two gathers are still copied:
# 100M tokens at seq_length 2048, batches of 1,000 rows: none of 49 viewed with gathers of
# ~1,000 rows, 36 with 16 MiB, 42 with 32 MiB; numpy_batches 0.63-0.66x -> 0.72-0.74x the
# np.memmap window ceiling (bench_builder.py). The cost is the gather a process holds: the
# stream's anonymous RSS peaks at 297 MiB instead of 281 (314 with 32 MiB). Shards larger
# than a gather are made a table of ROWS_PER_TABLE rows at a time, as before.
LOCAL_GATHER_BYTES = 16 << 20


def _in_dataloader_worker() -> bool:
    """Whether this process is a torch DataLoader worker (asked only of a torch already imported)."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _key(rows: np.ndarray):
    """What names a request: ``(first, stop)`` for consecutive rows, else the rows themselves.
    Called several times per shard a stream asks for (960 a pass): np.diff and np.all were 13%
    of the consumer thread's time on a remote stream (py-spy). ``last - first + 1 == n`` and
    strictly increasing is consecutive."""
    n = len(rows)
    if n:
        first, last = int(rows[0]), int(rows[-1])
        if last - first + 1 == n and (n < 3 or bool((rows[1:] > rows[:-1]).all())):
            return first, last + 1
    return rows.tobytes()


class ReadAhead:
    """Tables of rows ``make(rows)`` for a source read over the network: each call's table is
    made at once, the following ones (see the module docstring) in up to ``threads``
    background threads while tables made ahead and not yet handed out hold at most
    ``limit_bytes`` (estimated from the bytes per row of the tables made so far). ``make``
    must allow concurrent calls (remote token sources do: ``source.remote``)."""

    def __init__(self, make: Callable[[np.ndarray], object], layout: Sequence[tuple[int, int]], rows_per_table: int,
                 limit_bytes: int, threads: int = READ_AHEAD_THREADS, gather_bytes: int = GATHER_BYTES):
        self._make = make
        self._layout = [tuple(map(int, r)) for r in layout]
        self._starts = [start for start, _ in self._layout]
        self._rows_per_table = rows_per_table
        self.limit_bytes = int(limit_bytes)
        self._threads = threads
        self._gather_bytes = gather_bytes
        self._lock = threading.RLock()  # RLock: a dropped future's callback may run in the dropping thread
        self._start_state()

    def _start_state(self) -> None:
        self._pid = os.getpid()  # a forked DataLoader worker starts afresh (the parent's threads are not its own)
        self._pool = None
        self._pending = OrderedDict()  # key -> (future, estimated bytes), in the order asked for
        self._held = 0  # estimated bytes of pending tables and of dropped ones still being made
        self.peak_bytes = 0  # the most held at once (benchmarks report it)
        self._row_bytes = 0  # the largest bytes per row seen; 0: nothing made yet, nothing made ahead
        self._handed_out = 0  # bytes of tables handed out in this pass (the read-ahead grows with them)
        self._last = None  # the shard the last call started at
        self._stride = 0
        self._frontier = None  # (stride, shard): the walk's shards before it have been submitted

    def __call__(self, rows: np.ndarray):
        ((_, table),) = self.tables([(None, rows)])
        return table

    def tables(self, batches: Iterable[tuple[object, np.ndarray]]) -> Iterator[tuple[object, object]]:
        """``(key, make(rows))`` for each ``(key, rows)`` of ``batches``, in order; ``batches``
        is read lazily, as far ahead as the bound allows."""
        if os.getpid() != self._pid:
            with self._lock:
                self._start_state()
        batches = iter(batches)
        ahead = []  # (key, rows) pulled from batches and not handed out; the first `scheduled` are submitted
        call = {"started": False, "shard": None, "last": None, "exhausted": False, "scheduled": 0}
        try:
            yield from self._tables(batches, ahead, call)
        except GeneratorExit:  # the stream was left (a break, a take): what it would read next is not needed
            self.drop_all()
            raise

    def _tables(self, batches, ahead: list, call: dict) -> Iterator[tuple[object, object]]:
        while True:
            if ahead:
                key, rows = ahead.pop(0)
                call["scheduled"] = max(0, call["scheduled"] - 1)
            else:
                item = None if call["exhausted"] else self._pull(batches, call)
                if item is None:
                    return
                key, rows = item
            if not call["started"]:
                call["started"] = True
                call["shard"] = self._arrived(rows)
                self._realign(rows)
            self._schedule(ahead, batches, call)
            yield key, self._take(rows)

    # --- the walk --------------------------------------------------------------------------

    def _arrived(self, rows: np.ndarray) -> int | None:
        """The layout shard a call starts at (None: not at a shard's start), and the stride."""
        shard = None
        if len(rows):
            i = bisect_left(self._starts, int(rows[0]))
            if i < len(self._layout) and self._starts[i] == int(rows[0]):
                shard = i
        with self._lock:
            step = shard - self._last if shard is not None and self._last is not None else 0
            if step <= 0 or step != self._stride:  # a new walk: its frontier is not known
                self._frontier = None
            if step <= 0:  # a new pass (or a reader of its own rows): the read-ahead ramps again
                self._handed_out = 0
            self._last, self._stride = shard, max(step, 0)
        return shard

    @staticmethod
    def _pull(batches, call: dict):
        """The call's next batch, noting the last one's key (to tell whether the call was one shard)."""
        item = next(batches, None)
        if item is None:
            call["exhausted"] = True
            return None
        rows = np.asarray(item[1], np.int64)
        call["last"] = _key(rows) if call["last"] is None or isinstance(call["last"], tuple) else call["last"]
        return item[0], rows

    def _schedule(self, ahead: list, batches, call: dict) -> None:
        """Submits what follows the rows just asked for: the call's own batches, then (once the
        call has been read to its end and was one whole shard) the shards on the stride.
        Consecutive small batches are made as one table of up to ``rows_per_table`` rows (one
        gather: its pieces are planned and fetched together, and close ones merge into one
        request), then cut back into the tables asked for."""
        group, size, own = [], 0, 0  # own: the call's batches the group stands for (some may be under way)
        first_shard = failed_at = None  # the layout shard the group starts at; where scheduling stopped

        def flush() -> bool:
            nonlocal group, size, own, failed_at
            ok = not group or self._submit(group)
            if ok:
                call["scheduled"] += own
            else:
                failed_at = first_shard
            group, size, own = [], 0, 0
            return ok

        def add(rows, is_own: bool, shard=None) -> bool:  # False: the bound is reached
            nonlocal size, own, first_shard, failed_at
            if _key(rows) not in self._pending:
                with self._lock:
                    allowance = self._allowance()
                    room = (allowance - self._held) // self._row_bytes if self._row_bytes else 0
                    target = self._gather_target(allowance)
                    waiting = len(self._pending)
                if group and size + len(rows) > min(target, room):
                    if not flush():
                        return False
                if not group and waiting and room < target:
                    # While tables are under way, wait for room for a whole gather: a gather cut to
                    # the room one table frees fetches a request per piece.
                    failed_at = shard if failed_at is None else failed_at
                    return False
                if not group:
                    first_shard = shard
                group.append(rows)
                size += len(rows)
            own += is_own
            return True

        # The call's own batches (counted in call["scheduled"] once submitted).
        while True:
            index = call["scheduled"] + own
            if index < len(ahead):
                rows = ahead[index][1]
            else:
                item = None if call["exhausted"] else self._pull(batches, call)
                if item is None:
                    break
                ahead.append(item)
                rows = item[1]
            if not add(rows, True):
                return
        if not flush():
            return
        shard, last = call["shard"], call["last"]
        if shard is None or not self._stride or not isinstance(last, tuple) or last[1] != self._layout[shard][1]:
            return  # not one whole shard of a steady walk: what comes next is not known
        stride = self._stride
        following = shard + stride
        with self._lock:  # shards up to the frontier of this walk are under way or handed out
            frontier = self._frontier
        if frontier is not None and frontier[0] == stride and frontier[1] > following \
                and (frontier[1] - following) % stride == 0:
            following = frontier[1]
        while following < len(self._layout):
            start, stop = self._layout[following]
            for first in range(start, stop, self._rows_per_table):
                if not add(np.arange(first, min(first + self._rows_per_table, stop), dtype=np.int64), False, following):
                    with self._lock:
                        self._frontier = (stride, failed_at if failed_at is not None else following)
                    return
            following += stride
        if not flush():
            following = failed_at
        with self._lock:
            self._frontier = (stride, following)

    # --- the tables ------------------------------------------------------------------------

    def _submit(self, group: list) -> bool:
        """Starts making one table of the rows of ``group`` (a list of row arrays; those under
        way already are left out), to be cut into each one's table; False when the bound is
        reached."""
        with self._lock:
            keys = [_key(rows) for rows in group]
            fresh = [(key, rows) for key, rows in zip(keys, group) if key not in self._pending]
            fresh = [kr for k, kr in enumerate(fresh) if kr[0] not in {key for key, _ in fresh[:k]}]
            if not fresh:
                return True
            nbytes = sum(len(rows) for _, rows in fresh) * self._row_bytes
            if not self._row_bytes or self._held + nbytes > self._allowance():
                return False
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="mmidx-read-ahead")
            rows = fresh[0][1] if len(fresh) == 1 else np.concatenate([rows for _, rows in fresh])
            dropped = threading.Event()
            future = self._pool.submit(self._make_unless_dropped, rows, dropped, next(_SUBMISSIONS))
            future.dropped = dropped
            offset = 0
            for key, part in fresh:
                self._pending[key] = (future, len(part) * self._row_bytes, offset, len(part))
                offset += len(part)
            self._held += nbytes
            self.peak_bytes = max(self.peak_bytes, self._held)
            return True

    def _gather_target(self, allowance: int) -> int:
        """Rows the next background gather should hold. A stream read alone plans gathers of half
        what it may hold, so that one is fetched while the other is read. A DataLoader worker
        walking every n-th shard plans one gather of all it may hold: it reads a quarter of the
        rows (of 4 workers), so its gathers are sparser in the file than one reader's, fewer
        gaps are small enough to bridge and more pieces are a request each, and a whole gather
        is twice as dense as a half. Measured on a 20 MB .bin: 4 workers sent 1.11x the
        requests of 0 for the same samples with half gathers, 1.06x with whole ones. It then
        waits for each gather once the one before is read (a few dozen gathers a pass, as the
        ramp grows), while the DataLoader takes the other workers' tables."""
        whole = self._stride > 1 and _in_dataloader_worker()
        share = allowance if whole else allowance // 2
        return min(self._gather_rows(), share // max(1, self._row_bytes))

    def _gather_rows(self) -> int:
        """Rows one background gather may hold: ``gather_bytes`` of the rows seen so far, at
        least a table."""
        return _rows_in(self._gather_bytes, max(1, self._row_bytes), at_least=self._rows_per_table)

    def _make_unless_dropped(self, rows: np.ndarray, dropped: threading.Event, priority: int):
        # Behind the tables asked for now and the gathers submitted before; stops once dropped.
        with background_fetches(dropped, priority):
            return self._make(rows)

    def _allowance(self) -> int:
        """The bytes the read-ahead may hold now (see READ_AHEAD_START_BYTES)."""
        return min(self.limit_bytes, READ_AHEAD_START_BYTES + int(READ_AHEAD_GROWTH * self._handed_out))

    def _take(self, rows: np.ndarray):
        key = _key(rows)
        with self._lock:
            entry = self._pending.pop(key, None)
        if entry is None:
            table = self._make(rows)
        else:
            future, nbytes, offset, length = entry
            try:
                table = future.result()
                if length != table.num_rows:
                    table = table.slice(offset, length)
            finally:
                with self._lock:
                    self._held -= nbytes
        with self._lock:
            self._row_bytes = max(self._row_bytes, _bytes_per_row(table))
            self._handed_out += table.nbytes
        return table

    def _realign(self, rows: np.ndarray) -> None:
        """At a call's first rows: what was made ahead for rows the stream skipped, or for a walk
        it left (it asks for rows not made ahead), is dropped."""
        key = _key(rows)
        with self._lock:
            while self._pending and (key not in self._pending or next(iter(self._pending)) != key):
                self._drop(*self._pending.popitem(last=False)[1][:2])
                self._frontier = None

    def drop_all(self) -> None:
        """Drops every table made ahead (the stream moved to another maker)."""
        with self._lock:
            while self._pending:
                self._drop(*self._pending.popitem(last=False)[1][:2])
            self._frontier = None

    def _drop(self, future, nbytes: int) -> None:
        shared = any(entry[0] is future for entry in self._pending.values())  # a table cut for several
        if not shared and future.cancel():
            self._held -= nbytes
            return
        if not shared:
            future.dropped.set()
        future.add_done_callback(lambda _: self._release(nbytes))

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._held -= nbytes


__all__ = ["GATHER_BYTES", "READ_AHEAD_START_BYTES", "READ_AHEAD_THREADS", "ReadAhead", "ShardReadAhead"]
