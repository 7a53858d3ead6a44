"""HTTP ranges on fsspec's aiohttp session, on the reader's own event loop thread; what every
ranged GET of one file shares (HttpTarget) is also what libcurl is given (curl.py)."""

from __future__ import annotations

import asyncio
import functools
import os
import threading

from .answers import ShortBody, SlowBody, check_answer, is_date
from .server_waits import PAUSES, host_of
from .objects import RemoteObject
from .process_state import per_process
from .request_queue import REQUESTS_IN_FLIGHT


def io_loop() -> asyncio.AbstractEventLoop:
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


async def http_client(**client_kwargs):
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


def trusted_environment() -> tuple:
    """The variables trust_env reads, as they are now (taken once per gather: reading 14 of
    them per request cost 10% of the client's CPU)."""
    return tuple(map(os.environ.get, _TRUSTED_ENVIRONMENT))


@functools.lru_cache(maxsize=256)
def _environment_for(scheme: str, host: str, has_auth: bool, environment: tuple) -> tuple:
    """What aiohttp's ``trust_env`` adds to a request to ``scheme://host`` in ``environment``
    (trusted_environment): the proxy of the variables (HTTP_PROXY, NO_PROXY, ...) and a
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


class HttpTarget:
    """What every ranged GET of one file on fsspec's HTTP session shares, worked out once per
    gather (an encoded URL, the filesystem's request options and headers, ``If-Match``, the
    proxy and login ``trust_env`` finds): per request this was a fifth of the client's CPU.
    ``route``: ``(URL, headers)`` to fetch instead of ``obj.url`` (a Hub file's resolve URL,
    pinned to a revision as ``datasets`` resolves it: no ``If-Match``, the Hub's ETag is not
    the one ``stat`` saw). ``environment``: trusted_environment, or None without trust_env.
    ``timeout``: aiohttp's, cheaper than a task per request for asyncio.wait_for.
    ``version``: what every answer's ETag must be (answers.check_answer), None for a route.
    Ranges ask for the identity encoding: aiohttp would ask for gzip and decode it, libcurl
    would not, and a range of encoded bytes is not the file's range anyway."""

    __slots__ = ("obj", "url", "headers", "options", "version", "host", "floor")

    def __init__(self, fs, obj: RemoteObject, route, environment: tuple | None, timeout,
                 floor: tuple[float, float] | None = None):
        """``floor``: ``(bytes/s, seconds)``, the speed below which an answer is abandoned
        (aiohttp's ``sock_read`` in ``timeout`` catches a server that sends nothing at all)."""
        options = dict(fs.kwargs)
        options.setdefault("timeout", timeout)
        headers = dict(options.pop("headers", None) or {})
        headers["Accept-Encoding"] = "identity"
        if route is not None:
            headers.update(route[1])
        elif obj.version and is_date(obj.version):
            # A server without ETags (only Last-Modified): a date is no entity-tag, and nginx and
            # Apache answer If-Match with one by 412, so the file could not be read at all.
            headers["If-Unmodified-Since"] = obj.version
        elif obj.version and not obj.version.startswith("W/"):
            headers["If-Match"] = obj.version  # a changed file answers 412 (when the server honours it)
        url = fs.encode_url(route[0] if route is not None else obj.url)
        if environment is not None and url.host:
            has_auth = "auth" in options or "Authorization" in headers or url.user is not None
            for key, value in _environment_for(url.scheme, url.host, has_auth, environment):
                if key == "auth":  # a ~/.netrc login, as the header aiohttp would make of it
                    headers["Authorization"] = value.encode()
                else:
                    options.setdefault(key, value)
        self.obj, self.url, self.headers, self.options = obj, url, headers, options
        self.version = obj.version if route is None else None
        self.host = host_of(url)
        self.floor = floor

    async def get(self, session, start: int, stop: int) -> bytes:
        obj = self.obj
        pause = PAUSES.remaining(self.host)
        if pause:  # the host asked to be left alone (server_waits): not a request before then
            await asyncio.sleep(pause)
        headers = {**self.headers, "Range": f"bytes={start}-{stop - 1}"}
        try:
            async with session.get(self.url, headers=headers, auto_decompress=False, **self.options) as response:
                if not check_answer(obj, start, stop, response.status, response.headers, response.url, self.version):
                    return await self._body(response.content)
                return await _slice(response.content, start, stop)
        except asyncio.TimeoutError as error:  # aiohttp's sock_read or sock_connect: nothing for the floor's seconds
            if self.floor is None or type(error).__name__ not in ("SocketTimeoutError", "ConnectionTimeoutError"):
                raise
            what = "no connection" if type(error).__name__ == "ConnectionTimeoutError" else "no byte"
            raise SlowBody(f"{what} from {self.url.host}:{self.url.port} for {self.floor[1]:g} s") from error

    async def _body(self, content) -> bytes:
        """The body, abandoned once it has come slower than the floor for longer than its seconds."""
        if self.floor is None:
            return await content.read()
        speed, seconds = self.floor
        clock = asyncio.get_running_loop().time
        began, chunks, received = clock(), [], 0
        async for chunk in content.iter_any():
            chunks.append(chunk)
            received += len(chunk)
            elapsed = clock() - began
            if elapsed > seconds and received < speed * elapsed:
                raise SlowBody(f"{received} bytes in {elapsed:.1f} s, slower than {speed:,.0f} bytes/s")
        return b"".join(chunks)


async def _slice(body, start: int, stop: int) -> bytes:
    """Bytes ``[start, stop)`` of a whole-file body, read no further than ``stop`` (the
    connection is then closed, not drained: the file may be far longer)."""
    kept, position = [], 0
    async for chunk in body.iter_chunked(1 << 20):
        if position + len(chunk) > start:
            kept.append(chunk[max(0, start - position):stop - position])
        position += len(chunk)
        if position >= stop:
            return b"".join(kept)
    raise ShortBody(f"the whole-file answer ended at byte {position}, before {stop}")
