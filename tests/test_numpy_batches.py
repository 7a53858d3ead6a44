"""numpy_batches: the rows with_format("numpy") gives, in the stored dtype, for streams and Arrow."""

import numpy as np

from datasets import load_dataset

import mmidx_builder
from mmidx_builder import numpy_batches
from mmidx_builder.sources.indexed import write_documents


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
