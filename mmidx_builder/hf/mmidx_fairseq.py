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

from .. import provenance
from .._io import file_identity, is_remote
from ..fairseq import (Dictionary, LanguagePairs, check_upsample_primary, dictionary_path, find_language_pairs,
                       is_pair_file, pair_tables)
from ..format import IndexedFile, split_prefix
from ..source import check_opened
from ..errors import ParameterError
from .common import BaseBuilder, BaseConfig, identity_paths, ranged, split_files


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
    """

    source_lang: str | None = None
    target_lang: str | None = None
    upsample_primary: int = 1
    decode_text: bool = False
    bpe: str | None = None

    def validate(self) -> None:
        super().validate()
        check_upsample_primary(self.upsample_primary)
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


@dataclass(frozen=True)
class PairsPlan:
    split: str
    shards: tuple[ShardFiles, ...]
    identity: str
    upsample_primary: int
    dictionaries: tuple[str, str] | None  # dict.{src}.txt, dict.{tgt}.txt for decode_text
    bpe: str | None


@functools.lru_cache(maxsize=8)
def _opened(plan: PairsPlan, opener):
    def indexed(bin_path, idx_path):
        return IndexedFile.open(split_prefix(idx_path), idx_path=idx_path, bin_path=bin_path,
                                opener=ranged(opener) if is_remote(bin_path) else None)

    pairs = LanguagePairs([(indexed(s.source_bin, s.source_idx), indexed(s.target_bin, s.target_idx))
                           for s in plan.shards], upsample_primary=plan.upsample_primary)
    for side in (pairs.source, pairs.target):
        check_opened(side, plan.identity)  # the files the plan was made from, even in a new process
    dictionaries = None
    if plan.dictionaries:
        dictionaries = tuple(Dictionary.load(p, opener=opener if is_remote(p) else None) for p in plan.dictionaries)
    return pairs, dictionaries


def pairs_table(pairs: LanguagePairs, dictionaries, plan: PairsPlan, rows) -> pa.Table:
    (table,) = pair_tables(pairs, int(rows[0]), int(rows[-1]) + 1, len(rows), dictionaries, plan.bpe)
    return table


class MMIdxFairseq(BaseBuilder):
    """fairseq sentence pairs, one row per pair."""

    BUILDER_CONFIG_CLASS = FairseqConfig
    KIND = "fairseq language pairs"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        own = {"source_lang", "target_lang", "upsample_primary", "decode_text", "bpe"}
        return bool(own & set(settings)) or (bool(files) and all(is_pair_file(f) for f in files))

    def _split_generators(self, dl_manager):
        config = self.config
        generators, features = [], []
        for split, files in split_files(config).items():
            found = find_language_pairs(files, config.source_lang, config.target_lang)
            shards = [shard for name in sorted(found) for shard in found[name]]
            originals = [prefix + ext for shard in shards
                         for prefix in (shard.source_prefix, shard.target_prefix) for ext in (".bin", ".idx")]
            read = dl_manager.download(originals)
            dictionaries = None
            if config.decode_text:
                folder = os.path.dirname(shards[0].source_prefix)
                dictionaries = tuple(dl_manager.download([dictionary_path(folder, shards[0].src),
                                                          dictionary_path(folder, shards[0].tgt)]))
            plan = PairsPlan(split=split, shards=tuple(ShardFiles(*read[i:i + 4]) for i in range(0, len(read), 4)),
                             identity="|".join(file_identity(p) for p in identity_paths(originals)),
                             upsample_primary=config.upsample_primary, dictionaries=dictionaries, bpe=config.bpe)
            pairs, _ = _opened(plan, open)
            provenance.record_split(self.info, split, kind=self.name, files=originals[0::2], rows=pairs.num_pairs,
                                    settings={"upsample_primary": config.upsample_primary})
            split_features = {"id": datasets.Value("int64"),
                              "source": datasets.List(datasets.Value(pairs.source.dtype.name)),
                              "target": datasets.List(datasets.Value(pairs.target.dtype.name))}
            if dictionaries:
                split_features.update(source_text=datasets.Value("string"), target_text=datasets.Value("string"))
            features.append(datasets.Features(split_features))
            generators.append(self._split_generator(split, plan, pairs.num_pairs, f"{len(shards)} shard(s)"))
        self._set_features(features)
        return generators

    def _table_maker(self, plan: PairsPlan):
        pairs, dictionaries = _opened(plan, open)
        return functools.partial(pairs_table, pairs, dictionaries, plan)
