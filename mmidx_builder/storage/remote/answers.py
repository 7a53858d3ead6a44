"""What an answer to a ranged read means, for every client: the range, a fault to retry, a
changed file, or an error that no retry cures (named with the file and the range)."""

from __future__ import annotations

import asyncio

from ...errors import RemoteChangedError, RemoteReadError
from .objects import RemoteObject


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


def classify(error) -> str:
    """``"changed"`` (the object is not the one opened), ``"retry"`` or ``"fatal"``."""
    if isinstance(error, ShortBody):
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


class ShortBody(Exception):
    pass


def check_length(obj: RemoteObject, start: int, stop: int, data: bytes) -> bytes:
    if len(data) == stop - start:
        return data
    if len(data) > stop - start:
        raise RemoteReadError(obj.url, start, stop, f"the server sent {len(data)} bytes for a range of {stop - start} "
                                                     "(it does not honour Range requests)")
    raise ShortBody(f"{len(data)} of {stop - start} bytes")


class HTTPStatus(Exception):
    """An HTTP answer that is not the range: ``status`` is what _status reads."""

    def __init__(self, status: int, url):
        super().__init__(f"HTTP {status} from {url}")
        self.status = status


def check_status(obj: RemoteObject, start: int, stop: int, status: int, url) -> None:
    """The answer to a ranged GET of either HTTP client, by its status (``url``: where it came
    from, after redirects)."""
    if status == 404:
        raise FileNotFoundError(obj.url)
    if status >= 400:
        raise HTTPStatus(status, url)
    if status != 206 and (start, stop) != (0, obj.size):
        raise RemoteReadError(obj.url, start, stop, f"the server answered {status} with the whole file "
                                                    "(it does not honour Range requests)")


def typed_error(obj: RemoteObject, start: int, stop: int, error, attempts: int):
    kind = classify(error)
    if kind == "changed":
        return RemoteChangedError(obj.url, f"bytes [{start}, {stop})",
                                  f"the file seen when it was opened (size {obj.size}, version {obj.version})",
                                  f"a changed or removed file ({type(error).__name__}: {error})", offset=start,
                                  hint="the remote file changed while it was read; reopen the dataset")
    return RemoteReadError(obj.url, start, stop, f"{type(error).__name__}: {error} (after {attempts} attempt(s))")
