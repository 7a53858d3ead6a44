"""MosaicML columns as ``datasets`` features and Arrow arrays: the types come from the index.

    encoding                       feature                                   Arrow
    bytes                          Value("binary")                           binary
    str                            Value("string")                           string (UTF-8 checked)
    int, int8 ... uint64           Value("int64"), Value("int8") ...         the same integers
    float16/32/64                  Value("float16") ...                      the same floats
    ndarray:DTYPE:D                List(Value(DTYPE), length=D)              fixed-size list
    ndarray:DTYPE:D0,D1            List(List(Value(DTYPE), length=D1), length=D0)
    ndarray[:DTYPE] (shape in      List(Value(DTYPE)), one List per axis     list (nested)
      each value)
    str_int                        Value("int64")                            int64 (parsed)
    str_float                      Value("float64")                          float64 (parsed)
    str_decimal                    Value("string")                           the digits (no decimal
                                                                             type holds any precision)
    json                           Json() (datasets 5.1+; else the text)     json
    jpeg, png, pil                 Image()                                   {bytes, path}
    list[jpeg], list[png],         List(Image())                             list of {bytes, path}
      list[pil], jpeg_array
    pkl (allow_unsafe_types=True)  inferred from the stream's first 256      as inferred
                                   samples

An ndarray whose encoding leaves the dtype or the shape to each value is read with the dtype
and number of axes of the stream's first sample (mosaic/columns.py). ``pil`` values become
PNG images (Pillow).
"""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import FormatError, ParameterError
from ..mosaic.columns import Fixed, Layout, Nested, NdarrayForm, Objects, Ragged, column_spans, decode_column
from ..mosaic.encodings import Encoding, Kind

_IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def json_feature():
    """datasets' Json feature where the installed release has it (5.1+), else the JSON text."""
    return datasets.Json() if hasattr(datasets, "Json") else datasets.Value("string")


def column_feature(encoding: Encoding, form: NdarrayForm | None, pickled=None):
    """The feature of a column of ``encoding`` (``form``: an open ndarray's; ``pickled``: a
    pickle column's first values, unpickled, whose common type Arrow infers)."""
    kind = encoding.kind
    if kind is Kind.BYTES:
        return datasets.Value("binary")
    if kind in (Kind.TEXT, Kind.TEXT_DECIMAL):
        return datasets.Value("string")
    if kind is Kind.SCALAR:
        return datasets.Value(encoding.dtype.name)
    if kind is Kind.TEXT_INT:
        return datasets.Value("int64")
    if kind is Kind.TEXT_FLOAT:
        return datasets.Value("float64")
    if kind is Kind.JSON:
        return json_feature()
    if kind in (Kind.IMAGE, Kind.PIL):
        return datasets.Image()
    if kind in (Kind.IMAGE_LIST, Kind.PIL_LIST, Kind.JPEG_ARRAY):
        return datasets.List(datasets.Image())
    if kind is Kind.PICKLE:
        inferred = pa.array(pickled or []).type
        return datasets.Features.from_arrow_schema(pa.schema([("x", inferred)]))["x"]
    if encoding.shape is not None:
        feature = datasets.Value(encoding.dtype.name)
        for length in reversed(encoding.shape):
            feature = datasets.List(feature, length=length)
        return feature
    feature = datasets.Value(form.dtype.name)
    for _ in range(form.ndim):
        feature = datasets.List(feature)
    return feature


def _offsets(offsets: np.ndarray, what: str) -> pa.Array:
    if len(offsets) and offsets[-1] >= 2**31:
        raise ParameterError(f"{what}: a table of more than 2 GiB of values in one column; set num_shards higher so "
                             "that tables hold fewer rows")
    return pa.array(offsets.astype(np.int32))


def column_array(decoded, encoding: Encoding, feature, name, column: str) -> pa.Array:
    """The Arrow array of one decoded column (``name(k)`` names row k in errors)."""
    kind = encoding.kind
    if isinstance(decoded, Fixed):
        values = decoded.values
        array = pa.array(values.reshape(-1))
        for length in reversed(values.shape[1:]):
            array = pa.FixedSizeListArray.from_arrays(array, length)
        return array
    if isinstance(decoded, Nested):
        return _nested(decoded)
    if isinstance(decoded, Objects):
        if kind is Kind.PICKLE:
            try:
                return pa.array(decoded.items, type=feature.pa_type if hasattr(feature, "pa_type") else
                                datasets.Features({"x": feature}).arrow_schema.field("x").type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as error:
                raise FormatError(name(0), f"column {column!r}", f"values of the first sample's type ({feature})",
                                  f"another type in this batch ({error})") from None
        if kind is Kind.PIL:
            return _images(decoded.items)
        offsets = np.concatenate(([0], np.cumsum([len(i) for i in decoded.items]))).astype(np.int64)
        flat = [image for items in decoded.items for image in items]
        return pa.ListArray.from_arrays(_offsets(offsets, column), _images(flat))
    offsets = _offsets(decoded.offsets, column)
    if kind is Kind.NDARRAY:
        return pa.ListArray.from_arrays(offsets, pa.array(decoded.values))
    data = pa.py_buffer(decoded.values)
    rows = len(decoded.offsets) - 1
    binary = pa.Array.from_buffers(pa.binary(), rows, [None, offsets.buffers()[1], data])
    if kind in (Kind.BYTES,):
        return binary
    if kind is Kind.IMAGE:
        return pa.StructArray.from_arrays([binary, pa.nulls(rows, pa.string())], fields=list(_IMAGE_TYPE))
    text = pa.Array.from_buffers(pa.string(), rows, [None, offsets.buffers()[1], data])
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        k = next(k for k in range(rows) if not _utf8(binary[k].as_py()))  # the error path only: a row at a time
        raise FormatError(name(k), f"column {column!r} ({encoding.text})", "UTF-8 text",
                          repr(binary[k].as_py()[:40])) from None
    if kind in (Kind.TEXT, Kind.TEXT_DECIMAL):
        return text
    if kind is Kind.JSON:
        return pa.ExtensionArray.from_storage(pa.json_(), text) if hasattr(datasets, "Json") else text
    target = pa.int64() if kind is Kind.TEXT_INT else pa.float64()
    try:
        return pc.cast(text, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise FormatError(name(0), f"column {column!r} ({encoding.text})", f"numbers that fit {target}",
                          f"{error}", hint="pass features= with Value('string') for this column to keep the digits"
                          if kind is Kind.TEXT_INT else "") from None


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _images(items: list[bytes]) -> pa.StructArray:
    return pa.StructArray.from_arrays([pa.array(items, pa.binary()), pa.nulls(len(items), pa.string())],
                                      fields=list(_IMAGE_TYPE))


def _nested(decoded: Nested) -> pa.Array:
    """Rows of k-axis arrays as k nested lists, from each row's shape and its flat items."""
    shapes = decoded.shapes
    array = pa.array(decoded.values)
    # Innermost lists first: at axis a, each list holds shape[a] items; there is one list per
    # index of the axes before it.
    for axis in range(shapes.shape[1] - 1, -1, -1):
        counts = np.repeat(shapes[:, axis], np.prod(shapes[:, :axis], axis=1).astype(np.int64))
        array = pa.ListArray.from_arrays(_offsets(np.concatenate(([0], np.cumsum(counts))), "ndarray"), array)
    return array


def columns_table(layout: Layout, features: datasets.Features, forms: dict, data, at, lengths, name,
                  allow_pickle: bool) -> pa.Table:
    """The Arrow table of a batch of samples (their bytes: ``data``, each at ``at`` with ``lengths``)."""
    starts, sizes = column_spans(layout, data, at, lengths, name)
    arrays = {}
    for i, (column, encoding) in enumerate(zip(layout.columns, layout.encodings)):
        if column not in features:
            continue
        decoded = decode_column(encoding, data, starts[:, i], sizes[:, i], name, forms.get(column), allow_pickle)
        arrays[column] = column_array(decoded, encoding, features[column], name, column)
    return pa.table({column: arrays[column] for column in features})


__all__ = ["column_array", "column_feature", "columns_table", "json_feature"]
