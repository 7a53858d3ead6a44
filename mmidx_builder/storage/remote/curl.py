"""HTTP ranges through libcurl's multi interface (pycurl), when the ``remote`` extra installed it.

A stream over a corpus far larger than a read-ahead gather is one request per piece (4-5 per
sample), and it is bound by the client's CPU per request in one interpreter. aiohttp spends
~70 us of the event loop's thread on each (writing the request, parsing the answer into its
objects); libcurl does the same in C, with a handful of Python calls around each request. The
whole stream's CPU per request went from 86 to 54 us, 2,739 -> 3,114 samples/s (200M tokens,
25 ms, benchmarks/bench_remote.py --http-clients auto,aiohttp). One thread drives every
transfer of the process (``_Transfers``), up to REQUESTS_IN_FLIGHT at once (fewer while a server
is overloaded: request_queue.InFlight), most urgent batch first, as the aiohttp path does;
libcurl's event API tells it which sockets to watch.

Only plain HTTP filesystems take this path: options this module does not translate (an
aiohttp ``auth``, ``ssl``, cookies, a session factory) keep a filesystem on aiohttp
(:func:`usable`). What is translated, as aiohttp does it:

- the filesystem's headers, ``If-Match`` with the ETag seen at open, a Hub file's resolve URL
  and token headers (http.HttpTarget makes them for both paths);
- ``trust_env`` (which ``datasets`` sets): the proxy aiohttp would take from the environment
  and a ``~/.netrc`` login; without it no proxy at all (libcurl would read the variables
  itself otherwise);
- certificates: Python's default verify paths (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured),
  which is what aiohttp's default SSL context trusts; where Python finds no store there,
  certifi's (requests' and httpx', so the Hub's own downloads');
- redirects followed (at most 10, as aiohttp), a total timeout per request.

Answers are checked as the aiohttp path's (answers.check_answer, from the headers libcurl
hands to ``_Transfer.header``), and faults classified alike (answers.classify): an HTTP status
through answers.HTTPStatus, libcurl's transport errors as ConnectionError or TimeoutError
(retried), a bad certificate or URL as :class:`CurlError` (not retried). A 206 longer than the
range is stopped at the first excess byte; a 200 (the whole file) is cut to the range and
stopped at its end.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import re
import select
import ssl
import threading
import time

from ...errors import RemoteReadError
from .answers import SlowBody, check_answer, check_length
from .http import HttpTarget, trusted_environment
from .objects import RemoteObject
from .process_state import per_process
from .request_queue import REQUESTS_IN_FLIGHT, InFlight, check_wanted, next_part
from .server_waits import PAUSES
from .request_queue import Batch as _RequestBatch  # the fields, answers and failures a batch has on either path

# libcurl's transport errors that a new attempt may cure (the rest, a bad certificate or URL,
# are refused at once): couldn't resolve / connect, partial file, send / receive errors, got
# nothing, HTTP/2 stream errors, TLS handshake failures (transient on a busy endpoint).
_TIMEOUTS = {28}
_RETRIED = {5, 6, 7, 16, 18, 35, 52, 55, 56, 92}
# CURLE_OPERATION_TIMEDOUT's messages while connecting (TCP, TLS, name resolution): the
# CONNECTTIMEOUT set from the speed floor, a silent server, tried once more as a slow one is.
_CONNECTING = re.compile(r"Connection timed out|SSL connection timeout|Resolving timed out|Failed to connect",
                         re.IGNORECASE)
_TOO_MUCH = 23  # CURLE_WRITE_ERROR: our write callback stopped the body (too long, or the range's end reached)


class CurlError(Exception):
    """A libcurl error no retry cures (``code``: libcurl's CURLcode)."""

    def __init__(self, code: int, message: str):
        super().__init__(f"libcurl error {code}: {message}")
        self.code = code


def available() -> bool:
    try:
        import pycurl  # noqa: F401
    except ImportError:
        return False
    return True


def usable(fs) -> bool:
    """Whether ``fs`` (fsspec's HTTPFileSystem) has only options this module translates."""
    return (available() and set(fs.kwargs) <= {"headers"} and set(fs.client_kwargs) <= {"trust_env"}
            and type(fs).__name__ == "HTTPFileSystem")


class _Target:
    """One file's requests as libcurl takes them, from http.HttpTarget."""

    __slots__ = ("obj", "url", "headers", "proxy", "proxy_auth", "version", "host")

    def __init__(self, fs, obj: RemoteObject, route, environment):
        made = HttpTarget(fs, obj, route, environment, None)
        self.obj, self.version, self.host = obj, made.version, made.host
        self.url = str(made.url).encode()
        self.headers = [f"{k}: {v}" for k, v in made.headers.items()]
        proxy = made.options.get("proxy")
        self.proxy = str(proxy) if proxy is not None else ""  # "": no proxy, not libcurl's own env lookup
        auth = made.options.get("proxy_auth")
        self.proxy_auth = f"{auth.login}:{auth.password}" if auth is not None else None


class _Batch(_RequestBatch):
    """The requests of one fetch (request_queue.Batch), with what libcurl is given for each file."""

    __slots__ = ("targets", "timeout", "floor")

    def __init__(self, parts, targets, retries, timeout, priority, dropped, max_wait, floor, max_waits):
        super().__init__(parts, None, retries, priority, dropped, max_wait, max_waits)
        self.targets, self.timeout, self.floor = targets, timeout, floor


class _Transfer:
    """One request's answer as libcurl hands it over: the header lines of every response
    (after redirects: the last one's are used), and the body's bytes of the range. A 206
    longer than the range is stopped at the first excess byte; a 200 (the whole file) is cut
    to ``[start, stop)`` and stopped there, however long the file.

    libcurl calls its header function once per header line, ~8 a response: a Python method
    there, parsing each line, was ~3% of the process's GIL time (py-spy, 20 MB .bin at 25 ms).
    The lines are now kept by ``lines.append`` (no Python frame) and parsed once, when the
    transfer ends (:meth:`answer`)."""

    __slots__ = ("start", "stop", "size", "lines", "chunks", "position", "cut")

    def __init__(self, start: int, stop: int, size: int):
        self.start, self.stop, self.size = start, stop, size
        self.lines, self.chunks, self.position = [], [], 0
        self.cut = None  # at the first byte of the body: whether it is the whole file, to cut the range from

    def answer(self) -> tuple[int, "_Fields"]:
        """The status and the header fields of the last response: the one after redirects and
        ``100 Continue``."""
        first, status = self._last_response()
        return status, _Fields(b"".join(self.lines[first:]).decode("latin-1") if first else "")

    def _last_response(self) -> tuple[int, int]:
        """(index of the first header line of the last response, its status); (0, 0) without one."""
        lines = self.lines
        first = len(lines)
        while first and not lines[first - 1].startswith(b"HTTP/"):  # no field name holds a "/"
            first -= 1
        if not first:
            return 0, 0
        parts = lines[first - 1].split()
        return first, int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

    def write(self, data: bytes):
        position = self.position
        self.position += len(data)
        if self.cut is None:
            self.cut = self._last_response()[1] == 200 and (self.start, self.stop) != (0, self.size)
        if self.cut:  # the whole file: cut the range
            if self.position > self.start:
                self.chunks.append(data[max(0, self.start - position):self.stop - position])
            return 0 if self.position >= self.stop else None
        self.chunks.append(data)
        return 0 if self.position > self.stop - self.start else None  # more than the range: stop at once

    def body(self) -> bytes:
        return b"".join(self.chunks)


class _Fields:
    """A response's header fields as check_answer and server_waits read them (``get`` of a
    lower-case name: the value, stripped, of its last line; ``items``), found in the block of
    header lines when asked for: check_answer asks for 3-4 of a response's ~8."""

    __slots__ = ("block", "low")

    def __init__(self, block: str):
        # Lines end in CRLF, or LF alone from an old server (libcurl takes both): a field is
        # found after an LF, its value stripped of the CR.
        self.block = "\n" + block
        self.low = self.block.lower()

    def get(self, name: str, default=None):
        key = "\n" + name + ":"
        at = self.low.rfind(key)
        if at < 0:
            return default
        at += len(key)
        end = self.low.find("\n", at)
        return self.block[at:end if end >= 0 else len(self.block)].strip(" \t\r")

    def items(self):
        fields = {}
        for line in self.block.split("\n"):
            name, colon, value = line.partition(":")
            if colon:
                fields[name.strip().lower()] = value.strip(" \t\r")
        return fields.items()


class _Transfers:
    """The process's libcurl transfers, driven by one thread: batches wait in a heap by
    (priority, arrival); retries wait their backoff without holding a connection."""

    def __init__(self, limit: int):
        import pycurl

        self.pycurl = pycurl
        self.in_flight = InFlight(limit)
        self.lock = threading.Condition()
        self.waiting = []  # heap of (priority, arrival, batch)
        self.retrying = []  # heap of (due, arrival, batch, part, attempt)
        self.arrivals = itertools.count()
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_MAX_TOTAL_CONNECTIONS, limit)
        # libcurl's event API: it tells which sockets to watch and when its next timeout is, and
        # is told which socket is ready. curl_multi_perform would walk every transfer at each
        # wake-up: at 512 in flight that was most of this thread's time.
        self.poll = select.epoll()
        self.wake_read, self.wake_write = os.pipe()
        os.set_blocking(self.wake_read, False)
        os.set_blocking(self.wake_write, False)
        self.poll.register(self.wake_read, select.EPOLLIN)
        self.watched = set()
        self.deadline = None  # libcurl's next timeout (time.monotonic()), None: none
        self.multi.setopt(pycurl.M_SOCKETFUNCTION, self._watch)
        self.multi.setopt(pycurl.M_TIMERFUNCTION, self._timer)
        self.idle = []
        self.active = 0
        verify = ssl.get_default_verify_paths()
        self.cafile, self.capath = verify.cafile, verify.capath
        if not (self.cafile or self.capath):  # no store where Python looks: the one requests and httpx use
            with contextlib.suppress(ImportError):
                import certifi

                self.cafile = certifi.where()
        threading.Thread(target=self._run, name="mmidx-remote-curl", daemon=True).start()

    def submit(self, batch: _Batch) -> None:
        with self.lock:
            heapq.heappush(self.waiting, (batch.priority, next(self.arrivals), batch))
        with contextlib.suppress(BlockingIOError):  # a full pipe: the thread has wake-ups pending anyway
            os.write(self.wake_write, b"x")

    def call_locked(self, function, *args) -> None:
        with self.lock:
            function(*args)

    # --- the thread ------------------------------------------------------------------------
    def _watch(self, what: int, fd: int, multi, data) -> None:
        pycurl = self.pycurl
        if what == pycurl.POLL_REMOVE:
            if fd in self.watched:
                self.watched.discard(fd)
                self.poll.unregister(fd)
            return
        mask = (select.EPOLLIN if what & pycurl.POLL_IN else 0) | (select.EPOLLOUT if what & pycurl.POLL_OUT else 0)
        if fd in self.watched:
            self.poll.modify(fd, mask)
        else:
            self.watched.add(fd)
            self.poll.register(fd, mask)

    def _timer(self, milliseconds: int) -> None:
        self.deadline = None if milliseconds < 0 else time.monotonic() + milliseconds / 1000

    def _next(self):
        """Under the lock: (batch, part, attempt) to send now, or None."""
        if self.retrying and self.retrying[0][0] <= time.monotonic():
            _, _, batch, i, attempt = heapq.heappop(self.retrying)
            if not batch.future.done():
                return batch, i, attempt
        taken = next_part(self.waiting)
        return None if taken is None else (*taken, 0)

    def _run(self) -> None:
        pycurl, multi = self.pycurl, self.multi
        while True:
            with self.lock:
                while self.active < self.in_flight.now() and (taken := self._next()) is not None:
                    self._start(*taken)
                wait = [d - time.monotonic() for d in (self.deadline, self.retrying[0][0] if self.retrying else None)
                        if d is not None]
            events = self.poll.poll(max(0.0, min(wait)) if wait else -1)
            for fd, mask in events:
                if fd == self.wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_read, 4096)
                    continue
                flags = ((pycurl.CSELECT_IN if mask & (select.EPOLLIN | select.EPOLLHUP) else 0)
                         | (pycurl.CSELECT_OUT if mask & select.EPOLLOUT else 0)
                         | (pycurl.CSELECT_ERR if mask & select.EPOLLERR else 0))
                multi.socket_action(fd, flags)
            if self.deadline is not None and self.deadline <= time.monotonic():
                self.deadline = None
                multi.socket_action(pycurl.SOCKET_TIMEOUT, 0)
            while True:
                queued, done, failed = multi.info_read()
                if done or failed:
                    with self.lock:
                        for handle in done:
                            self._finish(handle, None)
                        for handle, code, message in failed:
                            self._finish(handle, (code, message))
                if not queued:
                    break

    def _start(self, batch: _Batch, i: int, attempt: int) -> None:
        pycurl = self.pycurl
        obj, start, stop, route = batch.parts[i]
        try:
            check_wanted(obj, start, stop, batch.dropped)
        except RemoteReadError as error:
            batch.fail(error)
            return
        target = batch.targets[obj.url, id(route)]
        pause = PAUSES.remaining(target.host)
        if pause:  # the host asked to be left alone (server_waits): not a request before then
            heapq.heappush(self.retrying, (time.monotonic() + pause, next(self.arrivals), batch, i, attempt))
            return
        handle = self.idle.pop() if self.idle else self._new_handle()
        transfer = _Transfer(start, stop, obj.size)
        settings = (target, batch.timeout, batch.floor)
        if handle.settings is None or handle.settings[0] is not target or handle.settings[1:] != settings[1:]:
            # What every request of a file shares is set once per handle and file, not per
            # request (the handles are reused: a batch's requests mostly find their own).
            handle.setopt(pycurl.URL, target.url)
            handle.setopt(pycurl.HTTPHEADER, target.headers)
            handle.setopt(pycurl.PROXY, target.proxy)
            handle.setopt(pycurl.PROXYUSERPWD, target.proxy_auth or "")
            handle.setopt(pycurl.TIMEOUT_MS, int(batch.timeout * 1000))
            # The speed floor: libcurl abandons a transfer slower than this many bytes/s over this many seconds.
            handle.setopt(pycurl.LOW_SPEED_LIMIT, max(1, int(batch.floor[0])))
            handle.setopt(pycurl.LOW_SPEED_TIME, max(1, round(batch.floor[1])))
            # ... which libcurl checks only once connected: a server silent during the TCP or TLS
            # handshake was waited for the whole timeout, retries + 1 times (6 x 60 s).
            handle.setopt(pycurl.CONNECTTIMEOUT_MS, max(1, int(batch.floor[1] * 1000)))
            handle.settings = settings
        handle.setopt(pycurl.RANGE, f"{start}-{stop - 1}")
        handle.setopt(pycurl.HEADERFUNCTION, transfer.lines.append)
        handle.setopt(pycurl.WRITEFUNCTION, transfer.write)
        handle.transfer = (batch, i, attempt, transfer, self.in_flight.cuts, target)
        self.multi.add_handle(handle)
        self.active += 1

    def _new_handle(self):
        pycurl = self.pycurl
        handle = pycurl.Curl()
        handle.setopt(pycurl.FOLLOWLOCATION, 1)
        handle.setopt(pycurl.MAXREDIRS, 10)
        handle.setopt(pycurl.NOSIGNAL, 1)
        handle.settings = None  # (target, timeout, floor) the handle's per-file options were set for
        if self.cafile:
            handle.setopt(pycurl.CAINFO, self.cafile)
        if self.capath:
            handle.setopt(pycurl.CAPATH, self.capath)
        return handle

    def _finish(self, handle, failure) -> None:
        """Under the lock: a transfer ended (``failure``: libcurl's (code, message), else None)."""
        pycurl = self.pycurl
        batch, i, attempt, transfer, cuts, target = handle.transfer
        url = handle.getinfo(pycurl.EFFECTIVE_URL)
        handle.transfer = None
        self.multi.remove_handle(handle)
        self.idle.append(handle)
        self.active -= 1
        if batch.future.done():
            return
        obj, start, stop, route = batch.parts[i]
        try:
            if failure is not None and failure[0] != _TOO_MUCH:
                code, message = failure
                if code in _TIMEOUTS and ("too slow" in message.lower() or _CONNECTING.search(message)):
                    raise SlowBody(f"libcurl: {message}")
                if code in _TIMEOUTS:
                    raise TimeoutError(f"libcurl: {message}")
                raise (ConnectionError(f"libcurl error {code}: {message}") if code in _RETRIED
                       else CurlError(code, message))
            status, headers = transfer.answer()
            check_answer(obj, start, stop, status, headers, url, target.version)
            data = check_length(obj, start, stop, transfer.body())
        except Exception as error:  # noqa: BLE001 (classified by the batch)
            self.in_flight.failed(error, cuts)
            again = batch.next_try(i, error, attempt)
            if again is not None:
                delay, attempt = again
                heapq.heappush(self.retrying, (time.monotonic() + delay, next(self.arrivals), batch, i, attempt))
            return
        self.in_flight.answered()
        batch.answered(i, data)


def fetch(access, fs, parts, dropped: threading.Event | None = None, priority: int = 0) -> list[bytes]:
    """``parts`` ``(obj, start, stop, route)`` on HTTP filesystem ``fs`` (:func:`usable`),
    through libcurl; this thread waits for all of them."""
    if not parts:
        return []
    environment = trusted_environment() if fs.client_kwargs.get("trust_env") else None
    targets = {}
    for obj, _, _, route in parts:
        if (obj.url, id(route)) not in targets:
            targets[obj.url, id(route)] = _Target(fs, obj, route, environment)
    batch = _Batch(parts, targets, access.retries, access.timeout, priority, dropped, access.max_wait,
                   (access.min_speed, access.slow_seconds), access.max_waits)
    transfers = per_process("libcurl transfers", lambda: _Transfers(REQUESTS_IN_FLIGHT))
    transfers.submit(batch)
    return batch.wait(transfers.call_locked)
