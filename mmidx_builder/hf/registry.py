"""The only code that touches ``datasets`` internals: registering the builders, the builder
attributes the builders need that ``datasets`` has no public API for, and what a reader of a
stream needs to know of it (hf/streams.py).

Why: ``datasets`` 4.0 removed loading scripts and has no plugin entry point. What still
works is what the built-in formats (parquet, arrow, text) do: an entry in the packaged-
module tables of ``datasets.packaged_modules``. ``datasets.load`` imports those tables *by
name* at import time, so they are mutated in place here, never rebound.

What each entry is for (and how it fails when missing, measured on datasets 5.2):
  _PACKAGED_DATASETS_MODULES[name]     load_dataset(name, ...) resolves  ("Couldn't reach 'name' on the Hub")
  _EXTENSION_TO_MODULE[".bin"]         a folder / Hub repo of .bin infers "mmidx" ("No (supported) data files found")
  _MODULE_TO_EXTENSIONS[name], _MODULE_TO_METADATA_EXTENSIONS[name],
  _MODULE_TO_METADATA_FILE_NAMES[name]                                      (KeyError in load.py)
  _ALL_EXTENSIONS, _ALL_ALLOWED_EXTENSIONS  lists derived once at import: without .bin
                                            there, .bin files are dropped without a word.

Only ``.bin`` is claimed: ``.idx`` is already Lance's metadata extension, and each .bin
finds its .idx by name. Every builder module is registered under its own name ("mmidx",
the front door that picks the source kind, and one name per kind, e.g. "mmidx_raw").

Two more hooks on ``datasets.load``: for our names, ``load_dataset(name)`` without
``data_files`` does not scan the working directory (see _no_folder_scan_for_our_names); and a
folder or repo holding ``.bin``/``.idx`` pairs is ours whatever else lies beside them
(see _pairs_make_a_folder_ours).

Supported: datasets 4.5 and newer (OLDEST_DATASETS; 4.0-4.4 lack three of the tables), with
no upper bound. Every internal used here is listed in INTERNALS and checked when the module
holding it is imported, before anything is registered or wrapped: a release that lacks one is
refused with one DatasetsVersionError naming the installed version, what is missing and what
to install, instead of an AttributeError from deep inside ``datasets``.

A third hook, on ``datasets.builder``: a setting that a builder's config does not have gets
an error that says what to do (hf/kind_settings.py: "did you mean seq_length?", or "this
folder holds no .bin/.idx pair" when datasets picked its own builder for our settings).

Registration must not import ``datasets`` (1.9 s): ``import mmidx_builder.format`` stays
light. :func:`install` registers at once when ``datasets.packaged_modules`` is already
imported, and otherwise right after it is, through a one-shot import hook. The table entries
need only module paths and a source hash, so nothing of ``datasets`` is touched before it
has finished loading. tests/test_registry.py has one test per table entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading

FRONT_DOOR = "mmidx"
# The source kinds: one module each under mmidx_builder.hf (its file name is its builder's name),
# in the front door's order of preference (the first whose builder claims a call is used).
# A new kind is its module plus one line here.
KIND_MODULES = ("mmidx_megatron", "mmidx_raw_chunks", "mmidx_raw", "mmidx_fairseq", "mmidx_mosaic_samples", "mmidx_mosaic",
                "mmidx_indexed")
BUILDER_MODULES = (FRONT_DOOR, *KIND_MODULES)
EXTENSIONS = [".bin", ".mds"]
# MosaicML's index files, kept among a folder's data files by name (their extension, .json,
# is every JSON file's): MDS's index.json and Composer's index.mds (.mds is ours already).
METADATA_FILE_NAMES = ["index.json"]


@functools.lru_cache(maxsize=None)
def package_source_hash() -> str:
    """A hash of this package's source, folded into the builders' cache hash so an edited
    package never serves an Arrow cache written by older code."""
    digest = hashlib.sha256()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for folder, subfolders, names in sorted(os.walk(root)):
        subfolders[:] = sorted(d for d in subfolders if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digest.update(os.path.relpath(path, root).encode() + b"\0" + f.read())
    return digest.hexdigest()


# The oldest datasets release supported: the first with every packaged-module table that
# register() fills in. CI runs the builder, registry, docs and remote tests on it and on the
# newest release.
OLDEST_DATASETS = "4.5.0"

# The datasets internals this module uses, by the module that defines them (dotted names
# inside it; tests/test_registry.py exercises each through its hook).
INTERNALS = {
    "datasets.packaged_modules": ("_PACKAGED_DATASETS_MODULES", "_EXTENSION_TO_MODULE", "_MODULE_TO_EXTENSIONS",
                                  "_MODULE_TO_METADATA_EXTENSIONS", "_MODULE_TO_METADATA_FILE_NAMES",
                                  "_ALL_EXTENSIONS", "_ALL_ALLOWED_EXTENSIONS"),
    "datasets.builder": ("DatasetBuilder._create_builder_config",),
    "datasets.load": ("PackagedDatasetModuleFactory.get_module", "LocalDatasetModuleFactory.get_module",
                      "HubDatasetModuleFactory.get_module", "infer_module_for_data_files", "DatasetModule",
                      "configure_builder_class", "_PACKAGED_DATASETS_MODULES", "_EXTENSION_TO_MODULE",
                      "_MODULE_TO_EXTENSIONS"),
    # imported by datasets.load before its hook runs
    "datasets.data_files": ("DataFilesDict", "sanitize_patterns", "resolve_pattern", "is_relative_path", "xjoin",
                            "_prepare_path_and_storage_options", "_is_inside_unrequested_special_dir",
                            "_is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir", "xbasename",
                            "FILES_TO_IGNORE"),
    "datasets.info": ("DatasetInfosDict.from_dataset_card_data",),
    "datasets.utils.metadata": ("MetadataConfigs.from_dataset_card_data",),
    "datasets.features": ("Features._from_yaml_list",),
    "datasets.utils.file_utils": ("_prepare_single_hop_path_and_storage_options",),
}


def _installed_datasets() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("datasets")
    except PackageNotFoundError:
        return "(version unknown)"


def check_internals(*module_names: str, modules=None) -> None:
    """Raises DatasetsVersionError when a datasets internal of INTERNALS is missing.
    ``modules`` maps a module name to the module object to check (default: sys.modules)."""
    from ..errors import DatasetsVersionError

    missing = []
    for module_name in module_names:
        module = (modules or {}).get(module_name) or sys.modules.get(module_name)
        if module is None:  # datasets.load imports them all before its hook runs; this is a fallback
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                module = None
        for dotted in INTERNALS[module_name]:
            found = module
            for part in dotted.split("."):
                found = getattr(found, part, None)
            if found is None:
                missing.append(f"{module_name}.{dotted}")
    if not missing:
        return
    installed = _installed_datasets()
    if _release(installed) < _release(OLDEST_DATASETS):
        advice = f"pip install -U 'datasets>={OLDEST_DATASETS}'"
    else:
        advice = ("this datasets release is newer than the ones this mmidx_builder knows: "
                  "pip install -U mmidx-builder, or install the datasets release before it")
    raise DatasetsVersionError(
        f"mmidx_builder supports datasets {OLDEST_DATASETS} and newer; the installed datasets {installed} "
        f"lacks {', '.join(missing)}, which registering the mmidx builders needs ({advice})")


def _release(version: str) -> tuple:
    """``"4.5.0.dev0"`` -> (4, 5, 0): the leading numbers, enough to order releases."""
    numbers = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def register(packaged=None) -> None:
    """Makes ``load_dataset`` find the builders; idempotent."""
    if packaged is None:
        import datasets.packaged_modules as packaged
    check_internals("datasets.packaged_modules", modules={"datasets.packaged_modules": packaged})
    for name in BUILDER_MODULES:
        packaged._PACKAGED_DATASETS_MODULES[name] = (f"{__package__}.{name}", package_source_hash())
        packaged._MODULE_TO_EXTENSIONS[name] = EXTENSIONS + [".zip"]
        packaged._MODULE_TO_METADATA_EXTENSIONS[name] = []
        packaged._MODULE_TO_METADATA_FILE_NAMES[name] = list(METADATA_FILE_NAMES)
    for ext in EXTENSIONS:
        packaged._EXTENSION_TO_MODULE[ext] = (FRONT_DOOR, {})
        for table in (packaged._ALL_EXTENSIONS, packaged._ALL_ALLOWED_EXTENSIONS):
            if ext not in table:
                table.append(ext)


def _no_folder_scan_for_our_names(load) -> None:
    """``load_dataset("mmidx", ...)`` without ``data_files`` makes datasets' packaged-module
    factory scan the *current directory* for data files: it fails in a folder without any
    ("EmptyDatasetError") and silently takes unrelated .bin files in one that has some. Our
    builders can be told their data otherwise (a Megatron ``data_path`` / ``megatron_args``),
    so for our names, with neither ``data_files`` nor ``data_dir``, no folder is scanned: the
    builder gets no files and says what it needs. Other names keep datasets' behaviour."""
    factory = load.PackagedDatasetModuleFactory
    if getattr(factory.get_module, "_mmidx", False):
        return
    original = factory.get_module

    def get_module(self):
        if self.name not in BUILDER_MODULES:
            return original(self)
        if self.data_files is None and self.data_dir is None:
            from datasets.data_files import DataFilesDict

            module_path, code_hash = load._PACKAGED_DATASETS_MODULES[self.name]
            return load.DatasetModule(module_path, code_hash, {"data_files": DataFilesDict(), "dataset_name": self.name})
        module = original(self)
        if self.data_files is not None:  # data_dir alone: datasets says when it holds no data file
            _refuse_empty_patterns(self.data_files, module.builder_kwargs.get("data_files") or {})
        return module

    get_module._mmidx = True
    factory.get_module = get_module


def _refuse_empty_patterns(patterns, resolved) -> None:
    """datasets drops a glob that matches nothing without a word, and the builder then sees a
    split without files and no longer knows the pattern: say it here, while it is known."""
    from datasets.data_files import sanitize_patterns

    from ..errors import ParameterError

    given = sanitize_patterns(patterns)
    for split, files in resolved.items():
        if not files:
            raise ParameterError(f"data_files[{str(split)!r}]: no file matched {given.get(split, given)}; "
                                 "check the path and the pattern")


def holds_pairs(files) -> bool:
    """Whether ``files`` (one split's data files, local paths or URLs) hold a ``.bin`` beside
    its ``.idx``."""
    names = {str(f) for f in files}
    return any(name.endswith(".bin") and name[:-4] + ".idx" in names for name in names)


def holds_shards(files) -> bool:
    """Whether ``files`` hold MosaicML shards with their index: an ``index.json`` or Composer's
    ``index.mds[.gz]`` beside shard files (``*.mds*``). An index.json alone may be any JSON."""
    from ..mosaic.index import index_layout

    names = [os.path.basename(str(f)) for f in files]
    layouts = {index_layout(name) for name in names}
    return "legacy" in layouts or ("mds" in layouts and any(".mds" in name for name in names))


def is_ours(files) -> bool:
    """The one test of "this folder is ours": one split's files hold ``.bin``/``.idx`` pairs or
    MosaicML shards with their index."""
    return holds_pairs(files) or holds_shards(files)


def _pairs_make_a_folder_ours(load) -> None:
    """datasets picks a folder's builder by its most common file extension (ties: .json, then
    alphabetical). A tokenized corpus is usually shared with its tokenizer beside it
    (``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json``) or a
    ``NOTES.txt``, and one pair then loads as JSON or text and fails on ``seq_length``. Once
    this package is imported, a folder (or Hub repo) whose splits hold ``.bin``/``.idx``
    pairs is ours, and datasets' own extension filter then drops the other files, as its
    folder builders ignore files of other extensions. Folders without a pair are left to
    datasets' rule."""
    infer = load.infer_module_for_data_files
    if getattr(infer, "_mmidx", False):
        return

    def infer_module_for_data_files(data_files, path=None, download_config=None):
        if data_files and all(is_ours(files) for files in data_files.values()):
            return load._EXTENSION_TO_MODULE[EXTENSIONS[0]]
        return infer(data_files, path=path, download_config=download_config)

    infer_module_for_data_files._mmidx = True
    load.infer_module_for_data_files = infer_module_for_data_files


# --- a dataset card datasets cannot read: one typed error naming the card -------------------

_FEATURES_EXPECTED = "datasets' YAML features (a list of mappings with a name and a dtype)"


def _shown(value) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 80 else text[:77] + '...'}"


def _front_matter_problem(data, field: str) -> str | None:
    """What is wrong with the types in the card's ``field`` (``configs`` or ``dataset_info``),
    if anything: the entry, the setting, what was expected and what was found."""
    from datasets.features import Features

    value = data.get(field)
    if not value:
        return None
    if field == "configs" and not isinstance(value, list):
        return f"configs: expected a list of configs (mappings with a config_name), found {_shown(value)}"
    entries = value if isinstance(value, list) else [value]
    for i, entry in enumerate(entries):
        where = f"{field}[{i}]" if isinstance(value, list) else field
        if not isinstance(entry, dict):
            return f"{where}: expected a mapping of settings, found {_shown(entry)}"
        name = entry.get("config_name")
        if name is not None and not isinstance(name, str):
            return f"{where} config_name: expected a string, found {_shown(name)}"
        if name is not None:
            where += f" (config_name {name!r})"
        features = entry.get("features")
        if features is not None:
            if not isinstance(features, (list, dict)):
                return f"{where} features: expected {_FEATURES_EXPECTED}, found {_shown(features)}"
            try:
                Features._from_yaml_list(features)
            except (TypeError, ValueError, KeyError, AttributeError) as bad:
                return f"{where} features: expected {_FEATURES_EXPECTED}, found {_shown(features)} ({bad})"
    return None


def _typed_card_errors(load) -> None:
    """datasets reads a card's ``configs`` and ``dataset_info`` itself, before it picks a
    builder, and a setting of the wrong type stops it with a bare error (``features: 5``:
    "TypeError: Expected a dict or a list but got <class 'int'>: 5"). Here that is one
    ParameterError naming the card, the config, the setting, what was expected and what was
    found. datasets' two parsers are wrapped (they are classmethods, called through their
    classes), and the module factories that read a card put its name in front."""
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs

    from ..errors import ParameterError

    for cls, field in ((MetadataConfigs, "configs"), (DatasetInfosDict, "dataset_info")):
        parse = cls.__dict__["from_dataset_card_data"].__func__
        if getattr(parse, "_mmidx", False):
            continue

        def checked(klass, data, _parse=parse, _field=field):
            problem = _front_matter_problem(data, _field)
            if problem is None:
                try:
                    return _parse(klass, data)
                except (TypeError, ValueError, KeyError, AttributeError) as error:  # datasets' own words, one line
                    problem = f"{_field}: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
            error = ParameterError(f"the dataset card's front matter: {problem}")
            error.card_problem = str(error)
            raise error

        checked._mmidx = True
        cls.from_dataset_card_data = classmethod(checked)

    readmes = {"LocalDatasetModuleFactory": lambda f: os.path.join(f.path, "README.md"),
               "HubBucketDatasetModuleFactory": lambda f: f"{f.path}/README.md",
               "HubDatasetModuleFactory": lambda f: f"README.md of the Hub dataset {f.name}"}
    for name, readme in readmes.items():
        factory = getattr(load, name, None)
        if factory is None or getattr(factory.get_module, "_mmidx", False):
            continue

        def get_module(self, _original=factory.get_module, _readme=readme):
            try:
                return _original(self)
            except ParameterError as error:
                if not getattr(error, "card_problem", None):
                    raise
                raise ParameterError(f"{_readme(self)}: {error.card_problem}") from None

        get_module._mmidx = True
        factory.get_module = get_module


def _settings_say_what_to_do(builder) -> None:
    """datasets refuses a setting its config lacks with the whole config's repr ("BuilderConfig
    IndexedConfig(name=..., ...) doesn't have a 'seq_lenght' key", ~700 characters), and for
    our settings on a folder it gave to its own builder, with that builder's config. Every
    builder's config is made in ``DatasetBuilder._create_builder_config``: wrapped here, the
    settings are checked first and refused with a ParameterError that says what to do
    (hf/kind_settings.py); settings that fit go on to datasets unchanged."""
    cls = builder.DatasetBuilder
    original = cls._create_builder_config
    if getattr(original, "_mmidx", False):
        return

    def _create_builder_config(self, config_name=None, custom_features=None, config_id=None, **config_kwargs):
        from .kind_settings import refuse_unknown_settings

        refuse_unknown_settings(self, config_kwargs, ours=type(self).__module__.startswith(f"{__package__}."),
                                kind_modules=[f"{__package__}.{name}" for name in KIND_MODULES])
        return original(self, config_name, custom_features, config_id, **config_kwargs)

    _create_builder_config._mmidx = True
    cls._create_builder_config = _create_builder_config


def _hook_builder(builder) -> None:
    check_internals("datasets.builder")
    _settings_say_what_to_do(builder)


# --- every file a listing matched is accounted for (hf/pair_listing.py) ----------------------

_listings = threading.local()


@contextlib.contextmanager
def accounting():
    """Within this block, every pattern datasets resolves also records the files it would
    silently leave out (a ``.idx`` whose ``.bin`` is gone, a FIFO or a dangling link among
    the data files): ``with accounting() as ledger: ...`` then ``ledger`` holds one error each."""
    outer, outer_matched = getattr(_listings, "ledger", None), getattr(_listings, "matched", None)
    ledger = []
    _listings.ledger, _listings.matched = ledger, set()
    try:
        yield ledger
    finally:
        _listings.ledger, _listings.matched = outer, outer_matched


def _listed(pattern: str, base_path: str, allowed_extensions, download_config) -> dict:
    """{path: kind} of every entry ``pattern`` (and its ``.idx`` partner pattern) matches,
    whatever its type, minus the hidden and special files datasets never reads; the path
    spelled as datasets' resolve_pattern spells its matches."""
    from datasets import data_files as df
    from fsspec.core import url_to_fs

    from .pair_listing import entry_kind, named_like_data, partner_pattern

    if df.is_relative_path(pattern):
        pattern = df.xjoin(base_path, pattern)
    pattern, storage_options = df._prepare_path_and_storage_options(pattern, download_config=download_config)
    if "::" in pattern:  # compressed or archived members: datasets' own business
        return {}
    fs, fs_pattern = url_to_fs(pattern, **storage_options)
    protocol = pattern.split("://")[0] if "://" in pattern else (fs.protocol if isinstance(fs.protocol, str)
                                                                 else fs.protocol[0])
    prefix = protocol + "://" if protocol != "file" else ""
    glob_kwargs = {"expand_info": False} if protocol == "hf" else {}
    entries = {}
    for each in filter(None, (fs_pattern, partner_pattern(fs_pattern))):
        for path, info in fs.glob(each, detail=True, **glob_kwargs).items():
            if (df._is_inside_unrequested_special_dir(path, fs_pattern)
                    or df._is_unrequested_hidden_file_or_is_inside_unrequested_hidden_dir(path, fs_pattern)):
                continue
            full = path if "://" in path else prefix + path
            if info.get("type") == "directory" and not named_like_data(full, fs_pattern):
                continue
            entries[full] = entry_kind(full, info.get("type", "file"), bool(info.get("islink")))
    return entries


def _plain_url(pattern: str) -> bool:
    """An http(s) URL without glob characters: fsspec's HTTP glob of one asks whether it
    exists with a GET of the whole file (``_exists``), hung up after the headers, and calls a
    429 or a 503 "not there"; storage/remote/http_info.py asks with a HEAD. (Glob characters
    as fsspec's HTTP glob sees them, ``*?[``; its module is not imported: it needs aiohttp,
    which a core install lacks.)"""
    return (pattern.startswith(("http://", "https://")) and "::" not in pattern
            and not any(c in pattern for c in "*?["))


def _existing_urls(url: str, storage_options: dict) -> list[str]:
    """``url`` and its ``.idx`` partner (for a ``.bin``), those of them that exist, each asked
    with a HEAD (RemoteAccess.stat: a rate limit waited out within its bounds, or said as one)."""
    from ..storage.remote import RemoteAccess
    from .pair_listing import partner_pattern

    urls = [u for u in (url, partner_pattern(url)) if u]
    found = RemoteAccess(storage_options=storage_options).stat_many(urls, missing_ok=True)
    return [u for u, obj in zip(urls, found) if obj is not None]


def _account_for_every_listed_file(data_files) -> None:
    """datasets.data_files.resolve_pattern, which every folder, pattern and Hub repo goes
    through, keeps only regular files; inside :func:`accounting`, what it drops is recorded."""
    check_internals("datasets.data_files")
    resolve = data_files.resolve_pattern
    if getattr(resolve, "_mmidx", False):
        return

    def resolve_pattern(pattern, base_path, allowed_extensions=None, download_config=None):
        ledger = getattr(_listings, "ledger", None)
        from .pair_listing import problems

        def is_data_file(path, allowed=allowed_extensions):
            return allowed is None or any("." + s in allowed for s in os.path.basename(path).split(".")[1:])

        if ledger is not None and _plain_url(pattern):
            # As datasets resolves it, with a HEAD of the URL and of its partner, not a GET; a
            # failure other than "not there" (a rate limit, a silent server) is raised as it is.
            url, storage_options = data_files._prepare_path_and_storage_options(pattern,
                                                                              download_config=download_config)
            existing = _existing_urls(url, storage_options)
            ledger.extend(problems(dict.fromkeys(existing), is_data_file))
            matched = _matched_url(url, existing, allowed_extensions)
            _listings.matched.update(matched)
            return matched
        try:
            matched = resolve(pattern, base_path, allowed_extensions=allowed_extensions,
                              download_config=download_config)
            if ledger is not None:
                _listings.matched.update(matched)  # a set: datasets probes a folder with overlapping patterns
            return matched
        finally:
            if ledger is not None:
                ledger.extend(problems(_listed(pattern, base_path, allowed_extensions, download_config), is_data_file))

    resolve_pattern._mmidx = True
    data_files.resolve_pattern = resolve_pattern


def _matched_url(url: str, existing: list[str], allowed_extensions) -> list[str]:
    """datasets.data_files.resolve_pattern of a plain http(s) URL (_plain_url) that
    ``existing`` says is there or not: ``[url]`` when it is and has an allowed extension, else
    its FileNotFoundError, worded as its."""
    from datasets import data_files as df

    name = df.xbasename(url)
    if url in existing[:1] and name not in df.FILES_TO_IGNORE and (
            allowed_extensions is None or any("." + suffix in allowed_extensions for suffix in name.split(".")[1:])):
        return [url]
    error_msg = f"Unable to find '{url}'"
    if allowed_extensions is not None:
        error_msg += f" with any supported extension {list(allowed_extensions)}"
    raise FileNotFoundError(error_msg)


def _ours(module) -> bool:
    return getattr(module, "module_path", "").startswith(__package__ + ".")


def _no_shard_left_out(load) -> None:
    """The module factories that list files (a folder, data_files patterns, a Hub repo) run
    inside :func:`accounting`; when the module they pick is ours, a file they left out is an
    error naming it. A folder picked for another format (its FIFOs or .idx files are that
    format's business) keeps datasets' behaviour; so does our name given no files."""
    from ..errors import FormatError
    from .pair_listing import PAIR_SUFFIXES, one_error

    for name in ("LocalDatasetModuleFactory", "PackagedDatasetModuleFactory", "HubDatasetModuleFactory",
                 "HubBucketDatasetModuleFactory"):
        factory = getattr(load, name, None)
        if factory is None or getattr(factory.get_module, "_mmidx_listing", False):
            continue
        packaged = name == "PackagedDatasetModuleFactory"

        def get_module(self, _original=factory.get_module, _packaged=packaged):
            with accounting() as ledger:
                try:
                    module = _original(self)
                    matched = len(_listings.matched)
                except (FileNotFoundError, FormatError) as error:
                    pairs = [e for e in ledger if e.path.endswith(PAIR_SUFFIXES)]
                    if pairs and not isinstance(error, FormatError):  # all the pattern matched was broken
                        raise one_error(pairs) from error
                    raise
            if not _ours(module):
                return module
            from .card_bounds import too_many_files

            too_many = too_many_files(matched)
            if too_many is not None:
                raise too_many
            extensions = () if _packaged else (*PAIR_SUFFIXES, *load._MODULE_TO_EXTENSIONS.get(FRONT_DOOR, ()))
            error = one_error(e for e in ledger if _packaged or e.path.endswith(tuple(extensions)))
            if error is not None:
                raise error
            return module

        get_module._mmidx_listing = True
        factory.get_module = get_module


def _bounded_cards() -> None:
    """Inside our module factories (:func:`accounting` is active there), a README is checked
    against the bounds of hf/card_bounds.py before huggingface_hub parses it."""
    from huggingface_hub import DatasetCard

    load = DatasetCard.load.__func__
    if getattr(load, "_mmidx", False):
        return

    def bounded(cls, repo_id_or_path, *args, _load=load, **kwargs):
        path = os.fspath(repo_id_or_path) if isinstance(repo_id_or_path, (str, os.PathLike)) else None
        if getattr(_listings, "ledger", None) is not None and path and os.path.isfile(path):
            from .card_bounds import check_front_matter

            with open(path, encoding="utf-8-sig", newline="", errors="replace") as f:
                check_front_matter(f.read(), path)
        return _load(cls, repo_id_or_path, *args, **kwargs)

    bounded._mmidx = True
    DatasetCard.load = classmethod(bounded)


def _hook_load(load) -> None:
    check_internals("datasets.load", "datasets.data_files", "datasets.info", "datasets.utils.metadata",
                    "datasets.features", "datasets.utils.file_utils")
    _bounded_cards()
    _no_folder_scan_for_our_names(load)
    _pairs_make_a_folder_ours(load)
    _typed_card_errors(load)
    _no_shard_left_out(load)


# module imported by datasets -> what to do right after it has run
_ON_IMPORT = {"datasets.packaged_modules": register, "datasets.builder": _hook_builder,
              "datasets.data_files": _account_for_every_listed_file, "datasets.load": _hook_load}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a module of ``_ON_IMPORT`` with the other finders, runs it, then calls its hook.
    Leaves ``sys.meta_path`` once every module it waits for has been imported."""

    def __init__(self, pending):
        self.pending, self.loaders = set(pending), {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        self.pending.discard(fullname)
        sys.meta_path.remove(self)  # so that find_spec below finds the real module, not us
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if self.pending:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        self.loaders[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        self.loaders.pop(module.__name__).exec_module(module)
        _ON_IMPORT[module.__name__](module)


def install() -> None:
    """Registers now if ``datasets`` is loaded, else as soon as it is; idempotent."""
    pending = []
    for name, hook in _ON_IMPORT.items():
        if name in sys.modules:
            hook(sys.modules[name])
        else:
            pending.append(name)
    if pending and not any(isinstance(finder, _AfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(pending))


# --- builder attributes datasets has no public API for -------------------------------

def cache_root(builder) -> str:
    """The cache folder the builder was given (``cache_dir`` or datasets' default); the
    sampling indices are cached beside the Arrow files, in ``<root>/mmidx_indices``."""
    return builder._cache_dir_root


def record_checksums(builder, enabled: bool) -> None:
    """datasets records the data files' sizes and sha256 only under ``datasets-cli test``
    (the ``_record_checksums`` switch); ``verification_mode="all_checks"`` turns it on here."""
    builder._record_checksums = enabled


def checksums_recorded(builder) -> bool:
    """Whether this load records checksums (``verification_mode="all_checks"``): then every
    hash a file's own index records (MosaicML shards) is checked too."""
    return bool(getattr(builder, "_record_checksums", False))


# Protocols whose storage options are resolved up front (any other gets the flat options).
REMOTE_PROTOCOLS = ("hf", "http", "https", "s3", "gs", "gcs", "az", "abfs", "abfss")


def remote_access(builder, cache_dir: str | None = None, max_cache_bytes: int | None = None):
    """The remote.RemoteAccess for a builder's remote files, with the storage options datasets'
    streaming ``open`` would use for each protocol (datasets' own resolution: the token and
    endpoint for ``hf://``, ``trust_env`` for HTTP, ``storage_options[protocol]`` or the flat
    options for the rest), and the block cache settings."""
    from datasets import DownloadConfig
    from datasets.utils.file_utils import _prepare_single_hop_path_and_storage_options

    from ..storage.remote import RemoteAccess

    given = dict(builder.storage_options or {})
    config = DownloadConfig(storage_options=given, token=builder.token)
    options = {}
    for protocol in sorted(set(REMOTE_PROTOCOLS) | {k for k, v in given.items() if isinstance(v, dict)}):
        _, resolved = _prepare_single_hop_path_and_storage_options(f"{protocol}://host/path", download_config=config)
        options[protocol] = resolved.get(protocol, {})
    return RemoteAccess(options, cache_dir, max_cache_bytes)


def with_card_config(builder_cls, config, dataset_name: str):
    """``builder_cls`` with ``config`` as its one named config, the way datasets configures a
    builder with a card's ``configs:`` (datasets.load.configure_builder_class, which also
    makes the dynamic class picklable for worker processes)."""
    from datasets.load import configure_builder_class

    return configure_builder_class(builder_cls, builder_configs=[config], default_config_name=config.name,
                                   dataset_name=dataset_name)


# --- streams: what readers of an IterableDataset need that datasets keeps private ----------

def split_by_node(stream) -> bool:
    """Whether ``datasets.distributed.split_dataset_by_node`` was applied to ``stream``."""
    return getattr(stream, "_distributed", None) is not None


def node_split_of_caller():
    """``(rank, world_size, strategy)`` of the split_dataset_by_node stream whose iteration is
    running this builder's table generator; None when there is none. datasets keeps the split
    on the IterableDataset (``_distributed``) and tells the generator nothing; its ``__iter__``
    (or ``_iter_pytorch`` in a DataLoader worker) is a frame up the stack, so it is found there."""
    import datasets

    frame = sys._getframe(1)
    while frame is not None:
        # Only a method of IterableDataset itself can be the stream's own frame: reading a
        # frame's f_locals copies them all (for every frame: 7% of a local stream's time).
        # Code objects name their class from Python 3.11 (co_qualname); before, every frame of
        # datasets' iterable_dataset.py is looked at.
        code = frame.f_code
        qualname = getattr(code, "co_qualname", None)
        wanted = (qualname.startswith("IterableDataset.") if qualname is not None
                  else code.co_filename.endswith("iterable_dataset.py"))
        owner = frame.f_locals.get("self") if wanted else None
        if isinstance(owner, datasets.IterableDataset):
            distributed = getattr(owner, "_distributed", None)
            if distributed is None:
                return None
            # datasets before 5.0 keeps no strategy (it dealt whole shards, else every n-th row)
            return distributed.rank, distributed.world_size, getattr(distributed, "strategy", None)
        frame = frame.f_back
    return None


def format_type(stream) -> str | None:
    """The format ``with_format`` gave ``stream`` (None: Python objects)."""
    formatting = getattr(stream, "_formatting", None)
    return formatting.format_type if formatting else None


def stream_origin(stream):
    """``(builder, gen_kwargs)`` when ``stream`` is a builder's ``_generate_tables`` read as
    it is (no map, filter, skip, shuffle or take on top), else None. ``datasets`` keeps the
    generator (a bound method of the builder) and its keyword arguments on the stream's
    examples iterable (datasets 5.2: ``ArrowExamplesIterable``)."""
    examples = getattr(stream, "_ex_iterable", None)
    generate = getattr(examples, "generate_tables_fn", None)
    kwargs = getattr(examples, "kwargs", None)
    builder = getattr(generate, "__self__", None)
    if (type(examples).__name__ != "ArrowExamplesIterable" or getattr(generate, "__name__", "") != "_generate_tables"
            or not isinstance(kwargs, dict) or builder is None):
        return None
    return builder, dict(kwargs)


__all__ = ["BUILDER_MODULES", "FRONT_DOOR", "INTERNALS", "KIND_MODULES", "OLDEST_DATASETS", "check_internals", "install",
           "package_source_hash", "register"]
