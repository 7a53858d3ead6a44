"""A server that asks to be left alone for a while (429 or 503 with ``Retry-After`` or
``RateLimit``) is waited out as it asks, not retried on a backoff of our own.

A rate-limited host answers every request in flight with a 429 at once: the wait is the
host's (:class:`HostPauses`), so no request is sent to it before the time it gave, the
wait is logged once per pause naming the host, and it does not use a request's retries
(the Hub's resolver bucket, for one, resets every 5 minutes: retries spent in that window
would end the run). What bounds it instead (:class:`WaitBudget`), whatever the server says:

- ``max_wait``: the seconds one request may spend waiting as told, over all its waits
  (RemoteAccess(max_wait=...), MAX_WAIT_SECONDS); a server asking for more (a day) is a
  :class:`~mmidx_builder.errors.RemoteRateLimitError` at once, not a day's sleep;
- ``max_waits``: how many times one request may be told to wait (MAX_WAITS). Zero seconds
  never spend a budget of seconds: ``429`` with ``Retry-After: 0`` (or a date in the past),
  forever, got ~1,000 requests a second for as long as the process lived;
- each told wait lasts at least a floor that doubles with the request's waits
  (WAIT_FLOOR_SECONDS, up to WAIT_FLOOR_MAX_SECONDS): "now" said again and again is a storm.
"""

from __future__ import annotations

import email.utils
import logging
import re
import threading
import time
import urllib.parse

from ...errors import RemoteRateLimitError

logger = logging.getLogger(__name__)

# The longest one request waits when servers ask it to (429/503 with Retry-After or RateLimit),
# over all such waits: 5 minutes, the Hub's rate-limit window.
MAX_WAIT_SECONDS = 300.0

# How many times one request may be told to wait, and the least each wait lasts (doubled per
# wait of that request, up to WAIT_FLOOR_MAX_SECONDS): 30 waits of "0 s" take ~2 minutes.
MAX_WAITS = 30
WAIT_FLOOR_SECONDS = 0.1
WAIT_FLOOR_MAX_SECONDS = 5.0

# RateLimit (IETF draft httpapi-ratelimit-headers, as the Hub sends it): "resolvers";r=0;t=55
_RATELIMIT = re.compile(r'"?(?P<name>[\w-]+)"?\s*;\s*r\s*=\s*(?P<r>\d+)\s*;\s*t\s*=\s*(?P<t>\d+)')


def asked_wait(status: int, headers) -> tuple[float, str] | None:
    """``(seconds, why)`` a 429 or 503 answer asks the client to wait (``headers``: a
    case-insensitive mapping, or one with lower-case keys), else None."""
    if status not in (429, 503):
        return None
    get = _getter(headers)
    limit = get("ratelimit")
    if limit and (match := _RATELIMIT.search(limit)) and int(match["r"]) == 0:
        return float(match["t"]), f'{status}, RateLimit "{match["name"]}" spent, resets in {match["t"]} s'
    remaining, reset = get("ratelimit-remaining") or get("x-ratelimit-remaining"), get("ratelimit-reset")
    if remaining and remaining.strip() == "0" and reset and reset.strip().isdigit():
        return float(reset), f"{status}, RateLimit-Reset {reset.strip()}"
    after = get("retry-after")
    if after:
        after = after.strip()
        if after.isdigit():
            return float(after), f"{status}, Retry-After {after}"
        try:
            when = email.utils.parsedate_to_datetime(after).timestamp()
        except (TypeError, ValueError):
            return None
        return max(0.0, when - time.time()), f"{status}, Retry-After {after}"
    return None


def _getter(headers):
    if hasattr(headers, "getall"):  # aiohttp's (multidict): case-insensitive already
        return headers.get
    lowered = {str(k).lower(): v for k, v in headers.items()}
    return lowered.get


def host_of(url) -> str:
    """``host:port`` of a URL (a string or yarl's), the key a pause is kept under."""
    parts = urllib.parse.urlsplit(str(url))
    return f"{parts.hostname}:{parts.port or {'http': 80, 'https': 443}.get(parts.scheme)}"


class HostPauses:
    """When each host may be sent requests again (time.monotonic()), as its servers asked."""

    def __init__(self):
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def remaining(self, host: str) -> float:
        """Seconds before ``host`` may be sent a request (0: now)."""
        until = self._until.get(host)
        return 0.0 if until is None else max(0.0, until - time.monotonic())

    def pause(self, host: str, seconds: float, why: str, bound: float, waits: int = MAX_WAITS) -> None:
        """``host`` asked to be left alone ``seconds``; logged when it was not already paused."""
        now = time.monotonic()
        with self._lock:
            until = self._until.get(host, 0.0)
            fresh = until <= now
            self._until[host] = max(until, now + seconds)
        if fresh:
            logger.warning(f"{host} asks to wait ({why}): waiting {seconds:.1f} s, up to {bound:.0f} s and "
                           f"{waits} waits per request in all (RemoteAccess max_wait, max_waits), without using "
                           "retries")


PAUSES = HostPauses()  # the process's (a forked child's copy is harmless: pauses only expire)


class WaitBudget:
    """What one request may still wait as servers ask: ``max_wait`` seconds and ``max_waits``
    waits in all (see the module's docstring)."""

    __slots__ = ("max_wait", "max_waits", "waited", "count")

    def __init__(self, max_wait: float = MAX_WAIT_SECONDS, max_waits: int = MAX_WAITS):
        self.max_wait, self.max_waits = max_wait, max_waits
        self.waited, self.count = 0.0, 0

    def take(self, host: str, seconds: float, why: str, url: str, start: int = 0, stop: int = 0) -> float:
        """The seconds to wait now that ``host`` asked for ``seconds`` (``why``), the host's pause
        set; a RemoteRateLimitError naming ``url``'s range, the host, the wait and the bound when
        that is beyond the budget."""
        delay = max(seconds, min(WAIT_FLOOR_MAX_SECONDS, WAIT_FLOOR_SECONDS * 2 ** self.count))
        if self.count >= self.max_waits or self.waited + delay > self.max_wait:
            bound = (f"at most {self.max_waits} waits (RemoteAccess max_waits)" if self.count >= self.max_waits
                     else f"at most {self.max_wait:.0f} s in all (RemoteAccess max_wait)")
            raise RemoteRateLimitError(url, start, stop,
                                       f"rate limited: {host} asks to wait {seconds:.0f} s ({why}); this request "
                                       f"waited {self.count} times, {self.waited:.0f} s, as told already, and waits "
                                       f"{bound}")
        PAUSES.pause(host, delay, why, self.max_wait, self.max_waits)
        delay = max(delay, PAUSES.remaining(host))
        self.waited += delay
        self.count += 1
        return delay
