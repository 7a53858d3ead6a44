"""The ``mmidx_mosaic_samples`` builder: a MosaicML token column as Megatron's documents, packed
into training samples exactly as megatron-core's GPTDataset packs a ``.bin``/``.idx`` pair's.

    load_dataset(folder, seq_length=2048, num_epochs=2, seed=1234)

Each sample of the stream (LLM Foundry's ``tokens``, or ``token_column=``) is one document, in
shard order, streams one after another; sampling, the index cache, ``document_structure``,
``dtype``, the collator and the rank streams are the ``.bin``/``.idx`` kind's, unchanged. The
same files without a sampling setting are rows as stored (the ``mmidx_mosaic`` builder).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from .gpt_samples import GPTConfig, GPTSamplesBuilder, opened_samples
from .mmidx_mosaic import MosaicBuilderMixin, token_source
from .mosaic_streams import holds_mosaic_index
from .plans import Plan

# The settings that ask for Megatron's samples (any one of them picks this builder).
SAMPLING_SETTINGS = ("seq_length", "num_epochs", "num_samples", "seed", "add_extra_token", "document_structure")


@dataclass
class MosaicSamplesConfig(GPTConfig):
    """BuilderConfig for a MosaicML token column packed into Megatron samples: the settings of
    :class:`~mmidx_builder.hf.gpt_samples.GPTConfig`, and

    Args:
        token_column (`str`, optional): the column of token ids; defaults to ``tokens`` (LLM
            Foundry's), else the stream's only column that can hold ids.
        dtype (`str`, optional): how a ``bytes`` token column is read (e.g. ``"int64"``); for an
            ndarray column, the dtype the samples are cast to.
    """

    token_column: str | None = None

    def validate(self) -> None:
        super().validate()
        if self.token_column is not None and not isinstance(self.token_column, str):
            raise ParameterError(f"token_column must be a column name (a string), got {self.token_column!r}")


class MMIdxMosaicSamples(MosaicBuilderMixin, GPTSamplesBuilder):
    """Megatron-core GPTDataset samples of a MosaicML token column, one document per sample."""

    BUILDER_CONFIG_CLASS = MosaicSamplesConfig
    KIND = "MosaicML token shards packed as Megatron samples (seq_length, num_epochs, ...)"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return holds_mosaic_index(files) and any(name in settings for name in SAMPLING_SETTINGS)

    def _card_fits(self, features) -> bool:
        return False

    def _card_counts_apply(self) -> bool:
        return False

    def _plan(self, split, files, dl_manager):
        return self._plan_streams(split, files, dl_manager, **{**self._mosaic_settings(), **self._sample_settings()})

    @staticmethod
    def open_plan(plan: Plan, opener):
        source = token_source(plan, opener, plan["token_column"])
        return opened_samples(source, plan, source.parts)
