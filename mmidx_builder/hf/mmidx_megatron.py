"""The ``mmidx_megatron`` builder: Megatron's data arguments (a blend, a split string, per-split
blends, sizes, or a whole Megatron command line) in one ``load_dataset`` call, giving the
``train`` / ``validation`` / ``test`` streams megatron-core's BlendedMegatronDatasetBuilder
gives, sample for sample (megatron/blend.py says how).

Prefixes are Megatron's (``PATH/name_text_document`` without ``.bin``/``.idx``); relative ones
are resolved against the folder or Hub repo ``load_dataset`` was given, so a card's
``configs:`` can carry a blend. Rows: ``input_ids`` and, when any split is a blend,
``dataset_id`` (int16, the prefix's index in its blend; 0 in a split that is not one).
"""

from __future__ import annotations

import functools
import os
import posixpath
from dataclasses import dataclass, field

import datasets
import numpy as np
import pyarrow as pa

from .. import provenance
from .._io import file_identity, is_remote
from ..dtypes import cast_tokens, integer_dtype
from ..errors import ParameterError
from ..format import IndexedFile, split_prefix
from ..megatron.args import settings_from_megatron_args
from ..megatron.blend import DEFAULT_SURPLUS, SplitPlan, all_prefixes, megatron_plan
from ..megatron.splits import build_split, split_samples
from ..pair_downloads import download_pairs
from ..source import Concatenated
from .common import (DEFAULT_NUM_SHARDS, INDEX_CACHE_FOLDER, ROWS_PER_TABLE, BaseBuilder, BaseConfig, check_integer,
                     fixed_size_lists, ranged, sample_features, shard_ranges, structure_columns)
from .readahead import ShardReadAhead
from .registry import cache_root

# The settings that say "this is a Megatron run": any of them picks this builder.
OWN_SETTINGS = ("data_path", "split_ratios", "train_data_path", "valid_data_path", "test_data_path",
                "megatron_args", "mid_level_dataset_surplus")
PATH_SETTINGS = ("data_path", "train_data_path", "valid_data_path", "test_data_path")


@dataclass
class MegatronConfig(BaseConfig):
    """BuilderConfig for Megatron's data arguments.

    Args:
        data_path (`list` or `str`): Megatron's ``--data-path`` tokens: prefixes, or weight/prefix pairs.
        split_ratios (`str`, optional): Megatron's ``--split`` ("969,30,1"); default "969, 30, 1" as Megatron's.
        train_data_path, valid_data_path, test_data_path: per-split blends (``blend_per_split``).
        num_samples (`int` or `dict`, optional): the train size, or sizes per split
            (``{"train": ..., "validation": ..., "test": ...}``); a split without one is one pass.
        mid_level_dataset_surplus (`float`, defaults to 0.005): Megatron's per-dataset oversizing.
        megatron_args (`str`, optional): a Megatron command line; the settings above override it.
        seq_length (`int`, defaults to 2048 or ``--seq-length``), seed (`int`, 1234 or ``--seed``),
        add_extra_token, document_structure, index_cache_dir, dtype: as for .bin/.idx pairs.
    """

    data_path: object = None
    split_ratios: str | None = None
    train_data_path: object = None
    valid_data_path: object = None
    test_data_path: object = None
    num_samples: object = None
    mid_level_dataset_surplus: float | None = None
    megatron_args: str | None = None
    seq_length: int | None = None
    seed: int | None = None
    add_extra_token: bool = True
    document_structure: bool = False
    index_cache_dir: str | None = None
    dtype: str | None = None
    collator_flags: dict = field(default_factory=dict, repr=False)  # from megatron_args, for MegatronCollator

    def resolved(self) -> dict:
        """The settings, ``megatron_args`` read and the explicit ones laid over it."""
        settings = settings_from_megatron_args(self.megatron_args) if self.megatron_args else {}
        self.collator_flags = settings.pop("collator_flags", {})
        explicit = {name: getattr(self, name) for name in (*PATH_SETTINGS, "split_ratios", "num_samples",
                                                           "mid_level_dataset_surplus", "seq_length", "seed")}
        if any(explicit[name] is not None for name in PATH_SETTINGS):
            for name in PATH_SETTINGS:  # an explicit blend replaces the command line's whole blend
                settings.pop(name, None)
        settings.update({k: v for k, v in explicit.items() if v is not None})
        settings.setdefault("seq_length", 2048)
        settings.setdefault("seed", 1234)
        settings.setdefault("mid_level_dataset_surplus", DEFAULT_SURPLUS)
        return settings

    def plans(self) -> dict[str, SplitPlan]:
        settings = self.resolved()
        return megatron_plan(**{k: settings.get(k) for k in (*PATH_SETTINGS, "split_ratios", "num_samples",
                                                             "mid_level_dataset_surplus")})

    def validate(self) -> None:
        super().validate()
        settings = self.resolved()
        check_integer("seq_length", settings["seq_length"], 1)
        check_integer("seed", settings["seed"], 0)
        if self.dtype is not None:
            integer_dtype(self.dtype)
        # Every rule that needs no file. A card's config may carry no data setting (the call
        # adds it, and the config is validated again then); "no data" is said when loading.
        if self.megatron_args or any(getattr(self, name) is not None for name in PATH_SETTINGS):
            self.plans()


@dataclass(frozen=True)
class MegatronSplit:
    """What a worker needs for one split; small and picklable."""

    plan: SplitPlan
    files: tuple[tuple[str, str, str], ...]  # (prefix as given, .bin read path, .idx read path)
    identity: str
    seq_length: int
    seed: int
    add_extra_token: bool
    index_cache_dir: str
    document_structure: bool
    dtype: str | None
    with_dataset_id: bool

    @property
    def split(self) -> str:
        return self.plan.name


@functools.lru_cache(maxsize=8)
def _built(split: MegatronSplit, opener):
    sources = {}
    for prefix, bin_path, idx_path in split.files:
        remote = is_remote(bin_path)
        sources[prefix] = Concatenated([IndexedFile.open(split_prefix(idx_path), idx_path=idx_path, bin_path=bin_path,
                                                         opener=ranged(opener) if remote else None)])
    return build_split(split.plan, sources, seq_length=split.seq_length, seed=split.seed,
                       add_extra_token=split.add_extra_token, cache_dir=split.index_cache_dir)


class MMIdxMegatron(BaseBuilder):
    """Megatron's train / validation / test streams for a blend and split (or per-split blends)."""

    BUILDER_CONFIG_CLASS = MegatronConfig
    KIND = "Megatron data arguments (data_path, split_ratios, per-split paths, megatron_args)"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return any(name in settings for name in OWN_SETTINGS)

    def _locate(self, prefix: str) -> str:
        """A prefix as given, or joined to the folder / repo ``load_dataset`` was given. A local
        result is absolute: the download manager joins a relative path to the folder again."""
        if is_remote(prefix) or os.path.isabs(prefix) or not self.base_path:
            return prefix
        if is_remote(self.base_path):
            return posixpath.join(self.base_path, prefix)
        return os.path.abspath(os.path.join(self.base_path, prefix))

    def _identity_paths(self, config) -> list[str]:
        try:
            prefixes = all_prefixes(config.plans())
        except ParameterError:
            return []
        paths = [self._locate(p) + ext for p in prefixes for ext in (".bin", ".idx")]
        return [p for p in paths if is_remote(p) or os.path.exists(p)]

    def _split_generators(self, dl_manager):
        config = self.config
        settings = config.resolved()
        plans = config.plans()
        prefixes = all_prefixes(plans)
        located = [self._locate(p) for p in prefixes]
        read = download_pairs(dl_manager, [path for prefix in located for path in (prefix + ".bin", prefix + ".idx")])
        files = tuple((p, read[2 * i], read[2 * i + 1]) for i, p in enumerate(prefixes))
        identity = "|".join(file_identity(path) for prefix in located for path in (prefix + ".bin", prefix + ".idx")
                            if is_remote(path) or os.path.exists(path))
        with_dataset_id = any(plan.blend is not None for plan in plans.values())
        cache_dir = config.index_cache_dir or os.path.join(cache_root(self), INDEX_CACHE_FOLDER)
        generators, features = [], []
        for name, plan in plans.items():
            split = MegatronSplit(plan=plan, files=tuple(f for f in files if f[0] in {p.prefix for p in plan.parts}),
                                  identity=identity, seq_length=settings["seq_length"], seed=settings["seed"],
                                  add_extra_token=config.add_extra_token, index_cache_dir=cache_dir,
                                  document_structure=config.document_structure, dtype=config.dtype,
                                  with_dataset_id=with_dataset_id)
            built = _built(split, open)
            dtype = np.dtype(config.dtype) if config.dtype else built.dtype
            split_features = sample_features(dtype, built.sample_length, config.document_structure)
            if with_dataset_id:
                split_features["dataset_id"] = datasets.Value("int16")
            features.append(split_features)
            provenance.record_split(
                self.info, name, kind=self.name, files=[p.prefix for p in plan.parts], rows=built.rows,
                settings={"seq_length": settings["seq_length"], "seed": settings["seed"],
                          "add_extra_token": config.add_extra_token, "blend": plan.blend,
                          "weights": plan.weights, "size": plan.size, "ratio": plan.ratio,
                          "num_samples": [p.num_samples for p in plan.parts]},
                facts=provenance.tokenizer_facts([r for f in split.files for r in f[1:2]], dl_manager, open))
            generators.append(self._split_generator(name, split, built.rows, f"{len(plan.parts)} dataset(s)"))
        self._set_features(features)
        return generators

    def _table_maker(self, split: MegatronSplit):
        return _read_ahead(split, self.config.num_shards or DEFAULT_NUM_SHARDS, open)


@functools.lru_cache(maxsize=8)
def _read_ahead(split: MegatronSplit, num_shards: int, opener) -> ShardReadAhead:
    """The split's table maker, kept per process: a stream asking shard by shard is served
    several shards per gather (readahead.py)."""
    built = _built(split, opener)
    return ShardReadAhead(functools.partial(megatron_table, built, split), shard_ranges(built.rows, num_shards),
                          ROWS_PER_TABLE)


def megatron_table(built, split: MegatronSplit, rows: np.ndarray) -> pa.Table:
    tokens, dataset_ids, structure = split_samples(built, rows, split.document_structure)
    length = built.sample_length
    columns = {"input_ids": fixed_size_lists(cast_tokens(tokens, split.dtype), length)}
    if split.with_dataset_id:
        columns["dataset_id"] = pa.array(dataset_ids)
    if structure is not None:
        columns.update(structure_columns(*structure, length))
    return pa.table(columns)
