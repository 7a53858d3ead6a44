"""Kinds whose rows are token samples over a token source (.bin/.idx pairs, Megatron blends and
splits, raw files, raw chunks): the sampling settings, the index cache, the ``input_ids``
tables, read ahead across shards when a stream asks shard by shard, and ahead in background
threads for remote files (``read_ahead_bytes``)."""

from __future__ import annotations

import functools
import os
import weakref
from dataclasses import dataclass
from typing import Iterator

import datasets
import numpy as np
import pyarrow as pa

from ..warnings_once import warn_once
from ..megatron import sampling
from ..checks import check_int
from ..dtypes import cast_tokens, integer_dtype
from ..sources.indexed import split_prefix
from ..sources.token_source import lengths_view
from .base_builder import DEFAULT_NUM_SHARDS, INDEX_CACHE_FOLDER, BaseBuilder, BaseConfig
from .plans import OpenedSplit, Plan, opened_split
from .readahead import ReadAhead
from . import registry
from .registry import cache_root
from .tables import fixed_size_lists, one_ahead, sample_features

# Read-ahead of remote files holds at most this many bytes of tables made ahead (as
# megatron-core's _S3BinReader keeps a 256 MB block).
DEFAULT_READ_AHEAD_BYTES = 256 * 2**20


@dataclass
class SamplesConfig(BaseConfig):
    """Settings of every kind whose rows are token samples.

    Args:
        dtype (`str`, optional): store ``input_ids`` as this integer dtype instead of the
            files' own (e.g. "int64" for frameworks that want it); values must fit.
        read_ahead_bytes (`int`, defaults to 256 MiB): for files read over the network
            (streaming from the Hub, HTTP, S3...), the tables of the rows a stream will ask for
            next are made ahead in background threads, holding at most this many bytes; 0
            reads only what is asked for. Local files are read when asked (no threads).
    """

    dtype: str | None = None
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES

    def validate(self) -> None:
        super().validate()
        check_int("read_ahead_bytes", self.read_ahead_bytes, 0)
        if self.dtype is not None:
            integer_dtype(self.dtype)


@dataclass
class GPTConfig(SamplesConfig):
    """Megatron GPTDataset sampling settings.

    Args:
        seq_length (`int`, defaults to 2048): tokens per training sample, as Megatron's
            ``--seq-length``; each row holds ``seq_length + add_extra_token`` tokens.
        num_epochs (`int`, optional): whole epochs over the split's sequences.
        num_samples (`int`, optional): samples to train on, Megatron's way (may end inside
            an epoch; the final partial epoch is shuffled apart). At most one of the two;
            with neither, one epoch.
        seed (`int`, defaults to 1234): Megatron's ``--seed`` for the document and sample shuffles.
        add_extra_token (`bool`, defaults to True): Megatron's ``add_extra_token_to_sequence``:
            samples of ``seq_length + 1`` tokens overlapping by one, so ``tokens = row[:-1]``
            and ``labels = row[1:]``.
        document_structure (`bool`, defaults to False): add ``position_ids`` (restarting at
            each document inside a sample) and ``piece_lengths`` (for ``cu_seqlens``).
        index_cache_dir (`str`, optional): where the sampling indices are cached; defaults to
            ``<datasets cache>/mmidx_indices``.
        dtype, read_ahead_bytes: see :class:`SamplesConfig`.
    """

    # None: not given (2048 and 1234, or what a Megatron command line says; resolved()).
    seq_length: int | None = None
    num_epochs: int | None = None
    num_samples: int | None = None
    seed: int | None = None
    add_extra_token: bool = True
    document_structure: bool = False
    index_cache_dir: str | None = None

    def validate(self) -> None:
        super().validate()
        self._check_sampling()

    def _check_sampling(self) -> None:
        settings = self.sampling_kwargs()
        sampling.check_settings(**{name: settings[name] for name in ("seq_length", "seed", "num_epochs",
                                                                      "num_samples")})

    def resolved(self) -> dict:
        """The settings with their defaults filled in."""
        return {"seq_length": sampling.DEFAULT_SEQ_LENGTH if self.seq_length is None else self.seq_length,
                "seed": sampling.DEFAULT_SEED if self.seed is None else self.seed}

    @property
    def sample_length(self) -> int:
        return sampling.sample_length(self.resolved()["seq_length"], self.add_extra_token)

    def sampling_kwargs(self) -> dict:
        settings = self.resolved()
        return dict(seq_length=settings["seq_length"], seed=settings["seed"], num_epochs=self.num_epochs,
                    num_samples=self.num_samples, add_extra_token=self.add_extra_token)


# builder -> (plan, process, table maker) of its local split last streamed (_table_maker).
_LOCAL_MAKERS = weakref.WeakKeyDictionary()


def pooled_samples(source, indices: sampling.SamplingIndices, sample_ids: np.ndarray) -> np.ndarray:
    """``sampling.assemble_samples``, gathered into a buffer of pyarrow's memory pool. The pool
    hands back the memory of tables already consumed; a fresh numpy array of a few MB is new
    pages from the kernel, each faulted in as the gather first writes it (measured: the gather
    ran ~20% faster from the pool, with no page faults)."""
    sequence_ids, offsets, lengths, _ = sampling.sample_pieces(indices, lengths_view(source), sample_ids)
    return pooled_tokens(source, sequence_ids, offsets, lengths).reshape(-1, indices.sample_length)


def pooled_tokens(source, sequence_ids, offsets, lengths) -> np.ndarray:
    """``source.read_pieces`` into a buffer of pyarrow's memory pool (see pooled_samples)."""
    dtype = np.dtype(source.dtype)
    out = np.frombuffer(pa.allocate_buffer(int(np.sum(lengths)) * dtype.itemsize), dtype)
    source.read_pieces(sequence_ids, offsets, lengths, out=out)
    return out


def sample_table(source, indices: sampling.SamplingIndices, sample_ids: np.ndarray,
                 document_structure: bool, dtype: str | None = None) -> pa.Table:
    """The rows for ``sample_ids`` (positions in the training order) as one Arrow table."""
    tokens = cast_tokens(pooled_samples(source, indices, sample_ids), dtype)
    columns = {"input_ids": fixed_size_lists(tokens, indices.sample_length)}
    if document_structure:
        columns.update(structure_columns(*sampling.document_structure(indices, lengths_view(source), sample_ids),
                                         indices.sample_length))
    return pa.table(columns)


def structure_columns(position_ids: np.ndarray, piece_lengths: list, length: int) -> dict:
    """The ``document_structure`` columns: position ids (fixed-size lists) and each row's pieces."""
    offsets = np.concatenate(([0], np.cumsum([len(p) for p in piece_lengths]))).astype(np.int32)
    flat = np.concatenate(piece_lengths).astype(np.int32) if piece_lengths else np.zeros(0, np.int32)
    return {"position_ids": fixed_size_lists(position_ids.astype(np.int32, copy=False), length),
            "piece_lengths": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))}


def _label(plan: Plan) -> str:
    """A split's files for a progress bar: ``data/a_text_document (train)``, or the first and a count."""
    names = [split_prefix(str(f)) for f in plan.files] or ["sampling indices"]
    more = f" and {len(names) - 1} more" if len(names) > 1 else ""
    return f"{names[0]}{more} ({plan.split})"


def opened_samples(source, plan: Plan, files=()) -> OpenedSplit:
    """A kind's token source sampled the Megatron GPTDataset way with the plan's settings
    (``sampling``, ``index_cache_dir``, ``document_structure``, ``dtype``)."""
    indices = sampling.load_or_build_source_indices(source, cache_dir=plan["index_cache_dir"], label=_label(plan),
                                                    **dict(plan["sampling"]))
    dtype = np.dtype(plan["dtype"]) if plan["dtype"] else source.dtype
    features = sample_features(dtype, indices.sample_length, plan["document_structure"])
    table = functools.partial(sample_table_for, source, indices, plan["document_structure"], plan["dtype"])
    return OpenedSplit(indices.num_samples, features, table, files=files or (source,), source=source)


def sample_table_for(source, indices, document_structure: bool, dtype: str | None, rows: np.ndarray) -> pa.Table:
    return sample_table(source, indices, rows, document_structure, dtype)


class GPTSamplesBuilder(BaseBuilder):
    """Rows are token samples of a split's token source (Megatron GPTDataset samples for a
    :class:`GPTConfig`). A kind implements ``_plan`` and ``open_plan`` (BaseBuilder); this
    adds the samples' settings to the plan (``_sample_settings``), keeps a card's
    ``dataset_info`` only while it fits, and makes a stream's tables through the split's
    table maker: one gather for several small shards, or, for remote files, read ahead in
    background threads along the rows the stream asks for next, within ``read_ahead_bytes``."""

    BUILDER_CONFIG_CLASS = GPTConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._drop_card_info_that_does_not_fit()

    def _card_fits(self, features: datasets.Features) -> bool:
        """Whether a card's features can be this config's samples."""
        config = self.config
        columns = {"input_ids", "position_ids", "piece_lengths"} if config.document_structure else {"input_ids"}
        ids = features["input_ids"]
        return (getattr(ids, "length", None) == config.sample_length and set(features) == columns
                and (config.dtype is None or ids.feature.dtype == config.dtype))

    def _card_counts_apply(self) -> bool:
        """Whether a card's split sizes can count this config's rows: the card cannot say which
        epochs or sample count its split sizes were counted for."""
        return self.config.num_epochs is None and self.config.num_samples is None

    def _drop_card_info_that_does_not_fit(self) -> None:
        """A dataset card's ``dataset_info`` describes the samples of the card's own settings,
        and ``datasets`` hands it over whatever the call's settings are. Keep it only while it
        can describe what this config makes, else its features would fail the cast and its
        split sizes the verification."""
        if self.config.features is not None or self.info.features is None:
            return
        if "input_ids" in self.info.features and not self._card_fits(self.info.features):
            self.info.features = None
            self.info.splits = None
        if not self._card_counts_apply():
            self.info.splits = None

    def _sample_settings(self) -> dict:
        """The plan's settings for ``opened_samples``: sampling, index cache, columns, dtype."""
        config = self.config
        return {"sampling": tuple(sorted(config.sampling_kwargs().items())),
                "index_cache_dir": config.index_cache_dir or os.path.join(cache_root(self), INDEX_CACHE_FOLDER),
                "document_structure": config.document_structure, "dtype": config.dtype}

    def _order(self, plan: Plan) -> dict:
        return dict(plan["sampling"])

    def _generate_tables(self, plan, ranges: list[tuple[int, int]]):
        # A stream of samples is in Megatron's training order; datasets' split_dataset_by_node
        # deals it out by whole shards or every n-th sample, which is not Megatron's per-rank
        # order (and is disjoint and complete, so nothing else would tell).
        split = registry.node_split_of_caller()
        if split is not None:
            rank, world_size, strategy = split
            warn_once(
                f"split_dataset_by_node(rank={rank}, world_size={world_size}) gives this rank whole shards or every "
                f"{world_size}-th sample of the stream" + (f" (datasets' strategy {strategy!r})" if strategy else "") + ", not Megatron's per-rank "
                "micro-batches (MegatronPretrainingSampler): for those pass the whole stream to megatron_rank_stream "
                "(a loop of your own) or megatron_global_stream (accelerate, the Hugging Face Trainer)", stacklevel=2)
        yield from super()._generate_tables(plan, ranges)

    def _tables(self, plan: Plan, batches):
        maker = self._table_maker(plan)
        return maker.tables(batches) if isinstance(maker, ReadAhead) else one_ahead(maker, batches)

    def _table_maker(self, plan: Plan):
        # A stream asks at every shard (960 times a pass): a local split's maker is kept for the
        # plan and process, beside the builder (builders are pickled to worker processes); a
        # remote one is asked each time (it becomes local once the block cache holds its files).
        kept = _LOCAL_MAKERS.get(self)
        if kept is not None and kept[0] is plan and kept[1] == os.getpid():
            return kept[2]
        maker = opened_split(type(self).open_plan, plan, self._remote()).maker(self.config.num_shards or DEFAULT_NUM_SHARDS,
                                                                     self.config.read_ahead_bytes)
        if not isinstance(maker, ReadAhead):
            _LOCAL_MAKERS[self] = (plan, os.getpid(), maker)
        return maker

    def row_tables(self, plan: Plan, range_batches) -> Iterator[pa.Table]:
        # Any rows in one gather (measured 4x faster for a rank's micro-batches than a table each).
        maker = self._table_maker(plan)
        positions = (np.concatenate([np.arange(a, b) for a, b in ranges]) for ranges in range_batches)
        if isinstance(maker, ReadAhead):  # remote: the batches after the one asked for are fetched meanwhile
            for _, table in maker.tables((None, rows) for rows in positions):
                yield table
            return
        for rows in positions:
            yield maker(rows)
