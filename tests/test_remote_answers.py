"""Every answer of a remote store is checked before its bytes are used (issue 32): servers that
behave as real ones sometimes do, through both HTTP clients (libcurl and aiohttp).

- a 206 whose ``Content-Range`` is not the range asked for (the right length, another
  offset's bytes: a proxy or cache serving another request's answer);
- a file changed after it was opened, on a server that ignores ``If-Match`` (206 with the
  new file's ETag);
- a 200 with the whole file to a ranged request (used, sliced, when it is the whole object);
- ``Content-Encoding`` on a range (identity is asked for; an encoded range is refused by
  both clients alike);
- 429 / 503 with ``Retry-After`` or ``RateLimit``: waited out as told, without using the
  retry budget, logged once naming the host, within bounds of time and count whatever the
  server says (0, a date in the past, an hour), then a RemoteRateLimitError;
- an answer without the ETag (or Last-Modified) seen at open: retried, then a changed file;
  a server with only Last-Modified (412 to If-Match, as nginx and Apache) streams;
- a server silent before its headers, or during the TCP/TLS handshake: given up on after
  the speed floor's seconds, twice (issue 41);
- what libcurl hands over: the last response's header lines, read once; its reused handles
  send each file's own URL and headers (issue 41 item 6).

The oracle for tokens is the served file read locally through a memory map.
"""

from __future__ import annotations

import logging
import os
import shutil

import numpy as np
import pytest

from mmidx_builder.errors import RemoteChangedError, RemoteRateLimitError, RemoteReadError
from mmidx_builder.sources.indexed import IndexedFile
from range_server import RangeServer
from test_remote import fast, http_client, quick_backoff, random_pieces, served  # noqa: F401 (fixtures)


def pieces_and_expected(prefix, count: int = 40, seed: int = 1):
    local = IndexedFile.open(prefix)
    ids, offsets, lengths = random_pieces(np.random.default_rng(seed), local, count)
    return (ids, offsets, lengths), local.read_pieces(ids, offsets, lengths)


@pytest.fixture
def copied(served, tmp_path):
    """The served pair copied into a folder of its own (its .bin is changed by the tests)."""
    folder, prefix = served
    for name in ("corpus.bin", "corpus.idx"):
        shutil.copy(folder / name, tmp_path / name)
    return tmp_path, prefix


# --- Content-Range ----------------------------------------------------------------------------

def test_a_range_answered_with_another_offsets_bytes_is_retried_not_used(served):
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        server.shift["corpus.bin"] = 2  # two answers of the right length from 4 KiB further on
        got = remote.read_pieces(*pieces)
        assert server.shift["corpus.bin"] == 0
    np.testing.assert_array_equal(got, expected)


def test_a_server_that_keeps_answering_other_offsets_gives_an_error_naming_both_ranges(served):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=1))
        server.shift["corpus.bin"] = 10 ** 6
        start = int(remote.sequence_starts[5]) * 2
        with pytest.raises(RemoteReadError, match=rf"corpus\.bin: bytes \[{start}, {start + 20}\).*Content-Range "
                                                  rf"bytes {start + 4096}-{start + 4096 + 19}/") as error:
            remote.read_pieces([5], [0], [10])
        assert (error.value.start, error.value.stop) == (start, start + 20)
        assert server.requests["corpus.bin"] == 2  # retried, within the budget


# --- a changed file, whatever the server does with If-Match ---------------------------------------

@pytest.mark.parametrize("change", ["same size", "longer", "shorter"])
def test_a_changed_file_is_refused_when_the_server_ignores_if_match(copied, change):
    folder, prefix = copied
    with RangeServer(folder) as server:
        server.ignore_if_match = True
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        before = remote.read_pieces([3], [0], [5])
        data = (folder / "corpus.bin").read_bytes()
        changed = {"same size": data[::-1], "longer": data + b"\0\0", "shorter": data[:-2]}[change]
        (folder / "corpus.bin").write_bytes(changed)
        start = int(remote.sequence_starts[3]) * 2
        with pytest.raises(RemoteChangedError, match=rf"corpus\.bin: bytes \[{start}, {start + 10}\).*changed") \
                as error:
            remote.read_pieces([3], [0], [5])
        assert error.value.offset == start
        assert server.statuses["corpus.bin"][-1] == 206  # the server did answer the range
    np.testing.assert_array_equal(before, IndexedFile.open(prefix).read_pieces([3], [0], [5]))


@pytest.mark.parametrize("change", ["longer", "shorter"])
def test_a_replaced_file_of_another_size_is_refused_by_a_server_without_etags(copied, change):
    """Issue 40 item 6: without an ETag (nor Last-Modified) the total of a 206's Content-Range
    is all that tells a replaced file; without that check a stream served the new file's bytes
    (140 remote tests passed with it removed)."""
    folder, prefix = copied
    with RangeServer(folder) as server:
        server.etags = False
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        assert remote.read_pieces([3], [0], [5]).size == 5
        data = (folder / "corpus.bin").read_bytes()[::-1]  # other bytes at every offset
        (folder / "corpus.bin").write_bytes(data + b"\0\0" if change == "longer" else data[:-2])
        start = int(remote.sequence_starts[3]) * 2
        with pytest.raises(RemoteChangedError, match=rf"corpus\.bin: bytes \[{start}, {start + 10}\).*changed"):
            remote.read_pieces([3], [0], [5])
        assert server.statuses["corpus.bin"][-1] == 206  # the server did answer the range


# --- every answer carries the validator seen at open (issue 41 items 1 and 2) ---------------------

def _rewritten(folder, newer_by: int = 10) -> None:
    """The .bin rewritten with other bytes of the same size, its mtime ``newer_by`` seconds on
    (Last-Modified has whole seconds: a rewrite within the second would keep the date)."""
    path = folder / "corpus.bin"
    mtime = path.stat().st_mtime
    path.write_bytes(path.read_bytes()[::-1])
    os.utime(path, (mtime + newer_by, mtime + newer_by))


def test_an_answer_without_the_etag_seen_at_open_is_never_served(copied):
    """A strong ETag at open; then the file is rewritten (same size) and served without an ETag
    by a server ignoring If-Match: each answer is retried as a fault, then a changed file."""
    folder, prefix = copied
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=2))
        assert remote.read_pieces([3], [0], [5]).size == 5
        server.etags, server.ignore_if_match = False, True
        _rewritten(folder)
        before = server.requests["corpus.bin"]
        start = int(remote.sequence_starts[3]) * 2
        with pytest.raises(RemoteChangedError, match=rf"corpus\.bin: bytes \[{start}, {start + 10}\).*without the "
                                                     r"ETag") as error:
            remote.read_pieces([3], [0], [5])
        assert error.value.offset == start
        assert server.requests["corpus.bin"] - before == 3  # retries + 1, every one a 206 refused
        assert server.statuses["corpus.bin"][-3:] == [206] * 3


def test_an_answer_without_the_etag_once_is_retried_and_the_tokens_are_right(served):
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        server.unversioned["corpus.bin"] = 2  # a cache that strips the ETag from two answers
        got = remote.read_pieces(*pieces)
        assert server.unversioned["corpus.bin"] == 0
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("ignores", [False, True], ids=["honours If-Unmodified-Since", "ignores it"])
def test_a_server_with_only_last_modified_streams_and_a_rewrite_is_refused(copied, ignores):
    """Issue 41 item 2: nginx and Apache without ETags answer If-Match (a date sent as one) by
    412, so such a file could not be read; the date goes in If-Unmodified-Since, and every
    answer's Last-Modified must be the one seen at open."""
    folder, prefix = copied
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        server.etags, server.last_modified, server.ignore_if_match = False, True, ignores
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=1))
        np.testing.assert_array_equal(remote.read_pieces(*pieces), expected)
        assert 412 not in server.statuses["corpus.bin"]
        _rewritten(folder)
        with pytest.raises(RemoteChangedError, match=r"corpus\.bin: bytes \[\d+, \d+\).*changed"):
            remote.read_pieces([3], [0], [5])
        assert server.statuses["corpus.bin"][-1] == (206 if ignores else 412)


# --- 200 to a ranged request ------------------------------------------------------------------

def test_a_whole_file_answer_to_a_range_is_sliced(served):
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        server.whole["corpus.bin"] = 3
        got = remote.read_pieces(*pieces)
        assert server.whole["corpus.bin"] == 0 and 200 in server.statuses["corpus.bin"]
    np.testing.assert_array_equal(got, expected)


def test_a_whole_file_answer_of_another_size_is_a_changed_file(copied):
    folder, prefix = copied
    with RangeServer(folder) as server:
        server.ignore_if_match = True
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        (folder / "corpus.bin").write_bytes((folder / "corpus.bin").read_bytes() + b"\0\0")
        server.whole["corpus.bin"] = 10 ** 6
        with pytest.raises(RemoteChangedError, match=r"corpus\.bin: bytes \[\d+, \d+\).*changed"):
            remote.read_pieces([3], [0], [5])


# --- Content-Encoding -----------------------------------------------------------------------

def test_ranges_ask_for_the_identity_encoding(served):
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        server.encodings.clear()
        got = remote.read_pieces(*pieces)
        assert server.encodings == {"identity": server.requests["corpus.bin"]}
    np.testing.assert_array_equal(got, expected)


def test_an_encoded_range_is_refused_by_both_clients_alike(served):
    """A range of an encoded representation is a range of the encoded bytes (RFC 9110): decoding
    it may give other bytes than the range of the file, so neither client decodes one."""
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        server.gzip["corpus.bin"] = 10 ** 6
        start = int(remote.sequence_starts[5]) * 2
        with pytest.raises(RemoteReadError, match=rf"corpus\.bin: bytes \[{start}, {start + 20}\).*"
                                                  r"Content-Encoding gzip"):
            remote.read_pieces([5], [0], [10])
        assert server.requests["corpus.bin"] == 1  # refused at once: asking again gets the same answer


# --- 429 / 503: waiting as told -----------------------------------------------------------------

RATE_LIMITS = {
    "429 Retry-After": (429, {"Retry-After": "1"}),
    "503 Retry-After": (503, {"Retry-After": "1"}),
    "429 RateLimit": (429, {"RateLimit": '"api";r=0;t=1', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'}),
}


@pytest.mark.parametrize("kind", sorted(RATE_LIMITS))
def test_a_rate_limited_read_waits_as_told_without_using_retries_and_logs_once(served, caplog, kind):
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=0))  # no retries at all
        server.limit_status, server.limit_headers = RATE_LIMITS[kind]
        server.limit["corpus.bin"] = 12
        with caplog.at_level(logging.INFO):
            got = remote.read_pieces(*pieces)
        assert server.limit["corpus.bin"] == 0
        host = server.url.split("://")[1]
    np.testing.assert_array_equal(got, expected)
    told = [r for r in caplog.records if host in r.getMessage() and r.levelno >= logging.WARNING]
    assert len(told) == 1, [r.getMessage() for r in told]
    assert "wait" in told[0].getMessage()


def test_opening_waits_as_told_too(served, caplog):
    """The HEAD that opens a file waits out a 429 as the ranged reads do, without retries."""
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix)
    with RangeServer(folder) as server:
        server.limit["corpus"] = 2  # the .idx's and the .bin's first answers (HEAD or GET)
        with caplog.at_level(logging.INFO):
            remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=0))
            got = remote.read_pieces(*pieces)
        assert server.limit["corpus"] == 0
    np.testing.assert_array_equal(got, expected)


def test_a_wait_longer_than_the_bound_is_an_error_naming_the_host(served):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(max_wait=2.5))
        server.limit_headers = {"Retry-After": "1"}
        server.limit["corpus.bin"] = 10 ** 6
        host = server.url.split("://")[1]
        with pytest.raises(RemoteReadError, match=rf"corpus\.bin: bytes \[\d+, \d+\).*{host}.*wait"):
            remote.read_pieces([5], [0], [10])
        assert 2 <= server.requests["corpus.bin"] <= 4  # three waits of a second fit in 2.5 s with their requests


def test_a_rate_limit_asking_for_more_than_the_bound_fails_at_once(served):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(max_wait=30))
        server.limit_headers = {"Retry-After": "3600"}
        server.limit["corpus.bin"] = 10 ** 6
        host = server.url.split("://")[1]
        with pytest.raises(RemoteRateLimitError, match=rf"rate limited: {host} asks to wait 3600 s.*at most 30 s"):
            remote.read_pieces([5], [0], [10])
        assert server.requests["corpus.bin"] == 1


# Waits a server asks for that spend no seconds (issue 41 item 3): "now", again and again.
ZERO_WAITS = {"Retry-After 0": {"Retry-After": "0"},
              "Retry-After in the past": {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}}


@pytest.fixture
def tiny_wait_floor(monkeypatch):
    from mmidx_builder.storage.remote import server_waits

    monkeypatch.setattr(server_waits, "WAIT_FLOOR_SECONDS", 0.01)


@pytest.mark.parametrize("kind", sorted(ZERO_WAITS))
def test_a_server_saying_retry_now_forever_is_asked_a_bounded_number_of_times(served, kind, tiny_wait_floor):
    """429 with Retry-After: 0 forever got ~1,000 requests a second for as long as the process
    lived: zero seconds never spend a budget of seconds. The waits are counted too."""
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(max_waits=3))
        server.limit_headers = ZERO_WAITS[kind]
        server.limit["corpus.bin"] = 10 ** 6
        host = server.url.split("://")[1]
        start = int(remote.sequence_starts[5]) * 2
        with pytest.raises(RemoteRateLimitError, match=rf"corpus\.bin: bytes \[{start}, {start + 20}\): rate "
                                                        rf"limited: {host} asks to wait 0 s.*at most 3 waits"):
            remote.read_pieces([5], [0], [10])
        assert server.requests["corpus.bin"] == 4  # the first answer and three waits


def test_each_wait_of_a_request_lasts_at_least_a_doubling_floor(served, tiny_wait_floor):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(max_waits=4))
        server.limit_headers = {"Retry-After": "0"}
        server.limit["corpus.bin"] = 10 ** 6
        with pytest.raises(RemoteRateLimitError):
            remote.read_pieces([5], [0], [10])
        asked = [received for method, name, received, _ in server.answered if name == "corpus.bin" and method == "GET"]
        assert server.requests["corpus.bin"] == 5  # the first answer and four waits
    # The first three waits, of 10, 20 and 40 ms at least (summed: the server's clock of each
    # request jitters; the last request may be recorded as answered after the error is raised).
    assert len(asked) >= 4 and asked[3] - asked[0] >= 0.07 - 0.01, np.diff(asked)


def test_opening_a_file_whose_server_says_retry_now_forever_is_a_rate_limit_error(served, tiny_wait_floor):
    folder, prefix = served
    with RangeServer(folder) as server:
        server.limit_headers = {"Retry-After": "0"}
        server.limit["corpus"] = 10 ** 6
        with pytest.raises(RemoteRateLimitError, match=r"corpus\.(idx|bin).*rate limited.*at most 2 waits"):
            IndexedFile.open(server.url + "/corpus", opener=fast(max_waits=2))
        # The .idx and the .bin are asked for at once: the first to fail ends the opening.
        assert {len(s) for s in server.statuses.values()} <= {2, 3} and 3 in {len(s) for s in server.statuses.values()}
        assert {s for answers in server.statuses.values() for s in answers} == {429}  # HEADs: 1 + 2 waits


def test_a_429_without_a_wait_is_reported_as_a_rate_limit_after_its_retries(served):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=2))
        server.limit_headers = {}
        server.limit["corpus.bin"] = 10 ** 6
        with pytest.raises(RemoteRateLimitError, match=r"corpus\.bin: bytes \[\d+, \d+\).*HTTP 429.*3 attempt"):
            remote.read_pieces([5], [0], [10])
        assert server.requests["corpus.bin"] == 3


# --- a server slower than the speed floor ---------------------------------------------------------

def test_an_answer_slower_than_the_floor_is_abandoned_and_tried_once_more(served):
    """A body at 1 byte/s is given up after the floor's seconds and asked once more, then an
    error naming the range and the speed: not ``retries`` attempts of ``timeout`` each."""
    folder, prefix = served
    pieces, expected = pieces_and_expected(prefix, count=1)
    with RangeServer(folder) as server:
        access = fast(timeout=60, retries=5, min_speed=1024, slow_seconds=1)
        remote = IndexedFile.open(server.url + "/corpus", opener=access)
        server.trickle["corpus.bin"] = 1  # one slow answer: the second attempt gets the bytes
        np.testing.assert_array_equal(remote.read_pieces(*pieces), expected)
        assert server.requests["corpus.bin"] == 2
        server.trickle["corpus.bin"] = 10 ** 6
        start = int(remote.sequence_starts[5]) * 2
        with pytest.raises(RemoteReadError, match=rf"corpus\.bin: bytes \[{start}, {start + 20}\).*"
                                                  r"(slow|no byte).*2 attempt"):
            remote.read_pieces([5], [0], [10])
        assert server.requests["corpus.bin"] == 4  # twice, not retries + 1 times


def test_a_server_silent_before_its_headers_is_given_up_on_within_the_floor(served):
    """Issue 41 item 4: a server that reads the request and sends nothing, not even its headers,
    is abandoned after the floor's seconds and tried once more, through both clients (a body
    that trickles is test_an_answer_slower_than_the_floor_is_abandoned_and_tried_once_more)."""
    import time

    folder, prefix = served
    with RangeServer(folder) as server:
        access = fast(timeout=20, retries=5, min_speed=1024, slow_seconds=1)  # libcurl's floor: whole seconds
        remote = IndexedFile.open(server.url + "/corpus", opener=access)
        server.stall_seconds = 10
        server.stall["corpus.bin"] = 10 ** 6
        began = time.monotonic()
        with pytest.raises(RemoteReadError, match=r"corpus\.bin: bytes \[\d+, \d+\).*2 attempt"):
            remote.read_pieces([5], [0], [10])
        assert time.monotonic() - began < 10  # two floors of 1 s, not a timeout of 20 s (nor 6 of them)
        assert server.requests["corpus.bin"] == 2


@pytest.fixture
def silent_port():
    """A port whose connections the kernel accepts and no one answers: no TLS handshake, no byte."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield listener.getsockname()[1]


def test_a_server_silent_from_the_connection_on_is_given_up_on_within_the_floor(silent_port):
    """HTTPS to a server that never answers the TLS handshake: libcurl's low-speed check does not
    run while it connects (and its connect timeout was 300 s, capped by the request's), aiohttp's
    read timeout neither; both now give up after the floor's seconds and try once more."""
    import time

    from mmidx_builder.storage.remote import RemoteObject

    access = fast(timeout=20, retries=5, min_speed=1024, slow_seconds=0.5)
    url = f"https://127.0.0.1:{silent_port}/corpus.bin"
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"corpus\.bin: bytes \[0, 10\).*2 attempt"):
        access.fetch([RemoteObject(url, 1000, '"v"')], [0], [10])
    assert time.monotonic() - began < 10  # two floors of 0.5 s, not 6 attempts of 20 s
    began = time.monotonic()
    with pytest.raises(RemoteReadError, match=r"opened\.bin: bytes \[0, 0\).*2 attempt"):
        fast(timeout=20, retries=5, slow_seconds=0.5).stat(url.replace("corpus", "opened"))
    assert time.monotonic() - began < 10


# --- what libcurl hands over (curl.py) --------------------------------------------------------

def test_libcurl_answers_are_the_last_responses_header_lines_parsed_once():
    """libcurl gives the header lines of every response of a request (a redirect, a 100
    Continue, then the answer) one at a time; they are kept as they come and read once: the
    last response's status and fields, a field sent twice being its last, names in any case,
    values without the spaces around them."""
    from mmidx_builder.storage.remote.curl import _Transfer

    transfer = _Transfer(10, 20, 100)
    for line in (b"HTTP/1.1 100 Continue\r\n", b"\r\n", b"HTTP/1.1 302 Found\r\n", b"ETag: \"old\"\r\n",
                 b"Location: /elsewhere\r\n", b"\r\n", b"HTTP/1.1 206 Partial Content\r\n",
                 b"content-range:  bytes 10-19/100 \r\n", b"ETag: \"a\"\r\n", b"X-Empty:\r\n", b"ETAG:\t\"b\"\r\n",
                 b"\r\n"):
        transfer.lines.append(line)
    status, fields = transfer.answer()
    assert status == 206
    assert (fields.get("content-range"), fields.get("etag"), fields.get("x-empty")) == ("bytes 10-19/100", '"b"', "")
    assert fields.get("location") is None and fields.get("content-encoding") is None
    assert dict(fields.items()) == {"content-range": "bytes 10-19/100", "etag": '"b"', "x-empty": ""}
    assert transfer.write(b"0123456789") is None and transfer.body() == b"0123456789"
    assert _Transfer(0, 1, 100).answer()[0] == 0  # no status line: not an answer
    old_server = _Transfer(0, 10, 100)  # lines ending in LF alone, which libcurl takes too
    for line in (b"HTTP/1.0 206 Partial Content\n", b"ETag: \"c\"\n", b"Content-Range: bytes 0-9/100\n", b"\n"):
        old_server.lines.append(line)
    status, fields = old_server.answer()
    assert (status, fields.get("etag"), fields.get("content-range")) == (206, '"c"', "bytes 0-9/100")


def test_reused_libcurl_handles_send_each_files_own_headers(served):
    """libcurl's handles are reused, their per-file options (URL, headers) set when a handle
    moves to another file: reads of two files with different headers, one after another and
    at once, each reach their own server with their own header and bytes."""
    folder, _ = served
    data = (folder / "corpus.bin").read_bytes()
    with RangeServer(folder) as first, RangeServer(folder) as second:
        reads = []
        for server, login in ((first, "Basic Zmlyc3Q6MQ=="), (second, "Basic c2Vjb25kOjI=")):
            access = fast(storage_options={"headers": {"Authorization": login}})
            reads.append((access, access.stat(server.url + "/corpus.bin")))
        for round_ in range(3):
            for access, obj in reads:
                starts = [(97 * k + round_) % 4000 for k in range(20)]
                assert access.fetch([obj] * 20, starts, [s + 50 for s in starts]) == [data[s:s + 50] for s in starts]
        assert set(first.logins) == {"Basic Zmlyc3Q6MQ=="} and set(second.logins) == {"Basic c2Vjb25kOjI="}
