"""The ``mmidx_mosaic`` builder: MosaicML shards (MDS ``index.json`` folders, or Composer's legacy
``index.mds`` ones) as rows, in shard order, as the shards store them.

    load_dataset(folder)                           every column, typed from the index
    load_dataset(folder, token_column="tokens")    ``input_ids`` rows: each sample's ids as they
                                                   are (LLM Foundry's samples are packed already)

Several streams (folders, each with its index) in one split are read one after another, in
the order given. With ``seq_length`` (or another Megatron sampling setting) the token column's
samples are documents packed the Megatron way instead: that is the ``mmidx_mosaic_samples``
builder. How bytes become columns: mosaic/ (the format) and hf/mosaic_tables.py (the types).
"""

from __future__ import annotations

import functools
import os
import pickle
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa

from ..checks import check_bool
from ..dtypes import cast_tokens
from ..errors import ParameterError, UnsafeEncodingError
from ..mosaic.columns import Layout, NdarrayForm, column_spans, ndarray_form
from ..mosaic.encodings import Kind
from ..mosaic.index import parse_index
from ..mosaic.tokens import TokenColumn, token_encoding_problem
from ..sources.token_source import Concatenated, lengths_view
from .base_builder import INDEX_CACHE_FOLDER
from .gpt_samples import GPTSamplesBuilder, SamplesConfig, pooled_tokens
from .mosaic_streams import (holds_mosaic_index, identity_paths_of, index_files, open_streams,
                             read_indexes, shard_paths, stream_identity, streams_of)
from .mosaic_tables import column_feature, columns_table
from .plans import OpenedSplit, Plan
from .registry import cache_root, checksums_recorded
from .tables import fixed_size_lists

# Settings that say "these files are MosaicML shards" even before the files are looked at.
OWN_SETTINGS = ("token_column", "allow_unsafe_types")
UNPACK_FOLDER = "mosaic_shards"


@dataclass
class MosaicConfig(SamplesConfig):
    """BuilderConfig for MosaicML shards read as stored.

    Args:
        token_column (`str`, optional): a column of token ids (an ndarray of integers, or bytes
            read with ``dtype``); rows are then its values as ``input_ids``. Without it, rows hold
            every column.
        dtype (`str`, optional): how a ``bytes`` token column is read (LLM Foundry's older
            shards: ``"int64"``); for an ndarray token column, the dtype ``input_ids`` are cast to.
        allow_unsafe_types (`bool`, defaults to False): read ``pkl`` columns, whose values are
            unpickled: reading one runs whatever code it holds (StreamingDataset asks the same).
        index_cache_dir (`str`, optional): where the token runs and decompressed shards are kept;
            defaults to ``<datasets cache>/mmidx_indices``.
        read_ahead_bytes: see :class:`~mmidx_builder.hf.gpt_samples.SamplesConfig`.
    """

    token_column: str | None = None
    allow_unsafe_types: bool = False
    index_cache_dir: str | None = None

    def validate(self) -> None:
        super().validate()
        check_bool("allow_unsafe_types", self.allow_unsafe_types)
        if self.token_column is not None and not isinstance(self.token_column, str):
            raise ParameterError(f"token_column must be a column name (a string), got {self.token_column!r}")


def plan_streams(split: str, files: list[str], dl_manager) -> tuple[tuple, str]:
    """``(streams, identity)`` of a split: each stream's index path, its bytes and its shard
    files as ((name, path), ...); the identity of every file read."""
    streaming = isinstance(dl_manager, datasets.StreamingDownloadManager)
    read = read_indexes(dl_manager, index_files(split, files))
    data_of = {index.path: data for index, data in read}
    streams, identities = [], []
    for index in streams_of(split, files, [index for index, _ in read]):
        paths = shard_paths(index, dl_manager, streaming)
        streams.append((index.path, data_of[index.path], tuple(sorted(paths.items()))))
        identities += stream_identity(index, paths)
    return tuple(streams), "|".join(identities)


class MosaicBuilderMixin:
    """What both MosaicML builders share: planning a split's streams and opening them."""

    def _identity_paths(self, config) -> list[str]:
        files = [f for split_files in (config.data_files or {}).values() for f in split_files]
        return super()._identity_paths(config) + identity_paths_of([str(f) for f in files])

    def _mosaic_settings(self) -> dict:
        config = self.config
        cache = config.index_cache_dir or os.path.join(cache_root(self), INDEX_CACHE_FOLDER)
        return {"token_column": config.token_column, "token_dtype": config.dtype, "index_cache_dir": cache,
                "verify": checksums_recorded(self)}

    def _set_features(self, features: list[datasets.Features]) -> None:
        # A card's dataset_info (mmidx card of a MosaicML folder) describes the files read one
        # way: rows as stored, a token column's input_ids or Megatron samples. Which way a call
        # reads them is known once its splits are opened: features of another way are dropped
        # here, or datasets would cast the rows to them.
        if self.config.features is None and self.info.features is not None and self.info.features not in features:
            self.info.features = None
        super()._set_features(features)

    def _plan_streams(self, split, files, dl_manager, **settings) -> Plan:
        streams, identity = plan_streams(split, files, dl_manager)
        kind = f"{type(self).__name__}{tuple(sorted((k, v) for k, v in settings.items() if k != 'verify'))}"
        return Plan.of(split, files, streams, f"{kind}|{identity}", **settings)


def recorded_streams(plan: Plan) -> list[dict]:
    """Each stream of the plan, in order, as provenance records it: its folder's name and its
    shards' sample counts as runs ``[[samples, shards], ...]`` (an LLM Foundry folder of 10,000
    equal shards and a partial last one is two runs)."""
    recorded = []
    for index_path, data, _ in plan.read_paths:
        index = parse_index(index_path, data)
        runs: list[list[int]] = []
        for shard in index.shards:
            if runs and runs[-1][0] == shard.samples:
                runs[-1][1] += 1
            else:
                runs.append([int(shard.samples), 1])
        recorded.append({"folder": _folder_name(index.folder), "layout": index.layout, "samples_per_shard": runs})
    return recorded


def _folder_name(folder: str) -> str:
    return folder.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def opened_streams(plan: Plan, opener) -> list:
    return open_streams(plan.read_paths, opener, os.path.join(plan["index_cache_dir"], UNPACK_FOLDER), plan["verify"])


def token_source(plan: Plan, opener, column: str | None) -> Concatenated:
    """The plan's streams' token column, one sequence per sample, streams one after another."""
    return token_source_of(plan.read_paths, opener, column, plan["token_dtype"], plan["index_cache_dir"],
                           os.path.join(plan["index_cache_dir"], UNPACK_FOLDER), plan["verify"])


def token_source_of(streams, opener, column: str | None, dtype, cache_dir: str, unpack_dir: str,
                    verify: bool) -> Concatenated:
    """Planned ``streams`` opened, and their token column (``column``, else the one
    default_token_column picks) read as one token source."""
    opened = open_streams(streams, opener, unpack_dir, verify)
    column = column or default_token_column(opened[0].index)
    return Concatenated([TokenColumn(s, column, dtype, cache_dir) for s in opened])


def default_token_column(index) -> str:
    """``tokens`` (LLM Foundry's name) when the stream has it, else its only column that can hold
    token ids; a ParameterError listing the columns otherwise."""
    candidates = [c for c, e in zip(index.columns, index.encodings) if token_encoding_problem(e, "int64") is None
                  and (e.kind is not Kind.BYTES or c == "tokens")]
    if "tokens" in index.columns:
        return "tokens"
    if len(candidates) == 1:
        return candidates[0]
    columns = ", ".join(f"{c} ({e.text})" for c, e in zip(index.columns, index.encodings))
    raise ParameterError(f"{index.path}: say which column holds the token ids with token_column= (its columns: "
                         f"{columns})")


def token_rows_table(source, dtype, fixed_length, rows: np.ndarray) -> pa.Table:
    """Rows ``rows`` of a token column, each sample's ids as they are, as ``input_ids``."""
    lengths = np.asarray(lengths_view(source)[rows], np.int64)
    tokens = cast_tokens(pooled_tokens(source, rows, np.zeros(len(rows), np.int64), lengths), dtype)
    if fixed_length is not None:
        return pa.table({"input_ids": fixed_size_lists(tokens, fixed_length)})
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))})


def columns_table_for(streams, layout, features, forms, allow_pickle, rows: np.ndarray) -> pa.Table:
    """Rows ``rows`` (positions in the split, streams one after another) with every column."""
    firsts = np.cumsum([0] + [s.num_samples for s in streams])
    owner = np.searchsorted(firsts, rows, side="right") - 1
    tables, order = [], []
    for s in np.unique(owner).tolist():
        mine = np.flatnonzero(owner == s)
        files = streams[s]
        ids = rows[mine] - firsts[s]
        data, at, lengths = files.read_samples(ids)
        name = (lambda k, files=files, ids=ids: files.name_of(int(ids[k])))
        tables.append(columns_table(layout, features, forms, data, at, lengths, name, allow_pickle))
        order.append(mine)
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if len(tables) > 1:
        table = table.take(np.argsort(np.concatenate(order), kind="stable"))
    return table


def stream_layout(streams) -> Layout:
    """The columns every stream of a split shares (a ParameterError naming two that differ)."""
    first = streams[0].index
    for other in streams[1:]:
        if (other.index.columns, [e.text for e in other.index.encodings]) != (first.columns,
                                                                              [e.text for e in first.encodings]):
            raise ParameterError(f"the streams of one split must share their columns: {first.path} has "
                                 f"{list(zip(first.columns, [e.text for e in first.encodings]))}, {other.index.path} "
                                 f"has {list(zip(other.index.columns, [e.text for e in other.index.encodings]))}")
    return Layout(first.columns, first.encodings, first.layout == "legacy")


# A pickle column's type is inferred from the stream's first samples: this many of them.
PICKLE_TYPE_SAMPLES = 256


def _leading_values(streams, layout: Layout) -> dict:
    """The open-ended columns' first values (bytes), from the first stream that has samples:
    an ndarray column's first, a pickle column's first PICKLE_TYPE_SAMPLES."""
    wanted = [i for i, e in enumerate(layout.encodings)
              if e.kind is Kind.PICKLE or (e.kind is Kind.NDARRAY and e.size is None)]
    count = PICKLE_TYPE_SAMPLES if any(layout.encodings[i].kind is Kind.PICKLE for i in wanted) else 1
    for files in streams if wanted else ():
        if files.num_samples:
            data, at, lengths = files.read_samples(np.arange(min(files.num_samples, count)))
            starts, sizes = column_spans(layout, data, at, lengths, files.name_of)
            return {layout.columns[i]: [data[a:a + n].tobytes() for a, n in zip(starts[:, i].tolist(),
                                                                                 sizes[:, i].tolist())]
                    for i in wanted}
    return {}


def open_ndarray_form(encoding, first: bytes | None, path: str) -> NdarrayForm | None:
    """An ndarray column's dtype and axes when its encoding leaves them to each value: from the
    stream's first value; with no sample at all, the encoding's dtype (else int64), one axis."""
    if encoding.kind is not Kind.NDARRAY or encoding.size is not None:
        return None
    if first is not None:
        return ndarray_form(encoding, first, path)
    return NdarrayForm(encoding.dtype if encoding.dtype is not None else np.dtype("<i8"),
                       len(encoding.shape) if encoding.shape else 1)


def columns_split(plan: Plan, streams) -> OpenedSplit:
    layout = stream_layout(streams)
    allow = plan["allow_unsafe_types"]
    leading = _leading_values(streams, layout)
    forms, features = {}, {}
    for column, encoding in zip(layout.columns, layout.encodings):
        if encoding.kind is Kind.PICKLE and not allow:
            raise UnsafeEncodingError(
                f"{streams[0].index.path}: column {column!r} is encoded 'pkl': its values are pickles, and unpickling "
                "runs whatever code the file's author put in them. Pass allow_unsafe_types=True to read it if you "
                "trust the data (StreamingDataset asks the same)")
        values = leading.get(column, [])
        pickled = [pickle.loads(v) for v in values] if encoding.kind is Kind.PICKLE else None
        form = open_ndarray_form(encoding, values[0] if values else None, streams[0].index.path)
        if form is not None:
            forms[column] = form
        features[column] = column_feature(encoding, form, pickled)
    features = datasets.Features(features)
    rows = sum(s.num_samples for s in streams)
    table = functools.partial(columns_table_for, streams, layout, features, forms, allow)
    return OpenedSplit(rows, features, table, files=streams)


class MMIdxMosaic(MosaicBuilderMixin, GPTSamplesBuilder):
    """MosaicML shards as rows, in shard order: every column, or one column of token ids."""

    BUILDER_CONFIG_CLASS = MosaicConfig
    KIND = "MosaicML shards (MDS index.json or Composer's index.mds), rows as stored"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return holds_mosaic_index(files) or any(name in settings for name in OWN_SETTINGS)

    def _card_fits(self, features) -> bool:
        return True  # decided once the splits are opened (MosaicBuilderMixin._set_features)

    def _card_counts_apply(self) -> bool:
        return True  # one row per sample of the streams, whichever columns the rows hold

    def _plan(self, split, files, dl_manager):
        return self._plan_streams(split, files, dl_manager, allow_unsafe_types=self.config.allow_unsafe_types,
                                  **self._mosaic_settings())

    def _order(self, plan):
        # The shard sizes too: StreamingDataset's order is dealt shard by shard, and a prepared
        # Dataset keeps only this record of its files (training/mosaic_stream.py reads it).
        return {"token_column": plan["token_column"], "mosaic_streams": recorded_streams(plan)}

    @staticmethod
    def open_plan(plan: Plan, opener) -> OpenedSplit:
        if plan["token_column"] is None:
            return columns_split(plan, opened_streams(plan, opener))
        source = token_source(plan, opener, plan["token_column"])
        lengths = np.asarray(source.sequence_lengths)
        fixed = int(lengths[0]) if len(lengths) and (lengths == lengths[0]).all() else None
        dtype = np.dtype(plan["token_dtype"]) if plan["token_dtype"] else source.dtype
        values = datasets.Value(dtype.name)
        features = datasets.Features({"input_ids": datasets.List(values, length=fixed) if fixed is not None
                                      else datasets.List(values)})
        table = functools.partial(token_rows_table, source, plan["token_dtype"], fixed)
        return OpenedSplit(len(lengths), features, table, files=source.parts, source=source)
