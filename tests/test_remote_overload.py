"""Slow and overloaded servers (issue 32 item 4): the requests in flight adapt to what a server
answers (request_queue.InFlight), and a request's timeout runs from when it is sent.

Through both HTTP clients (libcurl and aiohttp, the ``http_client`` fixture of test_remote),
and S3 through moto. The oracle for bytes is the same files read locally.
"""

from __future__ import annotations

import numpy as np
import pytest

from mmidx_builder.sources.indexed import IndexedFile
from mmidx_builder.storage.remote import request_queue
from range_server import RangeServer
from test_remote import fast, http_client, quick_backoff, served  # noqa: F401 (fixtures)
from test_remote_answers import pieces_and_expected


@pytest.fixture(autouse=True)
def full_limit():
    """Each test starts, and leaves the next, with the full REQUESTS_IN_FLIGHT."""
    restore = getattr(request_queue, "restore_in_flight", lambda: None)  # absent on main: the tests fail by their asserts
    restore()
    yield
    restore()


CAPACITY = 12


def test_an_overloaded_server_is_sent_fewer_requests_at_once(served):
    """A server that answers 503 (no Retry-After) to every request beyond 12 at once: the reads
    come back whole and right, and once it has refused, it is sent about as many as it takes.
    Sent 512 at once, most requests of every gather were refused, attempt after attempt,
    until a part ran out of retries."""
    folder, prefix = served
    with RangeServer(folder, latency=0.02) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(timeout=10, retries=5))
        server.capacity = CAPACITY
        pieces, expected = pieces_and_expected(prefix, count=1500, seed=4)
        np.testing.assert_array_equal(remote.read_pieces(*pieces), expected)
        assert server.refused > 0  # it was overloaded, and said so
        first_requests = server.requests["corpus.bin"]
        assert first_requests > 10 * CAPACITY  # a read of many more requests than it takes at once
        server.max_in_flight, refused = 0, server.refused
        for seed in (5, 6, 7):
            pieces, expected = pieces_and_expected(prefix, count=1500, seed=seed)
            np.testing.assert_array_equal(remote.read_pieces(*pieces), expected)
        later = server.requests["corpus.bin"] - first_requests
        # The limit grows by one per round trip of answers and is halved at a refusal: it
        # stays near the capacity (sent at 512 at once, hundreds of the next reads' were refused).
        assert server.max_in_flight <= 2 * CAPACITY, server.max_in_flight
        assert server.refused - refused < later / 4, (server.refused - refused, later)


def test_the_limit_halves_once_per_round_of_overload_signals_and_grows_back_by_answers():
    """What cuts the requests in flight: timeouts, dropped or refused connections (of either
    client and of botocore), 429/503/504, an answer below the speed floor; not a 404, a 416 or
    a wrong range. The failures of requests sent before a cut do not cut again (one overloaded
    round is one signal). It starts at FIRST_IN_FLIGHT and grows by one per answer until the
    first signal, then by one per ``limit`` answers, up to the ceiling; never below 1."""
    import aiohttp
    from botocore.exceptions import ReadTimeoutError

    from mmidx_builder.storage.remote.answers import HTTPStatus, SlowBody, WrongRange

    limit = request_queue.InFlight(512)
    assert limit.now() == request_queue.FIRST_IN_FLIGHT  # then doubled per round of answers, until a signal
    for _ in range(limit.now()):
        limit.answered()
    assert limit.now() == 2 * request_queue.FIRST_IN_FLIGHT
    for _ in range(1000):
        limit.answered()
    assert limit.now() == 512
    for error in (TimeoutError("t"), ConnectionResetError("reset"), aiohttp.ServerDisconnectedError(),
                  ReadTimeoutError(endpoint_url="http://s3"), HTTPStatus(503, "u"), HTTPStatus(429, "u"),
                  HTTPStatus(504, "u"), SlowBody("slow")):
        before, sent_at = limit.now(), limit.cuts
        limit.failed(error, sent_at)
        assert limit.now() == before // 2, error
        limit.failed(error, sent_at)  # another request of the same round
        assert limit.now() == before // 2, error
        limit.limit = 512
    for error in (HTTPStatus(404, "u"), HTTPStatus(416, "u"), WrongRange("w"), PermissionError("p")):
        limit.failed(error, limit.cuts)
        assert limit.now() == 512, error
    for _ in range(20):
        limit.failed(TimeoutError("t"), limit.cuts)
    assert limit.now() == 1
    for _ in range(1 + 2 + 3):  # 1 answer at 1 in flight, 2 at 2, 3 at 3
        limit.answered()
    assert limit.now() == 4
    limit.limit = 511
    for _ in range(1000):
        limit.answered()
    assert limit.now() == 512
