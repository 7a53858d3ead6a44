"""The process's ranged requests: batches queued by priority, at most REQUESTS_IN_FLIGHT in
flight, each part retried with backoff while that is safe; read-ahead marked as such."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import heapq
import itertools
import logging
import random
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

from ...errors import RemoteReadError
from . import process_state
from .answers import SlowBody, check_length, classify, typed_error
from .objects import RemoteObject
from .process_state import per_process
from .server_waits import MAX_WAIT_SECONDS, PAUSES, host_of

logger = logging.getLogger(__name__)

# Ranged requests in flight at once, per process (all gathers together). Latency is hidden when
# this many requests cover a round trip: at 25 ms, 512 keep up to ~20,000 requests/s going,
# more than one core of client code issues (~10,000/s at ~100 us each). On a 200M-token corpus
# at 25 ms: 256 in flight gave 1,700 samples/s, 512 2,390, 1,024 1,640 (its cost per request
# outgrew what it hid).
REQUESTS_IN_FLIGHT = 512
# Threads for synchronous filesystems (fsspec's without an async API): each holds a stack.
THREADS_IN_FLIGHT = 128
BACKOFF_SECONDS = 0.1  # doubled per attempt, jittered, at most BACKOFF_MAX_SECONDS
BACKOFF_MAX_SECONDS = 4.0
_BACKGROUND = threading.local()  # .fetches: (dropped event, priority) of the fetches this thread makes (background_fetches)


def backoff(attempt: int) -> float:
    return min(BACKOFF_MAX_SECONDS, BACKOFF_SECONDS * 2 ** attempt) * (0.5 + random.random())


def check_wanted(obj: RemoteObject, start: int, stop: int, dropped: threading.Event | None) -> None:
    """Before each request: not once the interpreter exits or the caller's read was dropped."""
    if process_state.EXITING.is_set():
        raise RemoteReadError(obj.url, start, stop, "not fetched: the interpreter is exiting")
    if dropped is not None and dropped.is_set():
        raise RemoteReadError(obj.url, start, stop, "not fetched: the read ahead was dropped (the stream moved on)")


@contextlib.contextmanager
def background_fetches(dropped: threading.Event, priority: int):
    """Fetches this thread starts inside the block are read ahead of need: their requests wait
    behind those of reads made now (priority 0) and of read-aheads of a lower ``priority``
    (the stream reaches those first), and none is sent once ``dropped`` is set (a gather the
    stream no longer needs stops within a round trip instead of fetching its tens of
    thousands of ranges)."""
    previous = getattr(_BACKGROUND, "fetches", None)
    _BACKGROUND.fetches = (dropped, priority)
    try:
        yield
    finally:
        _BACKGROUND.fetches = previous


def fetch_context() -> tuple:
    """(dropped event, priority) of the fetches this thread makes now: (None, 0) outside
    :func:`background_fetches` (a read the caller waits for)."""
    return getattr(_BACKGROUND, "fetches", None) or (None, 0)


class Batch:
    """The requests of one fetch: sent by an event loop's :class:`Requests`, answered (every
    body, or the first error) through ``future``, which the calling thread waits on."""

    __slots__ = ("parts", "send", "retries", "priority", "dropped", "results", "remaining", "sent", "future",
                 "max_wait", "waited", "slowed")

    def __init__(self, parts, send, retries: int, priority: int, dropped: threading.Event | None,
                 max_wait: float = MAX_WAIT_SECONDS):
        """``send``: the coroutine function that fetches one part (None for curl.py's);
        ``max_wait``: the seconds a part may wait in all when servers ask it to (server_waits)."""
        self.parts, self.send, self.retries, self.priority, self.dropped = parts, send, retries, priority, dropped
        self.results = [None] * len(parts)
        self.remaining = len(parts)
        self.sent = 0  # parts[:sent] have been taken by a worker
        self.future = concurrent.futures.Future()
        self.max_wait = max_wait
        self.waited = {}  # part -> seconds it waited as servers asked
        self.slowed = set()  # parts an answer of was slower than the speed floor (answers.SlowBody)

    async def request(self, i: int) -> None:
        """Part i, retried with backoff while that is safe; its body, or the batch's error."""
        obj, start, stop, route = self.parts[i]
        attempt = 0
        while True:
            try:
                check_wanted(obj, start, stop, self.dropped)
                data = check_length(obj, start, stop, await self.send(obj, start, stop, route))
            except Exception as error:  # noqa: BLE001 (classified)
                again = self.next_try(i, error, attempt)
                if again is None:
                    return
                # The worker waits: a failing or rate-limiting server gets fewer requests at once.
                delay, attempt = again
                await asyncio.sleep(delay)
                continue
            return self.answered(i, data)

    def answered(self, i: int, data: bytes) -> None:
        self.results[i] = data
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.results)

    def next_try(self, i: int, error: Exception, attempt: int) -> tuple[float, int] | None:
        """Attempt ``attempt`` of part i failed with ``error``: ``(seconds to wait, attempt
        number of the next try)`` when it is to be tried again, else None and the batch fails
        with an error naming the file and range. A wait the server asked for (429/503 with
        Retry-After or RateLimit) is the host's, within ``max_wait``, and not an attempt."""
        obj, start, stop, _ = self.parts[i]
        if isinstance(error, RemoteReadError):
            self.fail(error)
            return None
        told = getattr(error, "wait", None)
        if told is not None:
            seconds, why = told
            host, waited = host_of(error.url), self.waited.get(i, 0.0)
            if waited + seconds > self.max_wait:
                failure = RemoteReadError(obj.url, start, stop, f"{host} asks to wait {seconds:.0f} s ({why}); this "
                                          f"read waited {waited:.0f} s as told already, and waits at most "
                                          f"{self.max_wait:.0f} s in all (RemoteAccess max_wait)")
                failure.__cause__ = error
                self.fail(failure)
                return None
            PAUSES.pause(host, seconds, why, self.max_wait)
            delay = max(seconds, PAUSES.remaining(host))
            self.waited[i] = waited + delay
            return delay, attempt
        slow_again = isinstance(error, SlowBody) and i in self.slowed  # tried once more, no further
        if isinstance(error, SlowBody):
            self.slowed.add(i)
        if classify(error) != "retry" or attempt >= self.retries or slow_again:
            failure = typed_error(obj, start, stop, error, attempt + 1)
            failure.__cause__ = error
            self.fail(failure)
            return None
        logger.info(f"{obj.url} [{start}, {stop}): {type(error).__name__}: {error}; retrying")
        return backoff(attempt), attempt + 1

    def wait(self, call_soon) -> list[bytes]:
        """Every body, waited for in the calling thread. Interrupted there (KeyboardInterrupt),
        the batch sends no more: ``call_soon(function, *args)`` runs ``fail`` where the batch
        is sent."""
        try:
            return self.future.result()
        except BaseException:
            if not self.future.done():
                obj, start, stop, _ = self.parts[0]
                call_soon(self.fail, RemoteReadError(obj.url, start, stop, "not fetched: the caller was interrupted"))
            raise

    def fail(self, error: BaseException) -> None:
        """Ends the batch: its requests not yet sent never are."""
        self.sent = len(self.parts)
        if not self.future.done():
            self.future.set_exception(error)


class Requests:
    """One event loop's ranged requests: at most ``limit`` in flight, all gathers together (the
    read-ahead makes several at once), so the requests and the memory they hold in the client
    stay bounded. Waiting requests go out by batch, lowest priority first (the table a stream
    waits for, then gathers in the order the stream reads them), then by arrival.

    Sent by up to ``limit`` worker coroutines, each taking the next request when its last one is
    answered: a task, a gather slot and a semaphore future per request were 40% of the event
    loop's CPU (py-spy, 200M tokens at 25 ms), and the loop's thread is what bounds a stream
    of many small ranges."""

    def __init__(self, limit: int):
        self.limit = limit
        self.workers = 0
        self.waiting = []  # heap of (priority, arrival, batch)
        self.arrivals = itertools.count()

    def submit(self, batch: Batch) -> None:
        """On the loop: queues the batch and starts the workers it can use."""
        heapq.heappush(self.waiting, (batch.priority, next(self.arrivals), batch))
        loop = asyncio.get_running_loop()
        for _ in range(min(self.limit - self.workers, len(batch.parts))):
            self.workers += 1
            loop.create_task(self._work())

    async def _work(self) -> None:
        try:
            while (taken := next_part(self.waiting)) is not None:
                batch, i = taken
                try:
                    await batch.request(i)
                except BaseException as error:  # cancelled (the loop closes): the caller hears of it
                    batch.fail(error)
                    if not isinstance(error, Exception):
                        raise
        finally:
            self.workers -= 1


def next_part(waiting: list):
    """(batch, part) to send next from ``waiting``, a heap of (priority, arrival, batch): the
    next part of the most urgent batch that has parts left; None when none has."""
    while waiting:
        batch = waiting[0][2]
        if batch.sent < len(batch.parts):
            batch.sent += 1
            return batch, batch.sent - 1
        heapq.heappop(waiting)
    return None


_REQUESTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # event loop -> its Requests


def submit(batch: Batch) -> None:
    loop = asyncio.get_running_loop()
    requests = _REQUESTS.get(loop)
    if requests is None:
        requests = _REQUESTS[loop] = Requests(REQUESTS_IN_FLIGHT)
    requests.submit(batch)


def pool() -> ThreadPoolExecutor:
    return per_process("thread pool", lambda: ThreadPoolExecutor(THREADS_IN_FLIGHT, thread_name_prefix="mmidx-remote"))
