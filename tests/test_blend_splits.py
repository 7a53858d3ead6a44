"""A blend split three ways opens each prefix once, samples only the splits asked for, and
builds its prefixes' indices in parallel (issue 43, item 1).

Before, ``load_dataset(..., data_path=blend, split_ratios="969,30,1", split="train",
streaming=True)`` opened every prefix once per split and built (or checked) the validation
and test indices of every prefix too: 3,000 opens for a 1,000-prefix blend. Counted here, not
timed; the samples themselves are compared with megatron-core in test_megatron_builder.py.
"""

from __future__ import annotations

import collections
import os
import threading
import time

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder import parallel
from mmidx_builder.megatron import sampling
from mmidx_builder.sources.indexed import IndexedFile, write_documents

PREFIXES = 4
SEQ = 16


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    """Four prefixes of uneven size (1,201 to 3,901 documents, one empty), weights 1..4."""
    folder = tmp_path_factory.mktemp("blend3")
    rng = np.random.default_rng(43)
    prefixes = []
    for i in range(PREFIXES):
        lengths = rng.integers(1, 60, size=1201 + 900 * i)
        lengths[i] = 0
        prefix = str(folder / f"part{i}_text_document")
        write_documents(prefix, [rng.integers(0, 65535, n) for n in lengths], dtype=np.uint16)
        prefixes.append(prefix)
    return prefixes


@pytest.fixture
def counted(monkeypatch):
    opens, builds = collections.Counter(), collections.Counter()
    init, build = IndexedFile.__init__, sampling.build_indices
    lock = threading.Lock()  # pairs are opened and built in threads

    def counting_init(self, prefix, *args, **kwargs):
        with lock:
            opens[os.path.basename(prefix)] += 1
        return init(self, prefix, *args, **kwargs)

    def counting_build(sizes, *args, **kwargs):
        with lock:
            builds[len(sizes)] += 1
        return build(sizes, *args, **kwargs)

    monkeypatch.setattr(IndexedFile, "__init__", counting_init)
    monkeypatch.setattr(sampling, "build_indices", counting_build)
    return opens, builds


def _load(prefixes, cache, **options):
    from datasets import load_dataset

    data_path = [token for i, p in enumerate(prefixes) for token in (str(i + 1), p)]
    return load_dataset("mmidx", data_path=data_path, split_ratios="969,30,1", seq_length=SEQ, seed=5,
                        num_samples={"train": 400, "validation": 20, "test": 5}, streaming=True,
                        cache_dir=str(cache / "hf"), index_cache_dir=str(cache / "indices"), **options)


def _rows(stream, count: int = 30) -> list[tuple]:
    return [(row["dataset_id"], tuple(row["input_ids"])) for _, row in zip(range(count), stream)]


def test_a_train_stream_opens_each_prefix_once_and_builds_only_the_train_indices(blend, tmp_path, counted):
    opens, builds = counted
    train = _rows(_load(blend, tmp_path, split="train"))
    assert sorted(opens.values()) == [1] * PREFIXES  # not 3 each
    assert sum(builds.values()) == PREFIXES  # the train split of each prefix, nothing else
    opens.clear()
    builds.clear()
    every = _load(blend, tmp_path / "all")  # every split: still each prefix once
    assert _rows(every["train"]) == train
    assert sorted(opens.values()) == [1] * PREFIXES
    assert sum(builds.values()) == 3 * PREFIXES
    assert len(_rows(every["test"], 5)) == 5


def test_the_prefixes_of_a_split_are_built_at_once(blend, tmp_path, monkeypatch):
    """Two builds must be under way together (a barrier both must reach), with 2 threads
    whatever the machine's cores."""
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    both = threading.Barrier(2, timeout=10)
    met = []
    build = sampling.build_indices

    def meeting_build(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            # The first build, in the calling thread (parallel.SERIAL_SECONDS): as long as a
            # cold build, after which the rest go to the threads.
            time.sleep(2 * parallel.SERIAL_SECONDS)
            return build(*args, **kwargs)
        try:
            both.wait()
            met.append(True)
        except threading.BrokenBarrierError:  # the last one, alone
            pass
        return build(*args, **kwargs)

    monkeypatch.setattr(sampling, "build_indices", meeting_build)
    threaded = _rows(_load(blend, tmp_path, split="train"))
    assert len(met) >= 2
    monkeypatch.setattr(parallel, "workers", lambda: 1)
    monkeypatch.setattr(sampling, "build_indices", build)
    assert _rows(_load(blend, tmp_path / "serial", split="train")) == threaded


def test_a_weighted_blends_indices_are_built_beside_its_prefixes(blend, tmp_path, monkeypatch):
    """The blending indices of weighted prefixes need only the weights and the size: their
    build and the first prefix build must be under way together (a barrier both must reach;
    built one after the other, each would wait for the other in vain), and the rows are those
    of the builds one after the other."""
    from mmidx_builder.megatron import blending_indices

    monkeypatch.setattr(parallel, "workers", lambda: 2)
    both = threading.Barrier(2, timeout=10)
    met, claimed, lock = [], [], threading.Lock()
    build, blend_build = sampling.build_indices, blending_indices.build_blending_indices

    def meet(name):
        try:
            both.wait()
            met.append(name)
        except threading.BrokenBarrierError:
            pass

    def first_prefix_meets(*args, **kwargs):
        with lock:
            first = not claimed
            claimed.append(True)
        if first:
            meet("prefix")
        return build(*args, **kwargs)

    def blend_meets(*args, **kwargs):
        meet("blend")
        return blend_build(*args, **kwargs)

    monkeypatch.setattr(sampling, "build_indices", first_prefix_meets)
    monkeypatch.setattr(blending_indices, "build_blending_indices", blend_meets)
    threaded = _rows(_load(blend, tmp_path / "beside", split="train"))
    assert sorted(met) == ["blend", "prefix"]
    monkeypatch.setattr(parallel, "workers", lambda: 1)
    monkeypatch.setattr(sampling, "build_indices", build)
    monkeypatch.setattr(blending_indices, "build_blending_indices", blend_build)
    assert _rows(_load(blend, tmp_path / "serial", split="train")) == threaded


def test_nothing_beside_while_no_job_runs_in_a_thread(monkeypatch):
    """parallel.nothing_beside (whether a shuffle may hold the GIL throughout): False from the
    moment a job is started beside the caller or a pool of jobs runs until it ends, True
    again after, errors included."""
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    assert parallel.nothing_beside()
    release = threading.Event()
    wait = parallel.beside(lambda: release.wait(10) and parallel.nothing_beside())
    assert not parallel.nothing_beside()
    release.set()
    assert wait() is False
    assert parallel.nothing_beside()  # as soon as the caller has the result: its next build is alone

    def slow_first(item):
        if item == 0:
            time.sleep(2 * parallel.SERIAL_SECONDS)
        return parallel.nothing_beside()

    # The first job runs in the calling thread; it took long, so the rest run in the threads.
    assert parallel.in_threads(slow_first, range(3)) == [True, False, False]
    assert parallel.nothing_beside()
    with pytest.raises(ValueError):
        parallel.in_threads(lambda _: int("x"), range(2))
    with pytest.raises(ValueError):
        parallel.beside(lambda: int("x"))()
    assert parallel.nothing_beside()
    monkeypatch.setattr(parallel, "workers", lambda: 1)  # one core: run at once, nothing beside
    assert parallel.beside(parallel.nothing_beside)() and parallel.in_threads(lambda _: parallel.nothing_beside(), [1])


def test_quick_jobs_stay_in_the_calling_thread_and_slow_ones_move_to_the_threads(monkeypatch):
    """parallel.in_threads: jobs of a warm open (each well under SERIAL_SECONDS) run one after
    another in the calling thread, where two threads would wait on each other for the GIL; from
    the first job that took longer, the rest run in the threads. The results and the first
    error come in the items' order either way."""
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    monkeypatch.setattr(parallel, "SERIAL_SECONDS", 0.2)  # far above a quick job, whatever the machine's load
    caller = threading.current_thread()
    assert set(parallel.in_threads(lambda _: threading.current_thread(), range(50))) == {caller}

    def slow_third(item):
        if item == 2:
            time.sleep(2 * parallel.SERIAL_SECONDS)
        return item, threading.current_thread()

    done = parallel.in_threads(slow_third, range(8))
    assert [item for item, _ in done] == list(range(8))
    assert {thread for _, thread in done[:3]} == {caller} and caller not in {thread for _, thread in done[3:]}

    def fails_late(item):
        if item == 0:
            time.sleep(2 * parallel.SERIAL_SECONDS)
        if item in (3, 5):
            raise ValueError(f"job {item}")
        return item

    with pytest.raises(ValueError, match="job 3"):
        parallel.in_threads(fails_late, range(8))


def test_beside_hands_back_the_result_or_the_error_and_never_holds_the_exit(monkeypatch):
    """parallel.beside: the function's result, or its error raised where the caller waits; with
    one core it runs at once; its thread is a daemon, so a caller that fails first does not wait
    for it at the interpreter's exit."""
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    started = threading.Event()

    def slow():
        started.set()
        return threading.current_thread()

    wait = parallel.beside(slow)
    thread = wait()
    assert started.is_set() and thread is not threading.current_thread() and thread.daemon

    def fails():
        raise ValueError("from the thread")

    with pytest.raises(ValueError, match="from the thread"):
        parallel.beside(fails)()
    monkeypatch.setattr(parallel, "workers", lambda: 1)
    assert parallel.beside(threading.current_thread)() is threading.current_thread()
