"""How remote files are reached: :class:`RemoteAccess` is the one place a URL becomes a
filesystem. It holds the storage options (``{protocol: {...}}`` or flat, as ``datasets``'
``storage_options``), the cache settings, the timeout and retries; it is small, hashable and
picklable, and callable like ``open`` for the few text files read remotely."""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field

from ...errors import NO_SUCH_FILE, MissingPartnerError, RemoteRateLimitError, RemoteReadError
from ..files import is_remote
from .answers import status_of
from .answers import SlowBody, classify
from .block_cache import cache_for
from .fetching import fetch_async, fetch_threads
from .http import http_client, io_loop
from .http_info import http_info
from .hub_routes import HubRoute
from . import index_files
from .index_files import index_bytes
from .objects import RemoteObject
from .request_queue import REQUESTS_IN_FLIGHT, backoff, fetch_context, pool
from .server_waits import MAX_WAIT_SECONDS, MAX_WAITS, WaitBudget, asked_wait, host_of

logger = logging.getLogger(__name__)
_LOCK = threading.Lock()

# A longer run is fetched in parts of this size, in parallel, and joined.
MAX_REQUEST_BYTES = 8 << 20
RETRIES = 5
REFUSALS = 4  # a Hub file's signed URL refused (403/410) within one fetch: resolved again this many times
TIMEOUT_SECONDS = 60.0  # per request, async filesystems; the Hub client has its own
MIN_SPEED = 1024.0  # bytes/s: an HTTP answer slower than this over SLOW_SECONDS is abandoned
SLOW_SECONDS = 30.0


@dataclass(frozen=True, eq=False)
class RemoteAccess:
    """How remote files are reached. ``storage_options``: fsspec options, per protocol
    (``{"s3": {"endpoint_url": ...}}``) or flat (used for any protocol), as ``datasets``
    takes them. ``cache_dir`` / ``max_cache_bytes``: the optional local block cache.
    ``timeout`` / ``retries``: per request, and how often a failed one is tried again.
    ``max_wait``: the seconds one request may spend waiting when servers ask it to (429/503
    with ``Retry-After`` or ``RateLimit``), over all such waits, and ``max_waits`` how many
    times; those waits are not retries (server_waits.py), and a server asking beyond either is
    a RemoteRateLimitError naming the host, the wait and the bound. ``min_speed`` / ``slow_seconds``: the speed floor of HTTP answers: one
    slower than ``min_speed`` bytes/s over ``slow_seconds`` (or silent that long) is abandoned
    and tried once more, so a trickling server is an error in about twice ``slow_seconds``
    rather than ``retries`` times ``timeout``."""

    storage_options: dict = field(default_factory=dict)
    cache_dir: str | None = None
    max_cache_bytes: int | None = None
    timeout: float = TIMEOUT_SECONDS
    retries: int = RETRIES
    max_wait: float = MAX_WAIT_SECONDS
    max_waits: int = MAX_WAITS
    min_speed: float = MIN_SPEED
    slow_seconds: float = SLOW_SECONDS

    def _key(self) -> str:
        # Made once: the opened splits' cache hashes the access at every shard a stream asks for
        # (960 a pass), and the JSON of the options was ~0.1 ms of each.
        key = self.__dict__.get("_made_key")
        if key is None:
            key = json.dumps([self.storage_options, self.cache_dir, self.max_cache_bytes, self.timeout, self.retries,
                              self.max_wait, self.min_speed, self.slow_seconds, self.max_waits], sort_keys=True,
                             default=repr)
            object.__setattr__(self, "_made_key", key)  # frozen: the fields it is made of never change
        return key

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
            chosen.setdefault("get_client", http_client)
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
                options["loop"] = io_loop()
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
        """Size and version of ``url`` (one request, retried; waited out as the server asks,
        within ``max_wait`` and ``max_waits``); FileNotFoundError if absent."""
        from fsspec.asyn import sync as fsspec_sync

        fs, path = self.filesystem(url)
        attempt, budget, slowed = 0, WaitBudget(self.max_wait, self.max_waits), False
        while True:
            try:
                # HTTP: a HEAD or a one-byte GET (http_info), never fsspec's whole-file GET.
                info = (fsspec_sync(fs.loop, http_info, fs, path, self.timeout, self.slow_seconds)
                        if type(fs).__name__ == "HTTPFileSystem" else fs.info(path))
                break
            except Exception as error:  # noqa: BLE001 (classified below)
                if isinstance(error, FileNotFoundError) and status_of(error.__cause__) not in (None, 404):
                    # fsspec's HTTP info calls every failed HEAD "not found": a 429 or a 503 is not.
                    cause = error.__cause__
                    error = RemoteReadError(url, 0, 0, f"{type(cause).__name__}: {cause}")
                    error.__cause__ = cause
                    if classify(cause) == "retry":
                        error = cause
                status = status_of(error)
                headers = getattr(error, "headers", None) or getattr(getattr(error, "response", None), "headers", None)
                told = getattr(error, "wait", None) or (asked_wait(status, headers) if status is not None
                                                        and headers is not None else None)
                if told is not None:  # as a ranged read waits (server_waits), within the same bounds
                    time.sleep(budget.take(host_of(getattr(error, "url", None) or url), *told, url))
                    continue
                kind = classify(error)
                slow_again = isinstance(error, SlowBody) and slowed  # a silent server: tried once more, no further
                slowed = slowed or isinstance(error, SlowBody)
                if kind != "retry" or attempt == self.retries or slow_again:
                    if isinstance(error, (FileNotFoundError, RemoteReadError)) or (status is None and kind != "retry"):
                        raise error
                    raise typed_stat_error(url, error, attempt + 1) from error
                time.sleep(backoff(attempt))
                attempt += 1
        size = info.get("size")
        if size is None:
            raise RemoteReadError(url, 0, 0, "the server reports no size; ranged reads need one")
        version = next((str(info[k]) for k in ("ETag", "etag", "xet_hash", "blob_id", "Last-Modified") if info.get(k)),
                       None)
        lfs = info.get("lfs")
        if version is None and isinstance(lfs, dict) and lfs.get("sha256"):
            version = lfs["sha256"]
        return RemoteObject(url, int(size), version, info.get("VersionId") or None)

    def stat_many(self, urls: list[str], missing_ok: bool = False) -> list[RemoteObject | None]:
        """:meth:`stat` of every URL, many in flight (a folder of raw files, a blend's pairs);
        with ``missing_ok``, None for a file that does not exist."""
        def stat(url: str) -> RemoteObject | None:
            try:
                return self.stat(url)
            except FileNotFoundError:
                if not missing_ok:
                    raise
                return None

        if len(urls) < 2:
            return [stat(u) for u in urls]
        return list(pool().map(stat, urls))

    def fetch(self, objects: list[RemoteObject], starts, stops) -> list[bytes]:
        """Bytes ``[starts[i], stops[i])`` of ``objects[i]`` for every i, all requested at once
        (through the block cache when there is one)."""
        if self.cache_dir:
            return cache_for(self).fetch(self, objects, starts, stops)
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
        hub_routes = {}
        for k, (obj, start, stop) in enumerate(parts):
            if obj.url not in hub_routes:
                hub_routes[obj.url] = self._http_route(obj.url) or (self.filesystem(obj.url)[0], None)
            fs, _ = hub_routes[obj.url]
            by_fs.setdefault(id(fs), (fs, []))[1].append(k)
        for fs, ks in by_fs.values():
            dropped, priority = fetch_context()
            for refusals in itertools.count():
                # A Hub file's route as it is now: (URL, headers), resolved when due (hub_routes.py).
                current = {url: (route, _resolved(route, url)) for url, (f, route) in hub_routes.items()
                           if f is fs and route is not None}
                chunk = [(obj, start, stop, current[obj.url][1] if obj.url in current else None)
                         for obj, start, stop in (parts[k] for k in ks)]
                try:
                    got = (fetch_async(self, fs, chunk, dropped, priority) if getattr(fs, "async_impl", False)
                           else fetch_threads(self, fs, chunk, dropped))
                    break
                except RemoteReadError as error:
                    # A signed URL refused (expired, revoked: 403/410) is resolved again, and the
                    # gather fetched again: a few times (a gather outlasting a URL's life is
                    # refused each time; the Hub's last an hour).
                    refused = current.get(error.path)
                    if refused is None or refusals == REFUSALS or status_of(error) not in (403, 410):
                        raise
                    logger.info(f"{error.path}: its signed URL was refused ({error.reason}); resolving it again")
                    refused[0].refused(refused[1])
            for k, data in zip(ks, got):
                results[k] = data
        if len(parts) == len(objects):
            return results
        joined = [[] for _ in objects]
        for owner, data in zip(owners, results):
            joined[owner].append(data)
        return [b"".join(pieces) for pieces in joined]

    def _http_route(self, url: str):
        """``(HTTP filesystem, HubRoute)`` a Hub file's ranges are fetched through, else None.
        HfFileSystem fetches a range as one GET of the file's resolve URL with the token's
        headers, in a thread each, and every such GET is a request to the Hub's resolver; here
        the file is resolved once per process (hub_routes.py) and its ranges go to where the Hub
        sends them, on the HTTP filesystem's event loop or libcurl."""
        if not url.startswith("hf://"):
            return None
        key = (os.getpid(), self._key(), url)
        with _LOCK:
            route = _ROUTES.get(key)
        if route is None:
            fs, path = self.filesystem(url)
            if type(fs).__name__ != "HfFileSystem":
                return None
            resolve_url = fs.url(path)
            route = (self.filesystem(resolve_url)[0], HubRoute(resolve_url, fs.token, self.retries,
                                                                  (self.max_wait, self.max_waits)))
            with _LOCK:
                route = _ROUTES.setdefault(key, route)
        return route

    def open_pair(self, idx_url: str, bin_url: str) -> tuple[object, RemoteObject]:
        """The ``.idx``'s bytes (index_files.index_bytes: in memory when small, else mapped from
        a copy on disk) and the ``.bin``'s object; a missing file of the pair is a
        MissingPartnerError naming it."""
        return self.open_pairs([(idx_url, bin_url)])[0]

    def open_pairs(self, pairs: list[tuple[str, str]]) -> list[tuple[object, RemoteObject]]:
        """:meth:`open_pair` of every ``(idx_url, bin_url)``, all at once: every file's size and
        version asked for together, then every small ``.idx`` fetched in one gather (all its
        requests in flight at once). A blend of 50 prefixes opened one after another waited
        ~5 round trips per prefix in series; this is two round trips for all of them."""
        urls = [url for pair in pairs for url in pair]
        found = dict(zip(urls, self.stat_many(urls, missing_ok=True)))
        for idx_url, bin_url in pairs:
            error = MissingPartnerError.of_pair(idx_url, bin_url, *(None if found[url] is not None else NO_SUCH_FILE
                                                                    for url in (idx_url, bin_url)))
            if error is not None:
                raise error
        indices = [found[idx_url] for idx_url, _ in pairs]
        # index_files' bound read at the call (settable, as index_bytes reads it).
        small = [i for i, idx in enumerate(indices) if 0 < idx.size <= index_files.IN_MEMORY_BYTES]
        data = dict(zip(small, self.fetch([indices[i] for i in small], [0] * len(small),
                                          [indices[i].size for i in small]))) if small else {}
        return [(data[i] if i in data else index_bytes(self, indices[i]), found[bin_url])
                for i, (_, bin_url) in enumerate(pairs)]


def typed_stat_error(url: str, error, attempts: int) -> RemoteReadError:
    """The error of a size and version that could not be asked for: a rate limit said as one."""
    kind = RemoteRateLimitError if status_of(error) == 429 else RemoteReadError
    return kind(url, 0, 0, f"{type(error).__name__}: {error} (after {attempts} attempt(s))")


def _resolved(route: HubRoute, url: str) -> tuple[str, dict]:
    """``route.current()``; a Hub that cannot resolve the file is a RemoteReadError naming it."""
    try:
        return route.current()
    except RemoteReadError as error:  # a rate limit beyond the bounds: said of the hf:// file
        raise type(error)(url, 0, 0, f"resolving {route.resolve_url}: {error.reason}") from error
    except Exception as error:  # noqa: BLE001 (huggingface_hub's errors, named with the file)
        raise RemoteReadError(url, 0, 0, f"resolving {route.resolve_url}: {type(error).__name__}: {error}") from error


_ROUTES: dict = {}  # (pid, access, hf:// URL) -> RemoteAccess._http_route
_FILESYSTEMS: dict = {}


def remote_access_for(opener, path: str) -> RemoteAccess | None:
    """The RemoteAccess that reads ``path``: ``opener`` itself when it is one, a default one for
    a remote path without an opener, else None (a local path, or an ``open``-like callable
    the caller chose: read through it as before)."""
    if isinstance(opener, RemoteAccess):
        return opener if is_remote(path) else None
    if opener is None and is_remote(path):
        return RemoteAccess()
    return None
