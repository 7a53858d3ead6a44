"""MDS column encodings, as ``mosaicml-streaming`` 0.13 writes them (``streaming/base/format/mds/
encodings.py``, ``_encodings``): what each name means in bytes, its fixed size if it has one,
and whether reading it runs code.

    encoding                      bytes of one value                                 kind
    bytes                         the bytes                                          BYTES
    str                           UTF-8                                              TEXT
    int                           int64, little-endian (8)                           SCALAR
    uint8 ... int64, float16/32/64  one numpy scalar                                 SCALAR
    ndarray[:DTYPE[:D0,D1,...]]   [dtype code: 1, unless DTYPE] [ndim << 2 | shape   NDARRAY
                                  width: 1, unless the shape] [shape] [values]
    str_int, str_float,           the number's digits, UTF-8                         TEXT_INT, TEXT_FLOAT,
    str_decimal                                                                      TEXT_DECIMAL
    json                          JSON text                                          JSON
    jpeg, png                     the image file                                     IMAGE
    pil                           [width u32] [height u32] [len(mode) u32] [mode] [raw pixels]   PIL
    list[jpeg], list[png],        [0 u32] [count u32] [size u32 each] [each value]   IMAGE_LIST, PIL_LIST
    list[pil]
    jpeg_array (jpegarray)        [count u32] [size u32 each] [each JPEG]            JPEG_ARRAY
    pkl                           a pickle: reading it runs code                     PICKLE

Every multi-byte number is in the writer's byte order, little-endian on every machine
MosaicML supports; they are read as little-endian here. A value of any encoding may also be
raw bytes of the right length (``mds_encode`` passes ``bytes`` through unchanged), which is
how older LLM Foundry versions stored token ids in a ``bytes`` column.

Composer's legacy format has no encodings: every field is bytes (its readers pass decoders).
This module imports numpy only.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError


class Kind(enum.Enum):
    BYTES = "bytes"
    TEXT = "str"
    SCALAR = "scalar"
    NDARRAY = "ndarray"
    TEXT_INT = "str_int"
    TEXT_FLOAT = "str_float"
    TEXT_DECIMAL = "str_decimal"
    JSON = "json"
    IMAGE = "image"
    PIL = "pil"
    IMAGE_LIST = "image list"
    PIL_LIST = "pil list"
    JPEG_ARRAY = "jpeg_array"
    PICKLE = "pkl"


# NDArray._int2value_dtype and _int2shape_dtype of streaming 0.13: the byte that names a value
# dtype when the encoding does not, and the width of the shape's integers (its low 2 bits).
NDARRAY_DTYPES = {8: "uint8", 9: "int8", 16: "uint16", 17: "int16", 18: "float16", 32: "uint32",
                  33: "int32", 34: "float32", 64: "uint64", 65: "int64", 66: "float64"}
DTYPE_CODES = {name: code for code, name in NDARRAY_DTYPES.items()}
SHAPE_DTYPES = {0: "<u1", 1: "<u2", 2: "<u4", 3: "<u8"}

_SCALARS = {"int": "<i8", "uint8": "<u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "int8": "<i1",
            "int16": "<i2", "int32": "<i4", "int64": "<i8", "float16": "<f2", "float32": "<f4", "float64": "<f8"}
_SIMPLE = {"bytes": Kind.BYTES, "str": Kind.TEXT, "str_int": Kind.TEXT_INT, "str_float": Kind.TEXT_FLOAT,
           "str_decimal": Kind.TEXT_DECIMAL, "json": Kind.JSON, "jpeg": Kind.IMAGE, "png": Kind.IMAGE,
           "pil": Kind.PIL, "list[jpeg]": Kind.IMAGE_LIST, "list[png]": Kind.IMAGE_LIST,
           "list[pil]": Kind.PIL_LIST, "jpeg_array": Kind.JPEG_ARRAY, "jpegarray": Kind.JPEG_ARRAY,
           "pkl": Kind.PICKLE}
# The names mosaicml-streaming 0.13 knows (get_mds_encodings()), for messages.
KNOWN = sorted([*_SCALARS, *_SIMPLE, "ndarray"])


@dataclass(frozen=True)
class Encoding:
    """One column's encoding. ``dtype``: a scalar's, or an ndarray's values' when the encoding
    names it; ``shape``: an ndarray's when the encoding names it."""

    text: str
    kind: Kind
    dtype: np.dtype | None = None
    shape: tuple[int, ...] | None = None

    @property
    def size(self) -> int | None:
        """Bytes of every value when fixed (the sample then stores no size for it), else None."""
        if self.kind is Kind.SCALAR:
            return self.dtype.itemsize
        if self.kind is Kind.NDARRAY and self.dtype is not None and self.shape is not None:
            return math.prod(self.shape) * self.dtype.itemsize
        return None

    @property
    def safe(self) -> bool:
        """False for ``pkl``, whose values are unpickled: reading one runs whatever code it holds."""
        return self.kind is not Kind.PICKLE


BYTES = Encoding("bytes", Kind.BYTES)


def parse_encoding(text, path: str, column: str) -> Encoding:
    """The encoding ``text`` of ``column`` in the index at ``path``; a FormatError naming both
    for a name mosaicml-streaming 0.13 does not write."""
    if not isinstance(text, str):
        raise FormatError(path, f"column {column!r} encoding", "a string such as 'ndarray:int32'", repr(text))
    if text in _SCALARS:
        return Encoding(text, Kind.SCALAR, np.dtype(_SCALARS[text]))
    if text in _SIMPLE:
        return Encoding(text, _SIMPLE[text])
    name, _, config = text.partition(":")
    if name != "ndarray":
        raise FormatError(path, f"column {column!r} encoding", f"one of {', '.join(KNOWN)} (mosaicml-streaming "
                          "0.13's encodings)", repr(text), hint="written by a newer writer or not an MDS index")
    return _ndarray(text, config, path, column)


def _ndarray(text: str, config: str, path: str, column: str) -> Encoding:
    """``ndarray``, ``ndarray:DTYPE`` or ``ndarray:DTYPE:D0,D1,...`` (NDArray.from_str)."""
    args = config.split(":") if config else []
    expected = "ndarray, ndarray:DTYPE or ndarray:DTYPE:D0,D1,... with DTYPE one of " + ", ".join(DTYPE_CODES)
    if len(args) > 2 or (args and args[0] not in DTYPE_CODES):
        raise FormatError(path, f"column {column!r} encoding", expected, repr(text))
    shape = None
    if len(args) == 2:
        try:
            shape = tuple(int(d) for d in args[1].split(","))
        except ValueError:
            raise FormatError(path, f"column {column!r} encoding", expected, repr(text)) from None
        if not shape or min(shape) < 1:
            raise FormatError(path, f"column {column!r} encoding", "dimensions of at least 1", repr(text))
    return Encoding(text, Kind.NDARRAY, np.dtype(args[0]).newbyteorder("<") if args else None, shape)


__all__ = ["BYTES", "DTYPE_CODES", "Encoding", "KNOWN", "Kind", "NDARRAY_DTYPES", "SHAPE_DTYPES", "parse_encoding"]
