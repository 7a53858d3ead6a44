"""Remote token files (``hf://``, ``http(s)://``, ``s3://``, anything fsspec opens) read at the
speed of many requests in flight, not of one round trip per piece.

A sample is a handful of pieces at random places of a ``.bin`` (Megatron shuffles documents),
so a table of 1,000 samples is ~5,000 small ranges. Read one after another, each costs a
round trip (25-100 ms to object storage): ~100x too slow for one GPU. Here every range of a
gather is planned at once and fetched together:

    pieces (token runs)  --plan_runs-->  byte runs  --RemoteAccess.fetch-->  bytes
      sorted by file and offset; the smallest   up to REQUESTS_IN_FLIGHT ranged GETs at once,
      gaps bridged first, within a byte budget  most urgent batch first (_Requests): HTTP and
      (never more than 1.4x the bytes asked     the Hub's resolve URLs on the reader's own loop
      for: see plan_runs)                       (_io_loop), S3 on fsspec's, a thread pool for
                                                synchronous filesystems; optionally through a
                                                local BlockCache

Exactly the bytes asked for are requested (no read-ahead blocks: fsspec's default file cache
fetched 14.8x the bytes over plain HTTP). Faults: a dropped connection, a 5xx, a timeout or
a short body is retried with backoff, ``retries`` times; a file whose ETag or size differs
from what it was when opened is a :class:`RemoteChangedError` naming the file and range
(HTTP sends ``If-Match``, S3 ``IfMatch`` or the version id, so a change is seen by the
server on every request); never wrong or shifted tokens.

:class:`RemoteAccess` is the one place a URL becomes a filesystem: it holds the storage
options (``{protocol: {...}}`` or flat, as ``datasets``' ``storage_options``), the cache
settings, the timeout and retries; it is small, hashable and picklable, and callable like
``open`` for the few text files read remotely. This module does not import ``datasets``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import heapq
import itertools
import json
import logging
import mmap
import os
import random
import threading
import time
import weakref
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from .storage.files import is_remote, remove_quietly, temporary_path
from .errors import MissingPartnerError, RemoteChangedError, RemoteReadError
from .format import BinReader

logger = logging.getLogger(__name__)

# Ranged requests in flight at once, per process (all gathers together). Latency is hidden when
# this many requests cover a round trip: at 25 ms, 512 keep up to ~20,000 requests/s going,
# more than one core of client code issues (~10,000/s at ~100 us each). On a 200M-token corpus
# at 25 ms: 256 in flight gave 1,700 samples/s, 512 2,390, 1,024 1,640 (its cost per request
# outgrew what it hid).
REQUESTS_IN_FLIGHT = 512
# HTTP ranges: "auto" sends them through libcurl (remote_curl.py: less client CPU per request)
# when pycurl is installed and the filesystem's options allow, else through aiohttp; "aiohttp"
# always through aiohttp.
HTTP_CLIENT = "auto"
# Threads for synchronous filesystems (fsspec's without an async API): each holds a stack.
THREADS_IN_FLIGHT = 128
# Planning a gather (plan_runs): gaps between its pieces are fetched (two pieces become one
# request) smallest first while the gap bytes fetched stay within this share of the bytes the
# pieces hold, so a gather never fetches more than 1.4x its bytes (the bound is 1.5x).
# Requests, not bytes, bound a remote stream: a round trip costs 25-100 ms, 64 KiB of transfer
# about 1 ms. A gap longer than MERGE_GAP_BYTES is never fetched.
MERGE_BUDGET = 0.4
MERGE_GAP_BYTES = 1 << 20
# A longer run is fetched in parts of this size, in parallel, and joined.
MAX_REQUEST_BYTES = 8 << 20
RETRIES = 5
BACKOFF_SECONDS = 0.1  # doubled per attempt, jittered, at most BACKOFF_MAX_SECONDS
BACKOFF_MAX_SECONDS = 4.0
TIMEOUT_SECONDS = 60.0  # per request, async filesystems; the Hub client has its own
# The block cache: blocks of this size, one file each, named by content (URL, ETag, size).
CACHE_BLOCK_BYTES = 2 << 20
DEFAULT_MAX_CACHE_BYTES = 16 << 30
CACHE_BATCH_BYTES = 128 << 20  # blocks fetched (and held in memory) at once on a cold cache
_OPEN_BLOCKS = 1024  # block files kept memory-mapped per process


def _backoff(attempt: int) -> float:
    return min(BACKOFF_MAX_SECONDS, BACKOFF_SECONDS * 2 ** attempt) * (0.5 + random.random())


@dataclass(frozen=True)
class RemoteObject:
    """A remote file as seen when opened: its URL, size and version (ETag, S3 version id, or
    None when the store gives neither)."""

    url: str
    size: int
    version: str | None = None
    version_id: str | None = None  # S3 VersionId: pinned reads on a versioned bucket

    @property
    def content_key(self) -> str:
        return hashlib.sha256(f"{self.url}\0{self.size}\0{self.version}\0{self.version_id}".encode()).hexdigest()[:32]


@dataclass(frozen=True, eq=False)
class RemoteAccess:
    """How remote files are reached. ``storage_options``: fsspec options, per protocol
    (``{"s3": {"endpoint_url": ...}}``) or flat (used for any protocol), as ``datasets``
    takes them. ``cache_dir`` / ``max_cache_bytes``: the optional local block cache."""

    storage_options: dict = field(default_factory=dict)
    cache_dir: str | None = None
    max_cache_bytes: int | None = None
    timeout: float = TIMEOUT_SECONDS
    retries: int = RETRIES

    def _key(self) -> str:
        return json.dumps([self.storage_options, self.cache_dir, self.max_cache_bytes, self.timeout, self.retries],
                          sort_keys=True, default=repr)

    def __eq__(self, other) -> bool:
        return isinstance(other, RemoteAccess) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:  # storage options may hold credentials
        return f"RemoteAccess(protocols={sorted(self.storage_options)}, cache_dir={self.cache_dir!r})"

    # --- filesystems -------------------------------------------------------------------
    def options_for(self, url: str) -> dict:
        """The storage options for ``url``'s protocol: its own entry, else the flat options
        (those not named after a protocol), as datasets' streaming ``open`` picks them."""
        import fsspec

        protocol = url.split("://")[0] if "://" in url else "file"
        options = self.storage_options or {}
        if isinstance(options.get(protocol), dict):
            chosen = dict(options[protocol])
        else:
            known = set(fsspec.available_protocols())
            chosen = {k: v for k, v in options.items() if k not in known}
        # Connection pools as large as the requests in flight: botocore keeps 10 connections
        # and aiohttp 100, and requests beyond them would queue.
        if protocol == "s3":
            config = dict(chosen.get("config_kwargs") or {})
            config.setdefault("max_pool_connections", REQUESTS_IN_FLIGHT)
            chosen["config_kwargs"] = config
        elif protocol in ("http", "https"):
            chosen.setdefault("get_client", _http_client)
        return chosen

    def filesystem(self, url: str):
        """(fsspec filesystem, path in it) for ``url``; filesystems are shared per process."""
        import fsspec.core

        protocol = url.split("://")[0]
        key = (os.getpid(), protocol, self._key())
        with _LOCK:
            fs = _FILESYSTEMS.get(key)
        if fs is None:
            options = self.options_for(url)
            if protocol in ("http", "https"):
                options["loop"] = _io_loop()
            fs, _ = fsspec.core.url_to_fs(url, **options)
            with _LOCK:
                fs = _FILESYSTEMS.setdefault(key, fs)
        return fs, fs._strip_protocol(url)

    def __call__(self, path, mode: str = "rb", **kwargs):
        """``open`` for remote paths (dictionaries, metadata): an fsspec file object."""
        import fsspec

        path = os.fspath(path)
        if not is_remote(path):
            return open(path, mode, **kwargs)
        return fsspec.open(path, mode, **{**self.options_for(path), **kwargs}).open()

    # --- objects and bytes ---------------------------------------------------------------
    def stat(self, url: str) -> RemoteObject:
        """Size and version of ``url`` (one request, retried); FileNotFoundError if absent."""
        fs, path = self.filesystem(url)
        for attempt in range(self.retries + 1):
            try:
                info = fs.info(path)
                break
            except Exception as error:  # noqa: BLE001 (classified below)
                if _classify(error) != "retry" or attempt == self.retries:
                    raise
                time.sleep(_backoff(attempt))
        size = info.get("size")
        if size is None:
            raise RemoteReadError(url, 0, 0, "the server reports no size; ranged reads need one")
        version = next((str(info[k]) for k in ("ETag", "etag", "xet_hash", "blob_id", "Last-Modified") if info.get(k)),
                       None)
        lfs = info.get("lfs")
        if version is None and isinstance(lfs, dict) and lfs.get("sha256"):
            version = lfs["sha256"]
        return RemoteObject(url, int(size), version, info.get("VersionId") or None)

    def stat_many(self, urls: list[str]) -> list[RemoteObject]:
        """:meth:`stat` of every URL, many in flight (a folder of raw files)."""
        if len(urls) < 2:
            return [self.stat(u) for u in urls]
        return list(_pool().map(self.stat, urls))

    def fetch(self, objects: list[RemoteObject], starts, stops) -> list[bytes]:
        """Bytes ``[starts[i], stops[i])`` of ``objects[i]`` for every i, all requested at once
        (through the block cache when there is one)."""
        if self.cache_dir:
            return _cache_for(self).fetch(self, objects, starts, stops)
        return self.fetch_remote(objects, starts, stops)

    def fetch_remote(self, objects: list[RemoteObject], starts, stops) -> list[bytes]:
        """As :meth:`fetch`, never through the cache; runs longer than MAX_REQUEST_BYTES are
        fetched in parts."""
        parts, owners = [], []
        for i, (obj, start, stop) in enumerate(zip(objects, starts, stops)):
            for begin in range(int(start), int(stop), MAX_REQUEST_BYTES) if stop > start else ():
                parts.append((obj, begin, min(int(stop), begin + MAX_REQUEST_BYTES)))
                owners.append(i)
        results = [b""] * len(parts)
        by_fs: dict[int, tuple[object, list[int]]] = {}
        routes = {}
        for k, (obj, start, stop) in enumerate(parts):
            if obj.url not in routes:
                routes[obj.url] = self._http_route(obj.url) or (self.filesystem(obj.url)[0], None)
            fs, route = routes[obj.url]
            parts[k] = (obj, start, stop, route)
            by_fs.setdefault(id(fs), (fs, []))[1].append(k)
        for fs, ks in by_fs.values():
            chunk = [parts[k] for k in ks]
            dropped, priority = getattr(_BACKGROUND, "fetches", None) or (None, 0)
            got = (_fetch_async(self, fs, chunk, dropped, priority) if getattr(fs, "async_impl", False)
                   else _fetch_threads(self, fs, chunk, dropped))
            for k, data in zip(ks, got):
                results[k] = data
        if len(parts) == len(objects):
            return results
        joined = [[] for _ in objects]
        for owner, data in zip(owners, results):
            joined[owner].append(data)
        return [b"".join(pieces) for pieces in joined]

    def _http_route(self, url: str):
        """``(HTTP filesystem, (resolve URL, headers))`` a Hub file's ranges are fetched through,
        else None. HfFileSystem fetches a range as one GET of the file's resolve URL with the
        token's headers, in a thread each; the same GET on the HTTP filesystem's event loop costs
        the client a fraction of the CPU (see _get_http)."""
        if not url.startswith("hf://"):
            return None
        key = (os.getpid(), self._key(), url)
        with _LOCK:
            route = _ROUTES.get(key)
        if route is None:
            from huggingface_hub.utils import build_hf_headers

            fs, path = self.filesystem(url)
            if type(fs).__name__ != "HfFileSystem":
                return None
            resolve_url = fs.url(path)
            route = (self.filesystem(resolve_url)[0], (resolve_url, build_hf_headers(token=fs.token)))
            with _LOCK:
                route = _ROUTES.setdefault(key, route)
        return route

    def open_pair(self, idx_url: str, bin_url: str) -> tuple[bytes, RemoteObject]:
        """The whole ``.idx`` (one request, or the block cache) and the ``.bin``'s object; a missing file of the
        pair is a MissingPartnerError naming it."""
        found = {}
        for url in (idx_url, bin_url):
            try:
                found[url] = self.stat(url)
            except FileNotFoundError:
                found[url] = None
        if found[idx_url] is None and found[bin_url] is None:
            raise MissingPartnerError(idx_url[:-4], "files", f"{idx_url} and {bin_url}", "neither exists")
        for present, missing in ((idx_url, bin_url), (bin_url, idx_url)):
            if found[missing] is None:
                raise MissingPartnerError(missing, "file", "the partner of " + present, "no such file",
                                          hint="a .bin/.idx pair needs both files")
        idx = found[idx_url]
        (data,) = self.fetch([idx], [0], [idx.size]) if idx.size else (b"",)
        return data, found[bin_url]


_LOCK = threading.Lock()
_ROUTES: dict = {}  # (pid, access, hf:// URL) -> RemoteAccess._http_route
_BACKGROUND = threading.local()  # .fetches: (dropped event, priority) of the fetches this thread makes (background_fetches)
# Set when the interpreter exits: requests not yet sent are not sent. Background read-ahead
# threads are joined at exit (concurrent.futures), and without this a script that stops
# after a few samples would wait for up to read_ahead_bytes of fetches it will never use.
_EXITING = threading.Event()
if hasattr(threading, "_register_atexit"):  # runs before non-daemon threads are joined (as concurrent.futures does)
    threading._register_atexit(_EXITING.set)
_FILESYSTEMS: dict = {}
_PER_PROCESS: dict = {}  # name -> (pid, what per_process made in that process)


def per_process(name: str, make):
    """``make()``, once per process: threads and the event loops they run do not survive a fork."""
    with _LOCK:
        pid, made = _PER_PROCESS.get(name, (None, None))
        if pid != os.getpid():
            made = make()
            _PER_PROCESS[name] = (os.getpid(), made)
        return made


def _io_loop() -> asyncio.AbstractEventLoop:
    """The event loop HTTP ranges are fetched on, in a thread of its own: uvloop's when it is
    installed (the ``remote`` extra). A stream of many small ranges is bound by this loop's
    thread, and uvloop's transports cost less per request than asyncio's: ~100 -> ~90 us of
    client CPU per request, 2,390 -> ~2,500 samples/s (200M tokens at 25 ms; runs vary by 10%)."""
    def make():
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="mmidx-remote-io", daemon=True).start()
        return loop

    return per_process("io loop", make)


async def _http_client(**client_kwargs):
    """fsspec's HTTP session with a connection pool for REQUESTS_IN_FLIGHT requests.

    ``trust_env`` (which datasets sets for HTTP) is taken off the session and applied by
    _get_http once per host instead: aiohttp with ``trust_env`` reads the proxy variables and
    ~/.netrc again in an executor thread for every request, which measured 2.5x the client's
    CPU per ranged GET (1,000 against 2,400 samples/s at 25 ms)."""
    import aiohttp

    client_kwargs.pop("trust_env", None)
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=REQUESTS_IN_FLIGHT), **client_kwargs)


# The variables aiohttp's trust_env reads: a change of any of them is looked up again.
_TRUSTED_ENVIRONMENT = tuple(name for scheme in ("http", "https", "all", "no", "ws", "wss")
                             for name in (f"{scheme.upper()}_PROXY", f"{scheme}_proxy")) + ("NETRC", "HOME")


def _trusted_environment() -> tuple:
    """The variables trust_env reads, as they are now (taken once per gather: reading 14 of
    them per request cost 10% of the client's CPU)."""
    return tuple(map(os.environ.get, _TRUSTED_ENVIRONMENT))


@functools.lru_cache(maxsize=256)
def _environment_for(scheme: str, host: str, has_auth: bool, environment: tuple) -> tuple:
    """What aiohttp's ``trust_env`` adds to a request to ``scheme://host`` in ``environment``
    (_trusted_environment): the proxy of the variables (HTTP_PROXY, NO_PROXY, ...) and a
    ~/.netrc login when the request has no credentials; looked up once per host and
    environment."""
    from aiohttp.helpers import basicauth_from_netrc, get_env_proxy_for_url, netrc_from_env
    from yarl import URL

    found = {}
    try:
        found["proxy"], found["proxy_auth"] = get_env_proxy_for_url(URL.build(scheme=scheme, host=host))
    except LookupError:
        pass
    if not has_auth:
        try:
            found["auth"] = basicauth_from_netrc(netrc_from_env(), host)
        except LookupError:
            pass
    return tuple(found.items())


# --- planning: pieces -> runs -------------------------------------------------------------

def plan_runs(file_ids, starts, stops, sizes, budget: float = MERGE_BUDGET) -> tuple[np.ndarray, np.ndarray,
                                                                                     np.ndarray, np.ndarray, np.ndarray]:
    """Byte runs covering every piece ``[starts[i], stops[i])`` of file ``file_ids[i]``:
    ``(run_file, run_start, run_stop, piece_run, piece_offset)``, where piece i is bytes
    ``piece_offset[i]:`` of run ``piece_run[i]``.

    The plan is global over the gather: pieces are sorted by file and offset, overlapping and
    touching ones share a run, and the gaps between neighbours of one file are bridged smallest
    first while the bridged bytes add up to at most ``budget`` times the bytes the pieces cover
    (and none is longer than MERGE_GAP_BYTES). So the runs hold at most ``1 + budget`` times the
    pieces' bytes, in as few requests as that allows: the denser a gather (more rows planned
    together), the fewer requests per piece.
    """
    file_ids, starts, stops = (np.asarray(a, np.int64) for a in (file_ids, starts, stops))
    n = len(starts)
    if n == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, empty
    held = stops > starts
    if not held.all():  # an empty piece holds no bytes: it must not split a gap in two smaller ones
        piece_run, piece_offset = np.zeros(n, np.int64), np.zeros(n, np.int64)  # empty: bytes 0:0 of run 0
        if not held.any():
            return file_ids[:1], starts[:1] * 0, starts[:1] * 0, piece_run, piece_offset
        run_file, run_start, run_stop, piece_run[held], piece_offset[held] = plan_runs(
            file_ids[held], starts[held], stops[held], sizes, budget)
        return run_file, run_start, run_stop, piece_run, piece_offset
    # One line of positions: each file after the previous one (a gap between files is never bridged).
    base = np.concatenate(([0], np.cumsum(np.asarray(sizes, np.int64) + 1)[:-1]))
    begin, end = base[file_ids] + starts, base[file_ids] + stops
    order = np.lexsort((end, begin))
    begin_sorted, end_sorted, file_sorted = begin[order], end[order], file_ids[order]
    covered = np.maximum.accumulate(end_sorted)
    gaps = begin_sorted[1:] - covered[:-1]  # <= 0: overlapping or touching
    union = int(np.maximum(0, end_sorted - np.maximum(begin_sorted, np.concatenate(([begin_sorted[0]], covered[:-1]))))
                .sum())
    join = gaps <= 0
    candidates = np.flatnonzero(~join & (file_sorted[1:] == file_sorted[:-1]) & (gaps <= MERGE_GAP_BYTES))
    if len(candidates):
        by_size = candidates[np.argsort(gaps[candidates], kind="stable")]
        affordable = np.cumsum(gaps[by_size]) <= budget * union
        join[by_size[affordable]] = True
    new_run = np.concatenate(([True], ~join))
    first = np.flatnonzero(new_run)
    run_begin = begin_sorted[first]
    run_end = np.maximum.reduceat(end_sorted, first)
    run_file = file_sorted[first]
    run_of_sorted = np.cumsum(new_run) - 1
    piece_run = np.empty(n, np.int64)
    piece_run[order] = run_of_sorted
    piece_offset = begin - run_begin[piece_run]
    return run_file, run_begin - base[run_file], run_end - base[run_file], piece_run, piece_offset


def read_ranges(access: RemoteAccess, objects: list[RemoteObject], file_ids, starts, stops) -> list[memoryview]:
    """Bytes ``[starts[i], stops[i])`` of ``objects[file_ids[i]]`` for every i, fetched as
    merged runs, all at once."""
    run_file, run_start, run_stop, piece_run, piece_offset = plan_runs(
        file_ids, starts, stops, [o.size for o in objects])
    runs = access.fetch([objects[f] for f in run_file.tolist()], run_start.tolist(), run_stop.tolist())
    views = [memoryview(r) for r in runs]
    lengths = (np.asarray(stops, np.int64) - np.asarray(starts, np.int64)).tolist()
    return [views[r][o:o + n] for r, o, n in zip(piece_run.tolist(), piece_offset.tolist(), lengths)]


# --- fetching: the requests themselves ---------------------------------------------------

def _status(error) -> int | None:
    """The HTTP status behind an error, of any client (aiohttp, requests/httpx, botocore), also
    through the causes s3fs and huggingface_hub chain to the errors they raise."""
    seen = 0
    while error is not None and seen < 5:
        response = getattr(error, "response", None)
        if isinstance(response, dict):  # botocore's ClientError
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(status, int):
                return status
        for holder in (error, response):
            for name in ("status", "status_code"):
                value = getattr(holder, name, None)
                if isinstance(value, int):
                    return value
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _classify(error) -> str:
    """``"changed"`` (the object is not the one opened), ``"retry"`` or ``"fatal"``."""
    if isinstance(error, _ShortBody):
        return "retry"
    if isinstance(error, FileNotFoundError):
        return "changed"
    status = _status(error)
    if status in (412, 416):
        return "changed"
    if status is not None:
        return "retry" if status >= 500 or status in (408, 429) else "fatal"
    if isinstance(error, PermissionError):
        return "fatal"
    if isinstance(error, (TimeoutError, asyncio.TimeoutError, ConnectionError, OSError)):
        return "retry"
    module = type(error).__module__ or ""
    if module.startswith(("aiohttp", "httpx", "requests", "urllib3", "botocore", "aiobotocore", "http.client")):
        return "retry"
    return "fatal"


def _check_wanted(obj: RemoteObject, start: int, stop: int, dropped: threading.Event | None) -> None:
    """Before each request: not once the interpreter exits or the caller's read was dropped."""
    if _EXITING.is_set():
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


class _ShortBody(Exception):
    pass


def _check_length(obj: RemoteObject, start: int, stop: int, data: bytes) -> bytes:
    if len(data) == stop - start:
        return data
    if len(data) > stop - start:
        raise RemoteReadError(obj.url, start, stop, f"the server sent {len(data)} bytes for a range of {stop - start} "
                                                     "(it does not honour Range requests)")
    raise _ShortBody(f"{len(data)} of {stop - start} bytes")


class HTTPStatus(Exception):
    """An HTTP answer that is not the range: ``status`` is what _status reads."""

    def __init__(self, status: int, url):
        super().__init__(f"HTTP {status} from {url}")
        self.status = status


def _check_status(obj: RemoteObject, start: int, stop: int, status: int, url) -> None:
    """The answer to a ranged GET of either HTTP client, by its status (``url``: where it came
    from, after redirects)."""
    if status == 404:
        raise FileNotFoundError(obj.url)
    if status >= 400:
        raise HTTPStatus(status, url)
    if status != 206 and (start, stop) != (0, obj.size):
        raise RemoteReadError(obj.url, start, stop, f"the server answered {status} with the whole file "
                                                    "(it does not honour Range requests)")


def _failure(obj: RemoteObject, start: int, stop: int, error, attempts: int):
    kind = _classify(error)
    if kind == "changed":
        return RemoteChangedError(obj.url, f"bytes [{start}, {stop})",
                                  f"the file seen when it was opened (size {obj.size}, version {obj.version})",
                                  f"a changed or removed file ({type(error).__name__}: {error})", offset=start,
                                  hint="the remote file changed while it was read; reopen the dataset")
    return RemoteReadError(obj.url, start, stop, f"{type(error).__name__}: {error} (after {attempts} attempt(s))")


class _HttpTarget:
    """What every ranged GET of one file on fsspec's HTTP session shares, worked out once per
    gather (an encoded URL, the filesystem's request options and headers, ``If-Match``, the
    proxy and login ``trust_env`` finds): per request this was a fifth of the client's CPU.
    ``route``: ``(URL, headers)`` to fetch instead of ``obj.url`` (a Hub file's resolve URL,
    pinned to a revision as ``datasets`` resolves it: no ``If-Match``, the Hub's ETag is not
    the one ``stat`` saw). ``environment``: _trusted_environment, or None without trust_env.
    ``timeout``: aiohttp's, cheaper than a task per request for asyncio.wait_for."""

    __slots__ = ("obj", "url", "headers", "options")

    def __init__(self, fs, obj: RemoteObject, route, environment: tuple | None, timeout):
        options = dict(fs.kwargs)
        options.setdefault("timeout", timeout)
        headers = dict(options.pop("headers", None) or {})
        if route is not None:
            headers.update(route[1])
        elif obj.version and not obj.version.startswith("W/"):
            headers["If-Match"] = obj.version  # a changed file answers 412, never other bytes
        url = fs.encode_url(route[0] if route is not None else obj.url)
        if environment is not None and url.host:
            has_auth = "auth" in options or "Authorization" in headers or url.user is not None
            for key, value in _environment_for(url.scheme, url.host, has_auth, environment):
                if key == "auth":  # a ~/.netrc login, as the header aiohttp would make of it
                    headers["Authorization"] = value.encode()
                else:
                    options.setdefault(key, value)
        self.obj, self.url, self.headers, self.options = obj, url, headers, options

    async def get(self, session, start: int, stop: int) -> bytes:
        obj = self.obj
        headers = {**self.headers, "Range": f"bytes={start}-{stop - 1}"}
        async with session.get(self.url, headers=headers, **self.options) as response:
            _check_status(obj, start, stop, response.status, response.url)
            return await response.read()


async def _get_async(fs, obj: RemoteObject, start: int, stop: int) -> bytes:
    """One ranged read on an async filesystem other than HTTP (S3, or fsspec's ``_cat_file``)."""
    path = fs._strip_protocol(obj.url)
    if type(fs).__name__ == "S3FileSystem":
        bucket, key, version_id = fs.split_path(path)
        pin = {"VersionId": version_id or obj.version_id} if (version_id or obj.version_id) else (
            {"IfMatch": obj.version} if obj.version else {})
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}", **pin)
        try:
            return await response["Body"].read()
        finally:
            response["Body"].close()
    return await fs._cat_file(path, start=start, end=stop)


class _Batch:
    """The requests of one fetch: sent by an event loop's :class:`_Requests`, answered (every
    body, or the first error) through ``future``, which the calling thread waits on."""

    __slots__ = ("parts", "send", "retries", "priority", "dropped", "results", "remaining", "sent", "future")

    def __init__(self, parts, send, retries: int, priority: int, dropped: threading.Event | None):
        """``send``: the coroutine function that fetches one part (None for remote_curl's)."""
        import concurrent.futures

        self.parts, self.send, self.retries, self.priority, self.dropped = parts, send, retries, priority, dropped
        self.results = [None] * len(parts)
        self.remaining = len(parts)
        self.sent = 0  # parts[:sent] have been taken by a worker
        self.future = concurrent.futures.Future()

    async def request(self, i: int) -> None:
        """Part i, retried with backoff while that is safe; its body, or the batch's error."""
        obj, start, stop, route = self.parts[i]
        for attempt in range(self.retries + 1):
            try:
                _check_wanted(obj, start, stop, self.dropped)
                data = _check_length(obj, start, stop, await self.send(obj, start, stop, route))
            except Exception as error:  # noqa: BLE001 (classified)
                if not self.retry_after(i, error, attempt):
                    return
                # The worker waits out the backoff: a failing server gets fewer requests at once.
                await asyncio.sleep(_backoff(attempt))
                continue
            return self.answered(i, data)

    def answered(self, i: int, data: bytes) -> None:
        self.results[i] = data
        self.remaining -= 1
        if self.remaining == 0 and not self.future.done():
            self.future.set_result(self.results)

    def retry_after(self, i: int, error: Exception, attempt: int) -> bool:
        """Attempt ``attempt`` of part i failed with ``error``: True when it is to be retried,
        else the batch fails with an error naming the file and range."""
        obj, start, stop, _ = self.parts[i]
        if isinstance(error, RemoteReadError):
            self.fail(error)
            return False
        if _classify(error) != "retry" or attempt == self.retries:
            failure = _failure(obj, start, stop, error, attempt + 1)
            failure.__cause__ = error
            self.fail(failure)
            return False
        logger.info(f"{obj.url} [{start}, {stop}): {type(error).__name__}: {error}; retrying")
        return True

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


class _Requests:
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

    def submit(self, batch: _Batch) -> None:
        """On the loop: queues the batch and starts the workers it can use."""
        heapq.heappush(self.waiting, (batch.priority, next(self.arrivals), batch))
        loop = asyncio.get_running_loop()
        for _ in range(min(self.limit - self.workers, len(batch.parts))):
            self.workers += 1
            loop.create_task(self._work())

    async def _work(self) -> None:
        try:
            while (taken := _next_part(self.waiting)) is not None:
                batch, i = taken
                try:
                    await batch.request(i)
                except BaseException as error:  # cancelled (the loop closes): the caller hears of it
                    batch.fail(error)
                    if not isinstance(error, Exception):
                        raise
        finally:
            self.workers -= 1


def _next_part(waiting: list):
    """(batch, part) to send next from ``waiting``, a heap of (priority, arrival, batch): the
    next part of the most urgent batch that has parts left; None when none has."""
    while waiting:
        batch = waiting[0][2]
        if batch.sent < len(batch.parts):
            batch.sent += 1
            return batch, batch.sent - 1
        heapq.heappop(waiting)
    return None


def _submit(batch: _Batch) -> None:
    loop = asyncio.get_running_loop()
    requests = _REQUESTS.get(loop)
    if requests is None:
        requests = _REQUESTS[loop] = _Requests(REQUESTS_IN_FLIGHT)
    requests.submit(batch)


def _fetch_async(access: RemoteAccess, fs, parts, dropped: threading.Event | None = None,
                 priority: int = 0) -> list[bytes]:
    """``parts`` ``(obj, start, stop, route)`` fetched on ``fs``'s event loop (see _Requests);
    this thread waits for all of them."""
    if not parts:
        return []
    if type(fs).__name__ == "HTTPFileSystem" and HTTP_CLIENT != "aiohttp":
        from . import remote_curl

        if remote_curl.usable(fs):
            return remote_curl.fetch(access, fs, parts, dropped, priority)
    if type(fs).__name__ == "HTTPFileSystem":
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=access.timeout)
        environment = _trusted_environment() if fs.client_kwargs.get("trust_env") else None
        targets = {}  # (url, route) -> _HttpTarget, made on the loop's thread

        async def send(obj, start, stop, route):
            target = targets.get((obj.url, id(route)))
            if target is None:
                target = targets[obj.url, id(route)] = _HttpTarget(fs, obj, route, environment, timeout)
            return await target.get(fs._session or await fs.set_session(), start, stop)
    else:
        async def send(obj, start, stop, route):
            return await asyncio.wait_for(_get_async(fs, obj, start, stop), access.timeout)

    batch = _Batch(parts, send, access.retries, priority, dropped)
    fs.loop.call_soon_threadsafe(_submit, batch)
    return batch.wait(fs.loop.call_soon_threadsafe)


_REQUESTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # event loop -> its _Requests
_SYNC_FILES: OrderedDict = OrderedDict()


def _pool() -> ThreadPoolExecutor:
    return per_process("thread pool", lambda: ThreadPoolExecutor(THREADS_IN_FLIGHT, thread_name_prefix="mmidx-remote"))


def _get_sync(fs, obj: RemoteObject, start: int, stop: int) -> bytes:
    path = fs._strip_protocol(obj.url)
    key = (os.getpid(), id(fs), path)
    with _LOCK:
        f = _SYNC_FILES.get(key)
    if f is None:
        # No read-ahead cache: the file object is only asked for exact ranges.
        f = fs.open(path, "rb", cache_type="none")
        with _LOCK:
            f = _SYNC_FILES.setdefault(key, f)
            while len(_SYNC_FILES) > 256:
                _SYNC_FILES.popitem(last=False)
    if hasattr(f, "_fetch_range"):  # fsspec's buffered files: one stateless ranged GET
        return f._fetch_range(start, stop)
    return fs.cat_file(path, start=start, end=stop)


def _fetch_threads(access: RemoteAccess, fs, parts, dropped: threading.Event | None = None) -> list[bytes]:
    def one(obj, start, stop, route=None):
        for attempt in range(access.retries + 1):
            try:
                _check_wanted(obj, start, stop, dropped)
                return _check_length(obj, start, stop, _get_sync(fs, obj, start, stop))
            except RemoteReadError:
                raise
            except Exception as error:  # noqa: BLE001 (classified)
                if _classify(error) != "retry" or attempt == access.retries:
                    raise _failure(obj, start, stop, error, attempt + 1) from error
                time.sleep(_backoff(attempt))

    if len(parts) == 1:
        return [one(*parts[0])]
    return list(_pool().map(lambda p: one(*p), parts))


# --- the reader ----------------------------------------------------------------------------

class RemoteBinReader(BinReader):
    """A remote ``.bin``: every gather's pieces fetched as merged ranges, all in flight at once.
    Thread-safe (no state changes after opening)."""

    def __init__(self, path: str, dtype: np.dtype, access: RemoteAccess | None = None,
                 obj: RemoteObject | None = None):
        self.path = path
        self.dtype = dtype
        self.access = access or RemoteAccess()
        self.object = obj or self.access.stat(path)
        self.size = self.object.size

    def _whole_cache(self) -> "BlockCache | None":
        """The block cache when it holds every block of this file (reads are then local)."""
        if not self.access.cache_dir:
            return None
        cache = _cache_for(self.access)
        return cache if cache.holds_whole(self.object) else None

    @property
    def remote(self) -> bool:
        """Reads are network round trips, worth reading ahead in background threads; not once
        the block cache holds the whole file (a later epoch reads local blocks as fast as
        the caller copies them, and threads would only cost)."""
        return self._whole_cache() is None

    def read(self, start: int, count: int) -> np.ndarray:
        out = np.empty(count, self.dtype)
        self.gather(np.array([start]), np.array([count]), out)
        return out

    def gather(self, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray) -> None:
        if len(starts) == 0:
            return
        itemsize = self.dtype.itemsize
        byte_starts = np.asarray(starts, np.int64) * itemsize
        byte_lengths = np.asarray(lengths, np.int64) * itemsize
        cache = self._whole_cache()
        if cache is not None and out.flags.c_contiguous and out.dtype == self.dtype and out.flags.writeable \
                and cache.copy_pieces(self.object, byte_starts, byte_lengths, memoryview(out.view(np.uint8))):
            return
        keep = byte_lengths > 0
        ends = np.cumsum(byte_lengths)
        pieces = read_ranges(self.access, [self.object], np.zeros(int(keep.sum()), np.int64),
                             byte_starts[keep], (byte_starts + byte_lengths)[keep])
        target = memoryview(out.view(np.uint8)) if out.flags.c_contiguous and out.dtype == self.dtype else None
        buffer = target if target is not None else memoryview(bytearray(int(ends[-1])))
        for end, n, data in zip(ends[keep].tolist(), byte_lengths[keep].tolist(), pieces):
            buffer[end - n:end] = data
        if target is None:
            out[:] = np.frombuffer(buffer, self.dtype)


# --- the block cache -----------------------------------------------------------------------

_CACHES: dict = {}


def _cache_for(access: RemoteAccess) -> "BlockCache":
    key = (os.getpid(), access.cache_dir, access.max_cache_bytes)
    with _LOCK:
        cache = _CACHES.get(key)
        if cache is None:
            cache = _CACHES[key] = BlockCache(access.cache_dir, access.max_cache_bytes)
        return cache


class BlockCache:
    """Blocks of remote files on local disk: ``folder/<content key>/<block number>``.

    The content key hashes the URL, size and version (ETag) seen when the file was opened, so
    a changed file never reads old blocks. Blocks are written to a temporary name and renamed
    (readers in any process see a whole block or none; no locks), read through memory maps,
    and evicted oldest first (by mtime, set when a process first uses a block) once the folder
    holds more than ``max_bytes``. Cold blocks are fetched ``CACHE_BATCH_BYTES`` at a time.
    """

    def __init__(self, folder: str, max_bytes: int | None = None, block_bytes: int = CACHE_BLOCK_BYTES):
        self.folder = os.path.abspath(os.path.expanduser(folder))
        self.max_bytes = DEFAULT_MAX_CACHE_BYTES if max_bytes is None else int(max_bytes)
        self.block_bytes = block_bytes
        self._maps: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self._written_since_scan = None  # None: not scanned yet in this process
        # content key -> block numbers this process saw on disk (its folder is listed once,
        # then blocks mapped or stored are added): holds_whole without a stat per block.
        self._present: dict[str, set] = {}

    def _blocks(self, obj: RemoteObject) -> int:
        return -(-obj.size // self.block_bytes)

    def _seen(self, obj: RemoteObject, block: int) -> None:
        with self._lock:
            present = self._present.get(obj.content_key)
            if present is not None:
                present.add(block)

    def holds_whole(self, obj: RemoteObject) -> bool:
        """Whether every block of ``obj`` is on disk, as far as this process knows (another
        process may evict one meanwhile: its read then fetches it again)."""
        with self._lock:
            present = self._present.get(obj.content_key)
        if present is None:
            present = {int(e.name) for e in _scandir(os.path.dirname(self._block_path(obj, 0))) if e.name.isdigit()}
            with self._lock:
                present = self._present.setdefault(obj.content_key, present)
        return len(present) >= self._blocks(obj)

    def copy_pieces(self, obj: RemoteObject, starts: np.ndarray, lengths: np.ndarray, target: memoryview) -> bool:
        """Bytes ``[starts[i], starts[i] + lengths[i])`` of ``obj``, one after another, into
        ``target`` from the mapped blocks, a memcpy per piece (and per block a piece crosses);
        False, with ``target`` partly written, when a block is missing."""
        block = self.block_bytes
        first = starts // block
        last = (starts + lengths - 1) // block
        views = {}
        for b in np.unique(np.concatenate([first, last])[np.tile(lengths > 0, 2)]).tolist():
            views[b] = self._mapped(obj, b)
            if views[b] is None:
                return False
        position = 0
        for start, n, b, e in zip(starts.tolist(), lengths.tolist(), first.tolist(), last.tolist()):
            offset = start - b * block
            if n == 0:
                continue
            if b == e:
                target[position:position + n] = views[b][offset:offset + n]
            else:  # a piece across blocks (rare: blocks are 2 MiB, pieces a document or less)
                done = 0
                while done < n:
                    b, offset = divmod(start + done, block)
                    if b not in views:
                        views[b] = self._mapped(obj, b)
                        if views[b] is None:
                            return False
                    take = min(n - done, block - offset)
                    target[position + done:position + done + take] = views[b][offset:offset + take]
                    done += take
            position += n
        return True

    def _block_path(self, obj: RemoteObject, block: int) -> str:
        return os.path.join(self.folder, obj.content_key, str(block))

    def _block_length(self, obj: RemoteObject, block: int) -> int:
        return min(self.block_bytes, obj.size - block * self.block_bytes)

    def _mapped(self, obj: RemoteObject, block: int):
        """The block's bytes from disk, or None when it is not cached."""
        path = self._block_path(obj, block)
        with self._lock:
            view = self._maps.get(path)
            if view is not None:
                self._maps.move_to_end(path)
                return view
        try:
            with open(path, "rb") as f:
                if os.fstat(f.fileno()).st_size != self._block_length(obj, block):
                    return None
                view = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
            os.utime(path)  # recently used: evicted last
        except (FileNotFoundError, ValueError, OSError):
            return None
        with self._lock:
            self._maps[path] = view
            while len(self._maps) > _OPEN_BLOCKS:
                self._maps.popitem(last=False)
        self._seen(obj, block)
        return view

    def _store(self, obj: RemoteObject, block: int, data) -> None:
        path = self._block_path(obj, block)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = temporary_path(path)
        try:
            with open(temporary, "wb") as f:
                f.write(data)
            os.replace(temporary, path)
        except OSError as error:  # a full disk or a removed folder: the read goes on uncached
            remove_quietly(temporary)
            logger.warning(f"remote cache: cannot write {path}: {error}")
            return
        self._seen(obj, block)
        self._after_write(len(data))

    def fetch(self, access: RemoteAccess, objects, starts, stops) -> list[bytes]:
        block = self.block_bytes
        outputs = [bytearray(int(b) - int(a)) for a, b in zip(starts, stops)]
        # (object index, block) -> [(output, offset in output, offset in block, length)]
        segments: dict[tuple[int, int], list] = {}
        unique = {}
        for i, (obj, start, stop) in enumerate(zip(objects, starts, stops)):
            o = unique.setdefault(obj, len(unique))
            position = int(start)
            while position < stop:
                b = position // block
                n = min(int(stop), (b + 1) * block) - position
                segments.setdefault((o, b), []).append((i, position - int(start), position - b * block, n))
                position += n
        objs = list(unique)
        keys = sorted(segments)
        per_batch = max(1, CACHE_BATCH_BYTES // block)
        for first in range(0, len(keys), per_batch):
            batch = keys[first:first + per_batch]
            data = {k: self._mapped(objs[k[0]], k[1]) for k in batch}
            missing = [k for k in batch if data[k] is None]
            if missing:
                # Neighbouring missing blocks of one file become one request.
                requests, members = [], []
                for k in missing:
                    if requests and members[-1][-1][0] == k[0] and members[-1][-1][1] == k[1] - 1:
                        members[-1].append(k)
                        continue
                    requests.append(k)
                    members.append([k])
                fetched = access.fetch_remote(
                    [objs[g[0][0]] for g in members], [g[0][1] * block for g in members],
                    [min(objs[g[-1][0]].size, (g[-1][1] + 1) * block) for g in members])
                for group, payload in zip(members, fetched):
                    view = memoryview(payload)
                    for j, k in enumerate(group):
                        data[k] = view[j * block:j * block + self._block_length(objs[k[0]], k[1])]
                        self._store(objs[k[0]], k[1], data[k])
            for k in batch:
                source = data[k]
                for i, at, offset, n in segments[k]:
                    outputs[i][at:at + n] = source[offset:offset + n]
        return outputs

    def _after_write(self, size: int) -> None:
        with self._lock:
            if self._written_since_scan is not None:
                self._written_since_scan += size
                if self._written_since_scan < self.max_bytes // 16:
                    return
            self._written_since_scan = 0
        self.evict()

    def evict(self) -> int:
        """Removes the oldest blocks until the folder holds at most 90% of ``max_bytes`` (when
        it holds more than ``max_bytes``); returns the bytes removed. Any process may run this
        while others read: a block removed under a reader's memory map stays readable there."""
        entries, total = [], 0
        for folder in _scandir(self.folder):
            if not folder.is_dir():
                continue
            for entry in _scandir(folder.path):
                try:
                    stat = entry.stat()
                except FileNotFoundError:
                    continue
                total += stat.st_size
                if not entry.name.startswith("."):  # temporary files are their writer's
                    entries.append((stat.st_mtime, stat.st_size, entry.path))
        removed = 0
        if total > self.max_bytes:
            entries.sort()
            for _, size, path in entries:
                if total - removed <= self.max_bytes * 0.9:
                    break
                remove_quietly(path)
                removed += size
        return removed


def _scandir(path: str) -> list:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except (FileNotFoundError, NotADirectoryError):
        return []


def remote_access_for(opener, path: str) -> RemoteAccess | None:
    """The RemoteAccess that reads ``path``: ``opener`` itself when it is one, a default one for
    a remote path without an opener, else None (a local path, or an ``open``-like callable
    the caller chose: read through it as before)."""
    if isinstance(opener, RemoteAccess):
        return opener if is_remote(path) else None
    if opener is None and is_remote(path):
        return RemoteAccess()
    return None


__all__ = ["MERGE_BUDGET", "BlockCache", "RemoteAccess", "RemoteBinReader", "RemoteObject", "background_fetches",
           "plan_runs", "read_ranges", "remote_access_for"]
