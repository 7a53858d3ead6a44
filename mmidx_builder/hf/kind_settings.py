"""The settings each source kind takes, and settings no builder takes, refused with what to
do instead.

Two mistakes reach ``datasets``' config check, which answers both with a ~700-character repr
of the whole config and no hint:

- a misspelt or foreign setting for one of our builders (``seq_lenght=64``): refused naming
  the closest settings ("did you mean seq_length?"), the kinds that take a foreign one, and
  every setting of the builder;
- our settings (``seq_length=64``) on a folder without a ``.bin``/``.idx`` pair, where
  ``datasets`` picked its own builder by the files' extension (json, text, parquet...):
  refused saying that the files hold no pair and how to make pairs from them.

hf/registry.py calls :func:`refuse_unknown_settings` for every builder before its config is
made, with the kinds' module paths (this module imports no other of hf/, so that the registry,
which everything imports, can use it); settings that fit pass through untouched.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from collections import Counter

from ..errors import ParameterError


def _config_fields(config_class) -> set[str]:
    return {f.name for f in dataclasses.fields(config_class)} if dataclasses.is_dataclass(config_class) else set()


def kind_builder(module_path: str):
    """The builder a kind module defines (the class there with ``claims``)."""
    module = importlib.import_module(module_path)
    return next(obj for obj in vars(module).values()
                if isinstance(obj, type) and obj.__module__ == module.__name__ and hasattr(obj, "claims"))


def kind_fields(kind) -> set[str]:
    """The settings a kind's config declares (beyond datasets' own BuilderConfig fields)."""
    from datasets import BuilderConfig

    return _config_fields(kind.BUILDER_CONFIG_CLASS) - _config_fields(BuilderConfig)


def refuse_unknown_settings(builder, settings: dict, *, ours: bool, kind_modules) -> None:
    """Raises ParameterError when ``settings`` (the keywords datasets is about to make
    ``builder``'s config from) hold a name its config class lacks: for our builders any such
    name, for datasets' own builders only names that are our settings. ``kind_modules``: the
    module paths of our source kinds."""
    known = _config_fields(builder.BUILDER_CONFIG_CLASS)
    unknown = [name for name in settings if name not in known]
    if not unknown:
        return
    kinds = [kind_builder(path) for path in kind_modules]
    if ours:
        _refuse_for_ours(builder, unknown[0], known, kinds)
    our_settings = set().union(*(kind_fields(kind) for kind in kinds))
    # None is "not given": datasets passes it over when a config exists, so it is left to datasets.
    strays = [name for name in unknown if name in our_settings and settings[name] is not None]
    if strays:
        _refuse_for_theirs(builder, strays, settings.get("data_files"))


def _refuse_for_ours(builder, name: str, known: set[str], kinds) -> None:
    from datasets import BuilderConfig

    own = sorted(known - _config_fields(BuilderConfig) - {"features"})
    takers = [kind.__module__.rsplit(".", 1)[-1] for kind in kinds if name in kind_fields(kind)]
    if takers:
        hint = (f"it is a setting of {', '.join(takers)}; load with load_dataset(\"mmidx\", ...) or a folder "
                "to have the kind chosen from the settings.")
    else:
        close = difflib.get_close_matches(name, own, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "no setting has a name close to it."
    raise ParameterError(f"{name}= is not a setting of the {builder.name} builder: {hint} "
                         f"Its settings: {', '.join(own)}")


def _refuse_for_theirs(builder, names: list[str], data_files) -> None:
    if data_files is None:  # a folder's files are in the config datasets made for it
        data_files = next((c.data_files for c in builder.BUILDER_CONFIGS if c.data_files), None)
    files = [str(f) for split in (data_files or {}).values() for f in split] if isinstance(data_files, dict) else []
    where = f" in {builder.base_path}" if getattr(builder, "base_path", None) else ""
    if files:
        counts = Counter(os.path.splitext(f)[1] or "(no extension)" for f in files)
        found = ", ".join(f"{n} {ext}" for ext, n in counts.most_common(4))
        found = f"{len(files)} data file(s){where}: {found}"
    else:
        found = f"no data files{where}"
    raise ParameterError(
        f"{', '.join(f'{n}=' for n in names)}: a setting of mmidx_builder's .bin/.idx builders, but the data "
        f"holds no .bin/.idx pair ({found}), so datasets chose its {builder.name!r} builder, which does not "
        "take it. Point load_dataset at a folder (or data_files) of .bin/.idx pairs; to make pairs from text, "
        "run `mmidx convert FILES --output-prefix PREFIX --tokenizer TOKENIZER` (docs/convert.md)")


__all__ = ["kind_builder", "kind_fields", "refuse_unknown_settings"]
