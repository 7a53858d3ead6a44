"""numpy_batches: the rows with_format("numpy") gives, in the stored dtype, for streams and Arrow."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from datasets import load_dataset

import mmidx_builder
from mmidx_builder import numpy_batches
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.training.as_numpy import _as_numpy, _view_of_consecutive_rows


def test_numpy_batches_equal_the_numpy_format_in_the_files_dtype(tmp_path, random_documents):
    rng = np.random.default_rng(4)
    write_documents(tmp_path / "data" / "train", random_documents(rng, rng.integers(0, 300, 200)), dtype=np.uint16)
    kwargs = dict(seq_length=32, document_structure=True, cache_dir=str(tmp_path / "c"), split="train")
    prepared = load_dataset(str(tmp_path / "data"), **kwargs)
    stream = load_dataset(str(tmp_path / "data"), streaming=True, **kwargs)
    expected = prepared.with_format("numpy")[:]
    for source in (prepared, stream):
        batches = list(numpy_batches(source, batch_size=37))
        assert [len(b["input_ids"]) for b in batches[:-1]] == [37] * (len(batches) - 1)
        ids = np.concatenate([b["input_ids"] for b in batches])
        assert ids.dtype == np.uint16 and ids.shape == (len(prepared), 33)
        np.testing.assert_array_equal(ids, expected["input_ids"])
        np.testing.assert_array_equal(np.concatenate([b["position_ids"] for b in batches]), expected["position_ids"])
        pieces = [p for b in batches for p in b["piece_lengths"]]
        assert [list(p) for p in pieces] == [list(p) for p in expected["piece_lengths"]]
    assert "numpy_batches" in mmidx_builder.__all__


@settings(max_examples=150, deadline=None)
@given(rows=st.integers(1, 40), width=st.integers(1, 7), dtype=st.sampled_from(["uint16", "int32", "int64", "float32"]),
       cuts=st.lists(st.integers(0, 40), max_size=6), child_offset=st.integers(0, 3),
       change=st.sampled_from(["none", "gap", "swap", "another buffer", "repeat"]), at=st.integers(0, 10**6))
def test_consecutive_rows_of_one_array_are_viewed_and_any_other_chunks_copied(rows, width, dtype, cuts, child_offset,
                                                                              change, at):
    """A batch datasets joins from slices of one table (a local stream's gather) is a view of
    it; chunks that are not consecutive rows of one array are copied. Either way the rows are
    those of the chunks, in order (checked against numpy indexing of the values written)."""
    values = np.arange((rows + child_offset) * width).astype(dtype)
    array = pa.FixedSizeListArray.from_arrays(pa.array(values).slice(child_offset * width), width)
    twin = pa.FixedSizeListArray.from_arrays(pa.array(values[child_offset * width:].copy()), width)
    bounds = sorted({0, rows, *[c % (rows + 1) for c in cuts]})
    parts = [[array, a, b] for a, b in zip(bounds[:-1], bounds[1:])]  # (array, first row, stop)
    k = at % len(parts)
    if change == "gap" and parts[k][2] - parts[k][1] >= 3:
        parts[k:k + 1] = [[array, parts[k][1], parts[k][1] + 1], [array, parts[k][1] + 2, parts[k][2]]]
    elif change == "swap" and len(parts) >= 2:
        parts[k - 1], parts[k] = parts[k], parts[k - 1]
    elif change == "another buffer":
        parts[k][0] = twin
    elif change == "repeat":
        parts.insert(k, list(parts[k]))
    column = pa.chunked_array([source.slice(a, b - a) for source, a, b in parts], type=array.type)

    got = _as_numpy(column)

    order = np.concatenate([np.arange(a, b) for _, a, b in parts]).astype(np.int64)
    np.testing.assert_array_equal(got, values.reshape(-1, width)[child_offset:][order])
    assert got.dtype == np.dtype(dtype) and got.shape == (len(order), width)
    nonempty = [(source, a, b) for source, a, b in parts if b > a]
    consecutive = (len(nonempty) >= 2 and all(source is array for source, _, _ in nonempty)
                   and all(b == a2 for (_, _, b), (_, a2, _) in zip(nonempty, nonempty[1:])))
    viewed = np.shares_memory(got, np.frombuffer(array.values.buffers()[1], dtype))
    assert viewed == consecutive


def test_a_local_streams_batches_are_views_of_its_gathers(tmp_path, random_documents):
    """Shards of a few rows walked in order are gathered together (hf/readahead.py), so nearly
    every batch datasets joins from their tables is consecutive rows of one gather."""
    rng = np.random.default_rng(5)
    write_documents(tmp_path / "data" / "train", random_documents(rng, rng.integers(1, 400, 600)), dtype=np.uint16)
    stream = load_dataset(str(tmp_path / "data"), streaming=True, seq_length=32, split="train",
                          cache_dir=str(tmp_path / "c"))
    assert stream.num_shards > 100
    tables = list(stream.with_format("arrow").iter(100))
    viewed = [_view_of_consecutive_rows(table.column("input_ids")) is not None for table in tables]
    # The first two shards are gathered alone (the walk's stride is not known yet); after them
    # one gather holds the rest of the split.
    assert viewed[1:-1] == [True] * (len(tables) - 2), viewed
