"""Work spread over the cores in threads: a blend's prefixes opened (each ``.idx`` validated and
recorded) and their indices built side by side, a weighted blend's indices beside them (issue 43).

Threads, not processes: most of what the work spends its time in releases the GIL (numpy's
cumsums and copies, the kernel's copies out of the maps, xxh3 digests, file writes), and the
results (memory maps, opened files) stay in the process that reads them. Not two shuffles:
numpy's ``RandomState.shuffle`` holds the GIL, and so, in effect, does legacy_shuffle's loop
of small numpy calls (measured: two in threads took 1.2x the time of one after the other).
One shuffle beside work of large numpy calls does gain: sampling.build_indices shuffles a
large shuffle index beside the sample index. With nothing beside it (nothing_beside), a
document shuffle takes numpy's loop up to legacy_shuffle.ALONE_BYTES.
Quick jobs (a warm open's) stay in the calling thread: see SERIAL_SECONDS.
Bounded by the cores this process may use and by MAX_THREADS; files: each job holds at most
the descriptors of the pair it opens and the one cache file it writes (opened pairs are
bounded by MMIDX_MAX_OPEN_FILES, cached arrays are maps that hold none).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time

MAX_THREADS = 8

# Jobs of this module running in threads now (pools of in_threads, threads of beside): while
# there are none, a shuffle that holds the GIL throughout stalls no one (nothing_beside).
_running = 0
_running_lock = threading.Lock()


def _count(change: int) -> None:
    global _running
    with _running_lock:
        _running += change


def _none_in_a_child() -> None:
    global _running, _running_lock
    _running, _running_lock = 0, threading.Lock()  # the threads stayed in the parent


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_none_in_a_child)


def nothing_beside() -> bool:
    """Whether no job of this module runs in a thread now (sampling's document shuffle then
    takes numpy's loop where it is the faster: legacy_shuffle.ALONE_BYTES)."""
    return _running == 0


def workers() -> int:
    """Threads for CPU-bound jobs: the cores this process may use, at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


# Jobs run in the calling thread, one after another, until one takes longer than this; the rest
# then go to the threads. A warm open's jobs (a pair's record read, a prefix's cached indices
# mapped: ~0.3-0.5 ms each of Python and system calls) ran 2.3x slower in two threads than in
# one, each thread waiting for the GIL at every system call: 1,000 prefixes split 969,30,1,
# warm open 1.19 s against 0.62 s (benchmarks/bench_scale.py's blend). A cold open's
# jobs (a whole .idx validated, indices built: numpy and digests that let the GIL go) take
# tens of milliseconds past the smallest prefixes, and gain from the threads.
SERIAL_SECONDS = 0.02


def in_threads(function, items) -> list:
    """``[function(item) for item in items]``, in :func:`workers` threads from the first job
    that took longer than SERIAL_SECONDS on: the results, and the first error, in the items'
    order, as the serial loop gives them."""
    items = list(items)
    threads = workers()
    results = []
    if threads > 1:
        for item in items:
            started = time.perf_counter()
            results.append(function(item))
            if time.perf_counter() - started > SERIAL_SECONDS:
                break
    rest = items[len(results):]
    if threads <= 1 or len(rest) <= 1:
        return results + [function(item) for item in rest]
    _count(1)
    try:
        with concurrent.futures.ThreadPoolExecutor(min(threads, len(rest)), thread_name_prefix="mmidx-work") as pool:
            return results + list(pool.map(function, rest))
    finally:
        _count(-1)


def beside(function):
    """``function()`` started in a thread of its own when this process may use more than one
    core (else run at once); returns a function that waits for its result or raises its error.
    If the caller fails first nothing waits for the thread, the interpreter's exit included
    (a daemon, unlike a ThreadPoolExecutor's threads, which exit joins): it ends alone."""
    if workers() <= 1:
        result = function()
        return lambda: result
    future = concurrent.futures.Future()

    def run():
        outcome = None
        try:
            if future.set_running_or_notify_cancel():
                outcome = (future.set_result, function())
        except BaseException as error:  # noqa: BLE001  handed to the caller, raised there
            outcome = (future.set_exception, error)
        _count(-1)  # before the caller is woken: its next step runs with nothing beside
        if outcome is not None:
            hand_back, value = outcome
            hand_back(value)

    _count(1)  # before the thread starts: the caller's next step already runs beside it
    threading.Thread(target=run, name="mmidx-beside", daemon=True).start()
    return future.result


__all__ = ["MAX_THREADS", "beside", "in_threads", "nothing_beside", "workers"]
