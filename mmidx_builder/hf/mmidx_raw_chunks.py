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

from ..sources import provenance
from ..storage.files import is_remote
from ..checks import check_int
from ..dtypes import cast_tokens
from ..sources.raw import RawFiles, diff_chunks, diff_samples, labels_for
from ..megatron.sampling import DEFAULT_SEQ_LENGTH
from .data_files import ranged
from .gpt_samples import GPTSamplesBuilder, SamplesConfig
from .plans import OpenedSplit, Plan
from .tables import fixed_size_lists
from .mmidx_raw import check_raw_settings, raw_data_files


@dataclass
class RawChunksConfig(SamplesConfig):
    """BuilderConfig for raw files cut into per-file chunks.

    Args:
        n_bytes (`int`): bytes per token, 1-4.
        seq_length (`int`, defaults to 2048): tokens per row.
        style (`str`, defaults to "diff"): only "diff" here ("concat" is mmidx_raw).
        dtype, read_ahead_bytes: see :class:`~mmidx_builder.hf.gpt_samples.SamplesConfig`.
    """

    n_bytes: int | None = None
    seq_length: int = DEFAULT_SEQ_LENGTH
    style: str = "diff"

    def validate(self) -> None:
        super().validate()
        check_int("seq_length", self.seq_length, 1)
        check_raw_settings(self.n_bytes, self.style, "diff", "mmidx_raw_chunks")

    @property
    def sample_length(self) -> int:
        return self.seq_length


def chunk_table(raw: RawFiles, chunks, plan: Plan, rows: np.ndarray) -> pa.Table:
    """Rows ``rows``: a chunk of one file, with that file's path (as given) and label."""
    file_ids = chunks[0][rows]
    tokens = cast_tokens(diff_samples(raw, file_ids, chunks[1][rows], plan["seq_length"]), plan["dtype"])
    columns = {"input_ids": fixed_size_lists(tokens, plan["seq_length"]),
               "path": pa.array([plan.files[i] for i in file_ids.tolist()], pa.string())}
    if plan["labels"] is not None:
        columns["label"] = pa.array(np.asarray(plan["labels"], np.int64)[file_ids])
    return pa.table(columns)


class MMIdxRawChunks(GPTSamplesBuilder):
    """Raw files cut into per-file chunks of ``seq_length`` tokens."""

    BUILDER_CONFIG_CLASS = RawChunksConfig
    KIND = "raw files cut into per-file chunks (n_bytes, style='diff')"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return settings.get("n_bytes") is not None and settings.get("style") == "diff"

    def _card_fits(self, features) -> bool:
        return False  # a card describes GPT samples, not chunks with their path

    def _card_counts_apply(self) -> bool:
        return False

    def _plan(self, split, files, dl_manager):
        config = self.config
        data, metadata = raw_data_files(split, files)
        labels = labels_for(data, dl_manager.download(metadata[0]) if metadata else None)
        return Plan.of(split, data, dl_manager.download(data), self._identity(files), n_bytes=config.n_bytes,
                       seq_length=config.seq_length, dtype=config.dtype,
                       class_names=None if labels is None else tuple(labels[0]),
                       labels=None if labels is None else tuple(labels[1].tolist()))

    def _order(self, plan):
        return {"seq_length": plan["seq_length"]}

    def _token_facts(self, plan, dl_manager):
        return provenance.raw_facts(plan["n_bytes"])

    @staticmethod
    def open_plan(plan: Plan, opener) -> OpenedSplit:
        remote = any(is_remote(p) for p in plan.read_paths)
        raw = RawFiles(plan.read_paths, plan["n_bytes"], opener=ranged(opener) if remote else None)
        chunks = diff_chunks(raw, plan["seq_length"])
        dtype = np.dtype(plan["dtype"]) if plan["dtype"] else raw.dtype
        features = {"input_ids": datasets.List(datasets.Value(dtype.name), length=plan["seq_length"]),
                    "path": datasets.Value("string")}
        if plan["class_names"] is not None:
            features["label"] = datasets.ClassLabel(names=list(plan["class_names"]))
        return OpenedSplit(len(chunks[0]), datasets.Features(features), functools.partial(chunk_table, raw, chunks, plan),
                           files=(raw,), source=raw)
