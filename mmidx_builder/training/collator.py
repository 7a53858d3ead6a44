"""Rows of our datasets -> the batch megatron-core's GPTDataset gives a training step.

megatron-core 0.19's ``GPTDataset.__getitem__`` turns a sample of ``seq_length + 1`` tokens
into ``tokens``/``labels`` and, through ``_get_ltor_masks_and_position_ids``, a loss mask,
position ids and an attention mask; with ``inter_document_masking`` it returns ``cu_seqlens``
and ``max_seqlen`` instead of the mask. Megatron's loader stacks those items with torch's
``default_collate``. :class:`MegatronCollator` makes the same dict from our rows, for a
whole micro-batch at once (numpy inside, torch tensors out):

    key             shape            dtype     when
    tokens          (B, S)           int64     always
    labels          (B, S)           int64     always
    attention_mask  (B, 1, S, S)     bool      create_attention_mask and not inter_document_masking
                                               (True = masked, Megatron's convention)
    loss_mask       (B, S)           float32   always
    position_ids    (B, S)           int64     always
    cu_seqlens      (B, S + 1)       int32     inter_document_masking (padded with S)
    max_seqlen      (B,)             int32     inter_document_masking
    dataset_id      (B,)             int16     rows with a dataset_id (a blend's part, as
                                               BlendedDataset adds it; 0 in a split of the same
                                               dataset that is not a blend, where Megatron has none)

Two notions of "document", as in megatron-core:
- ``reset_position_ids``, ``reset_attention_mask`` and ``eod_mask_loss`` look at EOD *tokens*:
  positions restart after every EOD token, wherever it sits (an EOD inside a document counts;
  a document that does not end with EOD does not restart anything).
- ``inter_document_masking`` follows the *sequence boundaries* of the ``.idx`` (the pieces
  GPTDataset glued into the sample): rows must carry ``piece_lengths``
  (``document_structure=True``). Their lengths count the extra token (they sum to
  ``seq_length + 1``); megatron-core subtracts it from the last piece, and so does this.
  Zero-length pieces (an empty sequence inside a sample, or, with ``add_extra_token=False``, a
  sample that starts exactly where a sequence ends) are repeated ``cu_seqlens`` entries in
  megatron-core, and the rows carry them too, so ``cu_seqlens`` is equal entry for entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..sources import provenance
from ..checks import check_bool, check_int
from ..errors import ParameterError
from ..megatron.args import COLLATOR_DEFAULTS, resolve
from ..extras import require_torch

__all__ = ["MegatronCollator"]

_FLAGS = ("reset_position_ids", "reset_attention_mask", "eod_mask_loss", "create_attention_mask",
          "inter_document_masking", "add_extra_token")


class MegatronCollator:
    """``collate_fn`` giving megatron-core 0.19 ``GPTDataset`` batches (see the module docstring).

    Args mirror ``GPTDatasetConfig``: ``eod_id`` is the tokenizer's ``eod``; ``pad_id`` is
    GPTDataset's pad id after its collision check (-1 unless the tokenizer has a pad token
    distinct from EOD): labels equal to it get no loss, and it is replaced by 0 in tokens
    and labels. ``add_extra_token`` must match how the rows were made (Megatron's
    ``add_extra_token_to_sequence``). Given ``dataset=`` (a ``datasets`` Dataset or
    IterableDataset from this package's builder, or a :func:`megatron_rank_stream`),
    ``eod_id=None`` takes the EOD id ``mmidx convert`` recorded, and a mismatching
    ``add_extra_token`` is refused.

    Rows may be dicts of lists, numpy arrays or torch tensors (any ``with_format``), Arrow
    tables of one row each, one Arrow table of many rows, or a dict of columns (a batch).

    The defaults here are the plain ones (no flag on, no attention mask); a Megatron-LM
    command line's flags, with Megatron-LM's defaults, come from :meth:`from_megatron_args`.
    """

    def __init__(self, eod_id: int | None = None, reset_position_ids: bool = False,
                 reset_attention_mask: bool = False, eod_mask_loss: bool = False,
                 create_attention_mask: bool = False, inter_document_masking: bool = False,
                 add_extra_token: bool = True, pad_id: int = -1, *, dataset=None):
        self.torch = require_torch("MegatronCollator")
        flags = dict(reset_position_ids=reset_position_ids, reset_attention_mask=reset_attention_mask,
                     eod_mask_loss=eod_mask_loss, create_attention_mask=create_attention_mask,
                     inter_document_masking=inter_document_masking, add_extra_token=add_extra_token)
        for name, value in flags.items():
            setattr(self, name, check_bool(name, value))
        if dataset is not None:
            eod_id = self._from_dataset(dataset, eod_id)
        if eod_id is None:
            raise ParameterError("MegatronCollator needs eod_id (the tokenizer's end-of-document id), or "
                                 "dataset= a dataset whose files `mmidx convert` made (it records the id)")
        self.eod_id = check_int("eod_id", eod_id)
        self.pad_id = check_int("pad_id", pad_id)
        if self.pad_id == self.eod_id:
            raise ParameterError(f"pad_id {self.pad_id} equals eod_id: megatron-core refuses a pad id that collides "
                                 "with EOD and uses -1 instead; pass pad_id=-1")

    @classmethod
    def from_megatron_args(cls, megatron_args, *, megatron_version: str | None = None, add_extra_token: bool = True,
                           dataset=None, **explicit) -> "MegatronCollator":
        """The collator of a Megatron-LM command line (a string or a list of tokens), as its
        GPTDatasetConfig would make the batches: ``--reset-position-ids``,
        ``--reset-attention-mask``, ``--eod-mask-loss``, ``--dataloader-inter-document-masking``,
        and the attention mask unless ``--no-create-attention-mask-in-dataloader`` (Megatron-LM's
        default), read by :func:`mmidx_builder.megatron.resolve`; a NullTokenizer's
        ``--vocab-size`` gives ``eod_id`` and ``pad_id``. Keywords (``reset_position_ids=``,
        ``create_attention_mask=``, ``eod_id=``, ``pad_id=``...) override the command line.
        ``dataset=`` and ``add_extra_token`` are as for ``MegatronCollator(...)``; with neither
        a NullTokenizer nor ``eod_id=``, the EOD id comes from ``dataset=``."""
        not_flags = sorted(set(explicit) - set(COLLATOR_DEFAULTS))
        if not_flags:
            raise ParameterError(
                f"{', '.join(f'{name}=' for name in not_flags)} is not one of MegatronCollator's keywords "
                f"({', '.join(f'{name}=' for name in COLLATOR_DEFAULTS)}); the samples' settings go to load_dataset")
        flags = resolve(megatron_args, megatron_version=megatron_version, **explicit).collator_flags
        return cls(**flags, add_extra_token=add_extra_token, dataset=dataset)

    def _from_dataset(self, dataset, eod_id):
        record = provenance.dataset_record(getattr(dataset, "dataset", dataset))
        if record is None:
            if eod_id is None:
                raise ParameterError("the dataset records no EOD id (it was not loaded with this package's "
                                     "builder); pass eod_id")
            return eod_id
        made_with = record.get("order", {}).get("add_extra_token")
        if made_with is not None and bool(made_with) != self.add_extra_token:
            raise ParameterError(f"add_extra_token={self.add_extra_token} but the dataset's rows were made with "
                                 f"add_extra_token={made_with}; pass add_extra_token={made_with}")
        if eod_id is None:
            eod_id = record.get("eod_id")
            if eod_id is None:
                raise ParameterError(
                    "the dataset records no EOD id: its files have no .mmidx-info sidecar (made by Megatron's "
                    "preprocess_data, or files of different tokenizers); pass eod_id")
        return eod_id

    def __repr__(self) -> str:
        flags = ", ".join(f"{name}={getattr(self, name)}" for name in _FLAGS)
        return f"MegatronCollator(eod_id={self.eod_id}, {flags}, pad_id={self.pad_id})"

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("torch")  # a module does not pickle (DataLoader workers started by spawn)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.torch = require_torch("MegatronCollator")

    def __call__(self, rows) -> dict:
        input_ids, piece_lengths = _columns(rows, need_pieces=self.inter_document_masking)
        batch = self.collate_arrays(input_ids, piece_lengths)
        dataset_ids = _dataset_ids(rows)
        if dataset_ids is not None:  # BlendedDataset's items carry the part's index
            batch["dataset_id"] = self.torch.from_numpy(dataset_ids)
        return batch

    def collate_arrays(self, input_ids: np.ndarray, piece_lengths=None) -> dict:
        """The batch for a ``(B, sample_length)`` array of rows and their ``piece_lengths`` (a
        list per row, or ``(every row's lengths end to end, pieces per row)``)."""
        torch = self.torch
        text = np.asarray(input_ids, dtype=np.int64)
        if text.ndim != 2:
            raise ParameterError(f"input_ids must be a (batch, sample_length) array, got shape {text.shape}")
        extra = int(self.add_extra_token)
        batch, length = text.shape
        seq_length = length - extra
        if seq_length < 1:
            raise ParameterError(f"rows of {length} tokens are too short for add_extra_token={self.add_extra_token}")
        if extra:
            tokens, labels = text[:, :-1].copy(), text[:, 1:].copy()
        else:
            tokens, labels = text.copy(), np.roll(text, -1, axis=1)
            labels[:, -1] = self.pad_id
        eod = tokens == self.eod_id
        loss_mask = np.ones((batch, seq_length), np.float32)
        if self.eod_mask_loss:
            loss_mask[eod] = 0.0
        positions = np.broadcast_to(np.arange(seq_length, dtype=np.int64), (batch, seq_length)).copy()
        if self.reset_position_ids:
            # After an EOD at t, positions count again from t + 1.
            restart = np.where(eod, np.arange(1, seq_length + 1, dtype=np.int64), 0)
            positions[:, 1:] -= np.maximum.accumulate(restart[:, :-1], axis=1)
        attention_mask = None
        if self.create_attention_mask and not self.inter_document_masking:
            attention_mask = _attention_mask(eod if self.reset_attention_mask else None, batch, seq_length)
        # GPTDataset's pad handling, after the masks were computed from the unpadded tokens.
        loss_mask[labels == self.pad_id] = 0.0
        tokens[tokens == self.pad_id] = 0
        labels[labels == self.pad_id] = 0

        out = {"tokens": torch.from_numpy(tokens), "labels": torch.from_numpy(labels)}
        if self.inter_document_masking:
            if piece_lengths is None:
                raise ParameterError("inter_document_masking needs rows with piece_lengths: load the dataset with "
                                     "document_structure=True")
            cu_seqlens, max_seqlen, positions = _document_boundaries(piece_lengths, length, seq_length, extra)
            out.update(loss_mask=torch.from_numpy(loss_mask), position_ids=torch.from_numpy(positions),
                       cu_seqlens=torch.from_numpy(cu_seqlens), max_seqlen=torch.from_numpy(max_seqlen))
            return out
        if attention_mask is not None:
            out["attention_mask"] = torch.from_numpy(attention_mask)
        out.update(loss_mask=torch.from_numpy(loss_mask), position_ids=torch.from_numpy(positions))
        return out


def _attention_mask(eod, batch: int, seq_length: int) -> np.ndarray:
    """``(B, 1, S, S)`` bool, True = masked: causal, and with ``eod`` given (reset_attention_mask)
    no attention across an EOD. Written in place in two whole-array passes (a 16 x 2048
    micro-batch's mask is 64 MiB: a temporary per step would double the memory traffic)."""
    out = np.empty((batch, 1, seq_length, seq_length), bool)
    causal = np.triu(np.ones((seq_length, seq_length), bool), k=1)  # a key after the query
    if eod is None:
        out[:, 0] = causal
        return out
    # segment t = number of EODs before t; int16/int32 keeps the (B, S, S) comparison narrow.
    segment = np.zeros((batch, seq_length), np.int16 if seq_length < 2**15 else np.int32)
    np.cumsum(eod[:, :-1], axis=1, out=segment[:, 1:])
    np.not_equal(segment[:, :, None], segment[:, None, :], out=out[:, 0])
    out[:, 0] |= causal
    return out


def _document_boundaries(piece_lengths, length: int, seq_length: int, extra: int):
    """``cu_seqlens`` (padded to ``seq_length + 1`` entries with ``seq_length``), ``max_seqlen``
    and per-document position ids, as GPTDataset derives them from its document lengths.
    ``piece_lengths`` is ``(flat lengths, pieces per row)`` or a list of per-row lengths; the
    work is whole-array numpy, no Python per row."""
    flat, counts = _flat_pieces(piece_lengths)
    batch = len(counts)
    starts = np.concatenate(([0], np.cumsum(counts[:-1]))).astype(np.int64)
    bad = np.flatnonzero(counts == 0)
    if not bad.size:  # (reduceat needs every row to hold a piece)
        bad = np.flatnonzero((np.add.reduceat(flat, starts) != length) | (np.minimum.reduceat(flat, starts) < 0))
    if bad.size:
        b = int(bad[0])
        raise ParameterError(f"row {b}: piece_lengths {flat[starts[b]:starts[b] + counts[b]].tolist()} do not sum "
                             f"to the row's {length} tokens; rows and piece_lengths must come from the same dataset "
                             "(document_structure=True)")
    if extra:  # the extra token belongs to the labels, not to the tokens cu_seqlens indexes
        flat = flat.copy()
        last = starts + counts - 1
        flat[last] -= 1
        emptied = np.flatnonzero(flat[last] == 0)  # rows whose last piece held only the extra token
        if emptied.size:
            flat = np.delete(flat, last[emptied])
            counts = counts.copy()
            counts[emptied] -= 1
            starts = np.concatenate(([0], np.cumsum(counts[:-1]))).astype(np.int64)
    if counts.max(initial=0) > seq_length:
        raise ParameterError(f"a row has {int(counts.max())} document pieces, more than cu_seqlens' {seq_length} slots")
    # Every row's pieces now sum to seq_length, so the rows tile (B * S) tokens end to end.
    row_of = np.repeat(np.arange(batch), counts)
    ends = np.cumsum(flat)
    cu_seqlens = np.full((batch, seq_length + 1), seq_length, np.int32)
    cu_seqlens[:, 0] = 0
    cu_seqlens[row_of, 1 + np.arange(len(flat)) - starts[row_of]] = ends - row_of * seq_length
    max_seqlen = np.maximum.reduceat(flat, starts).astype(np.int32)
    positions = (np.arange(batch * seq_length) - np.repeat(ends - flat, flat)).reshape(batch, seq_length)
    return cu_seqlens, max_seqlen, positions


def _flat_pieces(piece_lengths) -> tuple[np.ndarray, np.ndarray]:
    """(every row's piece lengths end to end as int64, pieces per row) from either form."""
    if isinstance(piece_lengths, tuple):
        flat, counts = piece_lengths
        return np.asarray(flat, np.int64), np.asarray(counts, np.int64)
    rows = [np.asarray(pieces, np.int64).reshape(-1) for pieces in piece_lengths]
    counts = np.array([len(r) for r in rows], np.int64)
    return (np.concatenate(rows) if rows else np.zeros(0, np.int64)), counts


def _columns(rows, need_pieces: bool) -> tuple[np.ndarray, list | None]:
    """``input_ids`` as one 2-D array and ``piece_lengths`` as a list per row, from any row form."""
    import pyarrow as pa

    if isinstance(rows, pa.Table):
        return _table_columns(rows, need_pieces)
    if isinstance(rows, Mapping):  # a batch: a dict of columns
        ids = rows["input_ids"]
        pieces = rows.get("piece_lengths") if need_pieces else None
        return np.asarray(ids), None if pieces is None else list(pieces)
    if not isinstance(rows, Sequence) or len(rows) == 0:
        raise ParameterError(f"expected a non-empty list of rows, got {type(rows).__name__}")
    if all(isinstance(row, pa.Table) for row in rows):
        return _table_columns(pa.concat_tables(rows), need_pieces)
    if not all(isinstance(row, Mapping) for row in rows):
        kinds = sorted({type(row).__name__ for row in rows})
        raise ParameterError(f"rows must be dicts (any format) or Arrow tables, got {kinds}")
    try:
        ids = np.stack([np.asarray(row["input_ids"]) for row in rows])
    except KeyError:
        raise ParameterError(f"rows have no input_ids column; their keys are {sorted(rows[0])}") from None
    except ValueError as error:
        raise ParameterError(f"rows of different lengths cannot form one batch: {error}") from None
    pieces = None
    if need_pieces and all("piece_lengths" in row for row in rows):
        pieces = [np.asarray(row["piece_lengths"]) for row in rows]
    return ids, pieces


def _dataset_ids(rows) -> np.ndarray | None:
    """The rows' ``dataset_id`` (int16, as BlendedDataset's ``dataset_index``), or None without one."""
    import pyarrow as pa

    if isinstance(rows, Sequence) and rows and all(isinstance(row, pa.Table) for row in rows):
        rows = pa.concat_tables(rows)
    if isinstance(rows, pa.Table):
        found = rows.column("dataset_id").to_numpy() if "dataset_id" in rows.column_names else None
    elif isinstance(rows, Mapping):
        found = rows.get("dataset_id")
    elif all("dataset_id" in row for row in rows):
        found = [np.asarray(row["dataset_id"]) for row in rows]
    else:
        found = None
    return None if found is None else np.asarray(found, np.int16).reshape(-1)


def _table_columns(table, need_pieces: bool) -> tuple[np.ndarray, list | None]:
    if "input_ids" not in table.column_names:
        raise ParameterError(f"rows have no input_ids column; their columns are {table.column_names}")
    column = table.column("input_ids").combine_chunks()
    width = getattr(column.type, "list_size", None)
    if width is not None:  # fixed-size lists: one flat buffer, no Python objects
        ids = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
    else:
        ids = np.stack([np.asarray(v) for v in column.to_pylist()])
    pieces = None
    if need_pieces and "piece_lengths" in table.column_names:
        lists = table.column("piece_lengths").combine_chunks()  # offsets and values: no Python per row
        offsets = lists.offsets.to_numpy()
        pieces = (lists.flatten().to_numpy(zero_copy_only=False), np.diff(offsets))
    return ids, pieces
