"""mapped.py: reading a mapped file so that a truncation is an error, never SIGBUS.

The three ways it reads (memcpy under a read lease, process_vm_readv on the map where no lease
is granted, pread where that is refused) are checked against slices of the file's bytes, and a
truncated file is read in this very process: before mapped.py, touching a lost page of a map
killed the process (SIGBUS). tests/test_read_lease.py has the leases' own tests."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mmidx_builder.storage import mapped
from mmidx_builder.errors import FormatError
from mmidx_builder.storage.mapped import MappedFile, gather
from conftest import LOCAL_READ_WAYS, use_local_read_way

PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(params=LOCAL_READ_WAYS)
def way(request, monkeypatch):
    use_local_read_way(request.param, monkeypatch)
    return request.param


def _random_runs(rng, size, count, longest):
    lengths = rng.integers(0, longest, count)
    starts = rng.integers(0, size - lengths + 1)
    return starts.astype(np.int64), lengths.astype(np.int64)


@pytest.mark.parametrize("case", ["short runs of a small file", "long runs", "neighbours", "a few", "empty runs",
                                  "runs around the size of a join"])
def test_gather_copies_the_runs_it_is_asked_for(tmp_path, way, case):
    rng = np.random.default_rng(len(case))
    data = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    f = MappedFile(tmp_path / "f")
    if case == "short runs of a small file":  # copied as a few stretches, then taken apart
        starts, lengths = _random_runs(rng, 20_000, 5_000, 12)
    elif case == "long runs":
        starts, lengths = _random_runs(rng, len(data), 300, 5_000)
    elif case == "neighbours":  # runs that continue each other are copied as one
        lengths = rng.integers(1, 50, 400)
        starts = np.cumsum(lengths) - lengths + 1000
    elif case == "runs around the size of a join":  # joined a stretch at a time; a long one alone
        join = mapped._JOIN_BYTES
        starts, lengths = _random_runs(rng, len(data), 1_500, 300)
        longer = rng.random(len(lengths)) < 0.05
        lengths[longer] = rng.choice([join - 1, join, join + 1, 3 * join], int(longer.sum()))
        starts[longer] = rng.integers(0, len(data) - lengths[longer] + 1)
    elif case == "a few":
        starts, lengths = np.array([0, len(data) - 3, 7]), np.array([5, 3, 0])
    else:
        starts, lengths = np.array([len(data), 0, 9]), np.array([0, 0, 0])
    out = np.full(int(np.sum(lengths)), 7, np.uint8)
    gather([f], None, starts, lengths, out)
    expected = b"".join(data[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist()))
    assert out.tobytes() == expected
    # At chosen places of a larger buffer, from two files at once.
    (tmp_path / "g").write_bytes(data[::-1])
    g = MappedFile(tmp_path / "g")
    which = rng.integers(0, 2, len(starts))
    at = np.cumsum(lengths + 3) - lengths
    placed = np.zeros(int(at[-1] + lengths[-1]) if len(at) else 0, np.uint8)
    gather([f, g], which, starts, lengths, placed, at=at)
    for s, n, w, a in zip(starts.tolist(), lengths.tolist(), which.tolist(), at.tolist()):
        assert placed[a:a + n].tobytes() == (data if w == 0 else data[::-1])[s:s + n]


def test_a_gather_of_many_runs_starts_no_garbage_collection(tmp_path, monkeypatch):
    """The slices a gather under a lease keeps alive at once stay under the cyclic collector's
    first threshold, so thousands of runs start no collection. Over it, a collection started
    in the middle of a chunk moved the slices to an older generation, and every few passes of
    a stream a full collection ran (~0.09 s with datasets and pyarrow loaded)."""
    import gc

    use_local_read_way("lease", monkeypatch)
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    f = MappedFile(tmp_path / "f")
    starts, lengths = _random_runs(rng, len(data), 20_000, 40)
    out = np.empty(int(lengths.sum()), np.uint8)
    started = []

    def count(phase, info):
        if phase == "start":
            started.append(info["generation"])

    threshold = gc.get_threshold()
    gc.set_threshold(700, 10, 10)  # CPython's default
    gc.collect()
    gc.callbacks.append(count)
    try:
        gather([f], None, starts, lengths, out)
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
    assert started == []
    assert out.tobytes() == b"".join(data[s:s + n] for s, n in zip(starts.tolist(), lengths.tolist()))


def test_entries_and_reads_are_copies(tmp_path, way):
    table = np.arange(1000, dtype="<i8")
    (tmp_path / "t").write_bytes(b"head" + table.tobytes())
    f = MappedFile(tmp_path / "t")
    assert f.entries(4, "<i8", [3, 999, 0]).tolist() == [3, 999, 0]
    assert f.entries(4, "<i8", np.int64(5)).tolist() == 5
    assert f.read(4 + 8 * 10, 3, "<i8").tolist() == [10, 11, 12]


def test_reading_what_a_truncation_took_is_a_format_error_in_this_process(tmp_path, way):
    """The file is truncated after it was mapped, here, and then read: each read is an error
    naming the file and the offset, never SIGBUS (this process would die) nor the zeros the
    rest of a page reads as."""
    path = tmp_path / "f"
    data = np.random.default_rng(3).integers(1, 256, 10 * PAGE, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    f = MappedFile(path)
    os.truncate(path, 2 * PAGE + 100)  # within a page: the rest of that page reads as zeros
    out = np.empty(50, np.uint8)
    gather([f], None, [PAGE + 5], [50], out)  # still there
    assert out.tobytes() == data[PAGE + 5:PAGE + 55]
    for start in (2 * PAGE + 80, 2 * PAGE + 200, 6 * PAGE):  # across the new end, in its page, past it
        with pytest.raises(FormatError, match=rf"{path}: file size at byte {start}: expected {10 * PAGE} bytes, "
                                              rf"as when it was opened .*found {2 * PAGE + 100} bytes "
                                              r"\(the file was truncated while in use"):
            gather([f], None, [start], [50], out)
    runs = np.arange(0, 10 * PAGE - 10, 200)  # many short runs: read as stretches of the file
    with pytest.raises(FormatError, match="truncated while in use"):
        gather([f], None, runs, np.full(len(runs), 10), np.empty(10 * len(runs), np.uint8))
    with pytest.raises(FormatError, match=rf"byte range at byte {10 * PAGE - 4}: expected a range within the "
                                          rf"{10 * PAGE} bytes of the file"):
        gather([f], None, [10 * PAGE - 4], [8], np.empty(8, np.uint8))  # never past the file as opened


def test_a_mapped_file_travels_by_name_and_refuses_another_file(tmp_path):
    import pickle

    path = tmp_path / "f"
    path.write_bytes(b"abcdef")
    f = MappedFile(path)
    again = pickle.loads(pickle.dumps(f))
    assert again.read(1, 3, np.uint8).tobytes() == b"bcd"
    (tmp_path / "new").write_bytes(b"ABCDEF")
    os.replace(tmp_path / "new", path)
    with pytest.raises(FormatError, match="replaced or rewritten since the dataset was opened"):
        pickle.loads(pickle.dumps(f))
    assert f.read(0, 6, np.uint8).tobytes() == b"abcdef"  # the file this one opened, still whole


def test_a_run_outside_its_file_is_refused_before_anything_is_read(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)
    (tmp_path / "b").write_bytes(b"y" * 10)
    files = [MappedFile(tmp_path / "a"), MappedFile(tmp_path / "b")]
    with pytest.raises(FormatError, match=rf"{tmp_path / 'b'}: byte range at byte 5: .* found 6 bytes at byte 5"):
        gather(files, [0, 1], [50, 5], [6, 6], np.empty(12, np.uint8))
    with pytest.raises(FormatError, match=r"byte range at byte -1"):
        gather(files, None, [-1], [1], np.empty(1, np.uint8))
