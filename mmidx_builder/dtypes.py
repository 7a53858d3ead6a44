"""Every dtype rule of the project, in one place (megatron-core's ``DType`` enum is the model).

    rule                          where it comes from                      function
    .idx header code <-> dtype    megatron-core DType / fairseq _code_to_dtype   DTYPE_TABLES, dtype_code
    smallest dtype for a vocab    the writers people compare us with       smallest_dtype
    dtype a writer picks          Megatron optimal_dtype / fairseq          writer_dtype
                                  best_fitting_int_dtype
    dtype convert writes          megatron-core DType.optimal_dtype         megatron_writer_dtype
    raw files' token dtype        n_bytes tokens plus one EOF id            raw_token_dtype
    an output dtype a user asks   an integer numpy dtype name               integer_dtype
    casting tokens to it          refuse values that would not survive      cast_tokens
    one dtype for a blend's ids   every part's ids, never floats            common_token_dtype

This module imports numpy only.
"""

from __future__ import annotations

import enum

import numpy as np

from .checks import check_int
from .errors import ParameterError


class Flavour(str, enum.Enum):
    """Which writer's ``.idx`` layout: megatron-core's (with a document index) or fairseq's."""

    MEGATRON = "megatron"
    FAIRSEQ = "fairseq"


# megatron.core.datasets.indexed_dataset.DType and fairseq's _code_to_dtype. They agree on
# 1-6 and 8; code 7 is float32 to Megatron but float64 (np.double) to fairseq, and 9/10
# exist only in fairseq.
MEGATRON_DTYPES = {
    1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32,
    5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16,
}
FAIRSEQ_DTYPES = {
    1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
    6: np.float64, 7: np.float64, 8: np.uint16, 9: np.uint32, 10: np.uint64,
}
DTYPE_TABLES = {Flavour.MEGATRON: MEGATRON_DTYPES, Flavour.FAIRSEQ: FAIRSEQ_DTYPES}
# Megatron's DType.optimal_dtype and fairseq's best_fitting_int_dtype switch from uint16 here.
UINT16_VOCAB_LIMIT = 65500


def dtype_code(dtype, flavour: Flavour = Flavour.MEGATRON) -> int:
    """The header code of ``dtype`` in ``flavour``'s table (the first code if two match)."""
    dtype = np.dtype(dtype)
    for code, candidate in DTYPE_TABLES[Flavour(flavour)].items():
        if np.dtype(candidate) == dtype:
            return code
    raise ParameterError(f"dtype {dtype} cannot be stored in a {Flavour(flavour).value} .idx; "
                         f"use one of {sorted({np.dtype(t).name for t in DTYPE_TABLES[Flavour(flavour)].values()})}")


def smallest_dtype(vocab_size: int, flavour: Flavour = Flavour.MEGATRON) -> np.dtype:
    """The smallest integer dtype that holds token ids ``0 .. vocab_size - 1``.

    Above 256 this follows the writers people compare us with: uint16 below 65,500
    (Megatron's ``DType.optimal_dtype`` and fairseq's ``best_fitting_int_dtype``), then
    int32 for Megatron (its table has no uint32) or uint32 / int64 for fairseq.
    """
    vocab_size = check_int("vocab_size", vocab_size, 1)
    if vocab_size <= 256:
        return np.dtype(np.uint8)
    if vocab_size < UINT16_VOCAB_LIMIT:
        return np.dtype(np.uint16)
    if Flavour(flavour) is Flavour.MEGATRON:
        if vocab_size > 2**31:
            raise ParameterError(f"vocab_size {vocab_size} does not fit the Megatron flavour's "
                                 "largest integer dtype (int32); write the fairseq flavour")
        return np.dtype(np.int32)
    return np.dtype(np.uint32 if vocab_size < 2**32 - 1 else np.int64)


def writer_dtype(vocab_size: int, flavour: Flavour = Flavour.MEGATRON) -> np.dtype:
    """The dtype the real writers pick for a vocabulary: Megatron's ``DType.optimal_dtype`` and
    fairseq's ``best_fitting_int_dtype`` have no uint8 branch, so a vocabulary of 256 or fewer
    ids is uint16 there too; above that, :func:`smallest_dtype`."""
    if vocab_size < 1:
        return smallest_dtype(vocab_size)  # the error
    return smallest_dtype(max(vocab_size, 257), flavour)


def megatron_writer_dtype(vocab_size: int) -> np.dtype:
    """Megatron's ``DType.optimal_dtype``, which its preprocess_data.py uses: uint16 below
    65,500 ids, else int32. Not the smallest dtype: uint8 would differ from Megatron's files."""
    return np.dtype(np.uint16 if vocab_size < UINT16_VOCAB_LIMIT else np.int32)


def raw_token_dtype(eof_id: int) -> np.dtype:
    """Raw files' tokens (byte tokens plus an EOF id one past them): the smallest dtype that
    holds ``eof_id``, the signed one of two of a size (torch has no general uint32/uint64
    tensors, and Megatron's table has no uint32)."""
    for dtype in (np.uint8, np.uint16, np.int32, np.int64):
        if eof_id <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ParameterError(f"no integer dtype holds the EOF id {eof_id}")


def integer_dtype(name, field: str = "dtype") -> np.dtype:
    """``name`` as an integer numpy dtype, or a ParameterError naming ``field``."""
    try:
        dtype = np.dtype(name)
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "iu":
        raise ParameterError(f"{field} must name an integer numpy dtype such as 'int32', got {name!r}")
    return dtype


def cast_tokens(tokens: np.ndarray, dtype) -> np.ndarray:
    """``tokens`` as ``dtype`` (None: unchanged), refusing values that would not survive,
    NaN and fractions of a float ``.bin`` included."""
    if dtype is None or np.dtype(dtype) == tokens.dtype:
        return tokens
    if tokens.dtype.kind in "iu" and np.can_cast(tokens.dtype, dtype, "safe"):
        return tokens.astype(dtype)  # every value survives: no pass to check them
    with np.errstate(invalid="ignore"):
        converted = tokens.astype(dtype)
        survived = np.array_equal(converted, tokens)
    if not survived:
        bad = tokens.reshape(-1)[converted.reshape(-1) != tokens.reshape(-1)][0]
        raise ParameterError(f"token id {bad!r} (ids span {tokens.min()!r}..{tokens.max()!r}) does not fit "
                             f"dtype={np.dtype(dtype).name}; choose a dtype that holds every id")
    return converted


def common_token_dtype(dtypes, names=None) -> np.dtype:
    """The dtype that holds the ids of every part of a blend (a uint16 file with an int32 one:
    int32). Token ids are never floats: numpy's promotion of int64 with uint64 is float64,
    which would round ids above 2**53, so such a mix (and any mix with a float ``.bin``) is
    refused, naming the parts, with the way out: ``dtype=`` stores the ids as one integer
    dtype and checks that every value fits. ``names`` label the parts in the message."""
    dtypes = [np.dtype(d) for d in dtypes]
    if not dtypes:
        raise ParameterError("no token dtype to combine: the blend has no part")
    if all(d == dtypes[0] for d in dtypes):
        return dtypes[0]
    common = np.result_type(*dtypes)
    if common.kind in "iu" and all(d.kind in "iu" for d in dtypes):
        return common
    names = list(names) if names is not None else [f"part {i}" for i in range(len(dtypes))]
    found = ", ".join(f"{name}: {d.name}" for name, d in zip(names, dtypes))
    raise ParameterError(f"the blend's files have no common integer dtype ({found}; numpy would make the ids "
                         f"{common.name}); pass dtype='int64' (or another integer dtype that holds every id) "
                         "to store them as that, every value checked")


__all__ = ["DTYPE_TABLES", "FAIRSEQ_DTYPES", "Flavour", "MEGATRON_DTYPES", "cast_tokens", "common_token_dtype",
           "dtype_code", "integer_dtype", "megatron_writer_dtype", "raw_token_dtype", "smallest_dtype", "writer_dtype"]
