"""The ``mmidx_megatron`` builder: Megatron's data arguments (a blend, a split string, per-split
blends, sizes, or a whole Megatron command line) in one ``load_dataset`` call, giving the
``train`` / ``validation`` / ``test`` streams megatron-core's BlendedMegatronDatasetBuilder
gives, sample for sample (megatron/plan.py says how).

Prefixes are Megatron's (``PATH/name_text_document`` without ``.bin``/``.idx``); relative ones
are resolved against the folder or Hub repo ``load_dataset`` was given, so a card's
``configs:`` can carry a blend. Rows: ``input_ids`` and, when any split is a blend,
``dataset_id`` (int16, the prefix's index in its blend; 0 in a split that is not one).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import posixpath
from dataclasses import dataclass, field

import datasets
import numpy as np
import pyarrow as pa

from ..sources import provenance
from ..storage.files import is_remote
from ..storage.pairs import check_partners
from .card_checksums import verify_against_card
from ..dtypes import common_token_dtype
from ..errors import ParameterError
from ..megatron.args import BLEND_SETTINGS, SETTINGS, Resolution, resolve
from ..megatron.plan import all_prefixes
from ..megatron.splits import build_split, split_samples
from .pair_downloads import download_pairs
from ..sources.token_source import Concatenated
from .opened_files import indexed_files
from .gpt_samples import GPTConfig, GPTSamplesBuilder, structure_columns
from .mmidx_mosaic import UNPACK_FOLDER, plan_streams, token_source_of
from .mosaic_streams import identity_paths_of, mosaic_index_of
from .plans import OpenedSplit, Plan, opened_split
from .tables import fixed_size_lists, sample_features

# The settings that say "this is a Megatron run": the command line, and resolve()'s keywords
# that a load of .bin/.idx pairs does not have. Any of them picks this builder.
OWN_SETTINGS = ("megatron_args", "megatron_version",
                *(name for name in SETTINGS if name not in {f.name for f in dataclasses.fields(GPTConfig)}))


@dataclass
class MegatronConfig(GPTConfig):
    """BuilderConfig for Megatron's data arguments: a :class:`GPTConfig` whose data is a blend.

    Args:
        data_path (`list` or `str`): Megatron's ``--data-path`` tokens: prefixes, or weight/prefix pairs.
        split_ratios (`str`, optional): Megatron's ``--split`` ("969,30,1"); default "969, 30, 1" as Megatron's.
        train_data_path, valid_data_path, test_data_path: per-split blends (``blend_per_split``).
        num_samples (`int` or `dict`, optional): the train size, or sizes per split
            (``{"train": ..., "validation": ..., "test": ...}``); a split without one is one pass.
        mid_level_dataset_surplus (`float`, defaults to 0.005): Megatron's per-dataset oversizing.
        megatron_args (`str`, optional): a Megatron command line; the settings above override it.
        megatron_version (`str`, defaults to "core_v0.19"): the Megatron-LM release whose reading of
            ``megatron_args`` to follow, "core_v0.16" or "core_v0.19" (megatron/versions.py).
        seq_length (`int`, defaults to 2048 or ``--seq-length``), seed (`int`, 1234 or ``--seed``),
        add_extra_token, document_structure, index_cache_dir, dtype, read_ahead_bytes: as for
        .bin/.idx pairs (:class:`GPTConfig`); ``num_epochs`` does not apply (sizes are ``num_samples``).
        token_column (`str`, optional): for prefixes that name MosaicML shards (a folder holding an
            ``index.json``, or the index itself), the column of token ids (default ``tokens``, else
            the only column that can hold ids); each sample of it is a document.
    """

    data_path: object = None
    split_ratios: str | None = None
    train_data_path: object = None
    valid_data_path: object = None
    test_data_path: object = None
    mid_level_dataset_surplus: float | None = None
    megatron_args: str | None = None
    megatron_version: str | None = None
    token_column: str | None = None
    # Not a setting: the flags change batches, not samples. Declared only to refuse it by name.
    collator_flags: dict | None = field(default=None, repr=False)

    def resolution(self) -> Resolution:
        """Megatron's arguments resolved (megatron.resolve): ``megatron_args`` with the settings
        given beside it laid over it."""
        return resolve(self.megatron_args, megatron_version=self.megatron_version,
                       **{name: getattr(self, name) for name in SETTINGS})

    def resolved(self) -> dict:
        return self.resolution().settings

    def sampling_kwargs(self) -> dict:
        """The sampling settings every split shares (sizes are per split, in ``plans()``)."""
        settings = self.resolved()
        return dict(seq_length=settings["seq_length"], seed=settings["seed"], add_extra_token=self.add_extra_token)

    def plans(self) -> dict:
        return self.resolution().plans

    def _check_sampling(self) -> None:
        if self.collator_flags is not None:
            raise ParameterError(
                f"collator_flags={self.collator_flags!r} does not change the samples, so load_dataset does not take "
                "it: MegatronCollator.from_megatron_args(megatron_args) takes the flags of the same command line, "
                "or pass them to MegatronCollator(reset_position_ids=..., eod_mask_loss=..., ...)")
        if self.num_epochs is not None:
            raise ParameterError(f"num_epochs={self.num_epochs!r} does not apply to Megatron data arguments (the "
                                 "mmidx_megatron builder): give num_samples (Megatron's --train-samples), or "
                                 "load the files without data_path to sample whole epochs")
        resolution = self.resolution()
        resolution.settings  # seq_length, seed and the command line's sizes checked
        # Every rule that needs no file. A card's config may carry no data setting (the call
        # adds it, and the config is validated again then); "no data" is said when loading.
        if self.megatron_args or any(getattr(self, name) is not None for name in BLEND_SETTINGS):
            resolution.plans


# What a planned prefix's .bin slot holds when the prefix names MosaicML shards.
MOSAIC_PREFIX = "<mosaic>"


def mosaic_tokens(streams, opener, plan: Plan):
    """A prefix of MosaicML shards opened: its token column as one token source."""
    return token_source_of(streams, opener, plan["token_column"], plan["dtype"], plan["index_cache_dir"],
                           os.path.join(plan["index_cache_dir"], UNPACK_FOLDER), verify=False)


def megatron_table(built, plan: Plan, rows: np.ndarray) -> pa.Table:
    tokens, dataset_ids, structure = split_samples(built, rows, plan["document_structure"], plan["dtype"])
    length = built.sample_length
    columns = {"input_ids": fixed_size_lists(tokens, length)}
    if plan["with_dataset_id"]:
        columns["dataset_id"] = pa.array(dataset_ids)
    if structure is not None:
        columns.update(structure_columns(*structure, length))
    return pa.table(columns)


class MMIdxMegatron(GPTSamplesBuilder):
    """Megatron's train / validation / test streams for a blend and split (or per-split blends)."""

    BUILDER_CONFIG_CLASS = MegatronConfig
    KIND = "Megatron data arguments (data_path, split_ratios, per-split paths, megatron_args)"

    @classmethod
    def claims(cls, settings: dict, files: list[str]) -> bool:
        return any(name in settings for name in OWN_SETTINGS)

    def _card_fits(self, features) -> bool:
        return False  # a card describes one folder's samples, not a blend's splits

    def _card_counts_apply(self) -> bool:
        return False

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
        located = [self._locate(p) for p in prefixes]
        shards = [mosaic_index_of(p) for p in located]
        paths = [p + ext for p, index in zip(located, shards) if index is None for ext in (".bin", ".idx")]
        paths += identity_paths_of([index for index in shards if index is not None])
        return [p for p in paths if is_remote(p) or os.path.exists(p)]

    def _plans(self, dl_manager) -> list[Plan]:
        plans = self.config.plans()
        prefixes = all_prefixes(plans)
        located = [self._locate(p) for p in prefixes]
        indexes = [mosaic_index_of(p) for p in located]
        pairs = [p for p, index in zip(located, indexes) if index is None]
        for prefix in pairs:  # named as located, streaming or not, before anything is fetched
            if not is_remote(prefix):
                check_partners(prefix + ".idx", prefix + ".bin")
        read = iter(download_pairs(dl_manager, [path for prefix in pairs for path in (prefix + ".bin", prefix + ".idx")]))
        files, identities = [], []
        for prefix, path, index in zip(prefixes, located, indexes):
            if index is None:
                files.append((prefix, next(read), next(read)))
                identities.append(self._identity([path + ".bin", path + ".idx"]))
            else:  # MosaicML shards: the stream planned as the mosaic kinds plan it
                streams, identity = plan_streams(prefix, [index], dl_manager)
                files.append((prefix, MOSAIC_PREFIX, streams))
                identities.append(identity)
        identity = "|".join(identities)
        with_dataset_id = any(plan.blend is not None for plan in plans.values())
        settings = {**self._sample_settings(), "token_column": self.config.token_column}

        def plan_of(name, plan, **override):
            prefixes_of_plan = {p.prefix for p in plan.parts}
            return Plan.of(name, [p.prefix for p in plan.parts], [f for f in files if f[0] in prefixes_of_plan],
                           identity, split_plan=plan, with_dataset_id=with_dataset_id, **{**settings, **override})

        made = [plan_of(name, plan) for name, plan in plans.items()]
        if settings["dtype"] is None and len({plan.read_paths for plan in made}) > 1:
            # Per-split blends of different token dtypes (megatron-core builds them): one dtype holding
            # all. (Splits of one blend share its files, so their dtype.) Reading the .idx headers
            # opens the pairs: the card's sha256 check first (cheap: it compares what the download
            # manager recorded), as the base class does.
            verify_against_card(dl_manager, self.base_path)
            dtypes = [self._split_dtype(plan) for plan in made]
            if len(set(dtypes)) > 1:
                dtype = common_token_dtype(dtypes, names=[f"split {name!r}" for name in plans])
                made = [plan_of(name, plan, dtype=dtype.name) for name, plan in plans.items()]
        return made

    def _split_dtype(self, plan: Plan) -> str:
        """The token dtype of a split's samples, from its pairs' headers: opened (and kept for
        the split's opening, opened_files) but not sampled, so a stream of one split builds
        no other split's indices. MosaicML prefixes: the split opened as it will be read."""
        if any(kind == MOSAIC_PREFIX for _, kind, _ in plan.read_paths):
            return opened_split(type(self).open_plan, plan, self._remote()).features["input_ids"].feature.dtype
        opened = indexed_files([(idx_path, bin_path) for _, bin_path, idx_path in plan.read_paths], self._remote(),
                               plan["index_cache_dir"])
        self.__dict__.setdefault("_held_pairs", []).extend(opened)  # open until the splits take them
        return common_token_dtype([f.dtype for f in opened], [prefix for prefix, _, _ in plan.read_paths]).name

    def _order(self, plan) -> dict:
        split = plan["split_plan"]
        return {**dict(plan["sampling"]), "blend": split.blend, "weights": split.weights, "size": split.size,
                "ratio": split.ratio, "num_samples": [p.num_samples for p in split.parts]}

    def _token_facts(self, plan, dl_manager):
        return provenance.tokenizer_facts([bin_path for _, bin_path, _ in plan.read_paths if bin_path != MOSAIC_PREFIX],
                                          dl_manager, open, fetched=self._fetched_sidecars())

    @staticmethod
    def open_plan(plan: Plan, opener) -> OpenedSplit:
        # Every prefix's pair at once, and a prefix another split of the blend opened is not opened again.
        pairs = [(prefix, idx_path, bin_path) for prefix, bin_path, idx_path in plan.read_paths
                 if bin_path != MOSAIC_PREFIX]
        opened = indexed_files([(idx_path, bin_path) for _, idx_path, bin_path in pairs], opener,
                               plan["index_cache_dir"])
        sources = {prefix: Concatenated([f]) for (prefix, _, _), f in zip(pairs, opened)}
        files = list(opened)
        for prefix, kind, streams in plan.read_paths:
            if kind == MOSAIC_PREFIX:
                sources[prefix] = mosaic_tokens(streams, opener, plan)
                files += sources[prefix].parts
        built = build_split(plan["split_plan"], sources, cache_dir=plan["index_cache_dir"], **dict(plan["sampling"]))
        dtype = np.dtype(plan["dtype"]) if plan["dtype"] else built.dtype
        features = sample_features(dtype, built.sample_length, plan["document_structure"])
        if plan["with_dataset_id"]:
            features["dataset_id"] = datasets.Value("int16")
        return OpenedSplit(built.rows, features, functools.partial(megatron_table, built, plan), files=files,
                           sources=built.sources)
