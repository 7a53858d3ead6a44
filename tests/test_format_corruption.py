"""Damaged .bin/.idx pairs: every variant raises FormatError (or a subclass), nothing else.

Valid files are written by the package's writer, then damaged field by field with
``struct.pack_into``, truncated, extended or deleted. Offsets come from the spec
(shared/FORMAT.md), not from format.py. Where damage can leave a valid file (a byte flip
in the document index may give another valid index), the test accepts a clean open but
then checks that every read stays inside the files.
"""

from __future__ import annotations

import os
import signal
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mmidx_builder.errors import FormatError, MissingPartnerError, MMIdxError, ParameterError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

# Spec offsets.
VERSION_AT, CODE_AT, COUNT_AT, DOCUMENT_COUNT_AT = 9, 17, 18, 26
MEGATRON_HEADER, FAIRSEQ_HEADER = 34, 26

# Documents as lists of sequences: an empty document, an empty sequence, a document of
# three sequences, and a last sequence that is not empty (so that no truncation of the
# Megatron index happens to spell a valid fairseq index).
DOCUMENTS = [[[1, 2, 3]], [], [[4, 5], [], [6, 7, 8, 9]], [[10]], [[11, 12, 13, 14, 15], [16, 17]]]
N = sum(len(d) for d in DOCUMENTS)          # 7 sequences
D = len(DOCUMENTS) + 1                      # 6 document index entries
LENGTHS_AT = MEGATRON_HEADER
POINTERS_AT = LENGTHS_AT + 4 * N
DOCUMENTS_AT = POINTERS_AT + 8 * N
IDX_SIZE = DOCUMENTS_AT + 8 * D


@pytest.fixture(autouse=True)
def no_hang():
    """A guard, not a timing assertion: a validation that loops forever fails instead of hanging."""
    def on_alarm(signum, frame):
        raise TimeoutError("a corrupt-file test did not finish within 60 s")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def write_valid(prefix, flavour="megatron", dtype=np.uint16) -> str:
    with IndexedFileWriter(prefix, dtype=dtype, flavour=flavour) as writer:
        for document in DOCUMENTS:
            for sequence in document:
                writer.add_sequence(sequence)
            writer.end_document()
    return str(prefix)


@pytest.fixture
def pair(tmp_path):
    prefix = write_valid(tmp_path / "corpus")
    assert os.path.getsize(prefix + ".idx") == IDX_SIZE
    return prefix


def patch(path, fmt, offset, *values):
    data = bytearray(open(path, "rb").read())
    struct.pack_into(fmt, data, offset, *values)
    with open(path, "wb") as f:
        f.write(data)


def truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def append(path, data: bytes):
    with open(path, "ab") as f:
        f.write(data)


def expect_format_error(prefix, *, file_suffix=".idx", field=None) -> FormatError:
    """Opens ``prefix``; it must raise FormatError naming the damaged file (and field)."""
    with pytest.raises(FormatError) as caught:
        IndexedFile.open(prefix)
    message = str(caught.value)
    assert os.path.basename(prefix) + file_suffix in message, message
    if field is not None:
        assert field in message, message
    assert "expected" in message and "found" in message, message
    return caught.value


def assert_reads_stay_inside(indexed: IndexedFile):
    """An index that opened cleanly: every sequence and document lies inside the .bin."""
    bin_tokens = indexed.bin_size // indexed.dtype.itemsize
    ends = indexed.sequence_starts[:-1] + indexed.sequence_lengths
    assert (indexed.sequence_starts[:-1] >= 0).all() and (ends <= bin_tokens).all()
    assert indexed.num_tokens * indexed.dtype.itemsize == indexed.bin_size
    for i in range(indexed.num_sequences):
        assert indexed.sequence(i).size == indexed.sequence_lengths[i]
    assert indexed.document_lengths().sum() == indexed.num_tokens
    for d in range(indexed.num_documents):
        indexed.document(d)


# --- header fields --------------------------------------------------------------------------

@pytest.mark.parametrize("position", range(9))
def test_bad_magic(pair, position):
    data = bytearray(open(pair + ".idx", "rb").read())
    data[position] ^= 0x20
    open(pair + ".idx", "wb").write(data)
    expect_format_error(pair, field="magic")


@pytest.mark.parametrize("version", [0, 2, 2**32, 2**64 - 1])
def test_unknown_version(pair, version):
    patch(pair + ".idx", "<Q", VERSION_AT, version)
    error = expect_format_error(pair, field="version")
    assert error.offset == VERSION_AT


@pytest.mark.parametrize("code", [0, 9, 10, 11, 200, 255])
def test_unknown_megatron_dtype_code(pair, code):
    # 9 and 10 exist only in fairseq's table; this index is Megatron's flavour.
    patch(pair + ".idx", "<B", CODE_AT, code)
    error = expect_format_error(pair, field="dtype code")
    assert error.offset == CODE_AT


@pytest.mark.parametrize("code", [0, 11, 255])
def test_unknown_fairseq_dtype_code(tmp_path, code):
    prefix = write_valid(tmp_path / "fs", flavour="fairseq")
    patch(prefix + ".idx", "<B", CODE_AT, code)
    expect_format_error(prefix, field="dtype code")


def test_dtype_code_with_another_itemsize(pair):
    patch(pair + ".idx", "<B", CODE_AT, 4)  # int32: the pointers are 2-byte steps, not 4
    expect_format_error(pair, field="sequence_pointers")


@pytest.mark.parametrize("count", [0, N - 1, N + 1, 2**31, 2**61, 2**63, 2**64 - 1])
def test_wrong_sequence_count(pair, count):
    patch(pair + ".idx", "<Q", COUNT_AT, count)
    expect_format_error(pair, field="file size")


@pytest.mark.parametrize("count", [0, D - 1, D + 1, 2**61, 2**64 - 1])
def test_wrong_document_count(pair, count):
    patch(pair + ".idx", "<Q", DOCUMENT_COUNT_AT, count)
    expect_format_error(pair, field="file size")


def test_huge_counts_that_agree_with_each_other(tmp_path):
    # N and D chosen so that 34 + 12N + 8D wraps around 2**64 to the real size: a reader
    # that computes the size in uint64 would accept it.
    prefix = write_valid(tmp_path / "wrap")
    n = 2**62 + 1
    d = (IDX_SIZE - MEGATRON_HEADER - 12 * n) % 2**64 // 8
    assert (MEGATRON_HEADER + 12 * n + 8 * d) % 2**64 == IDX_SIZE
    patch(prefix + ".idx", "<QQ", COUNT_AT, n, d)
    expect_format_error(prefix, field="file size")


def test_document_count_zero(tmp_path):
    # A consistent size (no document index at all) but D must be at least 1.
    prefix = write_valid(tmp_path / "d0")
    patch(prefix + ".idx", "<Q", DOCUMENT_COUNT_AT, 0)
    truncate(prefix + ".idx", DOCUMENTS_AT)
    expect_format_error(prefix, field="document count")


# --- truncation and extension ---------------------------------------------------------------

@pytest.mark.parametrize("flavour", ["megatron", "fairseq"])
def test_idx_truncated_at_every_byte(tmp_path, flavour):
    prefix = write_valid(tmp_path / "t", flavour=flavour)
    original = open(prefix + ".idx", "rb").read()
    for size in range(len(original)):
        with open(prefix + ".idx", "wb") as f:
            f.write(original[:size])
        error = expect_format_error(prefix)
        # At 26 + 12N bytes a truncated Megatron index has the fairseq flavour's size; its
        # "lengths" then start with D, so the pointer check is what refuses it.
        if not (flavour == "megatron" and size == FAIRSEQ_HEADER + 12 * N):
            assert error.field in ("header", "file size"), (size, str(error))


@pytest.mark.parametrize("size", range(FAIRSEQ_HEADER, MEGATRON_HEADER))
def test_a_megatron_idx_cut_inside_its_header_is_called_so(pair, size):
    """Issue 40 item 3: cut at 26-33 bytes, the document count is gone and the only size on
    offer was the fairseq flavour's ("expected 140 bytes (fairseq flavour, N=7)")."""
    truncate(pair + ".idx", size)
    error = expect_format_error(pair, field="file size")
    said = str(error)
    assert f"a Megatron .idx cut at {size} bytes, inside its {MEGATRON_HEADER}-byte header" in said, said
    assert f"at least {MEGATRON_HEADER} bytes (Megatron flavour" in said, said


@pytest.mark.parametrize("extra", [1, 8, N - 1, N + 1, 8 * D])
def test_idx_with_trailing_bytes(pair, extra):
    # N extra bytes read as a multimodal file's modes; other amounts are wrong sizes.
    append(pair + ".idx", b"\x00" * extra)
    expect_format_error(pair, field="file size")


@pytest.mark.parametrize("size_in_bytes", [0, 1, 2, 3, 15, 16, 17, 29])
def test_bin_too_short(pair, size_in_bytes):
    assert os.path.getsize(pair + ".bin") == 17 * 2
    truncate(pair + ".bin", size_in_bytes)
    error = expect_format_error(pair, file_suffix=".bin", field="file size")
    assert "34 bytes" in str(error)


@pytest.mark.parametrize("extra", [1, 2, 4096])
def test_bin_too_long(pair, extra):
    append(pair + ".bin", b"\x01" * extra)
    expect_format_error(pair, file_suffix=".bin", field="file size")


def test_empty_files(tmp_path):
    prefix = str(tmp_path / "empty")
    open(prefix + ".idx", "wb").close()
    open(prefix + ".bin", "wb").close()
    error = expect_format_error(prefix, field="header")
    assert error.offset == 0
    valid = write_valid(tmp_path / "v")
    truncate(valid + ".bin", 0)
    expect_format_error(valid, file_suffix=".bin", field="file size")


@pytest.mark.parametrize("remove", [".bin", ".idx", "both"])
def test_missing_partner(pair, remove):
    for suffix in ((".bin", ".idx") if remove == "both" else (remove,)):
        os.remove(pair + suffix)
    with pytest.raises(MissingPartnerError) as caught:
        IndexedFile.open(pair)
    assert isinstance(caught.value, FormatError)
    missing = ".bin" if remove == "both" else remove
    assert os.path.basename(pair) + missing in str(caught.value)


def test_idx_that_is_a_directory(tmp_path):
    write_valid(tmp_path / "dir")
    os.remove(tmp_path / "dir.idx")
    os.mkdir(tmp_path / "dir.idx")
    with pytest.raises(MissingPartnerError):
        IndexedFile.open(tmp_path / "dir")


# --- sequence lengths and pointers ----------------------------------------------------------

def test_negative_length(pair):
    patch(pair + ".idx", "<i", LENGTHS_AT + 4 * 2, -2)
    error = expect_format_error(pair, field="sequence_lengths[2]")
    assert error.offset == LENGTHS_AT + 8


@pytest.mark.parametrize("length", [2**31 - 1, 5, 0])
def test_length_that_does_not_match_the_pointer_step(pair, length):
    patch(pair + ".idx", "<i", LENGTHS_AT + 4 * 3, length)  # sequence 3 holds 4 tokens
    expect_format_error(pair, field="sequence_pointers[4]")


def test_last_length_too_long_for_the_bin(pair):
    patch(pair + ".idx", "<i", LENGTHS_AT + 4 * (N - 1), 2**31 - 1)
    expect_format_error(pair, file_suffix=".bin", field="file size")


def test_swapped_pointers(pair):
    data = bytearray(open(pair + ".idx", "rb").read())
    a, b = POINTERS_AT + 8 * 1, POINTERS_AT + 8 * 3
    data[a:a + 8], data[b:b + 8] = data[b:b + 8], data[a:a + 8]
    open(pair + ".idx", "wb").write(data)
    error = expect_format_error(pair, field="sequence_pointers[1]")
    assert error.offset == POINTERS_AT + 8


@pytest.mark.parametrize("index,pointer", [(0, 2), (0, -2), (3, 1), (N - 1, 2**40), (N - 1, -(2**63)), (2, 2**63 - 1)])
def test_bad_pointer(pair, index, pointer):
    patch(pair + ".idx", "<q", POINTERS_AT + 8 * index, pointer)
    error = expect_format_error(pair, field=f"sequence_pointers[{index}]")
    assert error.offset == POINTERS_AT + 8 * index


def test_pointers_that_are_not_increasing(pair):
    pointers = list(struct.unpack_from(f"<{N}q", open(pair + ".idx", "rb").read(), POINTERS_AT))
    patch(pair + ".idx", f"<{N}q", POINTERS_AT, *sorted(pointers, reverse=True))
    expect_format_error(pair, field="sequence_pointers[0]")


def first_off_by_definition(pointers, lengths, start, itemsize):
    """The first pointer that is not its running byte offset, summed in Python integers and
    compared in int64 (as the file holds them), or None."""
    offset = start
    for k, (pointer, length) in enumerate(zip(pointers.tolist(), lengths.tolist())):
        if pointer != (offset + 2**63) % 2**64 - 2**63:
            return k
        offset += length * itemsize
    return None


@settings(max_examples=300, deadline=None)
@given(lengths=st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=40), itemsize=st.sampled_from([1, 2, 4, 8]),
       start=st.integers(0, 2**40), data=st.data())
def test_the_pointer_check_finds_the_first_pointer_off_its_running_offset(lengths, itemsize, start, data):
    """The check by steps (indexed.py) against the running sum, on damage of every kind:
    pointers shifted, swapped, or set to int64's extremes, where a step wraps around."""
    from mmidx_builder.sources.indexed import _first_off_running_offsets

    lengths = np.array(lengths, np.int32)
    pointers = (start + itemsize * (np.cumsum(lengths, dtype=np.int64) - lengths)).astype(np.int64)
    for _ in range(data.draw(st.integers(0, 3))):
        k = data.draw(st.integers(0, len(pointers) - 1))
        value = data.draw(st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from(
            [-(2**63), 2**63 - 1, int(pointers[k]) + 1, int(pointers[k]) - itemsize, 0])))
        pointers[k] = (value + 2**63) % 2**64 - 2**63  # as int64 holds it
    assert _first_off_running_offsets(pointers, lengths, start, itemsize) == \
        first_off_by_definition(pointers, lengths, start, itemsize)


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4, 5, N - 1])
def test_a_bad_pointer_is_found_on_either_side_of_a_chunk_boundary(pair, index, monkeypatch):
    """The index is checked a chunk at a time, each chunk's first pointer against the tokens
    before it: chunks of 3 sequences put boundaries after sequences 2 and 5."""
    from mmidx_builder.sources import indexed as module

    monkeypatch.setattr(module, "_VALIDATE_CHUNK", 3)
    lengths = struct.unpack_from(f"<{N}i", open(pair + ".idx", "rb").read(), LENGTHS_AT)
    right = 2 * sum(lengths[:index])  # uint16 tokens
    patch(pair + ".idx", "<q", POINTERS_AT + 8 * index, right + 2)
    error = expect_format_error(pair, field=f"sequence_pointers[{index}]")
    assert (error.expected, error.found, error.offset) == (right, right + 2, POINTERS_AT + 8 * index)
    assert IndexedFile.open(write_valid(os.path.dirname(pair) + "/intact")).num_sequences == N


# --- document index -------------------------------------------------------------------------

@pytest.mark.parametrize("position,value,field", [
    (0, 1, "document_indices[0]"),              # does not start at 0
    (0, -1, "document_indices[0]"),
    (2, 0, "document_indices[2]"),              # 1 -> 0 after 1: not increasing
    (3, 2**62, "document_indices[4]"),          # out of range; the next entry is then lower
    (D - 1, N + 1, f"document_indices[{D - 1}]"),  # last is not N
    (D - 1, N - 1, f"document_indices[{D - 1}]"),
    (D - 1, -(2**63), f"document_indices[{D - 1}]"),
])
def test_bad_document_index(pair, position, value, field):
    patch(pair + ".idx", "<q", DOCUMENTS_AT + 8 * position, value)
    error = expect_format_error(pair, field=field)
    assert error.offset == DOCUMENTS_AT + 8 * int(field.split("[")[1].rstrip("]"))


def test_a_damaged_document_index_that_stays_valid_is_read_safely(pair):
    # [0, 1, 1, 4, 5, 7] -> [0, 1, 2, 4, 5, 7] is another valid index (a different split
    # of the same sequences); it must open and read inside the files.
    patch(pair + ".idx", "<q", DOCUMENTS_AT + 8 * 2, 2)
    indexed = IndexedFile.open(pair)
    assert indexed.document_indices.tolist() == [0, 1, 2, 4, 5, 7]
    assert_reads_stay_inside(indexed)


# --- random damage --------------------------------------------------------------------------

def _open_or_format_error(prefix):
    try:
        indexed = IndexedFile.open(prefix)
    except FormatError as error:
        assert os.path.basename(prefix) in str(error)
        return None
    assert_reads_stay_inside(indexed)
    return indexed


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.integers(0, IDX_SIZE - 1), st.integers(1, 255)), min_size=1, max_size=4),
       flavour=st.sampled_from(["megatron", "fairseq"]))
def test_random_byte_flips_in_the_idx(tmp_path, flips, flavour):
    prefix = write_valid(tmp_path / f"flip-{flavour}", flavour=flavour)
    data = bytearray(open(prefix + ".idx", "rb").read())
    for position, mask in flips:
        data[position % len(data)] ^= mask
    open(prefix + ".idx", "wb").write(data)
    _open_or_format_error(prefix)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keep=st.integers(0, IDX_SIZE), garbage=st.binary(max_size=64), bin_keep=st.integers(0, 40))
def test_random_truncation_and_garbage(tmp_path, keep, garbage, bin_keep):
    prefix = write_valid(tmp_path / "garbage")
    data = open(prefix + ".idx", "rb").read()[:keep] + garbage
    open(prefix + ".idx", "wb").write(data)
    truncate(prefix + ".bin", min(bin_keep, 34))
    _open_or_format_error(prefix)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.binary(min_size=18, max_size=18), counts=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
       body=st.binary(max_size=200))
def test_arbitrary_idx_after_the_magic(tmp_path, header, counts, body):
    # Any bytes at all after a right magic: counts anywhere in the u64 range.
    prefix = str(tmp_path / "arbitrary")
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QB", 1, header[0] % 12) + struct.pack("<QQ", *counts) + body)
    with open(prefix + ".bin", "wb") as f:
        f.write(bytes(range(64)))
    _open_or_format_error(prefix)


# --- errors outside opening -----------------------------------------------------------------

def test_errors_belong_to_the_package(pair):
    truncate(pair + ".idx", 20)
    with pytest.raises(MMIdxError):
        IndexedFile.open(pair)


def test_read_pieces_out_of_range_is_a_parameter_error(tmp_path):
    indexed = IndexedFile.open(write_valid(tmp_path / "ok"))
    for ids, offsets, lengths in (([N], [0], [0]), ([0], [3], [1]), ([2], [0], [1]), ([0], [0], [-1])):
        with pytest.raises(ParameterError):
            indexed.read_pieces(ids, offsets, lengths)


def test_file_changed_under_a_remote_reader(tmp_path):
    # Ranged reads (opener given) notice a .bin that shrank after validation.
    prefix = write_valid(tmp_path / "remote")
    indexed = IndexedFile.open(prefix, opener=open)
    truncate(prefix + ".bin", 4)
    with pytest.raises(FormatError, match="remote.bin"):
        indexed.sequence(5)
