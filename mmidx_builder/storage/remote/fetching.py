"""Which client sends a filesystem's ranges: libcurl or aiohttp for HTTP, the filesystem's own
async API (S3), or a thread pool for synchronous filesystems."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import weakref
from collections import OrderedDict

from ...errors import RemoteReadError
from . import curl
from .answers import check_answer, check_length, classify, typed_error
from .http import HttpTarget, trusted_environment
from .objects import RemoteObject
from .request_queue import REQUESTS_IN_FLIGHT, Batch, backoff, check_wanted, pool, submit

_LOCK = threading.Lock()

# HTTP ranges: "auto" sends them through libcurl (curl.py: less client CPU per request)
# when pycurl is installed and the filesystem's options allow, else through aiohttp; "aiohttp"
# always through aiohttp.
HTTP_CLIENT = "auto"


_SLOTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # client -> asyncio.Semaphore or None


def _pool_size(fs, session) -> int | None:
    """The connections ``fs``'s client keeps (``session``: its aiohttp session or botocore
    client), when that is fewer than the requests in flight; else None."""
    size = None
    if type(fs).__name__ == "S3FileSystem":
        size = getattr(getattr(getattr(session, "meta", None), "config", None), "max_pool_connections", None)
    elif hasattr(session, "connector"):
        connector = session.connector
        sizes = [n for n in (getattr(connector, "limit", 0), getattr(connector, "limit_per_host", 0)) if n]
        size = min(sizes) if sizes else None
    return size if isinstance(size, int) and 0 < size < REQUESTS_IN_FLIGHT else None


def connection_slot(fs, session):
    """Held around one request with its timeout inside: a request waits here, timeout not yet
    running, while the client's connections are all busy. Without it, a client whose pool is
    smaller than the requests in flight (``config_kwargs={"max_pool_connections": 10}``, as
    botocore's default; an aiohttp session of 100) counted the wait for a connection in the
    request's timeout: requests queued behind slow ones timed out unsent. access.options_for
    sizes the pools to REQUESTS_IN_FLIGHT unless the storage options say otherwise."""
    if session not in _SLOTS:
        size = _pool_size(fs, session)
        _SLOTS[session] = asyncio.Semaphore(size) if size else None
    slots = _SLOTS[session]
    return slots if slots is not None else contextlib.nullcontext()


async def _get_async(fs, obj: RemoteObject, start: int, stop: int) -> bytes:
    """One ranged read on an async filesystem other than HTTP (S3, or fsspec's ``_cat_file``)."""
    path = fs._strip_protocol(obj.url)
    if type(fs).__name__ == "S3FileSystem":
        bucket, key, version_id = fs.split_path(path)
        pin = {"VersionId": version_id or obj.version_id} if (version_id or obj.version_id) else (
            {"IfMatch": obj.version} if obj.version else {})
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{stop - 1}", **pin)
        try:
            # The stored bytes, whatever Content-Encoding they were uploaded with (botocore does
            # not decode): the range, the size and the version are checked as HTTP answers'.
            answer = {"content-range": response.get("ContentRange"), "etag": response.get("ETag")}
            if "VersionId" in pin and response.get("VersionId"):
                answer["etag"], version = response["VersionId"], pin["VersionId"]
            else:
                version = obj.version
            status = 206 if answer["content-range"] else 200
            if check_answer(obj, start, stop, status, {k: v for k, v in answer.items() if v}, obj.url, version):
                return (await response["Body"].read())[start:stop]
            return await response["Body"].read()
        finally:
            response["Body"].close()
    return await fs._cat_file(path, start=start, end=stop)


def fetch_async(access, fs, parts, dropped: threading.Event | None = None,
                priority: int = 0) -> list[bytes]:
    """``parts`` ``(obj, start, stop, route)`` fetched on ``fs``'s event loop (see Requests);
    this thread waits for all of them. ``access``: the RemoteAccess (timeout, retries)."""
    if not parts:
        return []
    if type(fs).__name__ == "HTTPFileSystem" and HTTP_CLIENT != "aiohttp":
        if curl.usable(fs):
            return curl.fetch(access, fs, parts, dropped, priority)
    if type(fs).__name__ == "HTTPFileSystem":
        import aiohttp

        # sock_connect: a server silent during the TCP or TLS handshake is given up on as one
        # silent after it (sock_read), not after the whole timeout.
        timeout = aiohttp.ClientTimeout(total=access.timeout, sock_read=access.slow_seconds,
                                        sock_connect=access.slow_seconds)
        floor = (access.min_speed, access.slow_seconds)
        environment = trusted_environment() if fs.client_kwargs.get("trust_env") else None
        targets = {}  # (url, route) -> HttpTarget, made on the loop's thread

        async def send(obj, start, stop, route):
            target = targets.get((obj.url, id(route)))
            if target is None:
                target = targets[obj.url, id(route)] = HttpTarget(fs, obj, route, environment, timeout, floor)
            session = fs._session or await fs.set_session()
            async with connection_slot(fs, session):
                return await target.get(session, start, stop)
    else:
        async def send(obj, start, stop, route):
            session = await fs.set_session() if type(fs).__name__ == "S3FileSystem" else None
            async with connection_slot(fs, session) if session is not None else contextlib.nullcontext():
                return await asyncio.wait_for(_get_async(fs, obj, start, stop), access.timeout)

    batch = Batch(parts, send, access.retries, priority, dropped, access.max_wait, access.max_waits)
    fs.loop.call_soon_threadsafe(submit, batch)
    return batch.wait(fs.loop.call_soon_threadsafe)


_SYNC_FILES: OrderedDict = OrderedDict()


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


def fetch_threads(access, fs, parts, dropped: threading.Event | None = None) -> list[bytes]:
    def one(obj, start, stop, route=None):
        for attempt in range(access.retries + 1):
            try:
                check_wanted(obj, start, stop, dropped)
                return check_length(obj, start, stop, _get_sync(fs, obj, start, stop))
            except RemoteReadError:
                raise
            except Exception as error:  # noqa: BLE001 (classified)
                if classify(error) != "retry" or attempt == access.retries:
                    raise typed_error(obj, start, stop, error, attempt + 1) from error
                time.sleep(backoff(attempt))

    if len(parts) == 1:
        return [one(*parts[0])]
    return list(pool().map(lambda p: one(*p), parts))
