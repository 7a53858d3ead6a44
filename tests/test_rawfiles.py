"""Raw files read n_bytes per token: every token checked against numpy.frombuffer of the bytes."""

import json
import pickle

import numpy as np
import pytest

from conftest import LOCAL_READ_WAYS, use_local_read_way
from mmidx_builder.errors import FormatError, ParameterError
from mmidx_builder.sources.indexed import IndexedFileWriter, IndexedFile
from mmidx_builder.sources.raw import (RawFiles, diff_chunks, diff_samples, eof_id, labels_for,
                                    token_dtype)

N_BYTES = (1, 2, 3, 4)


def reference_tokens(data: bytes, n_bytes: int) -> np.ndarray:
    """The file's tokens by another route: zero-pad to whole tokens, widen each token to
    4 or 8 bytes with zero high bytes, and let numpy.frombuffer read little-endian ints."""
    data = data + b"\0" * (-len(data) % n_bytes)
    grouped = np.frombuffer(data, np.uint8).reshape(-1, n_bytes)
    width = 8 if n_bytes > 2 else 4
    wide = np.zeros((len(grouped), width), np.uint8)
    wide[:, :n_bytes] = grouped
    return np.frombuffer(wide.tobytes(), f"<u{width}").astype(np.int64)


def reference_sequence(data: bytes, n_bytes: int) -> np.ndarray:
    return np.append(reference_tokens(data, n_bytes), 2 ** (8 * n_bytes))


@pytest.fixture
def files(tmp_path):
    """Awkward sizes: empty, shorter than any token, not a multiple of 2/3/4, and one file
    far longer than many sequences."""
    rng = np.random.default_rng(7)
    sizes = [0, 1, 2, 3, 5, 7, 12, 4099, 0, 11]
    paths = []
    for i, size in enumerate(sizes):
        path = tmp_path / f"file{i:02d}.dat"
        path.write_bytes(rng.integers(0, 256, size, dtype=np.uint8).tobytes())
        paths.append(str(path))
    return paths


def test_eof_and_dtype_are_the_smallest_that_hold_the_vocabulary():
    for n in N_BYTES:
        eof, dtype = eof_id(n), token_dtype(n)
        assert eof == 256 ** n
        assert np.iinfo(dtype).max >= eof
        # No integer dtype of fewer bytes holds it.
        smaller = [np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.int32)
                   if np.dtype(t).itemsize < dtype.itemsize]
        assert all(np.iinfo(t).max < eof for t in smaller)
    with pytest.raises(ParameterError):
        token_dtype(5)
    with pytest.raises(ParameterError):
        RawFiles([], 0)


@pytest.mark.parametrize("n_bytes", N_BYTES)
def test_every_file_reads_as_frombuffer_of_its_bytes(files, n_bytes):
    raw = RawFiles(files, n_bytes)
    assert raw.dtype == token_dtype(n_bytes)
    for i, path in enumerate(files):
        data = open(path, "rb").read()
        expected = reference_sequence(data, n_bytes)
        assert raw.sequence_lengths[i] == len(expected) == -(-len(data) // n_bytes) + 1
        got = raw.sequence(i)
        assert got.dtype == raw.dtype
        np.testing.assert_array_equal(got.astype(np.int64), expected)
    assert raw.num_tokens == sum(len(reference_sequence(open(p, "rb").read(), n_bytes)) for p in files)
    assert raw.sequence_lengths.dtype == np.int32


@pytest.mark.parametrize("path", LOCAL_READ_WAYS)
@pytest.mark.parametrize("n_bytes", N_BYTES)
def test_read_pieces_matches_slices_of_the_reference(files, n_bytes, path, monkeypatch):
    use_local_read_way(path, monkeypatch)
    raw = RawFiles(files, n_bytes)
    sequences = [reference_sequence(open(p, "rb").read(), n_bytes) for p in files]
    rng = np.random.default_rng(n_bytes)
    ids = rng.integers(0, len(files), 300)
    lengths_of = np.array([len(s) for s in sequences])
    offsets = rng.integers(0, lengths_of[ids] + 1)
    lengths = rng.integers(0, lengths_of[ids] - offsets + 1)
    got = raw.read_pieces(ids, offsets, lengths)
    expected = np.concatenate([sequences[i][o:o + n] for i, o, n in zip(ids, offsets, lengths)])
    np.testing.assert_array_equal(got.astype(np.int64), expected)
    out = np.empty(len(expected), raw.dtype)
    assert raw.read_pieces(ids, offsets, lengths, out=out) is out


def test_read_pieces_refuses_pieces_outside_a_file(files):
    raw = RawFiles(files, 2)
    length = int(raw.sequence_lengths[3])
    with pytest.raises(ParameterError, match="file03"):
        raw.read_pieces([3], [1], [length])
    with pytest.raises(ParameterError):
        raw.read_pieces([len(files)], [0], [1])
    with pytest.raises(ParameterError):
        raw.read_pieces([0], [-1], [1])


@pytest.mark.parametrize("n_bytes", (1, 3))
def test_opener_reads_the_same_tokens_and_pickles(files, n_bytes):
    mapped = RawFiles(files, n_bytes)
    ranged = pickle.loads(pickle.dumps(RawFiles(files, n_bytes, opener=open)))
    for i in range(len(files)):
        np.testing.assert_array_equal(ranged.sequence(i), mapped.sequence(i))
    again = pickle.loads(pickle.dumps(mapped))
    np.testing.assert_array_equal(again.sequence(7), mapped.sequence(7))


def test_a_file_too_long_for_int32_lengths_is_refused(files):
    with pytest.raises(FormatError, match="file00"):
        RawFiles(files[:1], 1, sizes=[2**31])


@pytest.mark.parametrize("n_bytes", N_BYTES)
def test_raw_files_read_like_an_indexed_file_of_the_same_documents(tmp_path, files, n_bytes):
    """Concat style is sampling over documents 'file tokens + EOF': the raw source must
    answer every piece exactly as a .bin/.idx holding those documents does."""
    raw = RawFiles(files, n_bytes)
    with IndexedFileWriter(tmp_path / "same", dtype=raw.dtype) as writer:
        for p in files:
            writer.add_document(reference_sequence(open(p, "rb").read(), n_bytes))
    indexed = IndexedFile.open(tmp_path / "same")
    np.testing.assert_array_equal(raw.sequence_lengths, indexed.sequence_lengths)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, len(files), 200)
    offsets = rng.integers(0, raw.sequence_lengths[ids])
    lengths = rng.integers(0, raw.sequence_lengths[ids] - offsets + 1)
    np.testing.assert_array_equal(raw.read_pieces(ids, offsets, lengths), indexed.read_pieces(ids, offsets, lengths))


def test_concat_style_samples_as_the_indexed_file_would(tmp_path, files):
    from mmidx_builder.megatron import sampling
    if not hasattr(sampling, "build_indices") or not hasattr(sampling, "assemble_samples"):
        pytest.skip("sampling.build_indices / assemble_samples not there yet")
    raw = RawFiles(files, 2)
    with IndexedFileWriter(tmp_path / "same", dtype=raw.dtype) as writer:
        for i in range(len(files)):
            writer.add_document(raw.sequence(i))
    indexed = IndexedFile.open(tmp_path / "same")
    indices = sampling.build_indices(raw.sequence_lengths, seq_length=37, seed=5, num_epochs=2)
    indices_again = sampling.build_indices(indexed.sequence_lengths, seq_length=37, seed=5, num_epochs=2)
    count = sampling.count_samples(raw.num_tokens, seq_length=37, num_epochs=2)[1]
    ids = np.arange(count)
    np.testing.assert_array_equal(sampling.assemble_samples(raw, indices, ids),
                                  sampling.assemble_samples(indexed, indices_again, ids))


@pytest.mark.parametrize("n_bytes", N_BYTES)
@pytest.mark.parametrize("seq_length", (1, 4, 64))
def test_diff_style_cuts_each_file_into_eof_padded_chunks(files, n_bytes, seq_length):
    raw = RawFiles(files, n_bytes)
    file_ids, offsets = diff_chunks(raw, seq_length)
    samples = diff_samples(raw, file_ids, offsets, seq_length)
    eof = eof_id(n_bytes)
    expected_rows, expected_files = [], []
    for i, p in enumerate(files):
        sequence = reference_sequence(open(p, "rb").read(), n_bytes)
        chunks = -(-len(sequence) // seq_length)
        padded = np.full(chunks * seq_length, eof, np.int64)
        padded[:len(sequence)] = sequence
        expected_rows.append(padded.reshape(chunks, seq_length))
        expected_files += [i] * chunks
    assert samples.dtype == raw.dtype
    np.testing.assert_array_equal(samples.astype(np.int64), np.concatenate(expected_rows))
    np.testing.assert_array_equal(file_ids, expected_files)
    # Every file ends inside its last chunk, with at least one EOF.
    last = np.flatnonzero(np.diff(np.append(file_ids, -1)))
    assert (samples[last, -1] == eof).all()
    with pytest.raises(ParameterError):
        diff_chunks(raw, 0)


def test_labels_from_class_folders(tmp_path):
    paths = []
    for name in ("dog", "cat", "cat", "bird"):
        folder = tmp_path / "data" / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{len(paths)}.bin"
        path.write_bytes(b"x")
        paths.append(str(path))
    names, ids = labels_for(paths)
    assert names == ["bird", "cat", "dog"]
    assert [names[i] for i in ids] == ["dog", "cat", "cat", "bird"]
    # imagefolder's rule: one folder, or files at different depths, carry no labels.
    assert labels_for(paths[1:3]) is None
    assert labels_for(paths[:2] + [str(tmp_path / "data" / "loose.bin")]) is None


@pytest.mark.parametrize("kind", ("csv", "jsonl"))
def test_labels_from_a_metadata_file(tmp_path, kind):
    rows = [("a.bin", "spam"), ("sub/b.bin", "ham"), ("c.bin", "spam")]
    for name, _ in rows:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"\x01\x02")
    metadata = tmp_path / f"metadata.{kind}"
    if kind == "csv":
        metadata.write_text("file_name,label\n" + "".join(f"{n},{label}\n" for n, label in rows))
    else:
        metadata.write_text("".join(json.dumps({"file_name": n, "label": label}) + "\n" for n, label in rows))
    paths = [str(tmp_path / n) for n, _ in rows]
    names, ids = labels_for(paths, metadata)
    assert names == ["ham", "spam"]
    assert [names[i] for i in ids] == ["spam", "ham", "spam"]
    stray = tmp_path / "d.bin"
    stray.write_bytes(b"")
    with pytest.raises(FormatError, match="metadata"):
        labels_for(paths + [str(stray)], metadata)


def test_metadata_errors_name_the_file_and_line(tmp_path):
    metadata = tmp_path / "metadata.jsonl"
    metadata.write_text('{"file_name": "a.bin", "label": 1}\n{"file_name": "b.bin"}\n')
    with pytest.raises(FormatError, match=r"metadata\.jsonl: line 2"):
        labels_for([str(tmp_path / "a.bin")], metadata)
    metadata.write_text('{"file_name": "a.bin", "label": 1}\nnot json\n')
    with pytest.raises(FormatError, match="line 2"):
        labels_for([str(tmp_path / "a.bin")], metadata)


def test_integer_labels_sort_as_numbers(tmp_path):
    metadata = tmp_path / "metadata.csv"
    metadata.write_text("file_name,label\na,10\nb,2\n")
    names, ids = labels_for([str(tmp_path / "a"), str(tmp_path / "b")], metadata)
    assert names == ["2", "10"] and ids.tolist() == [1, 0]


