"""A remote ``.idx`` larger than what is held in memory is streamed to disk a window at a time
and mapped (storage/remote/index_files.py): the same index as the local file's, memory
bounded by the window whatever the index's size, a second opening without a request, and a
disk without room for it refused before a byte is written. Through both HTTP clients."""

from __future__ import annotations

import collections
import os
import tracemalloc

import numpy as np
import pytest

from mmidx_builder.errors import RemoteReadError
from mmidx_builder.sources.indexed import IndexedFile, write_documents
from mmidx_builder.storage.remote import RemoteAccess, index_files
from range_server import RangeServer
from test_remote import http_client, quick_backoff  # noqa: F401 (autouse fixtures)

WINDOW = 256 << 10


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    """200,000 short documents: a ~2.4 MB .idx beside a small .bin."""
    folder = tmp_path_factory.mktemp("big_index")
    rng = np.random.default_rng(3)
    prefix = write_documents(folder / "many", [rng.integers(0, 50_000, n) for n in rng.integers(0, 4, 200_000)],
                             dtype=np.uint16)
    return folder, prefix


@pytest.fixture
def small_limits(monkeypatch):
    monkeypatch.setattr(index_files, "IN_MEMORY_BYTES", 64 << 10)
    monkeypatch.setattr(index_files, "WINDOW_BYTES", WINDOW)


def test_a_large_remote_index_is_streamed_to_disk_within_a_window_of_memory(big_index, tmp_path, small_limits):
    folder, prefix = big_index
    local = IndexedFile.open(prefix)
    idx_size = os.path.getsize(prefix + ".idx")
    assert idx_size > 8 * WINDOW
    access = RemoteAccess(cache_dir=str(tmp_path / "cache"))
    with RangeServer(folder) as server:
        warm = access.stat(server.url + "/many.bin")  # the client's own setup (imports, threads) before measuring
        access.fetch_remote([warm], [0], [10])
        tracemalloc.start()
        try:  # the pair's opening alone (validating the index allocates its tables, whatever holds it)
            index, _ = access.open_pair(server.url + "/many.idx", server.url + "/many.bin")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(index) == idx_size
        remote = IndexedFile.open(server.url + "/many", opener=access)
        np.testing.assert_array_equal(remote.sequence_lengths, local.sequence_lengths)
        np.testing.assert_array_equal(remote.sequence_starts, local.sequence_starts)
        ids = np.arange(0, 200_000, 997)
        np.testing.assert_array_equal(remote.read_pieces(ids, np.zeros_like(ids), local.sequence_lengths[ids]),
                                      local.read_pieces(ids, np.zeros_like(ids), local.sequence_lengths[ids]))
        requests = server.requests["many.idx"]
        again = IndexedFile.open(server.url + "/many", opener=access)
        assert server.requests["many.idx"] == requests  # the copy on disk, mapped again
        np.testing.assert_array_equal(again.sequence_lengths, local.sequence_lengths)
    # Memory: about a window (the fetch of 256 KiB and its pieces), never the whole index.
    assert peak < idx_size / 2, (peak, idx_size)
    copies = [p for p in (tmp_path / "cache" / "indices").iterdir()]
    assert [p.stat().st_size for p in copies] == [idx_size] and not copies[0].name.startswith(".")


def test_an_index_larger_than_the_free_disk_is_refused_before_anything_is_written(big_index, tmp_path, small_limits,
                                                                                  monkeypatch):
    folder, prefix = big_index
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(index_files.shutil, "disk_usage", lambda path: usage(10 << 30, 0, 1 << 30))
    with RangeServer(folder) as server:
        with pytest.raises(RemoteReadError, match=r"many\.idx: bytes \[0, \d+\): the index is [\d,]+ bytes and .* "
                                                  r"has 1,073,741,824 bytes free"):
            IndexedFile.open(server.url + "/many", opener=RemoteAccess(cache_dir=str(tmp_path / "cache")))
        assert server.requests.get("many.idx", 0) == 0
    assert list((tmp_path / "cache" / "indices").iterdir()) == []
