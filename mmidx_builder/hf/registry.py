"""The only code that touches ``datasets`` internals: registering the builders, and the two
builder attributes the builders need that ``datasets`` has no public API for.

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

Registration must not import ``datasets`` (1.9 s): ``import mmidx_builder.format`` stays
light. :func:`install` registers at once when ``datasets.packaged_modules`` is already
imported, and otherwise right after it is, through a one-shot import hook. The table entries
need only module paths and a source hash, so nothing of ``datasets`` is touched before it
has finished loading. tests/test_registry.py has one test per table entry.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.util
import os
import sys

FRONT_DOOR = "mmidx"
# Module names under mmidx_builder.hf; each module's file name is its builder's name.
BUILDER_MODULES = ("mmidx", "mmidx_indexed", "mmidx_raw", "mmidx_raw_chunks", "mmidx_fairseq")
EXTENSIONS = [".bin"]
_TARGET = "datasets.packaged_modules"


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


def register(packaged=None) -> None:
    """Makes ``load_dataset`` find the builders; idempotent."""
    if packaged is None:
        import datasets.packaged_modules as packaged
    for name in BUILDER_MODULES:
        packaged._PACKAGED_DATASETS_MODULES[name] = (f"{__package__}.{name}", package_source_hash())
        packaged._MODULE_TO_EXTENSIONS[name] = EXTENSIONS + [".zip"]
        packaged._MODULE_TO_METADATA_EXTENSIONS[name] = []
        packaged._MODULE_TO_METADATA_FILE_NAMES[name] = []
    for ext in EXTENSIONS:
        packaged._EXTENSION_TO_MODULE[ext] = (FRONT_DOOR, {})
        for table in (packaged._ALL_EXTENSIONS, packaged._ALL_ALLOWED_EXTENSIONS):
            if ext not in table:
                table.append(ext)


class _RegisterOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``datasets.packaged_modules`` with the other finders, runs it, then registers."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding us
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        register(module)


def install() -> None:
    """Registers now if ``datasets`` is loaded, else as soon as it is; idempotent."""
    if _TARGET in sys.modules:
        register(sys.modules[_TARGET])
    elif not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


# --- builder attributes datasets has no public API for -------------------------------

def cache_root(builder) -> str:
    """The cache folder the builder was given (``cache_dir`` or datasets' default); the
    sampling indices are cached beside the Arrow files, in ``<root>/mmidx_indices``."""
    return builder._cache_dir_root


def record_checksums(builder, enabled: bool) -> None:
    """datasets records the data files' sizes and sha256 only under ``datasets-cli test``
    (the ``_record_checksums`` switch); ``verification_mode="all_checks"`` turns it on here."""
    builder._record_checksums = enabled


__all__ = ["BUILDER_MODULES", "FRONT_DOOR", "install", "package_source_hash", "register"]
