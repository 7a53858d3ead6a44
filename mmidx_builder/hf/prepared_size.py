"""What the prepared (Arrow) path costs on disk, said before it is paid.

``load_dataset`` without ``streaming=True`` writes every row into an Arrow cache: for GPT
samples about ``rows x sample_length x itemsize`` bytes, a second copy of the corpus per
epoch (~240 GB for a 120B-token uint16 prefix, hours to write). Before the first row is
written, the estimate is compared with the free space of the cache folder, and a cache
that cannot fit is refused with :class:`OutOfSpaceError` saying so and pointing at
``streaming=True``, which writes nothing (README, "Loading"). A write that runs out of room
anyway (the estimate is close, not exact; other writers share the disk) is the same error,
not datasets' generic "An error occurred while generating the dataset".
"""

from __future__ import annotations

import datasets
import numpy as np

from ..errors import OutOfSpaceError
from ..storage.files import free_bytes

STREAMING_HINT = "load with streaming=True, which reads the .bin files in place and writes no Arrow cache"
# Bytes guessed for a value whose size is not in its type (a string, a variable-length list).
_UNSIZED_BYTES = 64


def _value_bytes(feature) -> int:
    if isinstance(feature, datasets.Value):
        try:
            return np.dtype(feature.dtype).itemsize
        except TypeError:  # string, large_string, binary
            return _UNSIZED_BYTES
    if isinstance(feature, datasets.ClassLabel):
        return 8
    if isinstance(feature, datasets.List):
        length = getattr(feature, "length", -1)
        if length is not None and length >= 0:
            return length * _value_bytes(feature.feature)
        return 8 + _UNSIZED_BYTES  # an offset and a guess
    if isinstance(feature, dict):
        return sum(_value_bytes(f) for f in feature.values())
    return _UNSIZED_BYTES


def row_bytes(features: datasets.Features) -> int:
    """About how many bytes one row of ``features`` takes in an Arrow file."""
    return max(1, sum(_value_bytes(feature) for feature in features.values()))


def check_room(folder: str, num_rows: int, features: datasets.Features) -> int:
    """The estimated size of an Arrow cache of ``num_rows`` rows; raises OutOfSpaceError
    when it exceeds the space free in ``folder``."""
    needed = int(num_rows) * row_bytes(features)
    free = free_bytes(folder)
    if free is not None and needed > free:
        raise OutOfSpaceError(folder, needed, free, f"the Arrow cache of {num_rows:,} rows", hint=STREAMING_HINT)
    return needed


__all__ = ["STREAMING_HINT", "check_room", "row_bytes"]
