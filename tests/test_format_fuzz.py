"""A bounded, seeded fuzz of the ``.idx`` reader against an independent reading of the spec.

Valid pairs of both flavours and every dtype code are written here from the spec
(shared/FORMAT.md), not by the package's writer, then damaged: bit flips, truncations and
trailing garbage, huge sequence and document counts, bad pointers and lengths, every dtype
code, a ``.bin`` of the wrong size. For each file, :func:`spec_read` (plain ``struct``, no
numpy, written from the spec) decides whether the pair is valid and what it holds; the
reader must agree: a valid pair opens and reads exactly those bytes, an invalid one raises
``FormatError`` and nothing else (no other exception, no hang, no crash). ~2,000 files in a
few seconds; the seed is fixed so a failure reproduces.
"""

from __future__ import annotations

import struct

import numpy as np

from mmidx_builder.errors import FormatError
from mmidx_builder.sources.indexed import IndexedFile
from test_format_corruption import no_hang  # noqa: F401  (autouse: a validation that loops fails, not hangs)

MAGIC = b"MMIDIDX\x00\x00"
# Item sizes by dtype code, from the spec (fairseq's 7 is numpy.float, i.e. float64).
ITEMSIZES = {"megatron": {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2},
             "fairseq": {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 8, 8: 2, 9: 4, 10: 8}}
CASES = 2000


def spec_idx(flavour: str, code: int, lengths: list[int], documents: list[int] | None, itemsize: int,
             modes: bytes = b"") -> bytes:
    pointers, position = [], 0
    for length in lengths:
        pointers.append(position)
        position += length * itemsize
    out = MAGIC + struct.pack("<QBQ", 1, code, len(lengths))
    if flavour == "megatron":
        out += struct.pack("<Q", len(documents))
    out += struct.pack(f"<{len(lengths)}i", *lengths) + struct.pack(f"<{len(pointers)}q", *pointers)
    if flavour == "megatron":
        out += struct.pack(f"<{len(documents)}q", *documents) + modes
    return out


def spec_read(idx: bytes, bin_size: int):
    """(flavour, itemsize, [(byte offset, byte length)] per sequence, document bounds), or
    None when the spec says the pair is invalid."""
    if len(idx) < 26 or idx[:9] != MAGIC:
        return None
    version, code, n = struct.unpack_from("<QBQ", idx, 9)
    if version != 1:
        return None
    if len(idx) == 26 + 12 * n:
        flavour, documents_count, body = "fairseq", None, 26
    elif len(idx) >= 34:
        (documents_count,) = struct.unpack_from("<Q", idx, 26)
        size = 34 + 12 * n + 8 * documents_count
        if len(idx) not in (size, size + n):
            return None
        flavour, body = "megatron", 34
    else:
        return None
    itemsize = ITEMSIZES[flavour].get(code)
    if itemsize is None:
        return None
    lengths = struct.unpack_from(f"<{n}i", idx, body)
    pointers = struct.unpack_from(f"<{n}q", idx, body + 4 * n)
    position, pieces = 0, []
    for length, pointer in zip(lengths, pointers):
        if length < 0 or pointer != position:
            return None
        pieces.append((pointer, length * itemsize))
        position += length * itemsize
    if position != bin_size:
        return None
    if flavour == "fairseq":
        return flavour, itemsize, pieces, list(range(n + 1))
    documents = list(struct.unpack_from(f"<{documents_count}q", idx, body + 12 * n))
    if not documents or documents[0] != 0 or documents[-1] != n:
        return None
    if any(b < a for a, b in zip(documents, documents[1:])):
        return None
    return flavour, itemsize, pieces, documents


def valid_pair(rng: np.random.Generator):
    flavour = ("megatron", "fairseq")[rng.integers(2)]
    code = int(rng.choice(sorted(ITEMSIZES[flavour])))
    itemsize = ITEMSIZES[flavour][code]
    lengths = [int(x) for x in rng.integers(0, 6, rng.integers(0, 9))]
    documents = None
    if flavour == "megatron":
        cuts = sorted(int(x) for x in rng.integers(0, len(lengths) + 1, rng.integers(0, 4)))
        documents = [0] + cuts + [len(lengths)]
    modes = bytes(rng.integers(0, 3, len(lengths)).astype(np.uint8)) if flavour == "megatron" and rng.random() < 0.2 else b""
    idx = spec_idx(flavour, code, lengths, documents, itemsize, modes)
    data = rng.integers(0, 256, sum(lengths) * itemsize, dtype=np.uint8).tobytes()
    return bytearray(idx), bytearray(data)


def pick(rng: np.random.Generator, values: list[int]) -> int:
    return values[int(rng.integers(len(values)))]  # Python ints: numpy would round 2**64 - 1


def damage(rng: np.random.Generator, idx: bytearray, data: bytearray) -> tuple[bytes, bytes]:
    kind = rng.integers(9)
    n = struct.unpack_from("<Q", idx, 18)[0]
    if kind == 0 and idx:  # bit flips
        for _ in range(rng.integers(1, 4)):
            position = int(rng.integers(len(idx)))
            idx[position] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # truncation
        del idx[int(rng.integers(len(idx) + 1)):]
    elif kind == 2:  # trailing garbage
        idx += rng.integers(0, 256, rng.integers(1, 20), dtype=np.uint8).tobytes()
    elif kind == 3:  # huge sequence count
        struct.pack_into("<Q", idx, 18, pick(rng, [2**63 - 1, 2**64 - 1, 2**40, 2**31, n + 1]))
    elif kind == 4 and len(idx) >= 34:  # huge or wrong document count
        struct.pack_into("<Q", idx, 26, pick(rng, [0, 1, 2**63, 2**64 - 1, 2**33]))
    elif kind == 5 and n:  # a bad pointer
        struct.pack_into("<q", idx, 26 + (8 if len(idx) != 26 + 12 * n else 0) + 4 * n + 8 * int(rng.integers(n)),
                         pick(rng, [-1, 1, 2**62, -(2**63), 3]))
    elif kind == 6 and n:  # a bad length
        struct.pack_into("<i", idx, 26 + (8 if len(idx) != 26 + 12 * n else 0) + 4 * int(rng.integers(n)),
                         pick(rng, [-1, 2**31 - 1, -(2**31), 1]))
    elif kind == 7:  # every dtype code, and beyond
        idx[17] = int(rng.integers(0, 256)) if rng.random() < 0.3 else int(rng.integers(0, 12))
    elif kind == 8:  # a .bin of another size
        if data and rng.random() < 0.5:
            del data[int(rng.integers(len(data))):]
        else:
            data += b"\x00" * int(rng.integers(1, 9))
    return bytes(idx), bytes(data)


def test_the_idx_reader_agrees_with_the_spec_on_damaged_files(tmp_path):
    rng = np.random.default_rng(2025)
    prefix = tmp_path / "fuzz"
    opened = refused = 0
    for case in range(CASES):
        idx, data = valid_pair(rng)
        if case % 8:  # one in eight stays valid
            idx, data = damage(rng, idx, data)
        (tmp_path / "fuzz.idx").write_bytes(bytes(idx))
        (tmp_path / "fuzz.bin").write_bytes(bytes(data))
        expected = spec_read(bytes(idx), len(data))
        try:
            indexed = IndexedFile.open(prefix)
        except FormatError:
            assert expected is None, f"case {case}: a valid pair was refused"
            refused += 1
            continue
        assert expected is not None, f"case {case}: an invalid pair opened"
        flavour, itemsize, pieces, documents = expected
        assert indexed.flavour.value == flavour and indexed.dtype.itemsize == itemsize
        assert indexed.document_indices.tolist() == documents
        for i, (offset, size) in enumerate(pieces):
            assert indexed.sequence(i).tobytes() == bytes(data[offset:offset + size]), f"case {case}, sequence {i}"
        for d in range(len(documents) - 1):
            first, last = documents[d], documents[d + 1]
            begin = pieces[first][0] if first < len(pieces) else len(data)
            end = pieces[last][0] if last < len(pieces) else len(data)
            assert indexed.document(d).tobytes() == bytes(data[begin:end]), f"case {case}, document {d}"
        opened += 1
        del indexed
    assert opened > CASES // 10 and refused > CASES // 2  # both sides were exercised
