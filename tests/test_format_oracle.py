"""megatron-core as the differential oracle for the format layer.

Files written by megatron-core's ``IndexedDatasetBuilder`` read identically here and are
byte-identical to this package's writer for the same documents; files written here read
identically with megatron-core's ``IndexedDataset`` (memory-mapped and plain reads).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mmidx_builder.sources.indexed import Flavour, IndexedFile, IndexedFileWriter

pytestmark = pytest.mark.megatron

# Every dtype of megatron-core's table (codes 1-8).
MEGATRON_DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.int64, np.float64, np.float32, np.uint16]


def corpus(dtype, seed):
    """Documents as lists of sequences: awkward on purpose (empty document, empty sequence,
    several sequences, one long document)."""
    rng = np.random.default_rng(seed)
    high = 100 if np.dtype(dtype).kind == "f" else min(int(np.iinfo(dtype).max), 60000)
    documents = [[rng.integers(0, high, size=n).astype(dtype) for n in rng.integers(0, 30, size=rng.integers(1, 4))]
                 for _ in range(25)]
    documents[3] = []
    documents[7] = [np.zeros(0, dtype), rng.integers(0, high, size=5).astype(dtype)]
    documents[11] = [rng.integers(0, high, size=3000).astype(dtype)]
    return documents


def megatron_write(megatron, prefix, dtype, documents, *, whole_documents, multimodal=False):
    import torch  # megatron-core's builder takes tensors; imported here so that a machine
    # without torch skips through the `megatron` fixture instead of failing collection
    builder = megatron.indexed_dataset.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype, multimodal=multimodal)
    for d, document in enumerate(documents):
        if whole_documents:
            flat = np.concatenate(document) if document else np.zeros(0, dtype)
            modes = [(d + k) % 3 for k in range(len(document))] if multimodal else None
            builder.add_document(torch.from_numpy(flat.copy()), [len(s) for s in document], modes=modes)
        else:
            for k, sequence in enumerate(document):
                builder.add_item(torch.from_numpy(sequence.copy()), mode=(d + k) % 3)
            builder.end_document()
    builder.finalize(prefix + ".idx")
    return prefix


def our_write(prefix, dtype, documents):
    with IndexedFileWriter(prefix, dtype=dtype) as writer:
        for document in documents:
            for sequence in document:
                writer.add_sequence(sequence)
            writer.end_document()
    return prefix


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("dtype", MEGATRON_DTYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("whole_documents", [False, True], ids=["add_item", "add_document"])
def test_megatron_files_read_identically_and_match_our_bytes(megatron, tmp_path, dtype, whole_documents):
    documents = corpus(dtype, seed=np.dtype(dtype).num)
    theirs = megatron_write(megatron, str(tmp_path / "theirs"), dtype, documents, whole_documents=whole_documents)
    ours = our_write(str(tmp_path / "ours"), dtype, documents)
    assert read_bytes(ours + ".idx") == read_bytes(theirs + ".idx")
    assert read_bytes(ours + ".bin") == read_bytes(theirs + ".bin")

    oracle = megatron.indexed_dataset.IndexedDataset(theirs)
    indexed = IndexedFile.open(theirs)
    assert indexed.flavour is Flavour.MEGATRON and not indexed.header.multimodal
    assert indexed.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(indexed.sequence_lengths, oracle.sequence_lengths)
    np.testing.assert_array_equal(indexed.sequence_pointers, oracle.index.sequence_pointers)
    np.testing.assert_array_equal(indexed.document_indices, oracle.document_indices)
    assert indexed.num_sequences == len(oracle)
    for i in range(len(oracle)):
        np.testing.assert_array_equal(indexed.sequence(i), oracle[i])


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "file"])
@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.float32, np.uint8], ids=lambda t: np.dtype(t).name)
def test_our_files_read_identically_in_megatron(megatron, tmp_path, dtype, mmap):
    documents = corpus(dtype, seed=5)
    prefix = our_write(str(tmp_path / "ours"), dtype, documents)
    oracle = megatron.indexed_dataset.IndexedDataset(prefix, mmap=mmap)
    indexed = IndexedFile.open(prefix)
    sequences = [s for document in documents for s in document]
    assert len(oracle) == len(sequences)
    np.testing.assert_array_equal(oracle.sequence_lengths, [len(s) for s in sequences])
    np.testing.assert_array_equal(oracle.document_indices, np.cumsum([0] + [len(d) for d in documents]))
    assert oracle.index.dtype == indexed.dtype
    for i, sequence in enumerate(sequences):
        np.testing.assert_array_equal(oracle[i], sequence)
    # Slices of one sequence: megatron's get(idx, offset, length) against our read_pieces.
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(sequences), size=60)
    offsets = np.array([rng.integers(0, len(sequences[i]) + 1) for i in ids])
    lengths = np.array([rng.integers(0, len(sequences[i]) - o + 1) for i, o in zip(ids, offsets)])
    expected = np.concatenate([oracle.get(int(i), offset=int(o), length=int(n)) for i, o, n in zip(ids, offsets, lengths)])
    np.testing.assert_array_equal(indexed.read_pieces(ids, offsets, lengths), expected)


def test_merge_matches_megatron_add_index(megatron, tmp_path):
    parts = []
    for k in range(3):
        documents = corpus(np.uint16, seed=10 + k)
        parts.append(megatron_write(megatron, str(tmp_path / f"part{k}"), np.uint16, documents, whole_documents=False))
    builder = megatron.indexed_dataset.IndexedDatasetBuilder(str(tmp_path / "theirs.bin"), dtype=np.uint16)
    for part in parts:
        builder.add_index(part)
    builder.finalize(str(tmp_path / "theirs.idx"))
    with IndexedFileWriter(tmp_path / "ours", dtype=np.uint16) as writer:
        for part in parts:
            writer.add_file(part)
    for suffix in (".idx", ".bin"):
        assert read_bytes(tmp_path / f"ours{suffix}") == read_bytes(tmp_path / f"theirs{suffix}")


@pytest.mark.parametrize("whole_documents", [False, True], ids=["add_item", "add_document"])
def test_megatron_multimodal_files_are_detected(megatron, tmp_path, whole_documents):
    documents = corpus(np.int32, seed=3)
    prefix = megatron_write(megatron, str(tmp_path / "mm"), np.int32, documents, whole_documents=whole_documents,
                            multimodal=True)
    oracle = megatron.indexed_dataset.IndexedDataset(prefix, multimodal=True)
    indexed = IndexedFile.open(prefix)
    assert indexed.header.multimodal
    # (oracle.sequence_modes asserts on an array in megatron-core 0.16; read the index directly)
    np.testing.assert_array_equal(indexed.sequence_modes, oracle.index.sequence_modes)
    np.testing.assert_array_equal(indexed.document_indices, oracle.document_indices)
    for i in range(len(oracle)):
        tokens, _mode = oracle[i]
        np.testing.assert_array_equal(indexed.sequence(i), tokens)


def test_dtype_choice_matches_megatron_where_their_rule_applies(megatron):
    # megatron's optimal_dtype: uint16 below 65500, int32 from there on. Ours agrees above 256
    # (below, we pick uint8, which megatron reads too).
    from mmidx_builder.sources.indexed import smallest_dtype
    optimal = megatron.indexed_dataset.DType.optimal_dtype
    for vocab in (257, 50257, 65499, 65500, 128256, 2**31):
        assert smallest_dtype(vocab) == np.dtype(optimal(vocab))


WRITER_VOCABS = (1, 2, 100, 255, 256, 257, 50257, 65499, 65500, 128256)


def test_writer_dtype_from_vocab_size_is_megatrons_optimal_dtype(megatron, tmp_path):
    # preprocess_data.py writes DType.optimal_dtype(vocab_size), which has no uint8 branch:
    # a byte-sized vocabulary is uint16 there, so the same pair must come out here.
    for vocab in WRITER_VOCABS:
        documents = [np.array([0, vocab - 1]), np.array([vocab // 2])]
        ours = IndexedFileWriter(str(tmp_path / f"ours{vocab}"), vocab_size=vocab)
        for document in documents:
            ours.add_document(document)
        ours.close()
        dtype = megatron.indexed_dataset.DType.optimal_dtype(vocab)
        theirs = megatron_write(megatron, str(tmp_path / f"theirs{vocab}"), dtype, [[d] for d in documents],
                                whole_documents=True)
        for suffix in (".bin", ".idx"):
            assert (tmp_path / f"ours{vocab}{suffix}").read_bytes() == open(theirs + suffix, "rb").read(), (vocab, suffix)


def test_fairseq_writer_dtype_from_vocab_size_is_best_fitting_int_dtype(fairseq_python, tmp_path):
    import subprocess

    script = ("import json, sys; from fairseq.data.indexed_dataset import best_fitting_int_dtype as f; "
              f"print(json.dumps([f(v).__name__ for v in {list(WRITER_VOCABS)}]))")
    done = subprocess.run([fairseq_python, "-c", script], capture_output=True, text=True, check=True)
    expected = json.loads(done.stdout.strip().splitlines()[-1])
    for vocab, name in zip(WRITER_VOCABS, expected):
        writer = IndexedFileWriter(str(tmp_path / f"f{vocab}"), vocab_size=vocab, flavour=Flavour.FAIRSEQ)
        writer.abort()
        assert writer.dtype == np.dtype(name), vocab
