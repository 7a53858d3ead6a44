"""The process's ranged requests: batches queued by priority, at most REQUESTS_IN_FLIGHT in
flight (fewer while a server is overloaded: InFlight), each part retried with backoff while
that is safe; read-ahead marked as such."""

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
from .answers import SlowBody, check_length, classify, overloaded, typed_error
from .objects import RemoteObject
from .process_state import per_process
from .server_waits import MAX_WAIT_SECONDS, MAX_WAITS, WaitBudget, host_of

logger = logging.getLogger(__name__)

# Ranged requests in flight at once, per process (all gathers together). Latency is hidden when
# this many requests cover a round trip: at 25 ms, 512 keep up to ~20,000 requests/s going,
# more than one core of client code issues (~10,000/s at ~100 us each). On a 200M-token corpus
# at 25 ms: 256 in flight gave 1,700 samples/s, 512 2,390, 1,024 1,640 (its cost per request
# outgrew what it hid).
REQUESTS_IN_FLIGHT = 512
# Requests in flight at first (InFlight doubles them per round trip up to REQUESTS_IN_FLIGHT, 3
# round trips, unless the server is overloaded): 512 sent at once to a server that cannot
# answer them queue there until they time out, and it answers them all the same, to no one.
FIRST_IN_FLIGHT = 64
# Threads for synchronous filesystems (fsspec's without an async API): each holds a stack.
THREADS_IN_FLIGHT = 128
BACKOFF_SECONDS = 0.1  # doubled per attempt, jittered, at most BACKOFF_MAX_SECONDS
BACKOFF_MAX_SECONDS = 4.0
TIMER_SLACK = 0.005  # seconds a timer of the event loop may fire early
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


# Threads for gathers from several files made at once (concurrently): each waits on round trips.
CONCURRENT_GATHERS = 16


def concurrently(calls: list) -> list:
    """``[call() for call in calls]``, the calls made at once in threads of this process, each
    with the caller's fetch context (background_fetches: its priority and its drop still apply).
    For reads of several remote files that one table needs: one after another, each would wait
    its own round trips (a blend of 50 prefixes: 50 round trips a table)."""
    if len(calls) < 2:
        return [call() for call in calls]
    dropped, priority = fetch_context()

    def run(call):
        with background_fetches(dropped, priority) if dropped is not None else contextlib.nullcontext():
            return call()

    pool = per_process("concurrent-gathers",
                       lambda: ThreadPoolExecutor(CONCURRENT_GATHERS, thread_name_prefix="mmidx-gathers"))
    return list(pool.map(run, calls))


_LIMITS: "weakref.WeakSet" = weakref.WeakSet()  # every InFlight of this process


def restore_in_flight() -> None:
    """Every client's requests in flight as in a new process (a test's overloaded server does
    not slow the next test's healthy one)."""
    for limit in list(_LIMITS):
        limit.restart()


class InFlight:
    """How many requests may be in flight now, between 1 and ``ceiling`` (REQUESTS_IN_FLIGHT),
    as TCP sizes its window. It starts at FIRST_IN_FLIGHT and grows by one per answer (doubling
    per round trip) to the ceiling, until a server shows it is sent more than it can answer
    (answers.overloaded: a timeout, a dropped or refused connection, 429/503/504, an answer
    below the speed floor): then it is halved, and from there grows by one per round trip's
    worth of answers (``limit`` answers). A healthy server reaches the ceiling within a few
    round trips and keeps it. moto at 25 ms with a 300 MB object (each ranged GET costs it a
    copy of the object, ~0.25 s of one core), sent 512 at once, queued them until every one
    timed out: 6,313 GETs delivered 197 KB in 394 s; the requests it had queued were still
    answered, to no one, long after.

    One round of failures is one signal: only a request sent after the last cut cuts again
    (``cuts`` is read when a request is sent, :meth:`failed` is given it back), or the 512
    timeouts of one overloaded round would take the limit to 1 at once. The limit is the
    process's, all hosts together, as the queue is: the requests of one fetch go to one host."""

    def __init__(self, ceiling: int):
        self.ceiling = ceiling
        self.cuts = 0
        self.restart()
        _LIMITS.add(self)

    def restart(self) -> None:
        self.limit = min(FIRST_IN_FLIGHT, self.ceiling)
        self.doubling = True  # until the first overload signal
        self.answers = 0  # since the limit last grew (after the first signal)

    def now(self) -> int:
        return self.limit

    def answered(self) -> None:
        if self.limit >= self.ceiling:
            return
        if self.doubling:
            self.limit += 1
            return
        self.answers += 1
        if self.answers >= self.limit:
            self.limit, self.answers = self.limit + 1, 0

    def failed(self, error, cuts_at_send: int) -> None:
        """A request sent when :attr:`cuts` was ``cuts_at_send`` failed with ``error``."""
        if cuts_at_send != self.cuts or not overloaded(error):
            return
        before = self.now()
        self.limit, self.answers, self.doubling = max(1, self.limit // 2), 0, False
        self.cuts += 1
        logger.info(f"{type(error).__name__}: {error}: a server is overloaded; {before} -> {self.now()} requests "
                    "in flight at once (grown back as answers come)")


class Batch:
    """The requests of one fetch: sent by an event loop's :class:`Requests`, answered (every
    body, or the first error) through ``future``, which the calling thread waits on."""

    __slots__ = ("parts", "send", "retries", "priority", "dropped", "results", "remaining", "sent", "future",
                 "max_wait", "max_waits", "waited", "slowed")

    def __init__(self, parts, send, retries: int, priority: int, dropped: threading.Event | None,
                 max_wait: float = MAX_WAIT_SECONDS, max_waits: int = MAX_WAITS):
        """``send``: the coroutine function that fetches one part (None for curl.py's);
        ``max_wait`` / ``max_waits``: the seconds and the times a part may wait in all when
        servers ask it to (server_waits.WaitBudget)."""
        self.parts, self.send, self.retries, self.priority, self.dropped = parts, send, retries, priority, dropped
        self.results = [None] * len(parts)
        self.remaining = len(parts)
        self.sent = 0  # parts[:sent] have been taken by a worker
        self.future = concurrent.futures.Future()
        self.max_wait, self.max_waits = max_wait, max_waits
        self.waited = {}  # part -> its WaitBudget (made at its first wait)
        self.slowed = set()  # parts an answer of was slower than the speed floor (answers.SlowBody)

    async def request(self, i: int, attempt: int, in_flight: InFlight) -> tuple[float, int] | None:
        """Attempt ``attempt`` of part i: None when it is over (the body kept, or the batch
        failed), else ``(seconds to wait, next attempt)`` (next_try). ``in_flight`` hears of
        the answer or the failure."""
        obj, start, stop, route = self.parts[i]
        cuts = in_flight.cuts
        try:
            check_wanted(obj, start, stop, self.dropped)
            data = check_length(obj, start, stop, await self.send(obj, start, stop, route))
        except Exception as error:  # noqa: BLE001 (classified)
            in_flight.failed(error, cuts)
            return self.next_try(i, error, attempt)
        in_flight.answered()
        self.answered(i, data)
        return None

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
            budget = self.waited.get(i)
            if budget is None:
                budget = self.waited[i] = WaitBudget(self.max_wait, self.max_waits)
            try:
                return budget.take(host_of(error.url), *told, obj.url, start, stop), attempt
            except RemoteReadError as failure:
                failure.__cause__ = error
                self.fail(failure)
                return None
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
    stay bounded; fewer while a server is overloaded (``in_flight``: a worker beyond its limit
    stops after its request, one more starts as it grows back). Waiting requests go out by
    batch, lowest priority first (the table a stream waits for, then gathers in the order the
    stream reads them), then by arrival.

    Sent by up to ``limit`` worker coroutines, each taking the next request when its last one is
    answered: a task, a gather slot and a semaphore future per request were 40% of the event
    loop's CPU (py-spy, 200M tokens at 25 ms), and the loop's thread is what bounds a stream
    of many small ranges."""

    def __init__(self, limit: int):
        self.in_flight = InFlight(limit)
        self.workers = 0
        self.waiting = []  # heap of (priority, arrival, batch)
        self.retrying = []  # heap of (due, arrival, batch, part, attempt): a retry holds no worker while it waits
        self.arrivals = itertools.count()

    def submit(self, batch: Batch) -> None:
        """On the loop: queues the batch and starts the workers it can use."""
        heapq.heappush(self.waiting, (batch.priority, next(self.arrivals), batch))
        self._start_workers(len(batch.parts))

    def _start_workers(self, wanted: int) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(min(self.in_flight.now() - self.workers, wanted)):
            self.workers += 1
            loop.create_task(self._work())

    def _next(self, now: float):
        """(batch, part, attempt) to send now: a retry that is due, else the next waiting part; or None."""
        while self.retrying and self.retrying[0][0] <= now:
            _, _, batch, i, attempt = heapq.heappop(self.retrying)
            if not batch.future.done():
                return batch, i, attempt
        taken = next_part(self.waiting)
        return None if taken is None else (*taken, 0)

    async def _work(self) -> None:
        loop, in_flight = asyncio.get_running_loop(), self.in_flight
        try:
            # A worker beyond the limit (cut: an overloaded server) stops after its request.
            # A retry due within TIMER_SLACK is due: the wake-up call_later makes for it may come
            # that much early (uvloop's timers are in milliseconds), and would find nothing to do.
            while self.workers <= in_flight.now() and (taken := self._next(loop.time() + TIMER_SLACK)) is not None:
                batch, i, attempt = taken
                try:
                    again = await batch.request(i, attempt, in_flight)
                except BaseException as error:  # cancelled (the loop closes): the caller hears of it
                    batch.fail(error)
                    if not isinstance(error, Exception):
                        raise
                    continue
                if again is not None:
                    delay, attempt = again
                    heapq.heappush(self.retrying, (loop.time() + delay, next(self.arrivals), batch, i, attempt))
                    loop.call_later(delay, self._start_workers, 1)
                if self.workers < in_flight.now() and self.waiting:  # grown back: one more worker
                    self._start_workers(1)
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
