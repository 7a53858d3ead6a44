"""The ``mmidx_raw_chunks`` builder: every raw file cut into its own ``seq_length`` chunks
(``style="diff"``), with the file's path and, from class folders or a metadata file, its label.

Rows keep file order (a file's chunks in order, the last one padded with EOF); nothing is
shuffled or packed across files, so the GPT sampling settings do not apply here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa

from .. import provenance
from .._io import file_identity, is_remote
from ..dtypes import cast_tokens, integer_dtype
from ..rawfiles import RawFiles, diff_chunks, diff_samples, labels_for
from ..source import check_opened
from .common import BaseBuilder, BaseConfig, check_integer, fixed_size_lists, identity_paths, ranged, split_files
from .mmidx_raw import check_raw_settings, raw_data_files


@dataclass
class RawChunksConfig(BaseConfig):
    """BuilderConfig for raw files cut into per-file chunks.

    Args:
        n_bytes (`int`): bytes per token, 1-4.
        seq_length (`int`, defaults to 2048): tokens per row.
        style (`str`, defaults to "diff"): only "diff" here ("concat" is mmidx_raw).
        dtype (`str`, optional): store ``input_ids`` as this integer dtype; values must fit.
    """

    n_bytes: int | None = None
    seq_length: int = 2048
    style: str = "diff"
    dtype: str | None = None

    def validate(self) -> None:
        super().validate()
        check_integer("seq_length", self.seq_length, 1)
        check_raw_settings(self.n_bytes, self.style, "diff", "mmidx_raw_chunks")
        if self.dtype is not None:
            integer_dtype(self.dtype)


@dataclass(frozen=True)
class ChunksPlan:
    split: str
    read_paths: tuple[str, ...]
    original_paths: tuple[str, ...]  # the names the user gave: the ``path`` column
    identity: str
    n_bytes: int
    seq_length: int
    dtype: str | None
    class_names: tuple[str, ...] | None
    labels: tuple[int, ...] | None  # per data file, into class_names


@functools.lru_cache(maxsize=8)
def _opened(plan: ChunksPlan, opener):
    remote = any(is_remote(p) for p in plan.read_paths)
    raw = RawFiles(plan.read_paths, plan.n_bytes, opener=ranged(opener) if remote else None)
    check_opened(raw, plan.identity)  # the files the plan was made from, even in a new process
    return raw, diff_chunks(raw, plan.seq_length)


def chunk_table(raw: RawFiles, chunks, plan: ChunksPlan, rows: np.ndarray) -> pa.Table:
    """Rows ``rows``: a chunk of one file, with that file's path and label."""
    file_ids = chunks[0][rows]
    tokens = cast_tokens(diff_samples(raw, file_ids, chunks[1][rows], plan.seq_length), plan.dtype)
    columns = {"input_ids": fixed_size_lists(tokens, plan.seq_length),
               "path": pa.array([plan.original_paths[i] for i in file_ids.tolist()], pa.string())}
    if plan.labels is not None:
        columns["label"] = pa.array(np.asarray(plan.labels, np.int64)[file_ids])
    return pa.table(columns)


class MMIdxRawChunks(BaseBuilder):
    """Raw files cut into per-file chunks of ``seq_length`` tokens."""

    BUILDER_CONFIG_CLASS = RawChunksConfig
    KIND = "raw files cut into per-file chunks (n_bytes, style='diff')"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return settings.get("n_bytes") is not None and settings.get("style") == "diff"

    def _split_generators(self, dl_manager):
        config = self.config
        generators, features = [], []
        for split, files in split_files(config).items():
            data, metadata = raw_data_files(split, files)
            labels = labels_for(data, dl_manager.download(metadata[0]) if metadata else None)
            plan = ChunksPlan(split=split, read_paths=tuple(dl_manager.download(data)), original_paths=tuple(data),
                              identity="|".join(file_identity(p) for p in identity_paths(files)),
                              n_bytes=config.n_bytes, seq_length=config.seq_length, dtype=config.dtype,
                              class_names=None if labels is None else tuple(labels[0]),
                              labels=None if labels is None else tuple(labels[1].tolist()))
            raw, chunks = _opened(plan, open)
            provenance.record_split(self.info, split, kind=self.name, files=data, rows=len(chunks[0]), source=raw,
                                    settings={"seq_length": config.seq_length}, facts=provenance.raw_facts(config.n_bytes))
            dtype = np.dtype(config.dtype) if config.dtype else raw.dtype
            split_features = {"input_ids": datasets.List(datasets.Value(dtype.name), length=config.seq_length),
                              "path": datasets.Value("string")}
            if plan.class_names is not None:
                split_features["label"] = datasets.ClassLabel(names=list(plan.class_names))
            features.append(datasets.Features(split_features))
            generators.append(self._split_generator(split, plan, len(chunks[0]), f"{len(data)} file(s)"))
        self._set_features(features)
        return generators

    def _table_maker(self, plan: ChunksPlan):
        raw, chunks = _opened(plan, open)
        return functools.partial(chunk_table, raw, chunks, plan)
