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
