"""The options of fairseq's ``load_langpair_dataset`` that change what a pair holds, and the
sizes fairseq batches them by.

fairseq wraps each side's dataset, in this order::

    truncate_source    source: StripTokenDataset(eos) -> TruncateDataset(max_source_positions - 1)
                       -> AppendTokenDataset(eos)          (per shard, before ConcatDataset)
    prepend_bos        both sides: PrependTokenDataset(bos)
    append_source_id   source: AppendTokenDataset(index("[src]")), target: ... index("[tgt]"),
                       and the collater's EOS becomes index("[tgt]")

Each wrapper computes its ``sizes`` from the one below, not from the items: under
``truncate_source`` a source's size is ``min(n, max_source_positions - 1) + 1`` even when
stripping removed more than one EOS. Batching uses those sizes, so :class:`PairItems`
keeps both rules apart: :meth:`source_sizes` as fairseq's ``sizes``, :meth:`source` as
its items. Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..checks import check_int
from ..errors import ParameterError

# fairseq's Dictionary always numbers its specials so.
BOS, PAD, EOS, UNK = 0, 1, 2, 3


@dataclass(frozen=True)
class PairItems:
    """Resolved item options: which ids go where. ``PairItems()`` changes nothing."""

    prepend_bos: bool = False
    truncate_source: bool = False
    max_source_positions: int = 1024
    source_id: int | None = None   # append_source_id: index("[src]") in the source dictionary
    target_id: int | None = None   # ... and index("[tgt]") in the target dictionary

    def __post_init__(self):
        if self.truncate_source:
            check_int("max_source_positions", self.max_source_positions, 1, "truncate_source cuts sources to it")

    @classmethod
    def langpair(cls, *, prepend_bos: bool = False, truncate_source: bool = False, max_source_positions: int = 1024,
                 append_source_id: bool = False, langs: tuple[str, str] | None = None,
                 dictionaries=None) -> "PairItems":
        """From ``load_langpair_dataset``'s arguments. ``append_source_id`` needs the
        languages and the (source, target) dictionaries: the ids of ``[src]`` and ``[tgt]``
        (``<unk>`` where a dictionary lacks them, as fairseq's ``index`` gives)."""
        source_id = target_id = None
        if append_source_id:
            if langs is None or dictionaries is None:
                raise ParameterError("append_source_id needs the languages and their dictionaries "
                                     "(dict.{src}.txt, dict.{tgt}.txt): the ids of [src] and [tgt]")
            source_id = dictionaries[0].index(f"[{langs[0]}]")
            target_id = dictionaries[1].index(f"[{langs[1]}]")
        return cls(bool(prepend_bos), bool(truncate_source), max_source_positions, source_id, target_id)

    @property
    def changes_items(self) -> bool:
        return self.prepend_bos or self.truncate_source or self.source_id is not None

    @property
    def collate_eos(self) -> int:
        """The EOS ``LanguagePairDataset`` collates with (moved to the front of
        ``prev_output_tokens``): ``[tgt]``'s id under ``append_source_id``."""
        return EOS if self.target_id is None else self.target_id

    def source_sizes(self, sizes: np.ndarray) -> np.ndarray:
        sizes = np.asarray(sizes, np.int64)
        if self.truncate_source:
            sizes = np.minimum(sizes, self.max_source_positions - 1) + 1
        return sizes + self.prepend_bos + (self.source_id is not None)

    def target_sizes(self, sizes: np.ndarray) -> np.ndarray:
        return np.asarray(sizes, np.int64) + self.prepend_bos + (self.target_id is not None)

    def source(self, ids: np.ndarray) -> np.ndarray:
        if not self.changes_items:
            return ids
        if self.truncate_source:
            ids = _strip(ids, EOS)[:self.max_source_positions - 1]
            ids = np.append(ids, EOS)
        return self._wrap(ids, self.source_id)

    def target(self, ids: np.ndarray) -> np.ndarray:
        return self._wrap(ids, self.target_id) if self.changes_items else ids

    def _wrap(self, ids: np.ndarray, suffix: int | None) -> np.ndarray:
        parts = ([np.array([BOS])] if self.prepend_bos else []) + [ids] + \
                ([np.array([suffix])] if suffix is not None else [])
        return np.concatenate(parts).astype(np.int64) if len(parts) > 1 else ids


def _strip(ids: np.ndarray, token: int) -> np.ndarray:
    """``StripTokenDataset``: ``token`` removed from both ends, as often as it is there."""
    keep = np.flatnonzero(ids != token)
    return ids[keep[0]:keep[-1] + 1] if keep.size else ids[:0]


__all__ = ["BOS", "EOS", "PAD", "UNK", "PairItems"]
