"""Work spread over the cores in threads: a blend's prefixes opened (each ``.idx`` validated and
recorded) and their indices built side by side, a weighted blend's indices beside them (issue 43).

Threads, not processes: most of what the work spends its time in releases the GIL (numpy's
cumsums and copies, the kernel's copies out of the maps, xxh3 digests, file writes), and the
results (memory maps, opened files) stay in the process that reads them. Not two shuffles:
numpy's ``RandomState.shuffle`` holds the GIL, and so, in effect, does legacy_shuffle's loop
of small numpy calls (measured: two in threads took 1.2x the time of one after the other).
One shuffle beside work of large numpy calls does gain: sampling.build_indices shuffles a
large shuffle index beside the sample index.
Bounded by the cores this process may use and by MAX_THREADS; files: each job holds at most
the descriptors of the pair it opens and the one cache file it writes (opened pairs are
bounded by MMIDX_MAX_OPEN_FILES, cached arrays are maps that hold none).
"""

from __future__ import annotations

import concurrent.futures
import os
import threading

MAX_THREADS = 8


def workers() -> int:
    """Threads for CPU-bound jobs: the cores this process may use, at most MAX_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_THREADS))


def in_threads(function, items) -> list:
    """``[function(item) for item in items]`` in :func:`workers` threads: the results, and the
    first error, in the items' order, as the serial loop gives them."""
    items = list(items)
    count = min(workers(), len(items))
    if count <= 1:
        return [function(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(count, thread_name_prefix="mmidx-work") as pool:
        return list(pool.map(function, items))


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
        if future.set_running_or_notify_cancel():
            try:
                future.set_result(function())
            except BaseException as error:  # noqa: BLE001  handed to the caller, raised there
                future.set_exception(error)

    threading.Thread(target=run, name="mmidx-beside", daemon=True).start()
    return future.result


__all__ = ["MAX_THREADS", "beside", "in_threads", "workers"]
