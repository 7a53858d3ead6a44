"""Where a Hub file's ranged reads go: resolved once per process, as huggingface_hub does.

The Hub answers ``/resolve/`` of a file in LFS or Xet storage with a redirect to a CDN, at a
signed URL that expires. Sending every ranged read to ``/resolve/`` (one redirect each) spends
the Hub's "resolvers" rate-limit bucket (a fixed 5-minute window) in seconds: 4,416 resolver
requests per 1,000 samples of a 200M-token prefix. Here a file's ``/resolve/`` URL is asked once
(``get_hf_file_metadata``: a HEAD that stops at a redirect off the Hub and waits out the
``RateLimit`` headers as the Hub asks), its ranges go straight to the URL it names, and it is
asked again only when that URL is about to expire (the ``Expires`` or ``X-Amz-Date`` +
``X-Amz-Expires`` it carries) or was refused (403/410: see RemoteAccess.fetch_remote).

The resolve waits as ranged reads do (server_waits.WaitBudget: within ``max_wait`` seconds and
``max_waits`` waits, whatever ``Retry-After`` says), not as huggingface_hub's own backoff
does: that slept the ``Retry-After`` of a 429 as given (``time.sleep(86401)`` for a day), so
huggingface_hub is asked once per attempt (``retry_on_errors=False``) and the waiting is done
here. 5xx, timeouts and dropped connections are retried with backoff, ``retries`` times.

The Hub token goes only to the Hub's own origin: a signed URL elsewhere carries its own
authorization, and hf_hub_download drops the token there as well.
"""

from __future__ import annotations

import calendar
import threading
import time
import urllib.parse

# A signed URL is resolved again this long before it expires (at most a quarter of its life):
# a read sent just before expiry still arrives in time.
EXPIRY_MARGIN_SECONDS = 60.0


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def signed_expiry(url: str) -> float | None:
    """When a signed URL stops working (Unix time): CloudFront's ``Expires``, S3's
    ``X-Amz-Date`` + ``X-Amz-Expires``; None when it names no expiry."""
    query = {k.lower(): v[-1] for k, v in urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).items()}
    expires = query.get("expires", "")
    if expires.isdigit():
        return float(expires)
    date, lifetime = query.get("x-amz-date", ""), query.get("x-amz-expires", "")
    if lifetime.isdigit():
        try:
            return calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ")) + float(lifetime)
        except ValueError:
            return None
    return None


class HubRoute:
    """One ``hf://`` file's ranged reads: ``current()`` is ``(URL, headers)`` to send them to,
    resolved on first use and again when it expires or is refused. Thread-safe."""

    def __init__(self, resolve_url: str, token, retries: int = 5, waits: tuple[float, int] | None = None):
        """``retries``: attempts after a fault; ``waits``: ``(max_wait, max_waits)`` of a
        rate-limited resolve (server_waits.WaitBudget), the defaults when None."""
        self.resolve_url, self.token, self.retries, self.waits = resolve_url, token, retries, waits
        self.resolves = 0  # /resolve/ requests this route made (the tests count them)
        self._lock = threading.Lock()
        self._current: tuple[str, dict] | None = None
        self._renew_at = float("inf")

    def current(self) -> tuple[str, dict]:
        with self._lock:
            if self._current is None or time.time() >= self._renew_at:
                self._current = self._resolve()
            return self._current

    def refused(self, seen: tuple[str, dict]) -> None:
        """The CDN refused ``seen`` (a ``current()``; 403/410: expired or revoked): the next
        ``current()`` resolves again, unless another thread already has."""
        with self._lock:
            if self._current is seen:
                self._current = None

    def _metadata(self):
        """huggingface_hub's metadata of the file, asked once per attempt; rate limits waited out
        and faults retried here (see the module's docstring)."""
        from huggingface_hub import get_hf_file_metadata

        from .answers import classify, status_of
        from .request_queue import backoff
        from .server_waits import WaitBudget, asked_wait, host_of

        budget = WaitBudget(*self.waits) if self.waits is not None else WaitBudget()
        attempt = 0
        while True:
            self.resolves += 1
            try:
                return get_hf_file_metadata(self.resolve_url, token=self.token, retry_on_errors=False)
            except Exception as error:  # noqa: BLE001 (classified)
                status = status_of(error)
                response = getattr(error, "response", None)
                told = asked_wait(status, response.headers) if status is not None and response is not None else None
                if told is not None:  # a RemoteRateLimitError naming the host when beyond the bounds
                    time.sleep(budget.take(host_of(self.resolve_url), *told, self.resolve_url))
                    continue
                if classify(error) != "retry" or attempt >= self.retries:
                    raise
                time.sleep(backoff(attempt))
                attempt += 1

    def _resolve(self) -> tuple[str, dict]:
        from huggingface_hub.utils import build_hf_headers

        metadata = self._metadata()
        location = urllib.parse.urljoin(self.resolve_url, metadata.location)
        headers = build_hf_headers(token=self.token) if _origin(location) == _origin(self.resolve_url) else {}
        expires, now = signed_expiry(location), time.time()
        self._renew_at = (float("inf") if expires is None
                          else expires - min(EXPIRY_MARGIN_SECONDS, max(0.0, expires - now) / 4))
        return location, headers
