"""What an answer to a ranged read means, for every client: the range, a fault to retry, a
changed file, or an error that no retry cures (named with the file and the range).

Every answer is checked before its bytes are used (:func:`check_answer`), whatever the server
did with the request: a 206 must carry the ``Content-Range`` asked for, of an object of the
size seen at open; its ``ETag`` (or ``Last-Modified``, when that was the version at open) must
be there and be the one seen at open, whether or not the server honoured ``If-Match`` (or
``If-Unmodified-Since``): an answer without it cannot be told from another version of the file
of the same size, so it is retried as a fault and, if it keeps coming, is a changed file
(:class:`NoValidator`), never served; a 200 is the whole
object, used (sliced) only when its length is the object's; a body in a ``Content-Encoding``
is refused (identity is asked for: a range of encoded bytes is not a range of the file, so
neither client decodes one). A proxy serving another request's bytes, or a file replaced on
a server that ignores ``If-Match``, is then an error naming the file and range, never tokens.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading

from ...errors import RemoteChangedError, RemoteRateLimitError, RemoteReadError
from .objects import RemoteObject
from .server_waits import asked_wait, host_of

logger = logging.getLogger(__name__)


def status_of(error) -> int | None:
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


def classify(error) -> str:
    """``"changed"`` (the object is not the one opened), ``"retry"`` or ``"fatal"``."""
    if isinstance(error, (ShortBody, WrongRange, SlowBody, NoValidator)):
        return "retry"
    if isinstance(error, (FileNotFoundError, OtherVersion)):
        return "changed"
    status = status_of(error)
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


class ShortBody(Exception):
    pass


class SlowBody(Exception):
    """An answer slower than the speed floor (RemoteAccess ``min_speed`` over ``slow_seconds``):
    abandoned, and tried once more (a server that trickles twice is slow, not unlucky)."""


class WrongRange(Exception):
    """A 206 of other bytes than the range asked for (a proxy or cache mixing answers): retried."""


class OtherVersion(Exception):
    """An answer from another version of the file than the one opened: a changed file."""


class NoValidator(Exception):
    """An answer without the validator (ETag or Last-Modified) the file had when opened. A
    server that sent a strong ETag at open and then serves a rewritten file of the same size
    without one (and ignores If-Match) served 368 of 391 rows wrong before this was checked.
    Retried (a cache or proxy may strip it once), then a changed file: never served."""


def check_length(obj: RemoteObject, start: int, stop: int, data: bytes) -> bytes:
    if len(data) == stop - start:
        return data
    if len(data) > stop - start:
        raise RemoteReadError(obj.url, start, stop, f"the server sent {len(data)} bytes for a range of {stop - start} "
                                                     "(it does not honour Range requests)")
    raise ShortBody(f"{len(data)} of {stop - start} bytes")


class HTTPStatus(Exception):
    """An HTTP answer that is not the range: ``status`` is what status_of reads; ``wait``:
    ``(seconds, why)`` the server asked the client to wait (server_waits.asked_wait), or None."""

    def __init__(self, status: int, url, wait: tuple[float, str] | None = None):
        super().__init__(f"HTTP {status} from {url}")
        self.status, self.url, self.wait = status, url, wait


_CONTENT_RANGE = re.compile(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*")
_IGNORES_RANGE: set = set()  # hosts already logged as answering ranges with the whole file
_IGNORES_RANGE_LOCK = threading.Lock()


def _weak(version: str) -> str:
    return version[2:] if version.startswith("W/") else version


def check_answer(obj: RemoteObject, start: int, stop: int, status: int, headers, url, version: str | None) -> bool:
    """Checks the answer to a ranged GET of bytes ``[start, stop)`` of ``obj`` (either HTTP
    client; ``headers``: a case-insensitive mapping or one with lower-case keys; ``url``: where
    it came from, after redirects; ``version``: the ETag or Last-Modified its answers must
    carry, None when they cannot be compared, as a Hub file's CDN). Returns True when the body
    is the whole object, of which bytes ``[start, stop)`` are to be taken; raises otherwise."""
    get = headers.get
    if status == 404:
        raise FileNotFoundError(obj.url)
    if status not in (200, 206):
        raise HTTPStatus(status, url, asked_wait(status, headers))
    encoding = get("content-encoding")
    if encoding and encoding.strip().lower() != "identity":
        raise RemoteReadError(obj.url, start, stop, f"{url} sent the range with Content-Encoding {encoding.strip()} "
                                                    "(identity was asked for; a range of encoded bytes is not the "
                                                    "file's range)")
    if version is not None:
        header = "Last-Modified" if is_date(version) else "ETag"
        found = get(header.lower())
        if found is None:
            raise NoValidator(f"{url} answered {status} without the {header} the file had when it was opened "
                              f"({version}): another version of the same size could not be told from it")
        if _weak(found.strip()) != _weak(version):
            raise OtherVersion(f"{url} answered with version {found.strip()}, not {version} seen when it was opened "
                               "(the server did not honour the precondition)")
    if status == 206:
        content_range = get("content-range")
        match = _CONTENT_RANGE.fullmatch(content_range or "")
        if match is None:
            raise WrongRange(f"{url} answered 206 without the Content-Range of one range (found {content_range!r})")
        first, last, total = match.groups()
        if total != "*" and int(total) != obj.size:
            raise OtherVersion(f"{url} answered Content-Range {content_range.strip()}: a file of {total} bytes, not "
                               f"{obj.size} as when it was opened")
        if (int(first), int(last) + 1) != (start, stop):
            raise WrongRange(f"{url} answered Content-Range {content_range.strip()} to a request for bytes "
                             f"{start}-{stop - 1}")
        return False
    length = get("content-length")
    if length is not None and length.strip().isdigit() and int(length) != obj.size:
        raise OtherVersion(f"{url} answered 200 with {length.strip()} bytes: the whole file is {obj.size} bytes "
                           "as opened")
    if (start, stop) == (0, obj.size):
        return False
    host = host_of(url)
    with _IGNORES_RANGE_LOCK:
        fresh = host not in _IGNORES_RANGE
        _IGNORES_RANGE.add(host)
    if fresh:
        logger.warning(f"{host} answers ranged reads with the whole file (200): each read is cut from a download "
                       "from the start of the file to the end of the range")
    return True


def is_date(version: str) -> bool:
    """Whether a version seen at open is a Last-Modified date, not an ETag (always quoted)."""
    return not version.startswith(('"', "W/")) and "," in version and "GMT" in version


# Statuses by which a server says it has more requests than it can answer now.
_OVERLOAD_STATUSES = (429, 503, 504)


def overloaded(error) -> bool:
    """Whether ``error`` says the server is sent more requests than it can answer: a timeout,
    a dropped, refused or cut connection, 429/503/504, an answer below the speed floor
    (request_queue.InFlight sends fewer at once then)."""
    if isinstance(error, (SlowBody, ShortBody, TimeoutError, asyncio.TimeoutError, ConnectionError)):
        return True
    if status_of(error) in _OVERLOAD_STATUSES:
        return True
    module, name = type(error).__module__ or "", type(error).__name__
    # aiohttp's ServerDisconnectedError, ClientConnectorError, ClientPayloadError (a body cut
    # off); botocore's ReadTimeoutError, EndpointConnectionError, ConnectionClosedError.
    return module.startswith(("aiohttp", "botocore", "aiobotocore")) and any(
        word in name for word in ("Connect", "Disconnected", "Payload", "Timeout"))


def typed_error(obj: RemoteObject, start: int, stop: int, error, attempts: int):
    kind = classify(error)
    if kind == "changed" or isinstance(error, NoValidator):
        return RemoteChangedError(obj.url, f"bytes [{start}, {stop})",
                                  f"the file seen when it was opened (size {obj.size}, version {obj.version})",
                                  f"a changed or removed file ({type(error).__name__}: {error})", offset=start,
                                  hint="the remote file changed while it was read; reopen the dataset")
    kind = RemoteRateLimitError if status_of(error) == 429 else RemoteReadError  # 429 without a wait to keep
    return kind(obj.url, start, stop, f"{type(error).__name__}: {error} (after {attempts} attempt(s))")
