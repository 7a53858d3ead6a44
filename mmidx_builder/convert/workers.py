"""The worker pool: batches encoded (encode.py) in ``workers`` processes, results handed back
in submission order, so documents keep input order for any number of workers.

One worker encodes in this process. More are forked (spawned where fork is missing), each
given the run's :class:`EncodeJob` once; at most ``3 * workers`` batches are read ahead.
"""

from __future__ import annotations

import collections
import contextlib
import multiprocessing
import os
from typing import Iterable, Iterator

from .encode import BatchResult, EncodeJob, encode_batch
from .readers.base import Batch

_JOB: EncodeJob | None = None  # this process's job: set by _init_worker


def _init_worker(job: EncodeJob) -> None:
    global _JOB
    _JOB = job


def _encode(batch: Batch) -> BatchResult:
    return encode_batch(batch, _JOB)


@contextlib.contextmanager
def encoded_batches(batches: Iterable[Batch], job: EncodeJob, workers: int) -> Iterator[Iterator[BatchResult]]:
    """The results of ``batches``, in their order; the pool (if any) lives as long as the context."""
    if workers == 1:
        _init_worker(job)
        yield map(_encode, batches)
        return
    with _worker_pool(workers, job) as pool:
        yield _ordered_results(pool, batches, in_flight=3 * workers)


def _ordered_results(pool, batches: Iterable[Batch], in_flight: int) -> Iterator[BatchResult]:
    """Pool results in submission order, with at most ``in_flight`` batches read ahead
    (``Pool.imap`` would read the whole input into memory ahead of the workers)."""
    pending: collections.deque = collections.deque()
    for batch in batches:
        pending.append(pool.apply_async(_encode, (batch,)))
        if len(pending) >= in_flight:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


@contextlib.contextmanager
def _worker_pool(workers: int, job: EncodeJob):
    # Each worker runs its tokenizer single-threaded: N processes on N cores, not N x N threads.
    # Set before the fork, so that tokenizers also skips its "forked after parallelism" warning.
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods()
                                              else "spawn")
        pool = context.Pool(workers, initializer=_init_worker, initargs=(job,))
    finally:
        if saved is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = saved
    try:
        yield pool
        pool.close()
    finally:
        pool.terminate()
        pool.join()


__all__ = ["encoded_batches"]
