"""Module paths of release 0.1 that moved when the package was laid out in layer folders.

``import mmidx_builder.format`` (and ``from mmidx_builder.format import write_documents``)
keeps working for one more release: the old name is the new module itself (the same object,
so ``monkeypatch`` and ``isinstance`` see one module), with a DeprecationWarning that says
where it moved. CHANGELOG.md lists the same table.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old path -> new path (under mmidx_builder)
MOVED = {
    "_io": "storage.files",
    "mapped": "storage.mapped",
    "array_cache": "storage.array_cache",
    "remote": "storage.remote",
    "remote_curl": "storage.remote.curl",
    "format": "sources.indexed",
    "rawfiles": "sources.raw",
    "source": "sources.token_source",
    "provenance": "sources.provenance",
    "stats": "sources.stats",
    "fairseq_items": "fairseq.items",
    "fairseq_batches": "fairseq.batches",
    "fairseq_preprocess": "fairseq.preprocess",
    "training.fairseq_collater": "fairseq.collater",
    "training._torch": "extras",
    "sampling": "megatron.sampling",
    "card": "publishing.card",
    "hub": "publishing.hub",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths: the loader puts the new module in sys.modules under the old name,
    which the import system then returns (it reads sys.modules back after ``exec_module``)."""

    def __init__(self, package: str):
        self.package = package
        self.moved = {f"{package}.{old}": f"{package}.{new}" for old, new in MOVED.items()}

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.moved:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None  # a placeholder; exec_module replaces it

    def exec_module(self, module) -> None:
        old = module.__name__
        new = self.moved[old]
        warnings.warn(f"{old} moved to {new}; the old path goes away in the next release", DeprecationWarning,
                      stacklevel=2)
        sys.modules[old] = importlib.import_module(new)


def install(package: str) -> None:
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules(package))
