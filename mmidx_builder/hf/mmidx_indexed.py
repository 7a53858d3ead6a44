"""The ``mmidx_indexed`` builder: ``.bin``/``.idx`` pairs in, Megatron-packed samples out.

A split's pairs (either flavour, any dtype) are read as one sequence list in file order,
as Megatron would see their merge, and sampled exactly as megatron-core's GPTDataset does.

The path of a token: ``.bin`` (format.IndexedFile, memory-mapped or ranged reads) ->
Megatron's document/sample/shuffle indices (sampling) -> one batched gather per table
(sampling.assemble_samples) -> a pyarrow table of ``input_ids`` rows (gpt_samples.sample_table).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..sources import provenance
from ..sources.token_source import Concatenated
from .data_files import pair_data_files, without_files_beside_pairs
from .opened_files import indexed_files
from .gpt_samples import GPTConfig, GPTSamplesBuilder, opened_samples
from .plans import Plan
from .pair_downloads import NOT_PAIRS_HINT, download_pairs


@dataclass
class IndexedConfig(GPTConfig):
    """BuilderConfig for .bin/.idx pairs: the GPT sampling settings of :class:`GPTConfig`."""


class MMIdxIndexed(GPTSamplesBuilder):
    """Megatron-core GPTDataset samples from ``.bin``/``.idx`` pairs."""

    BUILDER_CONFIG_CLASS = IndexedConfig
    KIND = ".bin/.idx pairs"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return True  # the default kind: any .bin/.idx pairs

    def _plan(self, split, files, dl_manager):
        # Streaming returns the URLs themselves; downloading may rename files, so both
        # files of every pair are downloaded together and re-paired by position.
        files = without_files_beside_pairs(files)
        pairs = pair_data_files(split, files)
        read_paths = download_pairs(dl_manager, [path for pair in pairs for path in pair], hint=NOT_PAIRS_HINT)
        return Plan.of(split, files, read_paths, self._identity(files), **self._sample_settings())

    def _token_facts(self, plan, dl_manager):
        return provenance.tokenizer_facts([f for f in plan.files if f.endswith(".bin")], dl_manager, open,
                                          fetched=self._fetched_sidecars())

    @staticmethod
    def open_plan(plan: Plan, opener):
        paths = plan.read_paths
        files = indexed_files(list(zip(paths[1::2], paths[0::2])), opener, plan["index_cache_dir"])
        return opened_samples(Concatenated(files), plan, files)
