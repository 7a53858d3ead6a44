"""Read leases (storage/read_lease.py): mapped.py copies straight out of a map only while the
kernel promises that nobody truncates or writes the file, and lets that promise go soon
enough that writers are not held up. Other processes are real processes (subprocess, fork)."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from conftest import use_local_read_way
from mmidx_builder.errors import FormatError
from mmidx_builder.storage import mapped, read_lease
from mmidx_builder.storage.mapped import MappedFile, gather

# Far under the kernel's lease-break-time (45 s by default; read_lease refuses leases under 10):
# a writer that waited this long waited for the kernel, not for a watch that let go.
WRITER_PATIENCE = 8.0


@pytest.fixture
def leases(monkeypatch):
    use_local_read_way("lease", monkeypatch)


def _words_file(path, count=1 << 20):
    """A file of uint32 words whose value is their own index: any read can be checked."""
    np.arange(count, dtype="<u4").tofile(path)
    return MappedFile(path, random_access=True)


def _read_words(f, first_words, counts):
    out = np.empty(int(np.sum(counts)), "<u4")
    gather([f], None, np.asarray(first_words, np.int64) * 4, np.asarray(counts, np.int64) * 4, out)
    return out


def _expected(first_words, counts):
    return np.concatenate([np.arange(a, a + n, dtype="<u4") for a, n in zip(first_words, counts)])


def _wait_for(condition, seconds=WRITER_PATIENCE):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_gather_copies_under_a_read_lease_without_the_kernels_copy(tmp_path, leases, monkeypatch):
    f = _words_file(tmp_path / "w")
    monkeypatch.setattr(mapped, "_gather_mapped", lambda *args: pytest.fail("the kernel's copy was used"))
    monkeypatch.setattr(mapped, "_gather_pread", lambda *args: pytest.fail("pread was used"))
    firsts, counts = [5, 1000, 3, 700_000], [10, 1, 5000, 48_576]
    assert _read_words(f, firsts, counts).tolist() == _expected(firsts, counts).tolist()
    assert f.leased and f.lease_held()


def test_a_writer_elsewhere_waits_only_for_the_watch_and_is_then_seen(tmp_path, leases):
    """Another process opens the file for writing and truncates it: its open waits until the
    watch thread lets the lease go (well under the kernel's 45 s), and the next read here is
    the truncation's FormatError, through the kernel's copy."""
    f = _words_file(tmp_path / "w")
    _read_words(f, [0], [10])
    assert f.lease_held()
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", f"open({str(tmp_path / 'w')!r}, 'r+b').truncate(4000)"], check=True)
    assert time.monotonic() - began < WRITER_PATIENCE
    assert not f.leased
    assert _read_words(f, [3], [7]).tolist() == list(range(3, 10))  # still within the file
    with pytest.raises(FormatError, match="truncated while in use"):
        _read_words(f, [500_000], [10])
    time.sleep(mapped.LEASE_RETRY_SECONDS + 0.1)
    with pytest.raises(FormatError, match="truncated while in use"):  # no lease over a shorter file
        _read_words(f, [500_000], [10])
    assert not f.leased


def test_a_writer_in_this_process_waits_only_for_the_watch(tmp_path, leases):
    f = _words_file(tmp_path / "w")
    _read_words(f, [0], [10])
    began = time.monotonic()
    with open(tmp_path / "w", "r+b") as writer:  # the same process: the watch thread lets go
        writer.write(b"\xff" * 4)
    assert time.monotonic() - began < WRITER_PATIENCE
    assert _read_words(f, [0, 1], [1, 2]).tolist() == [2**32 - 1, 1, 2]


def test_no_lease_while_the_file_is_open_for_writing_and_one_after(tmp_path, leases, monkeypatch):
    path = tmp_path / "w"
    f = _words_file(path)
    with open(path, "r+b"):
        assert _read_words(f, [7, 9], [2, 3]).tolist() == [7, 8, 9, 10, 11]
        assert not f.leased  # refused (EAGAIN): the kernel's copy read it
    monkeypatch.setattr(mapped, "LEASE_RETRY_SECONDS", 0.0)
    f._lease_again_at = 0.0
    assert _read_words(f, [7], [2]).tolist() == [7, 8]
    assert f.lease_held()


def _child_reads(queue):
    f = MAPPED_IN_PARENT[0]
    try:
        values = _read_words(f, [11], [4]).tolist()
        queue.put((values, f.leased, f.lease_held(), f._opened_by == os.getpid()))
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        queue.put(repr(error))


MAPPED_IN_PARENT = []


def test_a_forked_child_reads_under_a_lease_of_its_own_and_leaves_the_parents(tmp_path, leases):
    """A fork shares the parent's opening of the file, and a lease belongs to an opening: the
    child opens the file again (its own lease), and its exit lets go of that one only."""
    f = _words_file(tmp_path / "w")
    _read_words(f, [0], [1])
    assert f.lease_held()
    MAPPED_IN_PARENT[:] = [f]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_reads, args=(queue,))
    child.start()
    result = queue.get(timeout=60)
    child.join(60)
    MAPPED_IN_PARENT.clear()
    assert result == ([11, 12, 13, 14], True, True, True)
    assert child.exitcode == 0
    assert f.lease_held()
    assert _read_words(f, [2], [2]).tolist() == [2, 3]


def test_the_watch_thread_ends_with_the_last_lease(tmp_path):
    """In a process of its own: other tests' files hold leases in this one."""
    code = textwrap.dedent(f"""
        import threading, time, numpy as np
        from mmidx_builder.storage.mapped import MappedFile, gather

        def watching():
            return any(t.name == "mmidx-read-leases" for t in threading.enumerate())
        files = []
        for i in range(3):
            np.arange(1024, dtype="<u4").tofile({str(tmp_path)!r} + f"/w{{i}}")
            files.append(MappedFile({str(tmp_path)!r} + f"/w{{i}}"))
            gather([files[-1]], None, np.array([4]), np.array([4]), np.empty(1, "<u4"))
        print(watching(), all(f.leased for f in files))
        for f in files[:2]:
            f._close()
        time.sleep(0.5)
        print(watching())
        files[2]._close()
        deadline = time.monotonic() + {WRITER_PATIENCE}
        while watching() and time.monotonic() < deadline:
            time.sleep(0.01)
        print(watching())
    """)
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert found == ["True", "True", "True", "False"]


def test_leases_can_be_turned_off():
    code = "from mmidx_builder.storage import read_lease; print(read_lease.USABLE)"
    found = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MMIDX_READ_LEASES": "0"},
                           capture_output=True, text=True, check=True).stdout.split()
    assert found == ["False"]


_READ_WHILE_TRUNCATED = """
import sys, time, numpy as np
from mmidx_builder.errors import FormatError
from mmidx_builder.storage import mapped
from mmidx_builder.storage.mapped import MappedFile, gather

path, seconds = sys.argv[1], float(sys.argv[2])
under_leases = [0]
copy = mapped._copied_under_leases
def counted(*args):
    done = copy(*args)
    under_leases[0] += done
    return done
mapped._copied_under_leases = counted
f = MappedFile(path, random_access=True)
words = f.size // 4
rng = np.random.default_rng(0)
outcomes = {"right": 0, "FormatError": 0}
print("ready", flush=True)
deadline = time.monotonic() + seconds
while time.monotonic() < deadline:
    counts = rng.integers(1, 2000, 3000)
    firsts = rng.integers(0, words - counts)
    out = np.empty(int(counts.sum()), "<u4")
    try:
        gather([f], None, firsts * 4, counts * 4, out)
    except FormatError:
        outcomes["FormatError"] += 1
        continue
    expected = np.concatenate([np.arange(a, a + n, dtype="<u4") for a, n in zip(firsts, counts)])
    if not np.array_equal(out, expected):
        sys.exit("WRONG WORDS")
    outcomes["right"] += 1
print(outcomes["right"], outcomes["FormatError"], under_leases[0], flush=True)
"""


def test_truncations_by_another_process_never_meet_a_copy_under_a_lease(tmp_path, leases):
    """A child gathers 3,000 random runs again and again, mostly under its lease, while this
    process truncates the file ten times, each time shorter: the child never dies of SIGBUS
    and every read gives the right words or the truncation's FormatError."""
    path = tmp_path / "w"
    np.arange(1 << 24, dtype="<u4").tofile(path)  # 64 MiB
    (tmp_path / "child.py").write_text(_READ_WHILE_TRUNCATED)
    child = subprocess.Popen([sys.executable, str(tmp_path / "child.py"), str(path), "4"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.5)  # reads under the lease first
        size = os.path.getsize(path)
        rng = np.random.default_rng(1)
        for _ in range(10):
            time.sleep(float(rng.uniform(0.05, 0.3)))
            size = int(rng.integers(size // 2, size))
            os.truncate(path, size)
        out, err = child.communicate(timeout=120)
    finally:
        child.kill()
    assert child.returncode == 0, (child.returncode, err[-2000:])  # -7: SIGBUS
    right, errors, under_leases = map(int, out.split())
    assert right > 0 and errors > 0 and under_leases > 0, (right, errors, under_leases)
