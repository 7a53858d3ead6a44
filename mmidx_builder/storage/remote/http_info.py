"""The size and version of an HTTP file: a HEAD, else a GET of its first byte; never a GET of
the whole file.

fsspec's HTTP filesystem asks whether a file exists with a GET without ``Range`` (``_exists``,
which its ``glob`` calls for a plain URL) and hangs up after the headers; on a real server that
is a whole-file answer started for nothing, per file and process (the test server wrote 2.9 MB
for one listing of a 3 MB ``.bin``). Its ``info`` falls back from a failed HEAD (a 429, a 503)
to such a GET as well, and calls any status of 400 or more "not found": a rate-limited ``.bin``
was reported as a missing partner. Here a HEAD is asked; a server that refuses HEADs (405, 501)
or gives no length is asked for byte 0 only; 404 and 410 are "not found", and every other
status is an answers.HTTPStatus (with the wait a 429/503 asks for), which RemoteAccess.stat
retries or waits out within its bounds.
"""

from __future__ import annotations

import asyncio
import re

from .answers import HTTPStatus, SlowBody
from .server_waits import asked_wait

_TOTAL = re.compile(r"\s*bytes\s+(?:\d+-\d+|\*)/(\d+)\s*")
_NOT_THERE = (404, 410)
_NO_HEAD = (405, 501)  # a server that does not answer HEAD: asked for one byte instead


def _versions(headers) -> dict:
    return {k: headers[k] for k in ("ETag", "Last-Modified") if headers.get(k)}


async def http_info(fs, url: str, timeout: float | None = None, silence: float | None = None) -> dict:
    """fsspec's ``info`` of ``url`` on HTTP filesystem ``fs`` (``size``, ``ETag``,
    ``Last-Modified``), from a HEAD or a one-byte ranged GET; FileNotFoundError for 404/410.
    ``timeout``: seconds per request; ``silence``: seconds without a connection or a byte after
    which it is given up (RemoteAccess ``slow_seconds``), as a ranged read is."""
    import aiohttp

    session = await fs.set_session()
    options = dict(fs.kwargs)
    if timeout is not None:
        options.setdefault("timeout", aiohttp.ClientTimeout(total=timeout, sock_connect=silence, sock_read=silence))
    headers = {**(options.pop("headers", None) or {}), "Accept-Encoding": "identity"}
    options.setdefault("allow_redirects", True)
    try:
        return await _asked(session, fs.encode_url(url), url, headers, options)
    except asyncio.TimeoutError as error:  # aiohttp's sock_connect or sock_read: silent for ``silence`` s
        if type(error).__name__ not in ("SocketTimeoutError", "ConnectionTimeoutError"):
            raise
        raise SlowBody(f"no answer from {url} for {silence:g} s") from error


async def _asked(session, encoded, url: str, headers: dict, options: dict) -> dict:
    info = {"name": url, "type": "file", "size": None}
    async with session.head(encoded, headers=headers, **options) as response:
        status = response.status
        if status not in _NO_HEAD:
            _check(status, response, url)
            length = response.headers.get("Content-Length", "")
            if length.strip().isdigit() and response.headers.get("Content-Encoding", "identity") == "identity":
                return {**info, "size": int(length), **_versions(response.headers)}
    async with session.get(encoded, headers={**headers, "Range": "bytes=0-0"}, auto_decompress=False,
                           **options) as response:
        status = response.status
        if status == 416:  # an empty file: nothing satisfies a range, "bytes */0"
            match = _TOTAL.fullmatch(response.headers.get("Content-Range", ""))
            return {**info, "size": int(match[1]) if match else None, **_versions(response.headers)}
        _check(status, response, url)
        match = _TOTAL.fullmatch(response.headers.get("Content-Range", ""))
        if status == 206 and match:
            size = int(match[1])
            await response.read()  # the one byte: the connection is kept for the next request
        else:  # 200: the whole file is coming; its length is the size, and the connection is dropped
            length = response.headers.get("Content-Length", "")
            size = int(length) if length.strip().isdigit() else None
            response.close()
        return {**info, "size": size, **_versions(response.headers)}


def _check(status: int, response, url: str) -> None:
    if status in _NOT_THERE:
        raise FileNotFoundError(url)
    if status >= 400:
        raise HTTPStatus(status, response.url, asked_wait(status, response.headers))
