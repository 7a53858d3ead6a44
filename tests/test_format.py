"""The .bin/.idx format layer: golden header bytes, writer/reader round trips, token access.

Expected bytes are built here from the specification (shared/FORMAT.md) with ``struct``,
never from format.py's own constants, so a wrong constant there fails a test here.
"""

from __future__ import annotations

import mmap
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmidx_builder.sources import indexed as fmt
from mmidx_builder.errors import FormatError, ParameterError
from mmidx_builder.sources.indexed import (Flavour, IndexedFile, IndexedFileWriter, dtype_code,
                                  parse_header, smallest_dtype, split_prefix, write_documents)
from mmidx_builder.sources.token_source import Concatenated
from conftest import LOCAL_READ_WAYS, use_local_read_way

# The dtype tables as FORMAT.md writes them.
SPEC_MEGATRON = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float32", 8: "uint16"}
SPEC_FAIRSEQ = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64", 7: "float64",
                8: "uint16", 9: "uint32", 10: "uint64"}
SPEC_MAGIC = b"MMIDIDX\x00\x00"


def spec_idx_bytes(flavour: str, code: int, itemsize: int, lengths, document_indices=None) -> bytes:
    """An .idx written from the spec's table, field by field."""
    out = SPEC_MAGIC + struct.pack("<Q", 1) + struct.pack("<B", code) + struct.pack("<Q", len(lengths))
    if flavour == "megatron":
        out += struct.pack("<Q", len(document_indices))
    out += struct.pack(f"<{len(lengths)}i", *lengths)
    pointers, position = [], 0
    for length in lengths:
        pointers.append(position)
        position += length * itemsize
    out += struct.pack(f"<{len(lengths)}q", *pointers)
    if flavour == "megatron":
        out += struct.pack(f"<{len(document_indices)}q", *document_indices)
    return out


def read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- golden bytes ------------------------------------------------------------------------------

def test_megatron_header_golden_bytes_seed_example(tmp_path):
    # The seed example: documents "abc", "defg", "hi", one sequence each.
    prefix = write_documents(tmp_path / "seed", [[0, 1, 2], [3, 4, 5, 6], [7, 8]], dtype=np.uint16)
    idx = read(prefix + ".idx")
    header = b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([8]) + (3).to_bytes(8, "little") \
        + (4).to_bytes(8, "little")
    assert len(header) == 34
    assert idx[:34] == header
    assert idx == spec_idx_bytes("megatron", 8, 2, [3, 4, 2], [0, 1, 2, 3])
    assert os.path.getsize(prefix + ".idx") == 34 + 12 * 3 + 8 * 4
    assert read(prefix + ".bin") == np.arange(9, dtype="<u2").tobytes()


def test_fairseq_header_golden_bytes(tmp_path):
    prefix = write_documents(tmp_path / "fs", [[5, 6, 7], [], [1]], dtype=np.uint32, flavour="fairseq")
    idx = read(prefix + ".idx")
    header = b"MMIDIDX\x00\x00" + (1).to_bytes(8, "little") + bytes([9]) + (3).to_bytes(8, "little")
    assert len(header) == 26
    assert idx[:26] == header
    assert idx == spec_idx_bytes("fairseq", 9, 4, [3, 0, 1])
    assert len(idx) == 26 + 12 * 3


@pytest.mark.parametrize("code,name", sorted(SPEC_MEGATRON.items()))
def test_megatron_dtype_codes_follow_the_spec(tmp_path, code, name):
    assert dtype_code(name, Flavour.MEGATRON) == code
    prefix = write_documents(tmp_path / "d", [[1, 2]], dtype=name)
    assert read(prefix + ".idx")[17] == code
    assert IndexedFile.open(prefix).dtype == np.dtype(name)


@pytest.mark.parametrize("code,name", sorted(SPEC_FAIRSEQ.items()))
def test_fairseq_dtype_codes_follow_the_spec(tmp_path, code, name):
    # Codes 6 and 7 both mean float64 to fairseq; write code 7 by hand, as fairseq's np.double does.
    lengths = [2, 0, 3]
    tokens = np.arange(5).astype(name)
    (tmp_path / "f.idx").write_bytes(spec_idx_bytes("fairseq", code, tokens.itemsize, lengths))
    (tmp_path / "f.bin").write_bytes(tokens.tobytes())
    indexed = IndexedFile.open(tmp_path / "f")
    assert indexed.flavour is Flavour.FAIRSEQ
    assert indexed.dtype == np.dtype(name)
    assert indexed.num_documents == indexed.num_sequences == 3
    np.testing.assert_array_equal(indexed.sequence(2), tokens[2:])
    if code != 7:  # the writer uses the first code of a dtype
        assert dtype_code(name, Flavour.FAIRSEQ) == code


@pytest.mark.parametrize("name,code", [("uint16", 8), ("uint32", 9), ("uint64", 10), ("float64", 6), ("int64", 5)])
def test_fairseq_writer_codes_and_sizes(tmp_path, name, code):
    # fairseq's own writer stores the first code of its table that maps to the dtype (6 for
    # float64; 7 is np.double, the same dtype, and only ever read).
    prefix = write_documents(tmp_path / "fw", [[1, 2], [], [3]], dtype=name, flavour="fairseq")
    idx = read(prefix + ".idx")
    assert idx[17] == code
    assert len(idx) == 26 + 12 * 3
    assert os.path.getsize(prefix + ".bin") == 3 * np.dtype(name).itemsize
    indexed = IndexedFile.open(prefix)
    assert (indexed.flavour, indexed.dtype, indexed.num_documents) == (Flavour.FAIRSEQ, np.dtype(name), 3)


def test_code_7_means_float32_to_megatron_and_float64_to_fairseq(tmp_path):
    (tmp_path / "m.idx").write_bytes(spec_idx_bytes("megatron", 7, 4, [2], [0, 1]))
    (tmp_path / "m.bin").write_bytes(np.array([1.5, 2.5], "<f4").tobytes())
    (tmp_path / "f.idx").write_bytes(spec_idx_bytes("fairseq", 7, 8, [2]))
    (tmp_path / "f.bin").write_bytes(np.array([1.5, 2.5], "<f8").tobytes())
    assert IndexedFile.open(tmp_path / "m").dtype == np.float32
    assert IndexedFile.open(tmp_path / "f").dtype == np.float64
    np.testing.assert_array_equal(IndexedFile.open(tmp_path / "f").sequence(0), [1.5, 2.5])


def test_fairseq_only_dtypes_are_refused_for_megatron():
    for name in ("uint32", "uint64"):
        with pytest.raises(ParameterError):
            dtype_code(name, Flavour.MEGATRON)
    with pytest.raises(ParameterError):
        dtype_code("float16", Flavour.FAIRSEQ)


def test_parse_header_tells_the_flavours_apart():
    megatron = spec_idx_bytes("megatron", 8, 2, [3, 4], [0, 2])
    fairseq = spec_idx_bytes("fairseq", 8, 2, [3, 4])
    h = parse_header(megatron[:34], len(megatron), "m.idx")
    assert (h.flavour, h.num_sequences, h.document_count, h.multimodal) == (Flavour.MEGATRON, 2, 2, False)
    h = parse_header(fairseq[:34], len(fairseq), "f.idx")
    assert (h.flavour, h.num_sequences, h.document_count) == (Flavour.FAIRSEQ, 2, None)
    # Multimodal: one int8 mode per sequence after the document index.
    h = parse_header(megatron[:34], len(megatron) + 2, "mm.idx")
    assert (h.flavour, h.multimodal) == (Flavour.MEGATRON, True)
    with pytest.raises(FormatError, match="file size"):
        parse_header(megatron[:34], len(megatron) + 1, "bad.idx")


# --- writer choices -------------------------------------------------------------------------

@pytest.mark.parametrize("vocab,megatron,fairseq", [
    (1, "uint8", "uint8"), (256, "uint8", "uint8"), (257, "uint16", "uint16"),
    (65499, "uint16", "uint16"), (65500, "int32", "uint32"), (2**31, "int32", "uint32"),
    (2**32 - 2, None, "uint32"), (2**32 - 1, None, "int64"),
])
def test_smallest_dtype(vocab, megatron, fairseq):
    if megatron is None:
        with pytest.raises(ParameterError):
            smallest_dtype(vocab, Flavour.MEGATRON)
    else:
        assert smallest_dtype(vocab, Flavour.MEGATRON) == np.dtype(megatron)
        assert np.iinfo(smallest_dtype(vocab)).max >= vocab - 1
    assert smallest_dtype(vocab, Flavour.FAIRSEQ) == np.dtype(fairseq)


def test_writer_picks_dtype_from_vocab_and_refuses_what_does_not_fit(tmp_path):
    prefix = write_documents(tmp_path / "v", [[0, 50256]], vocab_size=50257)
    assert IndexedFile.open(prefix).dtype == np.uint16
    with pytest.raises(ParameterError):
        IndexedFileWriter(tmp_path / "none")
    with IndexedFileWriter(tmp_path / "small", dtype=np.uint8) as writer:
        with pytest.raises(ParameterError, match="do not fit"):
            writer.add_document([1, 256])
        with pytest.raises(ParameterError, match="do not fit"):
            writer.add_sequence([-1])
        with pytest.raises(ParameterError):
            writer.add_sequence([[1, 2]])
        with pytest.raises(ParameterError):
            writer.add_document([1, 2, 3], sequence_lengths=[1, 1])
        with pytest.raises(ParameterError):
            writer.add_document([1, 2, 3], sequence_lengths=[4, -1])
        writer.add_document([255])
    assert IndexedFile.open(tmp_path / "small").document(0).tolist() == [255]


def test_writer_refuses_a_sequence_longer_than_int32():
    # Without materialising 2**31 tokens: the length check is what add_* rely on.
    with pytest.raises(ParameterError, match="int32"):
        fmt._check_sequence_lengths([1, 2**31])
    fmt._check_sequence_lengths([2**31 - 1])


def test_writer_leaves_nothing_that_looks_valid_until_close(tmp_path):
    writer = IndexedFileWriter(tmp_path / "out" / "x", dtype=np.uint16)
    writer.add_document([1, 2, 3])
    assert not (tmp_path / "out" / "x.bin").exists() and not (tmp_path / "out" / "x.idx").exists()
    writer.close()
    assert sorted(os.listdir(tmp_path / "out")) == ["x.bin", "x.idx"]
    writer.close()  # a second close is harmless

    with pytest.raises(RuntimeError):
        with IndexedFileWriter(tmp_path / "crash" / "y", dtype=np.uint16) as writer:
            writer.add_document([1, 2, 3])
            raise RuntimeError("tokenizer died")
    assert os.listdir(tmp_path / "crash") == []


def test_writer_replaces_an_existing_pair(tmp_path):
    write_documents(tmp_path / "r", [[1, 2, 3, 4]], dtype=np.uint16)
    write_documents(tmp_path / "r", [[9]], dtype=np.uint8)
    indexed = IndexedFile.open(tmp_path / "r")
    assert (indexed.dtype, indexed.document(0).tolist()) == (np.uint8, [9])


# --- round trips ----------------------------------------------------------------------------

def _values_for(name: str):
    dtype = np.dtype(name)
    if dtype.kind == "f":
        return st.integers(-(2**24), 2**24)  # exactly representable in float32 and float64
    info = np.iinfo(dtype)
    return st.integers(int(info.min), int(info.max))


@st.composite
def corpora(draw):
    """(flavour, dtype name, documents); a document is a list of sequences (maybe none)."""
    flavour = draw(st.sampled_from(["megatron", "fairseq"]))
    name = draw(st.sampled_from(sorted(set((SPEC_MEGATRON if flavour == "megatron" else SPEC_FAIRSEQ).values()))))
    sequence = st.lists(_values_for(name), max_size=12)
    documents = draw(st.lists(st.lists(sequence, max_size=4), max_size=8))
    return flavour, name, documents


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corpus=corpora(), use_add_document=st.booleans())
def test_round_trip(tmp_path, corpus, use_add_document):
    flavour, name, documents = corpus
    prefix = str(tmp_path / f"rt-{flavour}-{name}")
    with IndexedFileWriter(prefix, dtype=name, flavour=flavour) as writer:
        for document in documents:
            if use_add_document:
                flat = [t for sequence in document for t in sequence]
                writer.add_document(np.array(flat, dtype=name), sequence_lengths=[len(s) for s in document])
            else:
                for sequence in document:
                    writer.add_sequence(sequence)
                writer.end_document()

    sequences = [s for document in documents for s in document]
    lengths = [len(s) for s in sequences]
    itemsize = np.dtype(name).itemsize
    code = dtype_code(name, Flavour(flavour))
    if flavour == "megatron":
        bounds = np.cumsum([0] + [len(d) for d in documents]).tolist()
        assert read(prefix + ".idx") == spec_idx_bytes(flavour, code, itemsize, lengths, bounds)
    else:
        bounds = list(range(len(sequences) + 1))  # every sequence is a document
        assert read(prefix + ".idx") == spec_idx_bytes(flavour, code, itemsize, lengths)
    assert read(prefix + ".bin") == np.array([t for s in sequences for t in s], dtype=name).tobytes()

    indexed = IndexedFile.open(prefix)
    assert indexed.flavour is Flavour(flavour)
    assert indexed.dtype == np.dtype(name)
    assert indexed.num_sequences == len(sequences)
    assert indexed.num_documents == len(bounds) - 1
    assert indexed.num_tokens == sum(lengths)
    assert indexed.sequence_lengths.tolist() == lengths
    assert indexed.document_indices.tolist() == bounds
    assert indexed.sequence_starts.tolist() == np.cumsum([0] + lengths).tolist()
    for i, sequence in enumerate(sequences):
        assert indexed.sequence(i).tolist() == sequence
    for d in range(len(bounds) - 1):
        expected = [t for s in sequences[bounds[d]:bounds[d + 1]] for t in s]
        assert indexed.document(d).tolist() == expected
    assert indexed.document_lengths().tolist() == np.diff(np.cumsum([0] + lengths)[bounds]).tolist()


def test_documents_with_zero_and_several_sequences(tmp_path):
    with IndexedFileWriter(tmp_path / "z", dtype=np.uint16) as writer:
        writer.end_document()                                   # a document with no sequence
        writer.add_document([1, 2, 3, 4, 5], sequence_lengths=[2, 0, 3])
        writer.add_document([])                                  # one empty sequence
        writer.add_sequence([6])
        writer.add_sequence([7, 8])
        writer.end_document()
    indexed = IndexedFile.open(tmp_path / "z")
    assert indexed.document_indices.tolist() == [0, 0, 3, 4, 6]
    assert indexed.sequence_lengths.tolist() == [2, 0, 3, 0, 1, 2]
    assert [indexed.document(d).tolist() for d in range(4)] == [[], [1, 2, 3, 4, 5], [], [6, 7, 8]]
    assert indexed.document_lengths().tolist() == [0, 5, 0, 3]
    assert indexed.document(-1).tolist() == [6, 7, 8]
    with pytest.raises(ParameterError):
        indexed.document(4)
    with pytest.raises(ParameterError):
        indexed.sequence(6)


def test_empty_file_round_trips(tmp_path):
    for flavour in ("megatron", "fairseq"):
        prefix = write_documents(tmp_path / flavour, [], dtype=np.uint16, flavour=flavour)
        indexed = IndexedFile.open(prefix)
        assert (indexed.num_sequences, indexed.num_documents, indexed.num_tokens) == (0, 0, 0)
        assert indexed.read_pieces([], [], []).size == 0


def test_tokens_and_index_arrays_are_copies_never_views_of_a_map(tmp_path):
    """A view of a mapped file would fault (SIGBUS) if the file were truncated while the
    caller still held it: every array handed out is its own."""
    prefix = write_documents(tmp_path / "v", [[1, 2, 3], [4, 5]], dtype=np.uint16)
    indexed = IndexedFile.open(prefix)
    arrays = [indexed.sequence(1), indexed.document(0), indexed.read_pieces([0], [1], [2]), indexed.sequence_lengths,
              indexed.sequence_pointers, indexed.document_indices, indexed.sequence_starts]
    for array in arrays:
        base = array
        while base is not None and not isinstance(base, mmap.mmap):
            base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
        assert base is None, array
    assert [a.tolist() for a in arrays[:3]] == [[4, 5], [1, 2, 3], [2, 3]]
    assert not indexed.sequence_lengths.flags.writeable  # kept, and shared by every caller


def test_pickling_maps_the_bin_again_instead_of_copying_it(tmp_path):
    import pickle
    prefix = write_documents(tmp_path / "p", [np.arange(50_000) % 60_000], dtype=np.uint16)
    indexed = IndexedFile.open(prefix)
    data = pickle.dumps(indexed)
    assert len(data) < os.path.getsize(prefix + ".bin") // 4
    again = pickle.loads(data)
    np.testing.assert_array_equal(again.document(0), indexed.document(0))
    np.testing.assert_array_equal(again.read_pieces([0, 0], [5, 40_000], [3, 9]), indexed.read_pieces([0, 0], [5, 40_000], [3, 9]))


def test_multimodal_file_is_read(tmp_path):
    prefix = write_documents(tmp_path / "mm", [[1, 2], [3]], dtype=np.uint16)
    with open(prefix + ".idx", "ab") as f:
        f.write(bytes([0, 1]))  # one int8 mode per sequence
    indexed = IndexedFile.open(prefix)
    assert indexed.header.multimodal
    assert indexed.sequence_modes.tolist() == [0, 1]
    assert indexed.document(1).tolist() == [3]


def test_split_prefix():
    assert split_prefix("a/b.bin") == split_prefix("a/b.idx") == split_prefix("a/b") == "a/b"
    assert split_prefix("a/b.c") == "a/b.c"


def test_open_accepts_either_file_and_renamed_files(tmp_path):
    prefix = write_documents(tmp_path / "p", [[1, 2]], dtype=np.uint16)
    for path in (prefix, prefix + ".bin", prefix + ".idx"):
        assert IndexedFile.open(path).sequence(0).tolist() == [1, 2]
    os.rename(prefix + ".idx", tmp_path / "download-1")
    os.rename(prefix + ".bin", tmp_path / "download-2")
    indexed = IndexedFile.open(tmp_path / "x", idx_path=str(tmp_path / "download-1"),
                               bin_path=str(tmp_path / "download-2"))
    assert indexed.sequence(0).tolist() == [1, 2]


# --- merge ----------------------------------------------------------------------------------

def test_add_file_merges_like_concatenation(tmp_path):
    a = [[[1, 2], [3]], [], [[4]]]
    b = [[[5, 6, 7]], [[], [8]]]

    def write(prefix, documents):
        with IndexedFileWriter(prefix, dtype=np.int32) as writer:
            for document in documents:
                for sequence in document:
                    writer.add_sequence(sequence)
                writer.end_document()
        return prefix

    write(tmp_path / "a", a)
    write(tmp_path / "b", b)
    write(tmp_path / "ab", a + b)
    with IndexedFileWriter(tmp_path / "merged", dtype=np.int32) as writer:
        writer.add_file(tmp_path / "a")
        writer.add_file(tmp_path / "b.idx")
    assert read(tmp_path / "merged.idx") == read(tmp_path / "ab.idx")
    assert read(tmp_path / "merged.bin") == read(tmp_path / "ab.bin")
    with IndexedFileWriter(tmp_path / "other", dtype=np.uint16) as writer:
        with pytest.raises(ParameterError, match="dtype"):
            writer.add_file(tmp_path / "a")


# --- batched gather -------------------------------------------------------------------------

@pytest.fixture
def gather_file(tmp_path):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 300, size=57)
    lengths[[3, 10]] = 0
    tokens = rng.integers(0, 60000, size=int(lengths.sum())).astype(np.uint16)
    with IndexedFileWriter(tmp_path / "g", dtype=np.uint16) as writer:
        writer.add_document(tokens, sequence_lengths=lengths)
    return tmp_path / "g", tokens, np.concatenate(([0], np.cumsum(lengths)))


def _random_pieces(rng, starts, count):
    lengths_of = np.diff(starts)
    ids = rng.integers(0, len(lengths_of), size=count)
    offsets = np.array([rng.integers(0, n + 1) for n in lengths_of[ids]], dtype=np.int64)
    lengths = np.array([rng.integers(0, n - o + 1) for n, o in zip(lengths_of[ids], offsets)], dtype=np.int64)
    return ids, offsets, lengths


@pytest.mark.parametrize("lengths", ["entries", "copied"])
@pytest.mark.parametrize("path", LOCAL_READ_WAYS)
@pytest.mark.parametrize("opener", [None, open])
def test_read_pieces_matches_slicing(gather_file, monkeypatch, path, opener, lengths):
    """Every way mapped.py reads a local file, before and after the lengths are copied (the
    starts of the pieces come from the index's pointers, then from the copied lengths)."""
    prefix, tokens, starts = gather_file
    use_local_read_way(path, monkeypatch)
    indexed = IndexedFile.open(prefix, opener=opener)
    if lengths == "copied":
        indexed.sequence_lengths
    rng = np.random.default_rng(1)
    for count in (0, 1, 2, 5, 40):
        ids, offsets, lengths = _random_pieces(rng, starts, count)
        expected = np.concatenate([tokens[starts[i] + o: starts[i] + o + n] for i, o, n in zip(ids, offsets, lengths)]
                                  + [np.empty(0, np.uint16)])
        np.testing.assert_array_equal(indexed.read_pieces(ids, offsets, lengths), expected)
        out = np.full(len(expected), 7, np.uint16)
        assert indexed.read_pieces(ids, offsets, lengths, out=out) is out
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.int32, np.int64, np.float64])
def test_slice_copies_of_every_dtype_into_any_out(tmp_path, monkeypatch, dtype):
    # Bytes are copied straight into `out` when it has the file's dtype and is contiguous, and
    # through a temporary otherwise (numpy's casting assignment); both give the slices' values.
    rng = np.random.default_rng(11)
    lengths = rng.integers(0, 90, size=30)
    tokens = rng.integers(0, 120, size=int(lengths.sum())).astype(dtype)
    with IndexedFileWriter(tmp_path / "d", dtype=dtype) as writer:
        writer.add_document(tokens, sequence_lengths=lengths)
    indexed = IndexedFile.open(tmp_path / "d")
    starts = np.concatenate(([0], np.cumsum(lengths)))
    ids, offsets, piece_lengths = _random_pieces(rng, starts, 25)
    expected = np.concatenate([tokens[starts[i] + o: starts[i] + o + n] for i, o, n in zip(ids, offsets, piece_lengths)])
    got = indexed.read_pieces(ids, offsets, piece_lengths)
    assert got.dtype == indexed.dtype
    np.testing.assert_array_equal(got, expected)
    wider = np.full(len(expected), -1, np.float64 if dtype == np.float64 else np.int64)
    np.testing.assert_array_equal(indexed.read_pieces(ids, offsets, piece_lengths, out=wider), expected)
    strided = np.zeros(2 * len(expected), dtype)[::2]
    np.testing.assert_array_equal(indexed.read_pieces(ids, offsets, piece_lengths, out=strided), expected)


def test_read_pieces_refuses_requests_outside_a_sequence(gather_file):
    prefix, tokens, starts = gather_file
    indexed = IndexedFile.open(prefix)
    n0 = int(starts[1] - starts[0])
    bad = [
        ([-1], [0], [1]), ([57], [0], [1]), ([0], [-1], [1]), ([0], [0], [-1]), ([0], [0], [n0 + 1]),
        ([0], [n0], [1]), ([3], [0], [1]), ([0], [2**62], [2**62]), ([0], [1], [2**63 - 1]),
        ([0, 1], [0], [1]), ([[0]], [[0]], [[1]]),
    ]
    for ids, offsets, lengths in bad:
        with pytest.raises(ParameterError):
            indexed.read_pieces(ids, offsets, lengths)
    with pytest.raises(ParameterError):
        indexed.read_pieces([0], [0], [1], out=np.empty(2, np.uint16))
    assert indexed.read_pieces([0], [n0], [0]).size == 0


def test_concatenated_files_number_sequences_across_files(tmp_path):
    a = write_documents(tmp_path / "a", [[1, 2, 3], [4]], dtype=np.uint16)
    b = write_documents(tmp_path / "b", [[], [5, 6]], dtype=np.uint16)
    both = Concatenated([IndexedFile.open(a), IndexedFile.open(b)])
    assert (both.num_sequences, both.num_tokens) == (4, 6)
    assert both.sequence_lengths.tolist() == [3, 1, 0, 2]
    assert both.read_pieces([3, 0, 1, 3], [1, 1, 0, 0], [1, 2, 1, 2]).tolist() == [6, 2, 3, 4, 5, 6]
    for ids, offsets, lengths in (([4], [0], [1]), ([2], [0], [1]), ([0], [2**62], [2**62])):
        with pytest.raises(ParameterError):
            both.read_pieces(ids, offsets, lengths)
    c = write_documents(tmp_path / "c", [[1]], dtype=np.uint8)
    with pytest.raises(ParameterError):
        Concatenated([IndexedFile.open(a), IndexedFile.open(c)])
    with pytest.raises(ParameterError):
        Concatenated([])


def test_list_ids_above_int64_keep_every_bit(tmp_path):
    # np.asarray([0, 2**63 + 1]) is float64; the writer must not go through it.
    with IndexedFileWriter(tmp_path / "big", dtype=np.uint64, flavour="fairseq") as writer:
        writer.add_sequence([0, 2**63 + 1])
        writer.end_document()
    assert IndexedFile.open(tmp_path / "big").sequence(0).tolist() == [0, 2**63 + 1]


def test_fractional_float_ids_are_refused(tmp_path):
    with pytest.raises(ParameterError, match="whole numbers"):
        with IndexedFileWriter(tmp_path / "f", dtype=np.uint16) as writer:
            writer.add_document(np.array([1.0, 2.5]))
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("lengths", ["random", "a block spans 2**32 tokens"])
def test_the_starts_kept_beside_the_copied_lengths_are_the_running_sums(monkeypatch, lengths):
    """Blocks of 4 sequences and chunks of 4,096, so that 10,001 sequences cross both; a block
    that spans 2**32 tokens or more keeps int64 starts instead of uint32 distances."""
    monkeypatch.setattr(fmt, "_BLOCK_BITS", 2)
    rng = np.random.default_rng(5)
    values = rng.integers(0, 1000, 10_001).astype(np.int32)
    if lengths != "random":
        values[4100:4104] = 2**31 - 1
    blocks, offsets = fmt._block_starts(values)
    expected = np.cumsum(values, dtype=np.int64) - values
    ids = np.arange(len(values))
    np.testing.assert_array_equal(blocks[ids >> 2] + offsets[ids], expected)
    assert offsets.dtype == (np.uint32 if lengths == "random" else np.int64)
    assert fmt._block_starts(np.zeros(0, np.int32))[1].size == 0
