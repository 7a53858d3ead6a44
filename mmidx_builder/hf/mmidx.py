"""The ``mmidx`` builder: the front door that ``load_dataset("mmidx", ...)`` and
``load_dataset(DIR)`` (a folder of ``.bin`` files) reach. It picks the source kind from the
settings and the files, and returns that kind's builder:

    kind (builder name)   module               chosen when
    mmidx_megatron        mmidx_megatron.py    a Megatron data argument is set (data_path,
                                               split_ratios, *_data_path, megatron_args, ...)
    mmidx_raw_chunks      mmidx_raw_chunks.py  n_bytes is set and style="diff"
    mmidx_raw             mmidx_raw.py         n_bytes is set
    mmidx_fairseq         mmidx_fairseq.py     a fairseq setting is set, or every data file is
                                               named {split}.{src}-{tgt}.{lang}.bin
    mmidx_indexed         mmidx_indexed.py     otherwise: .bin/.idx pairs as GPT samples

Each kind has its own config class and validates only its own fields; a setting that the
chosen kind does not take raises :class:`ParameterError` naming the kinds that do. A new
source kind is one module (a config and a builder with ``claims()``) plus one line in
:data:`registry.KIND_MODULES` (the order of preference; the kind then also loads by its name).

Why a front door rather than one builder with a mode switch: ``datasets`` finds one builder
per registered name and builds its config from the call's keywords (and from a card's
``configs:``) before any of our code runs, so the front config accepts every kind's fields
(:class:`MMIdxConfig`, made from the kinds' configs) and ``MMIdx.__new__`` hands them to
the kind's own builder, which ``datasets`` then uses as if it had been named directly.
"""

from __future__ import annotations

import dataclasses

import datasets

from datasets import DownloadConfig
from datasets.data_files import DataFilesDict, sanitize_patterns

from ..errors import ParameterError
from .card_scope import scoped_card
from .kind_settings import kind_builder, kind_fields
from .registry import FRONT_DOOR, KIND_MODULES, with_card_config

logger = datasets.utils.logging.get_logger(__name__)

# The kinds, in registry.KIND_MODULES' order: the first whose claims() is true is used.
KINDS = tuple(kind_builder(f"{__package__}.{name}") for name in KIND_MODULES)

_ALL_FIELDS = sorted(set().union(*(kind_fields(kind) for kind in KINDS)))

# Every kind's settings, each None ("not given"), so that datasets can build it from any
# call or card; the chosen kind's config applies its own defaults and checks.
MMIdxConfig = dataclasses.make_dataclass(
    "MMIdxConfig", [(name, object, dataclasses.field(default=None)) for name in _ALL_FIELDS],
    bases=(datasets.BuilderConfig,), namespace={"__doc__": "Any kind's settings; see the kinds' configs."})


def choose_kind(settings: dict, files: list[str]):
    """The builder class for ``settings`` (the settings given, None left out) and ``files``;
    raises ParameterError for a setting the kind does not take."""
    kind = next(k for k in KINDS if k.claims(settings, files))
    foreign = sorted(set(settings) - kind_fields(kind))
    if foreign:
        name = foreign[0]
        takers = [f"{k.KIND} ({k.__module__.rsplit('.', 1)[-1]})" for k in KINDS if name in kind_fields(k)]
        raise ParameterError(f"{name}={settings[name]!r} does not apply to {kind.KIND} (the "
                             f"{kind.__module__.rsplit('.', 1)[-1]} builder); it is a setting of "
                             f"{', '.join(takers)}")
    return kind


class MMIdx(datasets.ArrowBasedBuilder):
    """The front door: ``MMIdx(data_files=..., **settings)`` returns the builder of the
    source kind those settings and files describe (see the module docstring)::

        builder = MMIdx(data_files={"train": ["data/corpus_text_document.bin"]}, seq_length=2048)
        builder.download_and_prepare(); ds = builder.as_dataset("train")
        stream = builder.as_streaming_dataset("train")
    """

    BUILDER_CONFIG_CLASS = MMIdxConfig

    def __new__(cls, *args, **kwargs):
        if args:
            raise TypeError("MMIdx takes keyword arguments only")
        base = _card_config(cls, kwargs.get("config_name"))
        card = {name: getattr(base, name) for name in _ALL_FIELDS if base and getattr(base, name) is not None}
        if card.pop("index_cache_dir", None) is not None:
            # A card must not choose where we write: only the caller may.
            logger.warning("ignoring index_cache_dir from the dataset card's configs; pass index_cache_dir= "
                           "yourself to choose where sampling indices are cached")
        call = {name: kwargs.pop(name) for name in _ALL_FIELDS if kwargs.get(name) is not None}
        if base is not None:
            given = {**call, **{k: kwargs[k] for k in ("data_files", "data_dir") if kwargs.get(k) is not None}}
            download_config = DownloadConfig(token=kwargs.get("token"),
                                             storage_options=kwargs.get("storage_options") or {})
            card = scoped_card(card, base.data_files, base.data_dir, given, kwargs.get("base_path"), download_config)
        for name in _ALL_FIELDS:
            kwargs.pop(name, None)
        if kwargs.get("data_files") is not None and not isinstance(kwargs["data_files"], DataFilesDict):
            # The call's patterns (load_dataset(folder, data_files="*")): datasets resolves them in
            # the builder's __init__, after the kind is chosen; resolved here as it would, the kind
            # is chosen on the files themselves and datasets takes them as they are.
            kwargs["data_files"] = DataFilesDict.from_patterns(
                sanitize_patterns(kwargs["data_files"]), base_path=kwargs.get("base_path"),
                download_config=DownloadConfig(token=kwargs.get("token"),
                                               storage_options=kwargs.get("storage_options") or {}))
        data_files = kwargs.get("data_files") or (base.data_files if base is not None else None)
        files = [str(f) for split_files in (data_files.values() if isinstance(data_files, dict) else [data_files or []])
                 for f in ([split_files] if isinstance(split_files, str) else split_files)]
        kind = choose_kind({**card, **call}, files)
        if base is None:
            return kind(**kwargs, **call)
        # The card's config becomes the kind's own named config (as datasets does for any
        # builder with card configs), so the cache is keyed as datasets keys card configs:
        # by the config's name when the call adds no setting (datasets' offline fallback to an
        # Arrow cache needs exactly that), by name and the call's settings otherwise.
        config = kind.BUILDER_CONFIG_CLASS(name=base.name, data_files=base.data_files, data_dir=base.data_dir, **card)
        configured = with_card_config(kind, config, kwargs.get("dataset_name") or FRONT_DOOR)
        return configured(**kwargs, **call)


def _card_config(cls, config_name):
    """The config a card's ``configs:`` made for ``config_name`` (datasets subclasses the
    front door with them as BUILDER_CONFIGS), or None."""
    configs = getattr(cls, "BUILDER_CONFIGS", None) or []
    if not configs:
        return None
    name = config_name or cls.DEFAULT_CONFIG_NAME or configs[0].name
    for config in configs:
        if config.name == name:
            return config
    raise ParameterError(f"config {name!r} not found; the card defines {[c.name for c in configs]}")


__all__ = ["KINDS", "MMIdx", "MMIdxConfig", "choose_kind"]
