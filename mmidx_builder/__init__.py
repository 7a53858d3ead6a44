"""mmidx_builder: Megatron/fairseq indexed token files (.bin/.idx) as HuggingFace datasets."""

from .errors import ConvertError, FormatError, HubError, MissingPartnerError, MMIdxError, ParameterError
from .format import Flavour, IndexedFile, IndexedFileWriter, write_documents

__version__ = "0.1.0"

__all__ = [
    "ConvertError",
    "Flavour",
    "FormatError",
    "HubError",
    "IndexedFile",
    "IndexedFileWriter",
    "MMIdxError",
    "MissingPartnerError",
    "ParameterError",
    "write_documents",
]
