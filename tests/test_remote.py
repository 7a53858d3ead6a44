"""Remote reads (remote.py): tokens equal to the local files' for every source kind, bytes
fetched within 1.5x of the pieces', many requests in flight, faults retried or named, a
changed file refused, the block cache, and S3 through moto's server on 127.0.0.1.

The oracle for tokens is the same files read locally through memory maps (MemmapBinReader,
RawFiles' maps), an independent read path; sample order comes from megatron-core where the
builder tests already pin it (local rows here are the builder's on the local folder).
"""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mmidx_builder.errors import MissingPartnerError, RemoteChangedError, RemoteReadError
from mmidx_builder.sources.indexed import IndexedFile, write_documents
from mmidx_builder.sources.raw import RawFiles
from mmidx_builder.storage.remote import MERGE_GAP_BYTES, BlockCache, RemoteAccess, plan_runs
from mmidx_builder.sources.token_source import Concatenated, SequenceRange
from range_server import RangeServer

SEQ = 64


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A pair of 2,000 documents (lengths 0-1,500, uint16) in a served folder."""
    folder = tmp_path_factory.mktemp("served")
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 1500, size=2000)
    lengths[7] = 0
    prefix = write_documents(folder / "corpus", [rng.integers(0, 65535, n) for n in lengths], dtype=np.uint16)
    return folder, prefix


def random_pieces(rng, source, count):
    ids = rng.integers(0, len(source.sequence_lengths), count)
    sizes = source.sequence_lengths[ids].astype(np.int64)
    offsets = (rng.random(count) * sizes).astype(np.int64)
    lengths = (rng.random(count) * (sizes - offsets + 1)).astype(np.int64)
    return ids, offsets, lengths


def fast(access: RemoteAccess | None = None, **changes) -> RemoteAccess:
    """Quick retries for fault tests."""
    settings_ = dict(storage_options={}, timeout=1.0, retries=3)
    settings_.update(changes)
    return RemoteAccess(**settings_)


@pytest.fixture(autouse=True, params=["libcurl", "aiohttp"])
def http_client(request, monkeypatch):
    """Every test here runs with HTTP ranges sent through libcurl (pycurl, the remote extra) and
    through aiohttp: the two paths must give the same bytes, faults and errors."""
    from mmidx_builder.storage.remote import curl, fetching

    if request.param == "libcurl":
        pytest.importorskip("pycurl", reason="the remote extra's pycurl")
        monkeypatch.setattr(fetching, "HTTP_CLIENT", "auto")
    else:
        pytest.importorskip("aiohttp", reason="the remote extra's aiohttp")

        def refused(*args, **kwargs):
            raise AssertionError("HTTP_CLIENT is aiohttp, yet libcurl was asked")

        monkeypatch.setattr(fetching, "HTTP_CLIENT", "aiohttp")
        monkeypatch.setattr(curl, "fetch", refused)
    return request.param


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    from mmidx_builder.storage.remote import request_queue

    monkeypatch.setattr(request_queue, "BACKOFF_SECONDS", 0.01)


# --- planning --------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9000), st.integers(0, 3000)), min_size=1, max_size=80),
       st.sampled_from([0.0, 0.1, 0.4, 0.5]))
def test_runs_cover_every_piece_exactly_and_bridge_the_smallest_gaps_within_the_byte_budget(pieces, budget):
    sizes = [9000, 7000, 9000]
    files = np.array([p[0] for p in pieces])
    starts = np.minimum(np.array([p[1] for p in pieces]), np.array(sizes)[files])
    stops = np.minimum(starts + np.array([p[2] for p in pieces]), np.array(sizes)[files])
    run_file, run_start, run_stop, piece_run, piece_offset = plan_runs(files, starts, stops, sizes, budget=budget)
    # Every piece's bytes, cut from its run as the reader cuts them, are exactly the piece's.
    contents = [np.random.default_rng(f).integers(0, 256, size, dtype=np.uint8) for f, size in enumerate(sizes)]
    runs = [contents[f][a:b] for f, a, b in zip(run_file, run_start, run_stop)]
    assert ((run_start >= 0) & (run_stop <= np.array(sizes)[run_file])).all()
    for i in range(len(pieces)):
        got = runs[piece_run[i]][piece_offset[i]:piece_offset[i] + stops[i] - starts[i]]
        np.testing.assert_array_equal(got, contents[files[i]][starts[i]:stops[i]])
    # The budget: the runs hold at most (1 + budget) times the bytes the pieces cover.
    covered = sum(len(set().union(*[range(a, b) for a, b in zip(starts[files == f], stops[files == f])]))
                  for f in range(3))
    fetched = int((run_stop - run_start).sum())
    assert fetched <= (1 + budget) * covered
    # Runs of a file neither overlap nor touch (touching ones would be one request), and every
    # gap left between them is at least as long as any gap that was bridged (smallest first).
    bridged, kept = [], []
    for f in range(3):
        mine = np.flatnonzero(run_file == f)
        order = mine[np.argsort(run_start[mine])]
        assert (run_start[order][1:] > run_stop[order][:-1]).all()
        kept += (run_start[order][1:] - run_stop[order][:-1]).tolist()
        for r in order:
            inside = np.flatnonzero((piece_run == r) & (stops > starts))
            spans = sorted(zip(starts[inside].tolist(), stops[inside].tolist()))
            reach = spans[0][1] if spans else None
            for a, b in spans[1:]:
                if a > reach:
                    bridged.append(a - reach)
                reach = max(reach, b)
    if bridged and kept:
        assert min(kept) >= max(bridged) or min(kept) > MERGE_GAP_BYTES


def test_a_gather_bridges_a_wide_gap_when_its_budget_allows_and_not_beyond():
    # Ten pieces of 1,000 bytes with gaps of 100 and one of 1,500: the budget (0.4 x 10,000)
    # bridges all of them, and with 0.2 all but the wide one.
    starts = np.array([0, 1100, 2200, 3300, 4400, 6900, 8000, 9100, 10200, 11300])
    stops = starts + 1000
    run_file, run_start, run_stop, _, _ = plan_runs(np.zeros(10, np.int64), starts, stops, [10 ** 7], budget=0.4)
    assert run_start.tolist() == [0] and run_stop.tolist() == [12300]
    for budget in (0.2, None):  # None: MERGE_BUDGET, 0.15
        _, run_start, run_stop, piece_run, _ = plan_runs(np.zeros(10, np.int64), starts, stops, [10 ** 7],
                                                         **({} if budget is None else {"budget": budget}))
        assert run_start.tolist() == [0, 6900] and run_stop.tolist() == [5400, 12300]
        assert piece_run.tolist() == [0] * 5 + [1] * 5
    # Pieces of different files are never one request, however close.
    run_file, run_start, run_stop, _, _ = plan_runs([0, 1], [0, 0], [10, 10], [10, 10])
    assert run_file.tolist() == [0, 1] and run_stop.tolist() == [10, 10]


# --- reads over HTTP ---------------------------------------------------------------------

def test_remote_pieces_equal_local_ones_and_stay_within_the_byte_budget(served):
    folder, prefix = served
    local = IndexedFile.open(prefix)
    rng = np.random.default_rng(0)
    with RangeServer(folder, latency=0.05) as server:
        remote = IndexedFile.open(server.url + "/corpus")
        assert remote.remote and not local.remote
        ids, offsets, lengths = random_pieces(rng, local, 600)
        np.testing.assert_array_equal(remote.read_pieces(ids, offsets, lengths), local.read_pieces(ids, offsets, lengths))
        needed = int(lengths.sum()) * 2
        assert 0 < server.sent["corpus.bin"] <= 1.5 * needed
        assert server.whole_files_sent.get("corpus.bin", 0) == 0
        assert server.requests["corpus.idx"] == 1  # the .idx in one request
        # The pieces' requests were in flight together, not one after another.
        assert server.max_in_flight >= 20, server.max_in_flight
        for i in (0, 7, 1999):
            np.testing.assert_array_equal(remote.sequence(i), local.sequence(i))


def test_remote_attribute_is_forwarded_by_concatenations_and_ranges(served):
    folder, prefix = served
    local = IndexedFile.open(prefix)
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus")
        assert Concatenated([local, remote]).remote and not Concatenated([local, local]).remote
        assert SequenceRange(remote, 3, 9).remote and not SequenceRange(local, 3, 9).remote


def test_a_missing_remote_partner_is_named(served, tmp_path):
    folder, prefix = served
    shutil.copy(prefix + ".bin", tmp_path / "lonely.bin")
    with RangeServer(tmp_path) as server:
        with pytest.raises(MissingPartnerError, match="lonely.idx"):
            IndexedFile.open(server.url + "/lonely")


def test_a_remote_prefix_without_either_file_is_said_as_a_local_one_is(served, tmp_path):
    """Issue 40 item 3: one wording for a pair of which neither file is there, local or remote
    (the remote one said "found neither exists")."""
    with RangeServer(tmp_path) as server:
        with pytest.raises(MissingPartnerError) as remote:
            IndexedFile.open(server.url + "/nope")
    with pytest.raises(MissingPartnerError) as local:
        IndexedFile.open(tmp_path / "nope")
    assert str(remote.value).replace(server.url, str(tmp_path)) == str(local.value), (str(remote.value), str(local.value))
    assert "found neither file" in str(local.value)


def test_raw_files_read_remotely_equal_local_maps(tmp_path):
    rng = np.random.default_rng(4)
    names = []
    for i, size in enumerate([0, 1, 3001, 77, 50_000]):
        names.append(f"f{i}.dat")
        (tmp_path / names[-1]).write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
    for n_bytes in (1, 2, 3):
        local = RawFiles([tmp_path / n for n in names], n_bytes)
        with RangeServer(tmp_path) as server:
            remote = RawFiles([f"{server.url}/{n}" for n in names], n_bytes)
            assert remote.remote and not local.remote
            ids, offsets, lengths = random_pieces(rng, local, 300)
            np.testing.assert_array_equal(remote.read_pieces(ids, offsets, lengths),
                                          local.read_pieces(ids, offsets, lengths))


# --- faults ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fault", ["fail", "drop", "cut", "stall"])
def test_faults_are_retried_and_the_tokens_are_right(served, fault):
    folder, prefix = served
    local = IndexedFile.open(prefix)
    rng = np.random.default_rng(1)
    ids, offsets, lengths = random_pieces(rng, local, 40)
    with RangeServer(folder) as server:
        server.stall_seconds = 2.5
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        getattr(server, fault)["corpus.bin"] = 3  # the first three .bin answers go wrong
        got = remote.read_pieces(ids, offsets, lengths)
        assert getattr(server, fault)["corpus.bin"] == 0
    np.testing.assert_array_equal(got, local.read_pieces(ids, offsets, lengths))


def test_a_server_that_keeps_failing_gives_an_error_naming_the_range(served):
    folder, prefix = served
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast(retries=2))
        server.fail["corpus.bin"] = 10 ** 6
        with pytest.raises(RemoteReadError, match=r"corpus\.bin: bytes \[\d+, \d+\).*503.*3 attempt") as error:
            remote.read_pieces([5], [0], [10])
        start = int(local_start := remote.sequence_starts[5]) * 2
        assert (error.value.start, error.value.stop) == (start, start + 20), local_start
        assert server.requests["corpus.bin"] == 3  # bounded: retries + 1


def test_requests_waiting_for_a_slot_go_out_by_priority_then_arrival():
    """The table a stream waits for (priority 0) and the nearest gathers read ahead go first,
    each batch's requests in order; a queue by arrival would put the table behind every
    gather read ahead. A failed batch sends no more of its requests."""
    import asyncio

    from mmidx_builder.errors import RemoteReadError
    from mmidx_builder.storage.remote import RemoteObject
    from mmidx_builder.storage.remote.request_queue import Batch, Requests

    obj = RemoteObject("http://example/x.bin", 100)

    async def run():
        requests, sent, release = Requests(1), [], asyncio.Event()

        def batch(name, priority, count):
            async def send(_obj, start, stop, _route):
                sent.append((name, start))
                if name == "first":
                    await release.wait()  # holds the one slot while the others queue
                if name == "broken":
                    raise RemoteReadError(obj.url, start, stop, "refused")
                return b"x" * (stop - start)
            return Batch([(obj, i, i + 1, None) for i in range(count)], send, 0, priority, None)

        batches = {"first": batch("first", 9, 1)}
        requests.submit(batches["first"])
        await asyncio.sleep(0)
        for name, priority, count in (("gather 5", 5, 1), ("gather 1", 1, 2), ("gather 1 again", 1, 1),
                                      ("broken", 0, 3), ("now", 0, 2), ("gather 3", 3, 1)):
            batches[name] = batch(name, priority, count)
            requests.submit(batches[name])
        release.set()
        while requests.workers:
            await asyncio.sleep(0)
        return sent, batches, requests

    sent, batches, requests = asyncio.run(run())
    assert sent == [("first", 0), ("broken", 0), ("now", 0), ("now", 1), ("gather 1", 0), ("gather 1", 1),
                    ("gather 1 again", 0), ("gather 3", 0), ("gather 5", 0)]
    assert batches["now"].future.result() == [b"x", b"x"]
    with pytest.raises(RemoteReadError, match="refused"):
        batches["broken"].future.result()
    assert requests.waiting == [] and requests.workers == 0


@pytest.mark.parametrize("uvloop", ["installed", "missing"])
def test_http_ranges_are_fetched_on_the_io_loop_uvloops_when_installed(served, monkeypatch, uvloop):
    """The HTTP filesystem runs on the reader's own loop thread: uvloop's when the ``remote``
    extra installed it (less client CPU per request), asyncio's otherwise, with the same bytes."""
    import sys

    from mmidx_builder.storage.remote import access as access_module
    from mmidx_builder.storage.remote import process_state

    if uvloop == "missing":
        monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    else:
        pytest.importorskip("uvloop", reason="the remote extra's uvloop")
    monkeypatch.setattr(process_state, "_PER_PROCESS", {})  # a new io loop, as in a new process
    monkeypatch.setattr(access_module, "_FILESYSTEMS", {})
    folder, _ = served
    with RangeServer(folder) as server:
        access = fast()
        fs, _ = access.filesystem(server.url + "/corpus.bin")
        loop_type = f"{type(fs.loop).__module__}.{type(fs.loop).__qualname__}"
        assert loop_type == ("uvloop.Loop" if uvloop == "installed" else "asyncio.unix_events._UnixSelectorEventLoop")
        assert fs.loop.is_running()
        obj = access.stat(server.url + "/corpus.bin")
        data = (folder / "corpus.bin").read_bytes()
        assert access.fetch([obj] * 3, [0, 100, 5000], [10, 300, 5001]) == [data[0:10], data[100:300], data[5000:5001]]


def test_http_ranges_go_through_libcurl_unless_an_option_needs_aiohttp(served, monkeypatch, http_client):
    """With pycurl installed, HTTP ranges are libcurl's (less client CPU per request), but a
    filesystem option libcurl is not given (session options, ssl, cookies...) keeps that
    filesystem on aiohttp rather than dropping the option."""
    import mmidx_builder.storage.remote.curl as remote_curl

    asked = []
    real = remote_curl.fetch
    monkeypatch.setattr(remote_curl, "fetch", lambda *a, **k: asked.append(len(a[2])) or real(*a, **k))
    folder, _ = served
    data = (folder / "corpus.bin").read_bytes()
    with RangeServer(folder) as server:
        for options, curl in (({}, True), ({"headers": {"X-Test": "1"}}, True),
                              ({"client_kwargs": {"headers": {"Authorization": "Basic bWU6cHc="}}}, False)):
            asked.clear()
            access = fast(storage_options=options)
            obj = access.stat(server.url + "/corpus.bin")
            assert access.fetch([obj] * 2, [0, 500], [10, 900]) == [data[0:10], data[500:900]]
            assert asked == ([2] if curl and http_client == "libcurl" else []), options
        assert set(server.logins) >= {None, "Basic bWU6cHc="}  # the session's header reached the server


@pytest.mark.parametrize("trusted", [True, False])
def test_https_ranges_trust_the_certificates_python_trusts(served, tmp_path, http_client, trusted):
    """HTTPS through either client trusts what Python's ssl trusts (SSL_CERT_FILE here, the
    system's store otherwise): a server whose certificate that does not vouch for is refused
    with an error naming the file, never read."""
    trustme = pytest.importorskip("trustme", reason="the test extra's trustme")
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert("127.0.0.1").configure_cert(context)
    folder, _ = served
    code = ("import sys\n"
            "from mmidx_builder.storage import remote\n"
            "from mmidx_builder.storage.remote import fetching\n"
            "fetching.HTTP_CLIENT = sys.argv[2]\n"
            "access = remote.RemoteAccess(timeout=5, retries=1)\n"
            "obj = remote.RemoteObject(sys.argv[1], int(sys.argv[3]))\n"
            "print(access.fetch([obj, obj], [0, 100], [10, 300])[1].hex())\n")
    env = {**os.environ, "SSL_CERT_FILE": str(tmp_path / "ca.pem")} if trusted else \
        {k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"}
    with RangeServer(folder, ssl_context=context) as server:
        assert server.url.startswith("https://")
        url = server.url + "/corpus.bin"
        done = subprocess.run([sys.executable, "-c", code, url, "auto" if http_client == "libcurl" else "aiohttp",
                               str((folder / "corpus.bin").stat().st_size)], env=env, capture_output=True,
                              text=True, timeout=120)
    if trusted:
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == (folder / "corpus.bin").read_bytes()[100:300].hex()
    else:
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert "RemoteReadError" in last and url in last and "certificate" in last.lower(), last


@pytest.mark.parametrize("why", ["exiting", "dropped"])
def test_requests_not_yet_sent_are_not_sent_at_exit_or_once_dropped(served, monkeypatch, why):
    import contextlib
    import threading

    import mmidx_builder.storage.remote as remote

    folder, _ = served
    event = threading.Event()
    if why == "exiting":
        monkeypatch.setattr(remote.process_state, "EXITING", event)
    within = remote.background_fetches(event, priority=1) if why == "dropped" else contextlib.nullcontext()
    with RangeServer(folder) as server, within:
        access = fast()
        obj = access.stat(server.url + "/corpus.bin")
        assert access.fetch([obj, obj], [0, 10], [5, 20]) == [(folder / "corpus.bin").read_bytes()[a:b]
                                                             for a, b in ((0, 5), (10, 20))]
        sent = sum(server.requests.values())
        event.set()
        with pytest.raises(RemoteReadError, match=why):
            access.fetch([obj] * 50, list(range(0, 500, 10)), list(range(5, 505, 10)))
        assert sum(server.requests.values()) == sent


def test_a_file_changed_mid_run_is_refused_not_read(served, tmp_path):
    folder, prefix = served
    for name in ("corpus.bin", "corpus.idx"):
        shutil.copy(os.path.join(folder, name), tmp_path / name)
    with RangeServer(tmp_path) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=fast())
        before = remote.read_pieces([3], [0], [5])
        # Same size, other bytes (a re-upload): the ETag changes, the server answers 412.
        data = (tmp_path / "corpus.bin").read_bytes()
        (tmp_path / "corpus.bin").write_bytes(data[::-1])
        with pytest.raises(RemoteChangedError, match=r"corpus\.bin: bytes \[\d+, \d+\).*changed") as error:
            remote.read_pieces([3], [0], [5])
        assert error.value.offset == int(remote.sequence_starts[3]) * 2
        assert len(before) == 5


# --- the block cache -----------------------------------------------------------------------

def test_a_second_pass_through_the_cache_reads_no_remote_bytes(served, tmp_path):
    folder, prefix = served
    local = IndexedFile.open(prefix)
    rng = np.random.default_rng(2)
    ids, offsets, lengths = random_pieces(rng, local, 500)
    access = RemoteAccess(cache_dir=str(tmp_path / "cache"))
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=access)
        first = remote.read_pieces(ids, offsets, lengths)
        sent = dict(server.sent)
        again = remote.read_pieces(ids, offsets, lengths)
        assert server.sent == sent
        # Another process (a new reader, no in-memory state) is served from the same files.
        code = (f"import sys, numpy as np; sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                "from mmidx_builder.sources.indexed import IndexedFile\nfrom mmidx_builder.storage.remote import RemoteAccess\n"
                f"f = IndexedFile.open({server.url + '/corpus'!r}, opener=RemoteAccess(cache_dir={str(tmp_path / 'cache')!r}))\n"
                f"sys.stdout.write(f.read_pieces({ids.tolist()}, {offsets.tolist()}, {lengths.tolist()}).tobytes().hex())")
        other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert server.sent == sent
    expected = local.read_pieces(ids, offsets, lengths)
    for got in (first, again, np.frombuffer(bytes.fromhex(other), np.uint16)):
        np.testing.assert_array_equal(got, expected)


def test_two_processes_filling_one_cache_at_once_read_the_same_tokens(served, tmp_path):
    folder, prefix = served
    cache = str(tmp_path / "cache")
    with RangeServer(folder, latency=0.01) as server:
        code = (f"from mmidx_builder.sources.indexed import IndexedFile\nfrom mmidx_builder.storage.remote import RemoteAccess\n"
                "import sys\n"
                f"f = IndexedFile.open({server.url + '/corpus'!r}, opener=RemoteAccess(cache_dir={cache!r}, max_cache_bytes=3 << 20))\n"
                "sys.stdout.write(f.read_pieces(list(range(0, 2000, 3)), [0] * 667, f.sequence_lengths[0:2000:3]).tobytes().hex())")
        runs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)]
        outputs = [run.communicate()[0] for run in runs]
        assert all(run.returncode == 0 for run in runs)
    local = IndexedFile.open(prefix)
    expected = local.read_pieces(range(0, 2000, 3), [0] * 667, local.sequence_lengths[0:2000:3])
    for output in outputs:
        np.testing.assert_array_equal(np.frombuffer(bytes.fromhex(output), np.uint16), expected)
    # Evicted down to the bound (3 MiB; the .bin is ~3 MB, blocks of 2 MiB), no temporary file left.
    files = [os.path.join(d, f) for d, _, names in os.walk(cache) for f in names]
    assert sum(os.path.getsize(f) for f in files) <= 3 << 20
    assert not [f for f in files if os.path.basename(f).startswith(".")]


def test_the_cache_is_keyed_by_content_so_a_changed_file_is_never_served_stale(served, tmp_path):
    folder, prefix = served
    for name in ("corpus.bin", "corpus.idx"):
        shutil.copy(os.path.join(folder, name), tmp_path / name)
    access = RemoteAccess(cache_dir=str(tmp_path / "cache"))
    with RangeServer(tmp_path) as server:
        before = IndexedFile.open(server.url + "/corpus", opener=access).read_pieces([1], [0], [50])
        data = (tmp_path / "corpus.bin").read_bytes()
        (tmp_path / "corpus.bin").write_bytes(data[::-1])
        after = IndexedFile.open(server.url + "/corpus", opener=access).read_pieces([1], [0], [50])
    start = int(IndexedFile.open(prefix).sequence_starts[1]) * 2
    np.testing.assert_array_equal(after, np.frombuffer(data[::-1][start:start + 100], np.uint16))
    assert not np.array_equal(before, after)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(min_size=1, max_size=5000), block=st.integers(1, 700),
       pieces=st.lists(st.tuples(st.integers(0, 4999), st.integers(0, 1500)), max_size=30),
       missing=st.one_of(st.none(), st.integers(0, 20)))
def test_a_whole_cached_file_is_copied_from_its_blocks_exactly(tmp_path_factory, data, block, pieces, missing):
    """A later epoch over a file the cache holds whole reads its mapped blocks directly: every
    piece, also across blocks, equals the file's bytes; a missing block is reported, not guessed."""
    from mmidx_builder.storage.remote import RemoteObject

    cache = BlockCache(str(tmp_path_factory.mktemp("blocks")), block_bytes=block)
    obj = RemoteObject("http://example/x.bin", len(data), "etag")
    blocks = -(-len(data) // block)
    absent = None if missing is None or missing >= blocks else missing
    assert not cache.holds_whole(obj)
    for b in range(blocks):
        if b != absent:
            cache._store(obj, b, data[b * block:(b + 1) * block])
    assert cache.holds_whole(obj) == (absent is None)
    starts = np.array([min(a, len(data)) for a, _ in pieces], np.int64)
    lengths = np.array([min(n, len(data) - a) for a, (_, n) in zip(starts.tolist(), pieces)], np.int64)
    target = bytearray(int(lengths.sum()))
    copied = cache.copy_pieces(obj, starts, lengths, memoryview(target))
    needed = {b for a, n in zip(starts.tolist(), lengths.tolist()) if n
              for b in range(a // block, (a + n - 1) // block + 1)}
    if absent is not None and absent in needed:
        assert not copied
    else:
        assert copied
        assert bytes(target) == b"".join(data[a:a + n] for a, n in zip(starts.tolist(), lengths.tolist()))
    # A new process's cache (no memory of what it stored) learns the folder's blocks.
    assert BlockCache(cache.folder, block_bytes=block).holds_whole(obj) == (absent is None)


def test_a_stream_through_a_cache_holding_the_whole_file_reads_it_without_background_threads(served, tmp_path,
                                                                                             monkeypatch):
    from datasets import load_dataset

    from mmidx_builder.hf.readahead import ReadAhead

    folder, prefix = served
    options = dict(seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"), num_samples=300)
    local = stream_rows(load_dataset("mmidx", data_files={"train": prefix + ".bin"}, streaming=True, **options))
    with RangeServer(folder) as server:
        remote = IndexedFile.open(server.url + "/corpus", opener=RemoteAccess(cache_dir=str(tmp_path / "blocks")))
        stream = load_dataset("mmidx", data_files={"train": server.url + "/corpus.bin"}, streaming=True,
                              remote_cache_dir=str(tmp_path / "blocks"), **options)
        assert remote.remote
        first = stream_rows(stream)  # fetches the whole .bin into the cache (one pass over every sample)
        assert not remote.remote  # a reader opened before sees the cache whole too
        requests = sum(server.requests.values())
        started, calls = ReadAhead.tables, []
        monkeypatch.setattr(ReadAhead, "tables", lambda self, batches: calls.append(1) or started(self, batches))
        second = stream_rows(stream)
        assert sum(server.requests.values()) == requests and not calls
    np.testing.assert_array_equal(first, local)
    np.testing.assert_array_equal(second, local)


class _SlowStore:
    """fetch_remote of a file held in memory, 0.2 s a call; ``fail`` calls raise first."""

    def __init__(self, data: bytes, fail: int = 0):
        self.data, self.fail, self.requested, self.lock = data, fail, [], threading.Lock()

    def fetch_remote(self, objects, starts, stops):
        with self.lock:
            self.requested.extend(zip(starts, stops))
            failing, self.fail = self.fail > 0, self.fail - 1
        time.sleep(0.2)
        if failing:
            raise OSError("the server hung up")
        return [self.data[a:b] for a, b in zip(starts, stops)]


def test_a_block_missing_for_several_threads_at_once_is_fetched_once(tmp_path):
    """A read-ahead and the reader (or two gathers) missing one block fetch it once: a second
    fetch would cost its bytes again, and one dropped midway is a stray partial transfer."""
    from mmidx_builder.storage.remote import RemoteObject

    data = bytes(range(256)) * 40
    obj = RemoteObject("http://example/x.bin", len(data), "etag")
    cache, store = BlockCache(str(tmp_path), block_bytes=1000), _SlowStore(data)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: cache.fetch(store, [obj], [1500], [3500]), range(4)))
    assert got == [[data[1500:3500]]] * 4
    assert store.requested == [(1000, 4000)]


def test_a_thread_waiting_for_a_block_whose_fetch_failed_fetches_it_itself(tmp_path):
    from mmidx_builder.storage.remote import RemoteObject

    data = bytes(range(256)) * 40
    obj = RemoteObject("http://example/x.bin", len(data), "etag")
    cache, store = BlockCache(str(tmp_path), block_bytes=1000), _SlowStore(data, fail=1)

    def read(_):
        try:
            return cache.fetch(store, [obj], [1500], [3500])
        except OSError as error:
            return error

    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(read, range(3)))
    errors = [g for g in got if isinstance(g, OSError)]
    assert len(errors) == 1 and all(g == [data[1500:3500]] for g in got if g not in errors)
    assert store.requested == [(1000, 4000)] * 2  # the failed fetch, then one by a waiter


def test_eviction_removes_the_oldest_blocks_first(tmp_path):
    cache = BlockCache(str(tmp_path), max_bytes=10_000, block_bytes=1000)
    for i in range(15):
        path = tmp_path / "key" / str(i)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * 1000)
        os.utime(path, (1000 + i, 1000 + i))
    assert cache.evict() == 6000
    assert sorted(int(p.name) for p in (tmp_path / "key").iterdir()) == list(range(6, 15))


# --- builders: streaming from HTTP ------------------------------------------------------------

def stream_rows(dataset) -> np.ndarray:
    return np.array([row["input_ids"] for row in dataset])


def test_builder_streams_over_http_with_the_cache_and_a_second_epoch_fetches_nothing(served, tmp_path):
    from datasets import load_dataset

    folder, prefix = served
    options = dict(seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"), num_samples=300)
    local = stream_rows(load_dataset("mmidx", data_files={"train": prefix + ".bin"}, streaming=True, **options))
    with RangeServer(folder) as server:
        stream = load_dataset("mmidx", data_files={"train": server.url + "/corpus.bin"}, streaming=True,
                              remote_cache_dir=str(tmp_path / "blocks"), **options)
        first = stream_rows(stream)
        sent = dict(server.sent)
        second = stream_rows(stream)
        assert server.sent == sent
    np.testing.assert_array_equal(first, local)
    np.testing.assert_array_equal(second, local)


def test_builder_without_cache_fetches_at_most_one_and_a_half_times_the_samples_bytes(served, tmp_path):
    from datasets import load_dataset

    folder, prefix = served
    options = dict(seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"), num_samples=400, num_shards=1)
    with RangeServer(folder, latency=0.02) as server:
        got = stream_rows(load_dataset("mmidx", data_files={"train": server.url + "/corpus.bin"}, streaming=True,
                                       **options))
        sent = server.sent["corpus.bin"]
    local = stream_rows(load_dataset("mmidx", data_files={"train": prefix + ".bin"}, streaming=True, **options))
    np.testing.assert_array_equal(got, local)
    assert sent <= 1.5 * local.size * 2, (sent, local.size * 2)


def test_http_streams_send_the_netrc_login_reading_netrc_once_per_host_not_per_request(served, tmp_path,
                                                                                        monkeypatch):
    """datasets asks aiohttp for ``trust_env`` (proxy variables and ~/.netrc); aiohttp then reads
    ~/.netrc again for every request, which cost 2.5x the client's CPU per ranged GET. The
    login still reaches every request; the file is read once per host."""
    import netrc

    from datasets import load_dataset

    folder, prefix = served
    (tmp_path / "netrc").write_text("machine 127.0.0.1 login reader password s3cret\n")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    reads = []
    real_init = netrc.netrc.__init__
    monkeypatch.setattr(netrc.netrc, "__init__", lambda self, *a: reads.append(a) or real_init(self, *a))
    options = dict(seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"), num_samples=300)
    local = stream_rows(load_dataset("mmidx", data_files={"train": prefix + ".bin"}, streaming=True, **options))
    with RangeServer(folder) as server:
        got = stream_rows(load_dataset("mmidx", data_files={"train": server.url + "/corpus.bin"}, streaming=True,
                                       **options))
        logins, requests = dict(server.logins), sum(server.requests.values())
    np.testing.assert_array_equal(got, local)
    import base64

    assert logins == {"Basic " + base64.b64encode(b"reader:s3cret").decode(): requests}
    # A few reads for datasets' own requests (resolving the data files); none per ranged GET.
    assert requests > 100 and len(reads) < requests / 10, (requests, len(reads))


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_dataloader_workers_stream_over_http_after_the_parent_started_fetching(served, tmp_path, start_method):
    """The fetch thread (libcurl's or the event loop's) does not survive a fork: a worker
    forked after the parent streamed makes its own, and gets the local folder's samples."""
    torch = pytest.importorskip("torch")
    from datasets import load_dataset

    folder, prefix = served
    # 400 samples of the corpus's ~5,800: the workers' fetch threads and every sample they read
    # are what is checked, not a pass over the whole file.
    options = dict(split="train", streaming=True, seq_length=256, num_samples=400, cache_dir=str(tmp_path / "hf"))
    with RangeServer(folder) as server:
        remote = load_dataset("mmidx", data_files={"train": server.url + "/corpus.bin"}, **options)
        next(iter(remote))  # the parent's fetch thread exists before the fork
        loader = torch.utils.data.DataLoader(remote.with_format("numpy"), batch_size=None, num_workers=2,
                                             multiprocessing_context=start_method, timeout=60)  # a hang fails
        got = sorted(np.asarray(row["input_ids"], np.int64).tobytes() for row in loader)
    local = load_dataset("mmidx", data_files={"train": prefix + ".bin"}, **options)
    assert got == sorted(np.asarray(row["input_ids"], np.int64).tobytes() for row in local)


def test_fairseq_pairs_stream_over_http(tmp_path):
    from datasets import load_dataset

    rng = np.random.default_rng(8)
    for lang in ("de", "en"):
        write_documents(tmp_path / f"train.de-en.{lang}", [rng.integers(4, 300, n) for n in rng.integers(1, 40, 97)],
                        dtype=np.uint16, flavour="fairseq")
    files = [f"train.de-en.{lang}.bin" for lang in ("de", "en")]
    local = load_dataset("mmidx", data_files={"train": [str(tmp_path / f) for f in files]}, split="train",
                         streaming=True, cache_dir=str(tmp_path / "hf"))
    with RangeServer(tmp_path) as server:
        remote = load_dataset("mmidx", data_files={"train": [f"{server.url}/{f}" for f in files]}, split="train",
                              streaming=True, cache_dir=str(tmp_path / "hf"))
        got = [(r["source"], r["target"]) for r in remote]
        assert server.sent.get("train.de-en.de.bin")
    assert got == [(r["source"], r["target"]) for r in local]
