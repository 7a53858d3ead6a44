"""mmidx_builder: Megatron/fairseq indexed token files (.bin/.idx) as HuggingFace datasets.

Importing the package registers the "mmidx" builder with ``datasets`` (see registry.py), so
``load_dataset("path/to/dir", seq_length=2048)`` finds it without a loading script.
"""

from .errors import ConvertError, FormatError, HubError, MissingPartnerError, MMIdxError, ParameterError
from .format import ConcatenatedFiles, Flavour, IndexedFile, IndexedFileWriter, write_documents
from .mmidx import MMIdx, MMIdxConfig
from .registry import register as _register

_register()

__version__ = "0.1.0"

# Training helpers import torch: loaded on first use, so the package imports without torch. They are
# public but not in __all__, so that `from mmidx_builder import *` does not need torch either.
_TRAINING = ("MegatronCollator", "megatron_rank_stream")


def __getattr__(name: str):
    if name in _TRAINING:
        from . import training

        return getattr(training, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConcatenatedFiles",
    "ConvertError",
    "Flavour",
    "FormatError",
    "HubError",
    "IndexedFile",
    "IndexedFileWriter",
    "MMIdx",
    "MMIdxConfig",
    "MMIdxError",
    "MissingPartnerError",
    "ParameterError",
    "write_documents",
]
