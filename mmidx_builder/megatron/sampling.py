"""Megatron-core GPTDataset sampling in numpy: the same packed sequences, in the same order.

For one list of sequence lengths, a ``seq_length``, a seed and an amount of training,
three arrays say what training sees, exactly as megatron-core builds them
(``gpt_dataset.py`` and ``helpers.cpp::build_sample_idx``; ``shared/SAMPLING.md``):

    document_index  int32 (epochs * N,)    sequence ids, every epoch's worth shuffled together,
                                           a partial final epoch shuffled apart (the 80% rule)
    sample_index    int32 (total + 1, 2)   (position in document_index, offset) where sample
                    (int64 when needed)    k starts; samples hold seq_length + E tokens and,
                                           with E = 1 (the default), overlap by one token
    shuffle_index   uint32 (total,)        training position -> sample (int64 when huge)

Every shuffle uses one ``numpy.random.RandomState(seed)``, in megatron-core's order:
document index (first the whole epochs, then a separate final epoch), then shuffle index
(likewise). Training position ``i`` reads sample ``shuffle_index[i]``.

Edges where megatron-core's C++ merely asserts (``seq_length > 1``, ``tokens_per_epoch >
1``) are decided here: ``seq_length`` 1 and a single token are sampled by the same rules
(nothing in them needs more), and anything that yields no sample at all, no tokens, a
negative length or seed, raises :class:`ParameterError` saying what to change.

The functions are pure (arrays and a seed in, arrays out), except
:func:`load_or_build_indices`, the on-disk cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import warnings
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..warnings_once import warn_once
from ..storage import array_cache
from ..storage.files import temporary_path
from ..checks import check_int, check_seed
from ..parallel import beside, nothing_beside
from ..errors import FormatError, OutOfSpaceError, ParameterError
from ..progress import Steps
from ..sources.token_source import (index_files, lengths_digest, lengths_fingerprint, lengths_identity,
                                   lengths_to_build_from, lengths_view, sequence_count)
from . import legacy_shuffle

__all__ = [
    "SamplingIndices",
    "assemble_samples",
    "build_document_index",
    "build_indices",
    "build_sample_index",
    "build_shuffle_index",
    "DEFAULT_SEED",
    "DEFAULT_SEQ_LENGTH",
    "check_settings",
    "count_samples",
    "document_structure",
    "iter_reference_samples",
    "load_or_build_indices",
    "sample_length",
    "sample_pieces",
    "save_indices",
]

# megatron-core passes the epoch count to its C++ helper as int32 and keeps sequence ids as int32.
MAX_EPOCHS = 2**31 - 1
MAX_SEQUENCES = 2**31 - 1
# megatron-core's rule: a final epoch giving fewer than 80% of an epoch's samples is shuffled apart.
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80
# Documents handled per step of the sample-index build: bounds its int64 temporaries (~12 MiB).
_CHUNK = 1 << 18
# Bump when the cached arrays' meaning changes, so old caches are not reused.
# 2: the meta file holds the arrays' digests (array_cache). 3: keyed by the lengths' xxh3 digest.
# 4: the three arrays packed in one file (KEY-indices.npy).
_CACHE_FORMAT = 4
_ARRAY_NAMES = ("document_index", "sample_index", "shuffle_index")


# The sampling settings' defaults. Megatron-LM's --seed defaults to 1234
# (megatron/training/config/common_config.py, core_v0.16.1 and core_v0.19.0); its --seq-length
# has no default (validate_args requires it), so 2048 is this package's own.
DEFAULT_SEQ_LENGTH = 2048
DEFAULT_SEED = 1234


def sample_length(seq_length: int, add_extra_token: bool) -> int:
    """Tokens per sample: ``seq_length`` plus the one extra token when it is on (megatron-core's
    ``sequence_length + add_extra_token_to_sequence``)."""
    return int(seq_length) + int(bool(add_extra_token))


def _checked_amount(seq_length, num_epochs, num_samples) -> tuple[int, int | None, int | None]:
    """``seq_length``, ``num_epochs`` and ``num_samples`` as ints: whole numbers of at least 1,
    at most one of the two amounts (None: not given)."""
    seq_length = check_int("seq_length", seq_length, 1, "pass a sequence length of 1 or more")
    if num_epochs is not None and num_samples is not None:
        raise ParameterError(f"give num_epochs or num_samples, not both (got num_epochs={num_epochs}, "
                             f"num_samples={num_samples})")
    return (seq_length, check_int("num_epochs", num_epochs, 1, "train at least one epoch", allow_none=True),
            check_int("num_samples", num_samples, 1, "ask for at least one sample", allow_none=True))


def check_settings(*, seq_length, seed, num_epochs=None, num_samples=None) -> None:
    """Raises :class:`ParameterError` for sampling settings that cannot work, before any
    data is read (builder configs call this; :func:`build_indices` applies the same rules)."""
    _checked_amount(seq_length, num_epochs, num_samples)
    check_seed(seed)


def count_samples(tokens_per_epoch: int, *, seq_length: int, num_epochs: int | None = None,
                  num_samples: int | None = None, add_extra_token: bool = True) -> tuple[int, int]:
    """``(num_epochs, num_samples)`` that training will see over ``tokens_per_epoch`` tokens.

    ``num_epochs`` asks for whole epochs: every sample they hold, ``(num_epochs *
    tokens_per_epoch - E) // seq_length`` with ``E = add_extra_token``. ``num_samples`` asks
    the Megatron way: the fewest epochs that hold that many samples (the last one may be
    partial). Neither: one epoch. Raises :class:`ParameterError` saying what to change.

    Whole epochs equal megatron-core called with that sample count, except when an epoch
    holds fewer tokens than one sample: there Megatron would need fewer epochs for the
    count, and the epochs asked for are kept (their document index is longer).
    """
    seq_length, num_epochs, num_samples = _checked_amount(seq_length, num_epochs, num_samples)
    extra = int(bool(add_extra_token))
    tokens_per_epoch = int(tokens_per_epoch)
    if tokens_per_epoch < 1:
        raise ParameterError(f"the data holds no tokens (tokens per epoch: {tokens_per_epoch}); "
                             "sampling needs at least one non-empty sequence")
    if num_samples is not None:
        # megatron-core's _get_num_epochs: the smallest e >= 1 with e * tokens >= N * L + E.
        needed = num_samples * seq_length + extra
        num_epochs = max(1, -(-needed // tokens_per_epoch))
        if num_epochs > MAX_EPOCHS:
            raise ParameterError(f"num_samples={num_samples} of {seq_length} tokens needs {num_epochs} epochs "
                                 f"of {tokens_per_epoch} tokens, more than megatron-core's limit of "
                                 f"{MAX_EPOCHS}; ask for fewer samples")
        return num_epochs, num_samples
    num_epochs = 1 if num_epochs is None else num_epochs
    if num_epochs > MAX_EPOCHS:
        raise ParameterError(f"num_epochs={num_epochs} exceeds megatron-core's limit of {MAX_EPOCHS}")
    num_samples = (num_epochs * tokens_per_epoch - extra) // seq_length
    if num_samples < 1:
        raise ParameterError(
            f"{num_epochs} epoch(s) of {tokens_per_epoch} tokens do not fill one sample of "
            f"{sample_length(seq_length, extra)} "
            f"tokens (seq_length {seq_length} + {extra} extra); lower seq_length or raise num_epochs")
    return num_epochs, num_samples


def _final_epoch_split(tokens_per_epoch: int, seq_length: int, extra: int, num_epochs: int,
                       num_samples: int) -> tuple[bool, int]:
    """megatron-core's separate-final-epoch rule: (separate?, samples of the epochs before it)."""
    if num_epochs == 1:
        return False, 0
    sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // seq_length
    from_final = num_samples - sans_final
    per_epoch = (tokens_per_epoch - extra) // seq_length
    return from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch), sans_final


@dataclass(frozen=True, eq=False)
class SamplingIndices:
    """The three index arrays and the numbers they were built for.

    ``num_samples`` is what training consumes: training positions ``0 .. num_samples - 1``
    (``shuffle_index`` may hold more, as megatron-core builds every sample of its epochs).
    ``lengths_fingerprint``: token_source.lengths_fingerprint of the lengths they were built
    from, when asked for (:func:`load_or_build_source_indices`): kept with the cache, so that
    a warm open of a split's range (whose pair records only its whole fingerprint) makes none.
    """

    seq_length: int
    add_extra_token: bool
    num_epochs: int
    num_samples: int
    separate_final_epoch: bool
    document_index: np.ndarray
    sample_index: np.ndarray
    shuffle_index: np.ndarray
    lengths_fingerprint: dict | None = None

    @property
    def sample_length(self) -> int:
        """Tokens per sample (:func:`sample_length`)."""
        return sample_length(self.seq_length, self.add_extra_token)

    @property
    def total_samples(self) -> int:
        """Samples the epochs hold (megatron-core's ``len(dataset)``), at least ``num_samples``."""
        return len(self.sample_index) - 1


def _as_lengths(sequence_lengths, check_values: bool = True) -> np.ndarray:
    sizes = np.asarray(sequence_lengths)
    if sizes.ndim != 1 or not np.issubdtype(sizes.dtype, np.integer):
        raise ParameterError(f"sequence_lengths must be a 1-D integer array, got dtype {sizes.dtype} "
                             f"shape {sizes.shape}")
    if len(sizes) == 0:
        raise ParameterError("there are no sequences to sample from; the data holds no tokens")
    if len(sizes) > MAX_SEQUENCES:
        raise ParameterError(f"{len(sizes)} sequences exceed megatron-core's int32 sequence ids "
                             f"(at most {MAX_SEQUENCES}); split the data into several files")
    if check_values and sizes.min() < 0:  # O(N): where indices are built (a cache hit needs none)
        k = int(np.argmax(sizes < 0))
        raise ParameterError(f"sequence {k} has length {int(sizes[k])}; lengths must be >= 0")
    return sizes


def build_document_index(num_sequences: int, num_epochs: int, rng: np.random.RandomState,
                         separate_final_epoch: bool) -> np.ndarray:
    """Sequence ids ``0..num_sequences-1`` once per epoch, shuffled as megatron-core does.

    Equals ``gpt_dataset._build_document_index(arange(N, int32), ...)``: one ``rng.shuffle``
    over all epochs, or with ``separate_final_epoch`` one over the first ``num_epochs - 1``
    and then one over the last. Shuffled in place, in int32 from the start (megatron-core
    builds int64 grids first), so the array itself is the peak.
    """
    alone = nothing_beside()  # no other build in a thread: numpy's loop where it is faster
    index = np.empty(num_epochs * num_sequences, np.int32)
    ascending = np.arange(min(num_sequences, _CHUNK), dtype=np.int32)
    for epoch in range(num_epochs):  # a chunk at a time: no temporary of 4 bytes a sequence
        for begin in range(0, num_sequences, _CHUNK):
            stop = min(begin + _CHUNK, num_sequences)
            np.add(ascending[:stop - begin], begin, out=index[epoch * num_sequences + begin:epoch * num_sequences + stop])
    if separate_final_epoch and num_epochs > 1:
        cut = (num_epochs - 1) * num_sequences
        # A shuffle of a view permutes it exactly as a shuffle of a copy of the same length.
        legacy_shuffle.shuffle(index[:cut], rng, alone=alone)
        legacy_shuffle.shuffle(index[cut:], rng, alone=alone)
    else:
        legacy_shuffle.shuffle(index, rng, alone=alone)
    return index


def sample_index_dtype(num_positions: int, longest: int) -> np.dtype:
    """megatron-core's: int32 when every document-index position and length fits it."""
    return np.dtype(np.int32 if max(num_positions, longest) <= np.iinfo(np.int32).max else np.int64)


def build_sample_index(sizes: np.ndarray, document_index: np.ndarray, seq_length: int,
                       tokens_total: int, add_extra_token: bool = True, out: np.ndarray | None = None) -> np.ndarray:
    """Where each sample starts: megatron-core's ``helpers.build_sample_idx``, vectorised.

    ``tokens_total`` is ``num_epochs * tokens_per_epoch`` (the sum of the lengths along
    ``document_index``). Row k is ``(d, offset)``: global token ``p = k * seq_length`` of the
    epoch-ordered stream. With the extra token, d is the sequence *holding* token p (so a
    sample ending on a sequence's last token leaves the next one starting on it); without,
    d holds token ``p - 1`` and ``offset`` may equal its length. Empty sequences hold no
    token and are skipped. Row 0 is ``(0, 0)``.

    Instead of a walk over tokens, each sequence's range of rows comes from integer
    division of its cumulative bounds, a chunk of sequences at a time (int64 temporaries
    stay small; the output is the only full-size array: ``out``, of ``(total + 1, 2)`` in
    :func:`sample_index_dtype`, to build it in).
    """
    extra = int(bool(add_extra_token))
    total = (int(tokens_total) - extra) // seq_length
    if out is None:
        out = np.empty((total + 1, 2), sample_index_dtype(len(document_index), int(sizes.max(initial=0))))
    out[0] = 0
    if total == 0:
        return out
    base = 0  # tokens before the current chunk
    filled = 1  # rows 0 .. filled-1 are written
    for begin in range(0, len(document_index), _CHUNK):
        stop = min(begin + _CHUNK, len(document_index))
        bounds = np.empty(stop - begin + 1, np.int64)
        bounds[0] = base
        np.cumsum(sizes[document_index[begin:stop]], dtype=np.int64, out=bounds[1:])
        bounds[1:] += base
        base = int(bounds[-1])
        # first_row[j] = the first k whose token p = k*L lies in sequence j (or beyond):
        # ceil(start / L) when d holds p (E = 1), floor(start / L) + 1 when d holds p - 1 (E = 0).
        if extra:
            first_row = -(-bounds // seq_length)
        else:
            first_row = bounds // seq_length + 1
        np.clip(first_row, 1, total + 1, out=first_row)
        lo, hi = int(first_row[0]), int(first_row[-1])
        if lo == hi:
            continue
        filled = hi
        # Each row's sequence (local to the chunk): the sequences that rows start in, each
        # marked at its first row by its step from the one before, summed along the rows.
        # (np.repeat of the ids by their row counts, mostly 0 or 1, took twice as long.)
        starting = np.flatnonzero(first_row[1:] != first_row[:-1])
        local = np.zeros(hi - lo, np.int64)
        local[first_row[starting] - lo] = np.diff(starting, prepend=0)
        np.cumsum(local, out=local)
        positions = np.arange(lo, hi, dtype=np.int64)
        positions *= seq_length
        positions -= bounds[local]
        local += begin
        out[lo:hi, 0] = local
        out[lo:hi, 1] = positions
        if hi == total + 1:
            break
    # Internal invariant, not user data: every row 1..total falls into exactly one sequence.
    assert filled == total + 1, f"sample index rows {filled}..{total} left unfilled"
    return out


def shuffle_index_dtype(total_size: int) -> np.dtype:
    """megatron-core's: uint32 unless that is too small."""
    return np.dtype(np.uint32 if total_size < np.iinfo(np.uint32).max - 1 else np.int64)


def build_shuffle_index(num_samples: int, total_size: int, rng: np.random.RandomState) -> np.ndarray:
    """``gpt_dataset._build_shuffle_index``: ``arange(total_size)`` with ``[0, num_samples)``
    shuffled, then ``[num_samples, total_size)`` shuffled apart; uint32 unless that is too small."""
    index = np.empty(total_size, shuffle_index_dtype(total_size))
    for begin in range(0, total_size, _CHUNK):  # a chunk at a time: no full-size temporary
        stop = min(begin + _CHUNK, total_size)
        index[begin:stop] = np.arange(begin, stop, dtype=index.dtype)
    legacy_shuffle.shuffle(index[:num_samples], rng)
    if num_samples != total_size:
        legacy_shuffle.shuffle(index[num_samples:], rng)
    return index


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def _check_memory(num_sequences: int, num_epochs: int, total_samples: int) -> None:
    """Refuses, before allocating, indices that cannot fit in this machine's memory (a plain
    MemoryError, or the OOM killer, would say nothing about why)."""
    wide = max(num_epochs * num_sequences, total_samples) > np.iinfo(np.int32).max
    needed = (num_epochs * num_sequences * 4 + (total_samples + 1) * 2 * (8 if wide else 4)
              + total_samples * (8 if total_samples >= 2**32 - 2 else 4))
    available = _physical_memory()
    if available is not None and needed > available:
        raise ParameterError(
            f"the sampling indices for {total_samples:,} samples ({num_epochs:,} epoch(s) of {num_sequences:,} "
            f"sequences) need {needed / 2**30:,.1f} GiB of memory, more than this machine's "
            f"{available / 2**30:,.1f} GiB; ask for fewer samples or epochs")


def _kept_in(out: np.ndarray | None, built: np.ndarray) -> np.ndarray:
    """``built`` copied into ``out`` (when given, else ``built`` itself), a chunk at a time."""
    if out is None:
        return built
    for begin in range(0, len(built), _CHUNK << 4):
        out[begin:begin + (_CHUNK << 4)] = built[begin:begin + (_CHUNK << 4)]
    return out


# The steps of a build, in order (what a progress bar names).
BUILD_STEPS = ("documents", "samples", "shuffle")
# Samples from which the shuffle index is shuffled in a thread beside the sample index: those
# whose uint32 shuffle goes through legacy_shuffle's blocks, which let go of the GIL between
# their numpy calls. Below, numpy's own loop holds it throughout and nothing overlaps
# (measured: 5.6M samples 225 ms beside against 221 ms in one thread; 18M, 682 against 763 ms).
BESIDE_SAMPLES = legacy_shuffle.SMALL_BYTES // np.dtype(np.uint32).itemsize


def build_indices(sequence_lengths: np.ndarray, *, seq_length: int, seed: int, num_epochs: int | None = None,
                  num_samples: int | None = None, add_extra_token: bool = True,
                  on_step=lambda step: None, allocate=None) -> SamplingIndices:
    """The document, sample and shuffle indices megatron-core's GPTDataset builds.

    ``sequence_lengths``: tokens per sequence (GPTDataset packs sequences; its document ids
    are sequence ids). Give ``num_epochs`` (whole epochs) or ``num_samples`` (Megatron's
    way, possibly ending inside an epoch), or neither for one epoch. Pure: no I/O;
    ``on_step(name)`` is called as each of BUILD_STEPS starts (a progress bar's hook; a large
    shuffle index is made beside the sample index, and its step named when that is done).
    ``allocate(layout)`` (``{name: (dtype, shape)}`` of the three arrays) gives the arrays to
    build in, or None for new ones (array_cache.PackedInPlace builds them in their file).
    """
    sizes = _as_lengths(sequence_lengths)
    seed = check_seed(seed)
    extra = int(bool(add_extra_token))
    tokens_per_epoch = int(sizes.sum(dtype=np.int64))
    num_epochs, num_samples = count_samples(tokens_per_epoch, seq_length=seq_length, num_epochs=num_epochs,
                                            num_samples=num_samples, add_extra_token=add_extra_token)
    separate, sans_final = _final_epoch_split(tokens_per_epoch, seq_length, extra, num_epochs, num_samples)
    total = (num_epochs * tokens_per_epoch - extra) // seq_length
    layout = {"document_index": (np.int32, (num_epochs * len(sizes),)),
              "sample_index": (sample_index_dtype(num_epochs * len(sizes), int(sizes.max(initial=0))), (total + 1, 2)),
              "shuffle_index": (shuffle_index_dtype(total), (total,))}
    arrays = allocate(layout) if allocate is not None else None
    if arrays is None:
        _check_memory(len(sizes), num_epochs, total)
        arrays = {name: None for name in layout}
    rng = np.random.RandomState(seed)
    on_step("documents")
    # Shuffled in the process's memory even when built in its file: a shuffle's random writes
    # to a file's pages run ~10x slower (each page written back and faulted again). Then
    # copied there, and the memory handed back before the next array is made.
    document_index = _kept_in(arrays["document_index"], build_document_index(len(sizes), num_epochs, rng, separate))
    if num_samples > total:  # cannot happen after count_samples; kept as a clear message, not garbage
        raise ParameterError(f"num_samples={num_samples} exceeds the {total} samples that {num_epochs} epoch(s) "
                             f"of {tokens_per_epoch} tokens hold at seq_length {seq_length}; ask for fewer")
    on_step("samples")
    # The shuffle index takes the generator where the document shuffle left it and nothing
    # else, so a large one is shuffled beside the sample index (whose numpy calls let go of
    # the GIL): 1.57 -> 1.40 s for 5M sequences x 3 epochs (benchmarks/bench_builder.py).
    def make_shuffle_index():
        return _kept_in(arrays["shuffle_index"], build_shuffle_index(sans_final if separate else total, total, rng))
    shuffled = beside(make_shuffle_index) if total >= BESIDE_SAMPLES else make_shuffle_index
    sample_index = build_sample_index(sizes, document_index, seq_length, num_epochs * tokens_per_epoch, extra,
                                      out=arrays["sample_index"])
    on_step("shuffle")
    shuffle_index = shuffled()
    return SamplingIndices(seq_length=int(seq_length), add_extra_token=bool(extra), num_epochs=num_epochs,
                           num_samples=num_samples, separate_final_epoch=separate,
                           document_index=document_index, sample_index=sample_index, shuffle_index=shuffle_index)


# --- the cache -------------------------------------------------------------------------------

def _lengths_digest(sizes: np.ndarray) -> str:
    # Lengths mapped from an index cache come with the digest recorded when they were written:
    # the key then costs nothing per sequence.
    whole = isinstance(sizes, np.memmap) and sizes.flags.c_contiguous
    return (whole and array_cache.recorded_digest(sizes)) or array_cache.array_digest(sizes)


def _cache_key(num_sequences: int, lengths_digest: str, identity: str, params: dict) -> str:
    digest = hashlib.sha256()
    description = {"cache_format": _CACHE_FORMAT, "identity": str(identity), "num_sequences": num_sequences, **params}
    digest.update(json.dumps(description, sort_keys=True).encode())
    # The lengths themselves too (their digest): an identity made of sizes and mtimes can miss a rewrite.
    digest.update(lengths_digest.encode())
    return digest.hexdigest()[:32]


def _cache_paths(cache_dir: str, key: str) -> dict[str, str]:
    # One file for the three arrays (array_cache packs them): one map and one stat at each open
    # instead of three, 3,000 fewer for a 1,000-prefix blend. save_indices writes them apart.
    paths = {name: os.path.join(cache_dir, f"{key}-indices.npy") for name in _ARRAY_NAMES}
    paths["meta"] = os.path.join(cache_dir, f"{key}-meta.json")
    return paths


_META_FIELDS = ("seq_length", "add_extra_token", "num_epochs", "num_samples", "separate_final_epoch")


def _load_cached(paths: dict[str, str], num_sequences: int) -> SamplingIndices | None:
    """The cached indices, or None when absent or damaged (then they are rebuilt): the
    files' digests are checked (array_cache), then that the arrays fit these sequences."""
    loaded = array_cache.load_arrays(paths["meta"], {name: paths[name] for name in _ARRAY_NAMES})
    if loaded is None:
        return None
    meta, arrays = loaded
    try:
        indices = SamplingIndices(**{k: meta[k] for k in _META_FIELDS}, **arrays,
                                  lengths_fingerprint=meta.get(FINGERPRINT_FIELD))
        consistent = (indices.document_index.shape == (indices.num_epochs * num_sequences,)
                      and indices.sample_index.ndim == 2 and indices.sample_index.shape[1] == 2
                      and indices.shuffle_index.shape == (indices.total_samples,)
                      and indices.num_samples <= indices.total_samples)
    except (KeyError, TypeError):
        consistent = False
    # Values are checked where they are used (sample_pieces: O(rows) a table), not here: a
    # pass over every value would cost O(samples) at each open.
    if not consistent:
        warnings.warn(f"sampling index cache {paths['meta']} is damaged; rebuilding it", stacklevel=3)
    return indices if consistent else None


def _cache_fields(indices: SamplingIndices, files: list[str] | None) -> dict:
    # files: the identities of the files the lengths were read from (not part of the key), for
    # `mmidx cache` to tell a cache no current file uses (cache_folder.py).
    fields = {name: getattr(indices, name) for name in _META_FIELDS}
    if files is not None:
        fields[FILES_FIELD] = list(files)
    if indices.lengths_fingerprint is not None:
        fields[FINGERPRINT_FIELD] = indices.lengths_fingerprint
    return fields


def _save_cached(paths: dict[str, str], indices: SamplingIndices, files: list[str] | None = None) -> None:
    array_cache.save_arrays(paths["meta"], {name: paths[name] for name in _ARRAY_NAMES},
                            {name: getattr(indices, name) for name in _ARRAY_NAMES}, _cache_fields(indices, files))


FILES_FIELD = "files"
FINGERPRINT_FIELD = "lengths_fingerprint"


def save_indices(indices: SamplingIndices, directory: str | os.PathLike) -> list[str]:
    """Writes ``document_index.npy``, ``sample_index.npy``, ``shuffle_index.npy`` (no pickle)
    and ``meta.json`` into ``directory``, all or none: they are written into a hidden
    temporary folder there and moved into place only once every one is whole (a full disk
    leaves none of them, not two of four). Returns the paths."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    staging = temporary_path(os.path.join(directory, "save-indices"))
    try:
        paths = {name: os.path.join(staging, f"{name}.npy") for name in _ARRAY_NAMES}
        paths["meta"] = os.path.join(staging, "meta.json")
        try:
            _save_cached(paths, indices)
        except OutOfSpaceError as error:  # numpy says only "1200 requested and 992 written"
            raise OutOfSpaceError(directory, error.needed, error.free, "the sampling indices (none was written)",
                                  failed=error.failed) from error
        except OSError as error:
            raise OSError(error.errno, f"cannot write the sampling indices into {directory}, none was written "
                                       f"({error.strerror or error})") from error
        names = sorted(os.listdir(staging))
        for name in names:
            os.replace(os.path.join(staging, name), os.path.join(directory, name))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return [os.path.join(directory, name) for name in names]


def _built(sizes, label: str, build_kwargs: dict, allocate=None) -> SamplingIndices:
    """:func:`build_indices` with a progress bar (``label: step``) once it has run a few seconds."""
    with Steps(label, BUILD_STEPS) as steps:
        return build_indices(sizes, on_step=steps.step, allocate=allocate, **build_kwargs)


# Indices of more bytes than this are built in their cache file (array_cache.PackedInPlace),
# not in the process's memory and then written: ~6 GB at a billion documents, which with the
# rest of a build would not fit beside a training job (issue 43: <= 4 GiB anonymous there).
IN_PLACE_BYTES = 1 << 28


def _built_and_cached(paths: dict[str, str], sizes, label: str, build_kwargs: dict, files, cache_dir,
                      fingerprint: bool = False) -> SamplingIndices:
    """:func:`_built`, then cached: in their file from the start when large (IN_PLACE_BYTES),
    else written after. A cache that cannot be written is skipped with a warning.
    ``fingerprint``: the lengths' fingerprint is recorded with them (SamplingIndices)."""
    with array_cache.PackedInPlace(paths["meta"], paths["document_index"]) as packed:
        in_place = []

        def allocate(layout):
            nbytes = sum(np.dtype(dtype).itemsize * int(np.prod(shape)) for dtype, shape in layout.values())
            if nbytes < IN_PLACE_BYTES:
                return None
            try:
                arrays = packed.allocate(layout)
            except OSError as error:
                warn_once(f"sampling indices not cached in {os.fspath(cache_dir)}: {error}", stacklevel=5)
                in_place.append(None)
                return None
            in_place.append(arrays is not None)
            return arrays

        indices = _built(sizes, label, build_kwargs, allocate)
        if fingerprint:
            indices = dataclasses.replace(indices, lengths_fingerprint=lengths_fingerprint(sizes))
        if in_place == [True]:
            try:
                mapped = packed.commit(_cache_fields(indices, files))
            except OSError as error:
                warn_once(f"sampling indices not cached in {os.fspath(cache_dir)}: {error}", stacklevel=3)
                return indices
            return dataclasses.replace(indices, **mapped)
    if in_place == [None]:
        return indices  # the folder refused the file: said above
    try:
        _save_cached(paths, indices, files)
    except OSError as error:
        warn_once(f"sampling indices not cached in {os.fspath(cache_dir)}: {error}", stacklevel=3)
    return indices


def load_or_build_indices(sequence_lengths, *, cache_dir: str | os.PathLike | None, identity: str,
                          label: str = "sampling indices", files: list[str] | None = None,
                          num_sequences: int | None = None, lengths_digest: str | None = None,
                          record_fingerprint: bool = False, **build_kwargs) -> SamplingIndices:
    """:func:`build_indices`, cached in ``cache_dir`` (None: no cache). A build that takes more
    than a couple of seconds shows a progress bar named ``label`` (progress.Steps).

    The key hashes ``identity`` (the caller's description of what the lengths are read from:
    for a pair its ``.idx``, not its ``.bin``, token_source.lengths_identity), the lengths
    themselves and every parameter: the indices are a function of the lengths and the
    settings alone. Arrays are written with
    ``allow_pickle=False`` under temporary names and renamed, the small meta file last, so
    two processes building at once both succeed and a reader never sees half a cache. A hit
    returns read-only memory maps. A cache that cannot be written is skipped with a warning.
    ``files`` (file identities, token_source.index_files) are recorded beside it, not keyed:
    ``mmidx cache`` prunes the caches whose files have all changed or gone.

    ``sequence_lengths`` may be a function that makes the lengths, called only to build, given
    with ``num_sequences`` and ``lengths_digest`` (the lengths' array_cache.array_digest, or a
    digest that stands for them: token_source.lengths_digest): a hit then reads no length.
    """
    if callable(sequence_lengths):
        if num_sequences is None or lengths_digest is None:
            raise TypeError("load_or_build_indices() needs num_sequences and lengths_digest with lengths made on demand")
        make_lengths = sequence_lengths
    else:
        sizes = _as_lengths(sequence_lengths, check_values=False)  # build_indices checks them when it builds
        num_sequences, lengths_digest = len(sizes), _lengths_digest(sizes)
        make_lengths = lambda: sizes  # noqa: E731
    if cache_dir is None:
        sizes = make_lengths()
        indices = _built(sizes, label, build_kwargs)
        return dataclasses.replace(indices, lengths_fingerprint=lengths_fingerprint(sizes)) if record_fingerprint else indices
    unknown = set(build_kwargs) - {"seq_length", "seed", "num_epochs", "num_samples", "add_extra_token"}
    if unknown:
        raise TypeError(f"load_or_build_indices() got unexpected arguments {sorted(unknown)}")
    params = {name: build_kwargs.get(name) for name in ("seq_length", "seed", "num_epochs", "num_samples")}
    # As plain ints (numpy ints do not serialise); wrong types and values are refused by build_indices.
    params = {name: value if value is None else check_int(name, value, -2**63, "") for name, value in params.items()}
    params["add_extra_token"] = bool(build_kwargs.get("add_extra_token", True))
    paths = _cache_paths(os.fspath(cache_dir), _cache_key(num_sequences, lengths_digest, identity, params))
    cached = _load_cached(paths, num_sequences)
    if cached is not None:
        return cached
    return _built_and_cached(paths, make_lengths(), label, build_kwargs, files, cache_dir, record_fingerprint)


def load_or_build_source_indices(source, *, cache_dir: str | os.PathLike | None, label: str = "sampling indices",
                                 **build_kwargs) -> SamplingIndices:
    """:func:`load_or_build_indices` of a token source's lengths, keyed by what they are read
    from (a pair's ``.idx``, not its ``.bin``: token_source.lengths_identity) and their digest
    (token_source.lengths_digest: a warm open of a pair copies none of its lengths)."""
    folder = os.fspath(cache_dir) if cache_dir is not None else None
    return load_or_build_indices(lambda: lengths_to_build_from(source, folder), cache_dir=cache_dir,
                                 identity=lengths_identity(source),
                                 files=index_files(source), label=label, num_sequences=sequence_count(source),
                                 lengths_digest=lengths_digest(source), record_fingerprint=True, **build_kwargs)


# --- from indices to tokens --------------------------------------------------------------------

def _as_sample_ids(indices: SamplingIndices, sample_ids) -> np.ndarray:
    ids = np.asarray(sample_ids)
    if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
        raise ParameterError(f"sample_ids must be a 1-D integer array, got dtype {ids.dtype} shape {ids.shape}")
    ids = ids.astype(np.int64, copy=False)
    if ids.size and (ids.min() < 0 or ids.max() >= indices.num_samples):
        bad = ids[(ids < 0) | (ids >= indices.num_samples)][0]
        raise ParameterError(f"sample id {int(bad)} out of range: training sees samples 0..{indices.num_samples - 1}")
    return ids


def sample_pieces(indices: SamplingIndices, sequence_lengths: np.ndarray, sample_ids, keep_empty: bool = False
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of sequences that make up samples at training positions ``sample_ids``.

    Positions are looked up in the shuffle index first, as ``GPTDataset[idx]`` does. Returns
    ``(sequence_ids, offsets, lengths, pieces_per_sample)``, int64, all samples' pieces
    concatenated in order: a sample runs from its start row to the next row plus the extra
    token, through the rest of its first sequence, whole sequences between and the head of
    its last. Empty pieces (empty sequences, an exhausted sequence it starts on) are left out
    unless ``keep_empty``.
    """
    ids = _as_sample_ids(indices, sample_ids)
    extra = int(indices.add_extra_token)
    # Plain ndarray views: indexing the np.memmap subclass of a cached index costs more than
    # the lookup itself, and this runs once per table of (often a few dozen) samples.
    shuffle_index, sample_index, document_index = (
        np.asarray(a) for a in (indices.shuffle_index, indices.sample_index, indices.document_index))
    rows = shuffle_index[ids].astype(np.int64)
    _check_used("shuffle_index", rows, 0, indices.total_samples - 1, rows >= 0)
    begin = sample_index[rows].astype(np.int64, copy=False)
    end = sample_index[rows + 1].astype(np.int64, copy=False)
    _check_used("sample_index", begin[:, 0], 0, len(document_index) - 1,
                (end[:, 0] >= begin[:, 0]) & (end[:, 0] < len(document_index)) & (begin[:, 1] >= 0) & (end[:, 1] >= 0))
    spans = end[:, 0] - begin[:, 0] + 1  # document-index positions each sample touches
    last_piece = np.cumsum(spans)
    last_piece -= 1
    first_piece = last_piece - spans + 1
    positions = np.arange(int(spans.sum()), dtype=np.int64)
    positions += np.repeat(begin[:, 0] - first_piece, spans)
    sequence_ids = document_index[positions].astype(np.int64)
    offsets = np.zeros(len(positions), np.int64)
    offsets[first_piece] = begin[:, 1]
    # Only the lengths of the sequences touched: converting the whole table would cost
    # O(sequences) per call.
    # ``sequence_lengths`` may be a view that reads entries as asked (token_source.lengths_view).
    piece_ends = np.asarray(sequence_lengths[sequence_ids], np.int64)
    piece_ends[last_piece] = end[:, 1] + extra
    lengths = piece_ends - offsets
    keep = lengths > 0
    if keep_empty or keep.all():
        return sequence_ids, offsets, lengths, spans
    sample_of_piece = np.repeat(np.arange(len(ids)), spans)
    pieces_per_sample = np.bincount(sample_of_piece[keep], minlength=len(ids)).astype(np.int64)
    return sequence_ids[keep], offsets[keep], lengths[keep], pieces_per_sample


def _check_used(name: str, values: np.ndarray, low: int, high: int, also: np.ndarray) -> None:
    """The index entries a read is about to use are in range: indices loaded from a cache are
    checked where they are used, O(rows), instead of whole at every open. (Sequence ids and
    offsets are checked against the lengths by every read_pieces.)"""
    bad = (values < low) | (values > high) | ~also
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise FormatError("sampling indices", f"{name} entry used for sample {k} of the read",
                          f"values in [{low}, {high}] that fit the other indices", int(values[k]),
                          hint="the index cache is damaged or was built for other data; delete it to rebuild")


def assemble_samples(source, indices: SamplingIndices, sample_ids) -> np.ndarray:
    """Tokens of the samples at training positions ``sample_ids``: ``(len(sample_ids),
    sample_length)`` in ``source.dtype``, read with one ``source.read_pieces`` call.

    ``source`` offers ``sequence_lengths``, ``dtype`` and ``read_pieces(sequence_ids,
    offsets, lengths, out=None)`` (an IndexedFile, a source.Concatenated or a raw source).
    """
    sequence_ids, offsets, lengths, _ = sample_pieces(indices, lengths_view(source), sample_ids)
    out = np.empty(int(lengths.sum()), source.dtype)
    source.read_pieces(sequence_ids, offsets, lengths, out=out)
    return out.reshape(-1, indices.sample_length)


def document_structure(indices: SamplingIndices, sequence_lengths: np.ndarray, sample_ids
                       ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Where sequences (documents) start inside each sample, for packed attention.

    Returns ``position_ids`` (``(batch, sample_length)`` int32, counting from 0 at the
    sample's start and again at every sequence that starts inside it) and, per sample, the
    int32 lengths of its pieces (they sum to ``sample_length``; ``cu_seqlens`` is their
    cumulative sum with a leading 0). Zero-length pieces are kept (an empty sequence inside a
    sample; with ``add_extra_token=False`` a sample starting at a sequence's end), one per
    document-index position the sample touches, exactly as megatron-core's
    ``document_lengths`` (and so its ``cu_seqlens``) list them.
    """
    _, _, lengths, pieces_per_sample = sample_pieces(indices, sequence_lengths, sample_ids, keep_empty=True)
    flat = np.arange(int(lengths.sum()), dtype=np.int64)
    flat -= np.repeat(np.cumsum(lengths) - lengths, lengths)
    position_ids = flat.astype(np.int32).reshape(-1, indices.sample_length)
    piece_lengths = np.split(lengths.astype(np.int32), np.cumsum(pieces_per_sample)[:-1])
    return position_ids, piece_lengths


def iter_reference_samples(source, indices: SamplingIndices) -> Iterator[np.ndarray]:
    """Every training sample in order, one array each, written plainly from megatron-core's
    ``_query_document_sample_shuffle_indices`` with a loop per sample: slow, readable, the
    reference the vectorised path is tested against."""
    extra = int(indices.add_extra_token)
    for i in range(indices.num_samples):
        j = int(indices.shuffle_index[i])
        first, first_offset = (int(v) for v in indices.sample_index[j])
        last, last_offset = (int(v) for v in indices.sample_index[j + 1])
        parts = []
        for position in range(first, last + 1):
            sequence = int(indices.document_index[position])
            start = first_offset if position == first else 0
            stop = last_offset + extra if position == last else int(lengths_view(source)[[sequence]][0])
            parts.append(source.read_pieces([sequence], [start], [stop - start]))
        yield np.concatenate(parts)
