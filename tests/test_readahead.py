"""Gathers that span shards (hf/readahead.py, tables.joined_batches): however the shards are
asked for, every table holds exactly the rows asked for, and datasets still counts each shard."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import datasets
from datasets import load_dataset

from mmidx_builder.megatron import sampling
from mmidx_builder.sources.indexed import IndexedFile
from mmidx_builder.hf.tables import joined_batches, shard_ranges
from mmidx_builder.hf import readahead
from mmidx_builder.hf.readahead import ReadAhead, ShardReadAhead


class CountingMaker:
    """make(rows) -> a table of the rows themselves; remembers every call."""

    def __init__(self):
        self.calls = []

    def __call__(self, rows):
        self.calls.append(np.array(rows))
        return pa.table({"row": pa.array(np.asarray(rows, np.int64))})


def served(read_ahead, layout, order):
    return [read_ahead(np.arange(*layout[shard])).column("row").to_numpy().tolist() for shard in order]


def test_in_order_and_strided_walks_gather_several_shards_at_once():
    layout = shard_ranges(1000, 96)  # shards of 10 and 11 rows
    for stride, first in ((1, 0), (3, 1), (8, 7)):
        make = CountingMaker()
        read_ahead = ShardReadAhead(make, layout, limit=100)
        order = list(range(first, len(layout), stride))
        assert served(read_ahead, layout, order) == [list(range(*layout[s])) for s in order]
        # Two single gathers to see the stride, then about one gather per 100 rows.
        assert len(make.calls) <= 2 + -(-sum(layout[s][1] - layout[s][0] for s in order) // 90)
        assert all(len(rows) <= 100 for rows in make.calls)


def test_local_gathers_grow_to_their_bytes_once_a_table_has_shown_its_row_size():
    """A local stream's walk is gathered ``gather_bytes`` of rows at a time (here a row is one
    int64), never fewer than ``limit`` rows, and still serves exactly each shard's rows."""
    layout = shard_ranges(2000, 200)  # shards of 10 rows
    for gather_bytes, most in ((800, 100), (8000, 1000), (80, 30)):
        make = CountingMaker()
        read_ahead = ShardReadAhead(make, layout, limit=30, gather_bytes=gather_bytes)
        assert served(read_ahead, layout, range(len(layout))) == [list(range(*r)) for r in layout]
        sizes = [len(rows) for rows in make.calls]
        # Two shards alone (the stride is not known yet; their tables show the row size), then
        # gathers of `gather_bytes` (at least `limit` rows) until the split runs out.
        assert sizes[:2] == [10, 10] and all(s == most for s in sizes[2:-1]) and sizes[-1] <= most


def test_a_new_pass_a_jump_and_foreign_rows_are_served_exactly():
    layout = shard_ranges(300, 30)
    make = CountingMaker()
    read_ahead = ShardReadAhead(make, layout, limit=50)
    order = [0, 1, 2, 3, 0, 1, 2, 29, 5, 6, 7, 8]
    assert served(read_ahead, layout, order) == [list(range(*layout[s])) for s in order]
    # Rows that are not one shard of the layout go straight to make.
    for rows in (np.arange(3, 7), np.array([0, 0, 2]), np.array([12, 11, 10, 13, 14, 15, 16, 17, 18, 19]),
                 np.arange(0, 0)):
        assert read_ahead(rows).column("row").to_numpy().tolist() == rows.tolist()
        np.testing.assert_array_equal(make.calls[-1], rows)


@settings(max_examples=60, deadline=None)
@given(num_rows=st.integers(1, 400), num_shards=st.integers(1, 60), limit=st.integers(1, 120),
       order=st.lists(st.integers(0, 10**6), max_size=80))
def test_any_order_of_shards_gets_exactly_its_rows(num_rows, num_shards, limit, order):
    layout = shard_ranges(num_rows, num_shards)
    order = [i % len(layout) for i in order] + list(range(len(layout)))
    make = CountingMaker()
    read_ahead = ShardReadAhead(make, layout, limit=limit)
    assert served(read_ahead, layout, order) == [list(range(*layout[s])) for s in order]


def calls_of(layout, order, rows_per_table):
    """The (key, rows) batches a stream's calls for shards ``order`` give, as _generate_tables cuts them."""
    return [[(shard, np.arange(first, min(first + rows_per_table, layout[shard][1])))
             for first in range(layout[shard][0], layout[shard][1], rows_per_table)] for shard in order]


@settings(max_examples=40, deadline=None)
@given(num_rows=st.integers(1, 400), num_shards=st.integers(1, 60), limit=st.integers(0, 4000),
       order=st.lists(st.integers(0, 10**6), max_size=40), stride=st.integers(1, 4))
def test_remote_read_ahead_serves_exactly_the_rows_asked_for_within_its_bound(num_rows, num_shards, limit, order,
                                                                               stride):
    """Background reads (ReadAhead, for remote sources): a strided walk, then any order (a jump,
    a new pass, a shuffled one); every table holds the rows asked for, nothing is held past the end."""
    layout = shard_ranges(num_rows, num_shards)
    order = list(range(0, len(layout), stride)) + [i % len(layout) for i in order]
    make = CountingMaker()
    read_ahead = ReadAhead(make, layout, rows_per_table=7, limit_bytes=limit, threads=3)
    for call in calls_of(layout, order, 7):
        got = [(key, table.column("row").to_numpy().tolist()) for key, table in read_ahead.tables(call)]
        assert got == [(key, rows.tolist()) for key, rows in call]
    assert read_ahead.peak_bytes <= limit
    # Rows that are not a shard's (a rank's micro-batches) are served in order too.
    chunks = [np.array([5, 1, 3]) % num_rows, np.arange(num_rows)[::-1], np.arange(0, 0)]
    got = [table.column("row").to_numpy().tolist() for _, table in read_ahead.tables((None, c) for c in chunks)]
    assert got == [c.tolist() for c in chunks]


@pytest.mark.parametrize("gather_rows", [100, 300])
def test_remote_read_ahead_makes_one_table_for_several_small_shards(gather_rows):
    """A walk over shards of a few rows: the shards ahead are made as gathers of up to
    ``gather_bytes`` (at least rows_per_table rows; one gather each, whose pieces can merge
    into fewer requests), cut back into the tables asked for."""
    layout = shard_ranges(1000, 96)  # shards of 10 and 11 rows
    for stride, first in ((1, 0), (3, 2)):
        make = CountingMaker()
        read_ahead = ReadAhead(make, layout, rows_per_table=100, limit_bytes=1 << 30, threads=2,
                               gather_bytes=gather_rows * 8 if gather_rows > 100 else 0)  # a row: one int64
        order = list(range(first, len(layout), stride))
        for call in calls_of(layout, order, 100):
            got = [(key, table.column("row").to_numpy().tolist()) for key, table in read_ahead.tables(call)]
            assert got == [(key, rows.tolist()) for key, rows in call]
        rows = sum(layout[s][1] - layout[s][0] for s in order)
        assert len(make.calls) <= 2 + -(-rows // (gather_rows - 11))
        assert all(len(r) <= gather_rows for r in make.calls)


def test_joined_batches_keep_keys_counts_and_order():
    batches = [(f"k{i}", np.arange(10 * i, 10 * i + n)) for i, n in enumerate([3, 4, 2, 9, 1, 12, 5])]
    joined = joined_batches(batches, limit=9)
    assert [[key for key, _ in keys] for keys, _ in joined] == [["k0", "k1", "k2"], ["k3"], ["k4"], ["k5"], ["k6"]]
    for keys, rows in joined:
        assert [count for _, count in keys] == [len(dict(batches)[key]) for key, _ in keys]
        np.testing.assert_array_equal(rows, np.concatenate([dict(batches)[key] for key, _ in keys]))
    assert joined_batches([], limit=9) == []


@pytest.fixture(scope="module")
def small_shards(tmp_path_factory, random_documents, awkward_lengths, write_corpus):
    """A pair whose default 960 shards are a few rows each: read-ahead and joined gathers on."""
    root = tmp_path_factory.mktemp("small-shards")
    rng = np.random.default_rng(3)
    written = write_corpus(root, {"train": random_documents(rng, awkward_lengths(rng, 700, 8), vocab=500)})
    source = IndexedFile.open(written["train"])
    indices = sampling.build_indices(source.sequence_lengths, seq_length=8, seed=5)
    return root, sampling.assemble_samples(source, indices, np.arange(indices.num_samples))


def test_stream_and_cache_of_small_shards_equal_the_samples(small_shards, tmp_path, monkeypatch):
    root, expected = small_shards
    kwargs = dict(seq_length=8, seed=5, cache_dir=str(tmp_path / "cache"), split="train")
    stream = load_dataset(str(root), streaming=True, **kwargs)
    assert stream.num_shards == 960 < len(expected)  # shards of one and two rows
    got = np.concatenate([t.column("input_ids").combine_chunks().flatten().to_numpy().reshape(len(t), -1)
                          for t in stream.with_format("arrow").iter(97)])
    np.testing.assert_array_equal(got, expected)
    monkeypatch.setattr(datasets.config, "SAVE_ORIGINAL_SHARD_LENGTHS", True)
    prepared = load_dataset(str(root), **kwargs)
    np.testing.assert_array_equal(prepared.with_format("numpy")[:]["input_ids"], expected)
    # datasets still counts every shard's own rows, though several shards share one gather.
    assert prepared.info.splits["train"].original_shard_lengths == [b - a for a, b in shard_ranges(len(expected), 960)]


def test_the_arrow_cache_of_small_shards_holds_tables_of_up_to_a_thousand_rows(small_shards, tmp_path):
    """By default datasets does not keep each shard's row count, and consecutive small shards
    reach the Arrow cache as one table: a record batch for up to 1,000 rows, not one for each
    of the 960 shards of one or two rows."""
    root, expected = small_shards
    assert not datasets.config.SAVE_ORIGINAL_SHARD_LENGTHS
    prepared = load_dataset(str(root), seq_length=8, seed=5, cache_dir=str(tmp_path / "cache"), split="train")
    np.testing.assert_array_equal(prepared.with_format("numpy")[:]["input_ids"], expected)
    assert prepared.info.splits["train"].original_shard_lengths is None
    batch_rows = []
    for cache_file in prepared.cache_files:
        with pa.memory_map(cache_file["filename"]) as source:
            batch_rows += [len(batch) for batch in pa.ipc.open_stream(source)]
    assert sum(batch_rows) == len(expected) > 1000
    assert len(batch_rows) <= -(-len(expected) // 1000) + 1, batch_rows


class SampleMaker(CountingMaker):
    """Tables of 4,098-byte rows, a sample of 2,049 uint16 tokens (seq_length 2048)."""

    def __call__(self, rows):
        self.calls.append(np.array(rows))
        return pa.table({"input_ids": pa.array([b"x" * 4098] * len(rows), pa.binary(4098))})


def test_a_pass_that_stops_has_made_little_more_than_it_read_and_a_new_pass_starts_small():
    """Passes over the shards of a 20 MB .bin (4,883 samples in 960 shards, one call per shard
    as streaming asks) that stop after 400, 1,000 and 3,000 rows: the rows made, ahead included,
    stay within 1.3x of the rows read (the read-ahead holds a little plus a quarter of what the
    pass has read), and so does each new pass (before: 2x what all passes before had read, plus
    1 MiB)."""
    layout = shard_ranges(4883, 960)
    make = SampleMaker()
    read_ahead = ReadAhead(make, layout, rows_per_table=1000, limit_bytes=256 << 20, threads=2)
    for stop in (400, 1000, 3000, 400):
        made_before, read = sum(map(len, make.calls)), 0
        for call in calls_of(layout, range(len(layout)), 1000):
            tables = read_ahead.tables(call)
            for _, table in tables:
                read += table.num_rows
            if read >= stop:
                tables.close()  # the stream is left: what it queued is dropped, not made
                break
        read_ahead._pool.shutdown(wait=True)  # what was under way is made
        read_ahead._pool = None
        made = sum(map(len, make.calls)) - made_before
        assert made <= 1.3 * read, (stop, read, made)


def test_leaving_a_remote_stream_drops_the_tables_it_would_have_read_next(monkeypatch):
    """A ``break`` or ``take`` ends a stream: the gathers queued for what it would read next are
    not fetched (a script that stops after a few samples does not wait for them at exit)."""
    import threading

    release = threading.Event()
    started = []

    from mmidx_builder.storage.remote import request_queue

    dropped_while_made = []

    def make(rows):
        if rows[0] >= 20:  # the first two tables go through; the gathers after them wait
            release.wait(10)
            # What a remote fetch in this thread checks before each request (request_queue.fetch_context).
            dropped_while_made.append(request_queue.fetch_context()[0].is_set())
        started.append(len(rows))
        return pa.table({"row": pa.array(np.asarray(rows, np.int64))})

    layout = shard_ranges(5000, 500)
    read_ahead = ReadAhead(make, layout, rows_per_table=10, limit_bytes=1 << 30, threads=2, gather_bytes=0)
    monkeypatch.setattr(readahead, "READ_AHEAD_START_BYTES", 1 << 28)  # the bound allows many gathers ahead
    tables = read_ahead.tables(batch for call in calls_of(layout, range(len(layout)), 10) for batch in call)
    next(tables)  # made at once; it tells the read-ahead the bytes per row
    next(tables)
    queued = len(read_ahead._pending)
    assert queued > 10
    before = len(started)
    tables.close()
    release.set()
    read_ahead._pool.shutdown(wait=True)
    assert len(started) <= before + 2, (before, len(started))  # at most the two gathers under way
    # ... and those were told: their remote fetches send no further request.
    assert dropped_while_made and all(dropped_while_made)
