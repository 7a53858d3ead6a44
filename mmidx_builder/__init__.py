"""mmidx_builder: Megatron/fairseq indexed token files (.bin/.idx) as HuggingFace datasets.

Importing the package registers the builders with ``datasets`` (hf/registry.py) without
importing ``datasets`` itself, so ``load_dataset("path/to/dir", seq_length=2048)`` finds
them and ``import mmidx_builder.sources.indexed`` stays light. Public names are loaded on first
use (as huggingface_hub's ``__init__`` does); the table below is the whole public surface.

The folders are the layers, lowest first (docs/layout.md; tests/test_layers.py keeps the order):

    errors, checks, dtypes, extras, progress   the foundation every layer may import
    storage/      bytes of files, local and remote (the reader seam, remote reads, caches)
    sources/      token sources: the .bin/.idx pair (indexed.py), raw files, the sidecar
    megatron/     Megatron's indices (sampling.py), blends, splits, command lines
    fairseq/      dictionaries and language pairs, batches, preprocess, collater
    convert/      text -> .bin/.idx (Megatron's preprocess_data.py), merge
    hf/           one datasets builder per source kind; "mmidx" picks the kind
    training/     MegatronCollator, megatron_rank_stream, megatron_global_stream,
                  mosaic_rank_stream, mosaic_global_stream, arrow_rows, numpy_batches
    publishing/   dataset cards and Hub upload
    cli/          the `mmidx` command

Module paths of release 0.1 (``mmidx_builder.format``, ``.sampling``, ...) still import, with a
DeprecationWarning naming the new path (old_paths.py).
"""

from __future__ import annotations

import importlib

from .hf.registry import install as _install_registration
from .old_paths import install as _install_old_paths

_install_registration()
_install_old_paths(__name__)

# The version is written once, in pyproject.toml; the installed package's metadata carries it.
DISTRIBUTION = "mmidx-builder"

# public name -> module that defines it
_LAZY = {
    "Concatenated": "sources.token_source",
    "ConcurrentWriteError": "errors",
    "ConvertError": "errors",
    "Flavour": "dtypes",
    "FormatError": "errors",
    "HubError": "errors",
    "IndexedFile": "sources.indexed",
    "IndexedFileWriter": "sources.indexed",
    "MMIdx": "hf.mmidx",
    "MMIdxConfig": "hf.mmidx",
    "MMIdxError": "errors",
    "MissingPartnerError": "errors",
    "ParameterError": "errors",
    "TokenSource": "sources.token_source",
    "write_documents": "sources.indexed",
    "numpy_batches": "training.as_numpy",
    # The training helpers use torch (an optional extra) when called.
    "FairseqCollater": "training",
    "MegatronCollator": "training",
    "megatron_rank_stream": "training",
    "megatron_global_stream": "training",
    "mosaic_rank_stream": "training",
    "mosaic_global_stream": "training",
    "arrow_rows": "training",
}

# Not the training helpers: `from mmidx_builder import *` must work without torch.
__all__ = sorted(name for name, module in _LAZY.items() if module != "training")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree on sys.path that was never installed
        return "0+unknown"


def __getattr__(name: str):
    if name == "__version__":  # read on first use: importlib.metadata scans sys.path
        globals()[name] = value = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"__version__"})
