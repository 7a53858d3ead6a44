"""Sentence pairs -> the batch fairseq's ``LanguagePairDataset.collater`` makes for a step.

fairseq 0.12's ``language_pair_dataset.collate``, for pairs without alignments or
constraints::

    key                          shape        what
    id                           (B,)         pair ids, sorted by source length, longest first
    nsentences                   int          B
    ntokens                      int          target tokens that are not <pad> (source ones
                                              without targets)
    net_input.src_tokens         (B, S)       sources padded with <pad>, on the left by default
    net_input.src_lengths        (B,)         each source's tokens that are not <pad>
    net_input.prev_output_tokens (B, T)       targets shifted right: EOS first, last token
                                              dropped (teacher forcing; input_feeding)
    target                       (B, T)       targets padded, on the right by default

Rows are reordered by ``src_lengths`` with torch's descending ``sort``, which is not stable:
rows of equal source length come in the order torch's sort leaves them, so this calls the
same sort rather than a stable one. An empty batch (a padded step of a short rank, see
``fairseq_batches.shard_batches``) collates to ``{}``, as in fairseq.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..checks import check_int
from ..errors import ParameterError
from .items import EOS, PAD
from ..extras import require_torch

__all__ = ["FairseqCollater"]


class FairseqCollater:
    """``collate_fn`` giving fairseq's translation batches (see the module docstring).

    Args mirror ``LanguagePairDataset``'s: ``left_pad_source`` (True) and
    ``left_pad_target`` (False) are fairseq-train's defaults, ``pad_to_multiple`` is its
    ``--required-seq-len-multiple``, ``pad_to_length`` a ``{"source": n, "target": m}``
    minimum width. ``eos`` is what ``prev_output_tokens`` starts with: ``[tgt]``'s id under
    ``append_source_id`` (``LanguagePairs.collater()`` sets it).

    Samples are rows ``{"id", "source", "target"}`` (lists, numpy arrays or tensors; a
    ``datasets`` row) or a dict of such columns (``dataset[batch_ids]``).
    """

    def __init__(self, pad: int = PAD, eos: int = EOS, left_pad_source: bool = True, left_pad_target: bool = False,
                 input_feeding: bool = True, pad_to_multiple: int = 1, pad_to_length: Mapping | None = None):
        self.torch = require_torch("FairseqCollater")
        check_int("pad_to_multiple", pad_to_multiple, 1)
        if pad_to_length is not None and not set(pad_to_length) <= {"source", "target"}:
            raise ParameterError(f"pad_to_length takes the keys 'source' and 'target', got {sorted(pad_to_length)}")
        self.pad, self.eos = int(pad), int(eos)
        self.left_pad_source, self.left_pad_target = bool(left_pad_source), bool(left_pad_target)
        self.input_feeding = bool(input_feeding)
        self.pad_to_multiple = pad_to_multiple
        self.pad_to_length = dict(pad_to_length or {})

    def __call__(self, samples) -> dict:
        rows = _rows(samples)
        if not rows:
            return {}
        torch = self.torch
        sources = [_ids(row, "source") for row in rows]
        has_target = rows[0].get("target") is not None
        ids = torch.tensor([int(row["id"]) for row in rows], dtype=torch.long)
        src_lengths = torch.tensor([int((s != self.pad).sum()) for s in sources], dtype=torch.long)
        src_lengths, order = src_lengths.sort(descending=True)   # fairseq's own (unstable) sort
        order_np = order.numpy()
        batch = {"id": ids.index_select(0, order), "nsentences": len(rows), "ntokens": None,
                 "net_input": {"src_tokens": self._merge(sources, self.left_pad_source, "source")[order_np],
                               "src_lengths": src_lengths},
                 "target": None}
        if has_target:
            targets = [_ids(row, "target") for row in rows]
            batch["target"] = self._merge(targets, self.left_pad_target, "target")[order_np]
            batch["ntokens"] = int(sum(int((t != self.pad).sum()) for t in targets))
            if self.input_feeding:
                shifted = [np.concatenate(([self.eos], t[:-1])) if len(t) else t for t in targets]
                batch["net_input"]["prev_output_tokens"] = \
                    self._merge(shifted, self.left_pad_target, "target")[order_np]
        else:
            batch["ntokens"] = int(src_lengths.sum())
        if batch["target"] is not None:
            batch["target"] = torch.from_numpy(batch["target"])
        net_input = batch["net_input"]
        for key in ("src_tokens", "prev_output_tokens"):
            if key in net_input:
                net_input[key] = torch.from_numpy(net_input[key])
        return batch

    def _merge(self, values: list[np.ndarray], left_pad: bool, side: str) -> np.ndarray:
        """``data_utils.collate_tokens``: one row per value, padded to the longest (at least
        ``pad_to_length``), the width rounded up to ``pad_to_multiple``."""
        width = max(len(v) for v in values)
        width = max(width, self.pad_to_length.get(side) or 0)
        width = -(-width // self.pad_to_multiple) * self.pad_to_multiple
        out = np.full((len(values), width), self.pad, np.int64)
        for row, value in zip(out, values):
            if left_pad:
                row[width - len(value):] = value
            else:
                row[:len(value)] = value
        return out


def _rows(samples) -> list:
    if isinstance(samples, Mapping):   # a dict of columns
        keys = list(samples)
        return [dict(zip(keys, values)) for values in zip(*(samples[k] for k in keys))]
    return list(samples)


def _ids(row, key: str) -> np.ndarray:
    value = row[key]
    if hasattr(value, "numpy"):
        value = value.numpy()
    return np.asarray(value, np.int64).reshape(-1)
