"""fairseq's ``--max-tokens`` batches of sentence pairs, as ``task.get_batch_iterator(...)``
makes them and ``next_epoch_itr(shuffle=True)`` serves them, epoch after epoch.

For pairs of source and target lengths (EOS included), fairseq 0.12:

1. **orders** the pairs: a permutation drawn after ``numpy.random.seed(s)``, stably sorted
   by target length, then by source length (``LanguagePairDataset.ordered_indices``);
2. **filters** pairs longer than ``max_positions`` on either side: dropped with
   ``ignore_invalid_inputs``, refused without (``filter_indices_by_size``);
3. **cuts** that order into runs whose padded size ``len(run) * max(max(src, tgt))`` stays
   within ``max_tokens``, at most ``max_sentences`` long, and ended on multiples of
   ``required_batch_size_multiple`` where the limits allow (``batch_by_size_vec``);
4. keeps those batches for every epoch and **shuffles their order** per epoch after
   ``numpy.random.seed(seed + epoch)`` (``EpochBatchIterator``, epochs counted from 1);
5. with several data-parallel ranks, **deals** them out: every ``num_shards``-th batch to a
   rank, short ranks padded with empty batches (``ShardedIterator(fill_value=[])``).

Steps 1 and 3 differ between the two fairseq 0.12 codes one can install, hence
``fairseq_version``:

==================  ===========================================  ======================
                    ``"0.12.3.1"`` (fairseq-fixed, the default;  ``"0.12.2"`` (PyPI)
                    what the differential tests run)
step 1 seed ``s``   ``seed + start_epoch`` (the epoch the         ``seed``
                    iterator was made at: 1, or a resumed one)
step 3 last batch   dropped when its size is not a multiple      kept
==================  ===========================================  ======================

Pure numpy: arrays and seeds in, arrays out. Never imports ``datasets`` or ``torch``.
"""

from __future__ import annotations

import numbers

import numpy as np

from ..checks import SEED_LIMIT, check_int, check_seed
from ..errors import ParameterError

FAIRSEQ_VERSIONS = ("0.12.3.1", "0.12.2")

__all__ = ["FAIRSEQ_VERSIONS", "batch_by_size", "filter_by_size", "max_tokens_batches", "ordered_indices",
           "shard_batches"]


def _check_version(fairseq_version: str) -> str:
    if fairseq_version not in FAIRSEQ_VERSIONS:
        raise ParameterError(f"fairseq_version must be one of {', '.join(map(repr, FAIRSEQ_VERSIONS))}, "
                             f"got {fairseq_version!r}")
    return fairseq_version


def ordered_indices(src_sizes, tgt_sizes=None, seed: int | None = 1, shuffle: bool = True) -> np.ndarray:
    """``LanguagePairDataset.ordered_indices`` with numpy seeded by ``seed``: a seeded
    permutation (or ``arange`` without ``shuffle``), stably sorted by target length, then by
    source length, so that pairs of equal lengths keep the permutation's order."""
    src_sizes = np.asarray(src_sizes)
    n = len(src_sizes)
    if shuffle:
        # numpy.random.seed(s); numpy.random.permutation(n) draws from this same stream.
        indices = np.random.RandomState(seed).permutation(n).astype(np.int64)
    else:
        indices = np.arange(n, dtype=np.int64)
    if tgt_sizes is not None:
        indices = indices[np.argsort(np.asarray(tgt_sizes)[indices], kind="mergesort")]
    return indices[np.argsort(src_sizes[indices], kind="mergesort")]


def _max_positions_pair(max_positions) -> tuple[float, float]:
    if isinstance(max_positions, numbers.Real) and not isinstance(max_positions, bool):
        return max_positions, max_positions
    try:
        source, target = max_positions
    except (TypeError, ValueError):
        source = target = None
    if not all(isinstance(m, numbers.Real) and not isinstance(m, bool) for m in (source, target)):
        raise ParameterError(f"max_positions must be a number or a (source, target) pair of numbers, "
                             f"got {max_positions!r}")
    return source, target


def filter_by_size(indices, src_sizes, tgt_sizes, max_positions,
                   ignore_invalid_inputs: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """fairseq's ``filter_indices_by_size`` for pairs: ``(kept, ignored)``, both in the order
    of ``indices``; a pair is ignored when its source is longer than ``max_positions``'s
    source limit or its target longer than its target limit (one number limits both).

    Without ``ignore_invalid_inputs`` an ignored pair raises :class:`ParameterError` naming
    the first one, as fairseq raises for it. ``max_positions=None`` keeps every pair.
    """
    indices = np.asarray(indices, np.int64)
    if max_positions is None:
        return indices, indices[:0]
    max_source, max_target = _max_positions_pair(max_positions)
    src_sizes = np.asarray(src_sizes)
    too_long = src_sizes[indices] > max_source
    if tgt_sizes is not None:
        tgt_sizes = np.asarray(tgt_sizes)
        too_long |= tgt_sizes[indices] > max_target
    ignored = indices[too_long]
    if len(ignored) and not ignore_invalid_inputs:
        first = int(ignored[0])
        sizes = (f"source {int(src_sizes[first])}" +
                 ("" if tgt_sizes is None else f", target {int(tgt_sizes[first])}"))
        raise ParameterError(f"pair {first} has {sizes} tokens, more than max_positions={max_positions!r} "
                             f"({len(ignored)} pair(s) too long); pass ignore_invalid_inputs=True to skip "
                             "them, as fairseq's --skip-invalid-size-inputs-valid-test does")
    return indices[~too_long], ignored


def batch_by_size(indices, num_tokens, max_tokens: int | None = None, max_sentences: int | None = None,
                  required_batch_size_multiple: int = 1, *,
                  fairseq_version: str = FAIRSEQ_VERSIONS[0]) -> list[np.ndarray]:
    """fairseq's ``data_utils.batch_by_size`` on a vector of token counts: ``indices`` (in
    order) cut into batches, ``num_tokens[k]`` being the size of ``indices[k]``.

    A batch of ``n`` examples costs ``n * max(num_tokens)`` padded tokens, at most
    ``max_tokens``, and holds at most ``max_sentences`` examples (None: no limit). Batches
    end on multiples of ``required_batch_size_multiple`` where the limits allow; with
    ``fairseq_version="0.12.3.1"`` a last batch whose size is not such a multiple is dropped.
    An example longer than ``max_tokens`` raises :class:`ParameterError` (fairseq asserts).
    """
    _check_version(fairseq_version)
    max_tokens = check_int("max_tokens", max_tokens, 1, "or None for no limit", allow_none=True)
    max_sentences = check_int("max_sentences", max_sentences, 1, "or None for no limit", allow_none=True)
    multiple = check_int("required_batch_size_multiple", required_batch_size_multiple, 1)
    indices = np.asarray(indices, np.int64)
    num_tokens = np.asarray(num_tokens, np.int64)
    if indices.shape != num_tokens.shape or indices.ndim != 1:
        raise ParameterError(f"indices and num_tokens must be two vectors of one length, "
                             f"got shapes {indices.shape} and {num_tokens.shape}")
    if len(indices) == 0:
        return []  # fairseq 0.12.3.1 fails here (IndexError on the empty list)
    if max_tokens is not None and num_tokens.max() > max_tokens:
        k = int(np.argmax(num_tokens))
        raise ParameterError(f"example {int(indices[k])} has {int(num_tokens[k])} tokens, more than "
                             f"max_tokens={max_tokens}; raise max_tokens, or filter long examples first "
                             "(max_positions)")
    ends = _batch_ends(num_tokens.tolist(), max_tokens, max_sentences, multiple)
    batches = np.split(indices, ends)
    if fairseq_version != "0.12.2" and multiple > 1 and len(batches[-1]) % multiple:
        batches.pop()
    return batches


def _batch_ends(sizes: list[int], max_tokens: int | None, max_sentences: int | None,
                multiple: int) -> list[int]:
    """The positions where batches end, but for the last one (``len(sizes)``: np.split adds it).

    One pass keeps the last complete batch ``[start, ends[-1])`` and the tail after it. The
    tail joins the batch whenever the batch's new size is a multiple (or below one); when
    batch plus tail break a limit, the batch is closed and the tail starts the next one,
    unless the tail breaks ``max_tokens`` by itself: then the tail without the current
    example is closed too, and the current example starts the next batch. So batches end on
    multiples where they can, and a batch that cannot fill a multiple still closes.
    """
    ends = [0]   # ends[-1] is the end of the batch being grown; the others are closed
    start = 0
    batch_max = tail_max = 0
    for pos, size in enumerate(sizes):
        tail_max = max(tail_max, size)
        count = pos + 1 - start
        longest = max(batch_max, tail_max)
        overflow = ((max_sentences is not None and count > max_sentences) or
                    (max_tokens is not None and count * longest > max_tokens))
        if overflow:
            if max_tokens is not None and tail_max * (pos + 1 - ends[-1]) > max_tokens:
                ends.append(pos)
                tail_max = size
            start = ends[-1]
            ends.append(pos + 1)
            batch_max, tail_max = tail_max, 0
        elif count < multiple or count % multiple == 0:
            ends[-1] = pos + 1
            batch_max, tail_max = longest, 0
    if ends[-1] == len(sizes):
        ends.pop()   # np.split adds the last piece itself
    return ends


def max_tokens_batches(src_sizes, tgt_sizes, max_tokens: int | None, seed: int = 1, epoch: int = 1, *,
                       max_sentences: int | None = None, required_batch_size_multiple: int = 1,
                       max_positions=None, ignore_invalid_inputs: bool = False, start_epoch: int = 1,
                       shuffle: bool = True, num_shards: int = 1, shard_id: int = 0, grouped_shuffling: bool = False,
                       fairseq_version: str = FAIRSEQ_VERSIONS[0]) -> list[np.ndarray]:
    """The batches of pair ids fairseq trains on in ``epoch``: what
    ``task.get_batch_iterator(dataset, max_tokens, max_sentences, max_positions,
    ignore_invalid_inputs, required_batch_size_multiple, seed, epoch=start_epoch)
    .next_epoch_itr(shuffle=shuffle)`` serves in that epoch, for a ``LanguagePairDataset``
    with these sizes (``tgt_sizes`` None: source only). Epochs count from 1.

    ``start_epoch`` is the epoch the iterator was made at (1, or the epoch training resumed
    at): fairseq makes the batches once then and only reorders them later. Without
    ``shuffle`` (``LanguagePairDataset(shuffle=False)``, fairseq's test split) neither the
    pairs nor the batches are shuffled. ``max_positions`` (a number, or source and target
    limits) is passed as given: fairseq's trainer lowers the model's limits to ``max_tokens``
    first (``resolve_max_positions``). Use the result as a ``batch_sampler``; fairseq's
    training defaults are ``seed=1``, ``required_batch_size_multiple=8``.

    With ``num_shards`` data-parallel ranks, the result is rank ``shard_id``'s batches
    (``get_batch_iterator(num_shards=, shard_id=)``): every rank shuffles all batches alike
    and takes every ``num_shards``-th, and a rank left one short gets an empty batch at the
    end (see :func:`shard_batches`), so that all ranks run the same number of steps.
    ``grouped_shuffling`` (fairseq's ``--grouped-shuffling``) shuffles runs of
    ``num_shards`` consecutive batches as units, so the ranks of one step get batches of
    similar lengths; as in fairseq, batches after the last whole run are left out.
    """
    _check_version(fairseq_version)
    start_epoch = check_int("start_epoch", start_epoch, 1)
    epoch = check_int("epoch", epoch, start_epoch)
    seed = check_seed(seed)
    if seed + epoch >= SEED_LIMIT:  # fairseq seeds numpy with seed + epoch (data_utils.numpy_seed)
        raise ParameterError(f"seed={seed} with epoch={epoch}: fairseq seeds numpy with seed + epoch, which "
                             "numpy.random.RandomState takes below 2**32; use a smaller seed")
    src_sizes = np.asarray(src_sizes, np.int64)
    tgt_sizes = None if tgt_sizes is None else np.asarray(tgt_sizes, np.int64)
    if tgt_sizes is not None and len(tgt_sizes) != len(src_sizes):
        raise ParameterError(f"{len(src_sizes)} source sizes but {len(tgt_sizes)} target sizes")
    order_seed = seed if fairseq_version == "0.12.2" else seed + start_epoch
    indices = ordered_indices(src_sizes, tgt_sizes, seed=order_seed, shuffle=shuffle)
    indices, _ = filter_by_size(indices, src_sizes, tgt_sizes, max_positions, ignore_invalid_inputs)
    tokens = src_sizes[indices] if tgt_sizes is None else np.maximum(src_sizes[indices], tgt_sizes[indices])
    batches = batch_by_size(indices, tokens, max_tokens, max_sentences, required_batch_size_multiple,
                            fairseq_version=fairseq_version)
    num_shards, shard_id = _check_shard(num_shards, shard_id)
    if shuffle and grouped_shuffling:
        groups = [batches[k * num_shards:(k + 1) * num_shards] for k in range(len(batches) // num_shards)]
        np.random.RandomState(seed + epoch).shuffle(groups)
        batches = [batch for group in groups for batch in group]
    elif shuffle:
        np.random.RandomState(seed + epoch).shuffle(batches)
    return shard_batches(batches, num_shards, shard_id)


def _check_shard(num_shards, shard_id) -> tuple[int, int]:
    num_shards = check_int("num_shards", num_shards, 1)
    shard_id = check_int("shard_id", shard_id, 0)
    if shard_id >= num_shards:
        raise ParameterError(f"shard_id must lie in [0, num_shards={num_shards}), got {shard_id}")
    return num_shards, shard_id


def shard_batches(batches, num_shards: int, shard_id: int) -> list[np.ndarray]:
    """Rank ``shard_id``'s part of ``batches``: fairseq's ``ShardedIterator(batches,
    num_shards, shard_id, fill_value=[])``, i.e. ``batches[shard_id::num_shards]`` padded
    with empty batches to ``ceil(len(batches) / num_shards)``.

    The padding is what keeps distributed training in step: each rank runs as many steps
    as the longest one, an empty batch being a step without data (fairseq's trainer runs
    it as a dummy batch of weight 0). Plain slicing would leave ranks with unequal counts,
    and the rank with more steps would wait forever in its all-reduce.
    """
    num_shards, shard_id = _check_shard(num_shards, shard_id)
    batches = list(batches)
    mine = [np.asarray(b, np.int64) for b in batches[shard_id::num_shards]]
    steps = -(-len(batches) // num_shards)
    return mine + [np.zeros(0, np.int64) for _ in range(steps - len(mine))]
