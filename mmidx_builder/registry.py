"""The only code that touches ``datasets`` internals: registering the "mmidx" builder.

Why: ``datasets`` 4.0 removed loading scripts and has no plugin entry point. What still
works is what the built-in formats (parquet, arrow, text) do: an entry in the packaged-
module tables of ``datasets.packaged_modules``. ``datasets.load`` imports those tables *by
name* at import time, so they are mutated in place here, never rebound.

What each entry is for (and how it fails when missing, measured on datasets 5.2):
  _PACKAGED_DATASETS_MODULES["mmidx"]  load_dataset("mmidx", ...) resolves  ("Couldn't reach 'mmidx' on the Hub")
  _EXTENSION_TO_MODULE[".bin"]         a folder / Hub repo of .bin infers us ("No (supported) data files found")
  _MODULE_TO_EXTENSIONS["mmidx"], _MODULE_TO_METADATA_EXTENSIONS["mmidx"],
  _MODULE_TO_METADATA_FILE_NAMES["mmidx"]                                      (KeyError in load.py)
  _ALL_EXTENSIONS, _ALL_ALLOWED_EXTENSIONS  lists derived once at import: without .bin
                                            there, .bin files are dropped without a word.

Only ``.bin`` is claimed: ``.idx`` is already Lance's metadata extension, and each .bin
finds its .idx by name. tests/test_registry.py has one test per entry point so that a
``datasets`` upgrade that moves these tables fails CI instead of users.
"""

from __future__ import annotations

import datasets.packaged_modules as packaged

from . import mmidx

BUILDER_NAME = "mmidx"
EXTENSIONS = [".bin"]


def register() -> None:
    """Makes ``load_dataset`` find the builder; idempotent."""
    packaged._PACKAGED_DATASETS_MODULES[BUILDER_NAME] = (mmidx.__name__, mmidx.PACKAGE_SOURCE_HASH)
    for ext in EXTENSIONS:
        packaged._EXTENSION_TO_MODULE[ext] = (BUILDER_NAME, {})
        for table in (packaged._ALL_EXTENSIONS, packaged._ALL_ALLOWED_EXTENSIONS):
            if ext not in table:
                table.append(ext)
    packaged._MODULE_TO_EXTENSIONS[BUILDER_NAME] = EXTENSIONS + [".zip"]
    packaged._MODULE_TO_METADATA_EXTENSIONS[BUILDER_NAME] = []
    packaged._MODULE_TO_METADATA_FILE_NAMES[BUILDER_NAME] = []
