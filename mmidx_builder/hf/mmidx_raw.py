"""The ``mmidx_raw`` builder: raw files read ``n_bytes`` per token, packed the Megatron way.

Each file is one sequence (its tokens, then EOF: see rawfiles.py); samples are what
megatron-core's GPTDataset would make of those sequences. No converted copy is written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..sources import provenance
from ..storage.files import is_remote
from ..errors import ParameterError
from ..sources.raw import RawFiles, check_n_bytes
from .data_files import ranged
from .gpt_samples import GPTConfig, GPTSamplesBuilder, opened_samples
from .plans import Plan

# Files with these names among the data files map files to labels (mmidx_raw_chunks).
RAW_METADATA_FILES = ("metadata.csv", "metadata.jsonl")


def check_raw_settings(n_bytes, style: str, expected_style: str, other_builder: str) -> None:
    check_n_bytes(n_bytes)
    if style != expected_style:
        raise ParameterError(f"style={style!r} is not this builder's ({expected_style!r}); "
                             f"style 'concat' is the mmidx_raw builder's, 'diff' the {other_builder} builder's")


def raw_data_files(split: str, files: list[str]) -> tuple[list[str], list[str]]:
    """(data files sorted, metadata files) of a split."""
    metadata = [f for f in files if os.path.basename(f) in RAW_METADATA_FILES]
    data = sorted(f for f in files if f not in metadata)
    if not data:
        raise ParameterError(f"split {split!r} has no data files besides metadata {metadata}")
    return data, metadata


@dataclass
class RawConfig(GPTConfig):
    """BuilderConfig for raw files packed as Megatron samples.

    Args:
        n_bytes (`int`): bytes per token, 1-4.
        style (`str`, defaults to "concat"): only "concat" here ("diff" is mmidx_raw_chunks).
    """

    n_bytes: int | None = None
    style: str = "concat"

    def validate(self) -> None:
        super().validate()
        check_raw_settings(self.n_bytes, self.style, "concat", "mmidx_raw_chunks")


class MMIdxRaw(GPTSamplesBuilder):
    """Megatron-core GPTDataset samples of raw files, ``n_bytes`` per token."""

    BUILDER_CONFIG_CLASS = RawConfig
    KIND = "raw files packed as samples (n_bytes, style='concat')"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return settings.get("n_bytes") is not None

    def _token_facts(self, plan, dl_manager) -> dict:
        return provenance.raw_facts(self.config.n_bytes)

    def _plan(self, split, files, dl_manager):
        read_paths = dl_manager.download(raw_data_files(split, files)[0])
        return Plan.of(split, files, read_paths, self._identity(files, n_bytes=self.config.n_bytes),
                       n_bytes=self.config.n_bytes, **self._sample_settings())

    @staticmethod
    def open_plan(plan: Plan, opener):
        remote = any(is_remote(p) for p in plan.read_paths)
        raw = RawFiles(plan.read_paths, plan["n_bytes"], opener=ranged(opener) if remote else None)
        return opened_samples(raw, plan)
