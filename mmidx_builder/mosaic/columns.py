"""Samples' bytes decoded into columns, a batch at a time, in numpy.

A sample holds its columns one after another, after a header of sizes:

    MDS      [uint32 size of each variable-size column, in column order] [each column's bytes]
             (``MDSReader.decode_sample``; fixed-size columns store no size)
    legacy   [int64 size of every field] [each field's bytes]   (``bytes_to_sample_dict``)

Every sample's header is read at once and checked against the sample's length; then each
column of the batch becomes one of:

    Fixed(values)            scalars and fixed-shape ndarrays: an array of shape (rows, *shape)
    Ragged(offsets, values)  variable-size values: row k is values[offsets[k]:offsets[k + 1]]
                             (bytes of strings, JSON, images; the items of a 1-D ndarray)
    Nested(shapes, values)   ndarrays of 2 or more axes: each row's shape and its items, flat
    Objects(items)           what only Python can decode: pil images, image lists, pickles

The builder (hf/mmidx_mosaic.py) makes Arrow arrays of them. An ndarray column whose encoding
leaves out the dtype or the shape keeps one dtype and one number of axes (``NdarrayForm``,
learned from the stream's first sample): a sample that differs is a FormatError naming it,
since a column has one type.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, UnsafeEncodingError
from .encodings import DTYPE_CODES, NDARRAY_DTYPES, SHAPE_DTYPES, Encoding, Kind

# take_runs copies runs one by one (a slice copy each) from this mean length up; below it,
# one fancy index over every byte (8 bytes of index per byte, but no Python loop).
_LOOP_FROM = 256


@dataclass
class Fixed:
    values: np.ndarray


@dataclass
class Ragged:
    offsets: np.ndarray  # int64, rows + 1
    values: np.ndarray


@dataclass
class Nested:
    shapes: np.ndarray  # int64, (rows, ndim)
    values: np.ndarray


@dataclass
class Objects:
    items: list


@dataclass(frozen=True)
class NdarrayForm:
    """What an ndarray column's values are when its encoding leaves it open."""

    dtype: np.dtype
    ndim: int


@dataclass(frozen=True)
class Layout:
    """How a stream's samples hold their columns (see the module docstring)."""

    columns: tuple[str, ...]
    encodings: tuple[Encoding, ...]
    legacy: bool

    @property
    def size_dtype(self) -> np.dtype:
        return np.dtype("<i8") if self.legacy else np.dtype("<u4")

    @property
    def sized(self) -> list[int]:
        """The columns whose sizes the sample's header holds, in order."""
        return [i for i, e in enumerate(self.encodings) if self.legacy or e.size is None]

    @property
    def header_bytes(self) -> int:
        return len(self.sized) * self.size_dtype.itemsize


def take_runs(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The byte runs ``data[starts[k]:starts[k] + lengths[k]]``, one after another, as a new array."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    if total >= _LOOP_FROM * len(lengths):
        out = np.empty(total, np.uint8)
        position = 0
        for start, length in zip(starts.tolist(), lengths.tolist()):
            out[position:position + length] = data[start:start + length]
            position += length
        return out
    index = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    index += np.arange(total, dtype=np.int64)
    return data[index]


def column_spans(layout: Layout, data: np.ndarray, at: np.ndarray, lengths: np.ndarray, name) -> tuple:
    """``(starts, sizes)``: where each column of each sample lies in ``data`` (arrays of shape
    (rows, columns)). ``name(k)`` names sample k (its file and number) in errors."""
    rows, header = len(at), layout.header_bytes
    sizes = np.empty((rows, len(layout.columns)), np.int64)
    for i, encoding in enumerate(layout.encodings):
        if not layout.legacy and encoding.size is not None:
            sizes[:, i] = encoding.size
    short = np.flatnonzero(lengths < header)
    if len(short):
        k = int(short[0])
        raise FormatError(name(k), "sample header", f"at least {header} bytes (a size per sized column)",
                          f"a sample of {int(lengths[k])} bytes")
    if header:
        raw = data[at[:, None] + np.arange(header)]
        sizes[:, layout.sized] = raw.view(layout.size_dtype).reshape(rows, -1)
    ends = np.cumsum(sizes, axis=1)
    wrong = np.flatnonzero((sizes < 0).any(axis=1) | (ends[:, -1] + header != lengths))
    if len(wrong):
        k = int(wrong[0])
        raise FormatError(name(k), "column sizes", f"sizes adding up to the sample's {int(lengths[k]) - header} bytes "
                          "after its header", f"{dict(zip(layout.columns, sizes[k].tolist()))}")
    starts = at[:, None] + header + ends - sizes
    return starts, sizes


def decode_column(encoding: Encoding, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray, name,
                  form: NdarrayForm | None = None, allow_pickle: bool = False):
    """One column of a batch (its values at ``starts`` with ``sizes`` in ``data``) decoded as
    its encoding says; ``name(k)`` names row k in errors."""
    kind = encoding.kind
    if kind is Kind.SCALAR or (kind is Kind.NDARRAY and encoding.size is not None):
        values = take_runs(data, starts, sizes).view(encoding.dtype)
        return Fixed(values.reshape(len(starts), *(encoding.shape or ())))
    if kind is Kind.NDARRAY:
        return _ndarray(encoding, data, starts, sizes, name, form)
    if kind in (Kind.PIL, Kind.IMAGE_LIST, Kind.PIL_LIST, Kind.JPEG_ARRAY, Kind.PICKLE):
        if kind is Kind.PICKLE and not allow_pickle:
            raise UnsafeEncodingError(f"{name(0)}: a column encoded 'pkl' holds pickles, and unpickling runs whatever "
                                      "code the file's author put in them; pass allow_unsafe_types=True to read it "
                                      "if you trust the data (as StreamingDataset asks)")
        decode = _OBJECT_DECODERS[kind]
        items = []
        for k, (start, size) in enumerate(zip(starts.tolist(), sizes.tolist())):
            try:
                items.append(decode(data[start:start + size].tobytes()))
            except Exception as error:  # noqa: BLE001  the decoders' own errors, named
                raise FormatError(name(k), f"{encoding.text} value", f"a value {encoding.text} encodes",
                                  f"{type(error).__name__}: {error}") from None
        return Objects(items)
    return Ragged(np.concatenate(([0], np.cumsum(sizes))), take_runs(data, starts, sizes))


def ndarray_form(encoding: Encoding, value: bytes, name: str) -> NdarrayForm | None:
    """What an ndarray column holds, from one of its values (``value``), when the encoding
    leaves the dtype or the shape open; None when it does not."""
    if encoding.kind is not Kind.NDARRAY or encoding.size is not None:
        return None
    if encoding.shape is not None:  # a dtype without a shape is the other case: shape in the value
        return NdarrayForm(encoding.dtype, len(encoding.shape))
    position, dtype = 0, encoding.dtype
    if dtype is None:
        if not value or value[0] not in NDARRAY_DTYPES:
            raise FormatError(name, "ndarray dtype code", f"one of {sorted(NDARRAY_DTYPES)}",
                              repr(value[:1]))
        dtype, position = np.dtype(NDARRAY_DTYPES[value[0]]).newbyteorder("<"), 1
    if len(value) <= position:
        raise FormatError(name, "ndarray shape", "a shape byte", "the value's end")
    return NdarrayForm(dtype, value[position] >> 2)


def _ndarray(encoding: Encoding, data, starts, sizes, name, form: NdarrayForm) -> Ragged | Nested:
    """ndarray values whose dtype or shape is stored in each value (NDArray.encode)."""
    rows = len(starts)
    position = starts.copy()
    if encoding.dtype is None:
        codes = data[position]
        dtype_code = DTYPE_CODES[form.dtype.name]
        _same(codes != dtype_code, name, "ndarray dtype", f"{form.dtype.name} (code {dtype_code}, as the stream's "
              "first sample)", lambda k: f"code {int(codes[k])}")
        position += 1
    ndim = form.ndim
    shapes = np.empty((rows, ndim), np.int64)
    if encoding.shape is None:
        marks = data[position]
        _same(marks >> 2 != ndim, name, "ndarray axes", f"{ndim} (as the stream's first sample)",
              lambda k: str(int(marks[k]) >> 2))
        widths = marks & 3
        position += 1
        for width in np.unique(widths).tolist():
            mine = np.flatnonzero(widths == width)
            dtype = np.dtype(SHAPE_DTYPES[width])
            raw = data[position[mine, None] + np.arange(ndim * dtype.itemsize)]
            shapes[mine] = raw.view(dtype).reshape(len(mine), ndim)
            position[mine] += ndim * dtype.itemsize
    else:
        shapes[:] = encoding.shape
    items = shapes.prod(axis=1)
    value_bytes = starts + sizes - position
    _same(value_bytes != items * form.dtype.itemsize, name, "ndarray values",
          f"{form.dtype.itemsize} bytes per item of the shape", lambda k: f"{int(value_bytes[k])} bytes for shape "
          f"{tuple(shapes[k].tolist())}")
    values = take_runs(data, position, value_bytes).view(form.dtype)
    if ndim == 1:
        return Ragged(np.concatenate(([0], np.cumsum(items))), values)
    return Nested(shapes, values)


def _same(bad: np.ndarray, name, field: str, expected: str, found) -> None:
    wrong = np.flatnonzero(bad)
    if len(wrong):
        k = int(wrong[0])
        raise FormatError(name(k), field, expected, found(k))


# --- what only Python decodes ---------------------------------------------------------------

def _uint32s(value: bytes, position: int, count: int) -> list[int]:
    end = position + 4 * count
    if end > len(value):
        raise ValueError(f"{count} sizes at byte {position} pass the value's end ({len(value)} bytes)")
    return np.frombuffer(value[position:end], "<u4").tolist()


def _pieces(value: bytes, position: int, sizes: list[int]) -> list[bytes]:
    if position + sum(sizes) != len(value):
        raise ValueError(f"items of {sum(sizes)} bytes after byte {position} in a value of {len(value)} bytes")
    pieces = []
    for size in sizes:
        pieces.append(value[position:position + size])
        position += size
    return pieces


def _image_list(value: bytes) -> list[bytes]:
    """list[jpeg] / list[png] (List.encode): a placeholder, a count, the sizes, the files."""
    (count,) = _uint32s(value, 4, 1)
    return _pieces(value, 8 + 4 * count, _uint32s(value, 8, count))


def _jpeg_array(value: bytes) -> list[bytes]:
    """jpeg_array (JPEGArray.encode): a count, the sizes, the JPEG files."""
    (count,) = _uint32s(value, 0, 1)
    return _pieces(value, 4 + 4 * count, _uint32s(value, 4, count))


def _pil_as_png(value: bytes) -> bytes:
    """A pil value (width, height, mode, raw pixels: PIL.encode) as PNG bytes, the form
    datasets.Image stores; Pillow is needed (datasets' Image feature needs it too)."""
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("decoding a 'pil' column needs Pillow: pip install Pillow") from error
    width, height, mode_size = _uint32s(value, 0, 3)
    mode = value[12:12 + mode_size].decode("utf-8")
    image = Image.frombytes(mode, (width, height), value[12 + mode_size:])
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _pil_list(value: bytes) -> list[bytes]:
    return [_pil_as_png(piece) for piece in _image_list(value)]


_OBJECT_DECODERS = {Kind.PIL: _pil_as_png, Kind.IMAGE_LIST: _image_list, Kind.PIL_LIST: _pil_list,
                    Kind.JPEG_ARRAY: _jpeg_array, Kind.PICKLE: pickle.loads}


__all__ = ["Fixed", "Layout", "Nested", "NdarrayForm", "Objects", "Ragged", "column_spans", "decode_column",
           "ndarray_form", "take_runs"]
