"""mmidx_builder: Megatron/fairseq indexed token files (.bin/.idx) as HuggingFace datasets.

Importing the package registers the builders with ``datasets`` (hf/registry.py) without
importing ``datasets`` itself, so ``load_dataset("path/to/dir", seq_length=2048)`` finds
them and ``import mmidx_builder.format`` stays light. Public names are loaded on first use
(as huggingface_hub's ``__init__`` does); the table below is the whole public surface.

    layer             modules
    bytes on disk     format (.bin/.idx), rawfiles, fairseq, dtypes, source (the TokenSource seam)
    what training     sampling (Megatron's indices and sample assembly)
    sees
    datasets          hf/ (one builder per source kind; "mmidx" picks the kind), registry
    training          training/ (MegatronCollator, FairseqCollater, megatron_rank_stream, arrow_rows,
                      numpy_batches), provenance (EOD id)
    tools             convert, card, hub, stats, cli/
"""

from __future__ import annotations

import importlib

from .hf.registry import install as _install_registration

_install_registration()

__version__ = "0.1.0"

# public name -> module that defines it
_LAZY = {
    "Concatenated": "source",
    "ConcurrentWriteError": "errors",
    "ConvertError": "errors",
    "Flavour": "dtypes",
    "FormatError": "errors",
    "HubError": "errors",
    "IndexedFile": "format",
    "IndexedFileWriter": "format",
    "MMIdx": "hf.mmidx",
    "MMIdxConfig": "hf.mmidx",
    "MMIdxError": "errors",
    "MissingPartnerError": "errors",
    "ParameterError": "errors",
    "TokenSource": "source",
    "write_documents": "format",
    "numpy_batches": "training.as_numpy",
    # The training helpers use torch (an optional extra) when called.
    "FairseqCollater": "training",
    "MegatronCollator": "training",
    "megatron_rank_stream": "training",
    "arrow_rows": "training",
}

# Not the training helpers: `from mmidx_builder import *` must work without torch.
__all__ = sorted(name for name, module in _LAZY.items() if module != "training")


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
