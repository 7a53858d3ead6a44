"""The ``mmidx_fairseq`` builder: fairseq language pairs (``fairseq-preprocess`` output) as rows
``{id, source, target}`` (+ decoded ``source_text`` / ``target_text``), in file order.

fairseq shuffles when it batches (``fairseq.max_tokens_batches``), so rows keep the order
``load_langpair_dataset`` numbers pairs in, upsampled primary shard included.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import datasets
import pyarrow as pa

from ..storage.files import is_remote
from ..fairseq.pairs import (Dictionary, LanguagePairs, check_upsample_primary, dictionary_path, find_language_pairs,
                       is_pair_file, pair_tables)
from ..fairseq.items import PairItems
from ..sources.indexed import IndexedFile, split_prefix
from ..errors import ParameterError
from .base_builder import BaseBuilder, BaseConfig
from .data_files import ranged, without_files_beside_pairs
from .plans import OpenedSplit, Plan


@dataclass
class FairseqConfig(BaseConfig):
    """BuilderConfig for fairseq language pairs.

    Args:
        source_lang, target_lang (`str`, optional): found from the file names
            (``train.de-en.de.bin``) when not given.
        upsample_primary (`int`, defaults to 1): fairseq's ``--upsample-primary``.
        decode_text (`bool`, defaults to False): add ``source_text`` and ``target_text``
            decoded with ``dict.{lang}.txt`` (and ``bpe``).
        bpe (`str`, optional): the BPE to undo when decoding, e.g. "sentencepiece".
        prepend_bos (`bool`, defaults to False): ``<s>`` before both sides, as
            ``load_langpair_dataset(prepend_bos=True)``.
        truncate_source (`bool`, defaults to False): sources cut to ``max_source_positions``
            tokens (EOS kept last), as ``--truncate-source``.
        max_source_positions (`int`, defaults to 1024): fairseq's ``--max-source-positions``.
        append_source_id (`bool`, defaults to False): ``[src]`` after the source and ``[tgt]``
            after the target (their ids in ``dict.{lang}.txt``), as
            ``load_langpair_dataset(append_source_id=True)``.
    """

    source_lang: str | None = None
    target_lang: str | None = None
    upsample_primary: int = 1
    decode_text: bool = False
    bpe: str | None = None
    prepend_bos: bool = False
    truncate_source: bool = False
    max_source_positions: int = 1024
    append_source_id: bool = False

    def validate(self) -> None:
        super().validate()
        check_upsample_primary(self.upsample_primary)  # (every bool field: BaseConfig.validate)
        PairItems(truncate_source=self.truncate_source, max_source_positions=self.max_source_positions)
        if (self.source_lang is None) != (self.target_lang is None):
            raise ParameterError("give both source_lang and target_lang or neither, got "
                                 f"source_lang={self.source_lang!r}, target_lang={self.target_lang!r}")


@dataclass(frozen=True)
class ShardFiles:
    """Where one language-pair shard's four files are read from."""

    source_bin: str
    source_idx: str
    target_bin: str
    target_idx: str


def pairs_table(pairs: LanguagePairs, dictionaries, bpe, rows) -> pa.Table:
    (table,) = pair_tables(pairs, int(rows[0]), int(rows[-1]) + 1, len(rows), dictionaries, bpe)
    return table


def _item_options(config: FairseqConfig) -> dict:
    """The options of ``load_langpair_dataset`` that change items (``PairItems.langpair``'s)."""
    return {"prepend_bos": config.prepend_bos, "truncate_source": config.truncate_source,
            "max_source_positions": config.max_source_positions, "append_source_id": config.append_source_id}


class MMIdxFairseq(BaseBuilder):
    """fairseq sentence pairs, one row per pair."""

    BUILDER_CONFIG_CLASS = FairseqConfig
    KIND = "fairseq language pairs"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        own = {"source_lang", "target_lang", "upsample_primary", "decode_text", "bpe", "prepend_bos",
               "truncate_source", "max_source_positions", "append_source_id"}
        pair_files = without_files_beside_pairs(files)  # a data-bin's dict.*.txt, a card
        return bool(own & set(settings)) or (bool(pair_files) and all(is_pair_file(f) for f in pair_files))

    def _plan(self, split, files, dl_manager):
        config = self.config
        found = find_language_pairs(files, config.source_lang, config.target_lang)
        shards = [shard for name in sorted(found) for shard in found[name]]
        originals = [prefix + ext for shard in shards
                     for prefix in (shard.source_prefix, shard.target_prefix) for ext in (".bin", ".idx")]
        read = dl_manager.download(originals)
        dictionaries = None
        if config.decode_text or config.append_source_id:   # append_source_id: the ids of [src], [tgt]
            folder = os.path.dirname(shards[0].source_prefix)
            dictionaries = tuple(dl_manager.download([dictionary_path(folder, shards[0].src),
                                                      dictionary_path(folder, shards[0].tgt)]))
        return Plan.of(split, originals[0::2], [ShardFiles(*read[i:i + 4]) for i in range(0, len(read), 4)],
                       self._identity(originals), upsample_primary=config.upsample_primary,
                       dictionaries=dictionaries, bpe=config.bpe, decode_text=config.decode_text,
                       langs=(shards[0].src, shards[0].tgt), items=tuple(sorted(_item_options(config).items())))

    def _order(self, plan):
        return {"upsample_primary": plan["upsample_primary"], **dict(plan["items"])}

    @staticmethod
    def open_plan(plan: Plan, opener) -> OpenedSplit:
        def indexed(bin_path, idx_path):
            return IndexedFile.open(split_prefix(idx_path), idx_path=idx_path, bin_path=bin_path,
                                    opener=ranged(opener) if is_remote(bin_path) else None)

        dictionaries = None
        if plan["dictionaries"]:
            dictionaries = tuple(Dictionary.load(p, opener=opener if is_remote(p) else None)
                                 for p in plan["dictionaries"])
        items = PairItems.langpair(**dict(plan["items"]), langs=plan["langs"], dictionaries=dictionaries)
        shards = [(indexed(s.source_bin, s.source_idx), indexed(s.target_bin, s.target_idx)) for s in plan.read_paths]
        pairs = LanguagePairs(shards, upsample_primary=plan["upsample_primary"], items=items)
        if not plan["decode_text"]:
            dictionaries = None
        features = {"id": datasets.Value("int64"),
                    "source": datasets.List(datasets.Value(pairs.source.dtype.name)),
                    "target": datasets.List(datasets.Value(pairs.target.dtype.name))}
        if dictionaries:
            features.update(source_text=datasets.Value("string"), target_text=datasets.Value("string"))
        return OpenedSplit(pairs.num_pairs, datasets.Features(features),
                           functools.partial(pairs_table, pairs, dictionaries, plan["bpe"]),
                           files=[f for shard in shards for f in shard],
                           sources=(pairs.source, pairs.target))
