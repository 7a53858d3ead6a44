"""Shard compression, by the names MosaicML writers give it.

    name in the index        file extension   decompressed with
    gz, gz:LEVEL             .gz              gzip (standard library)
    bz2, bz2:LEVEL           .bz2             bz2 (standard library)
    zstd, zstd:LEVEL         .zstd            zstd (the package mosaicml-streaming uses), else
                                              zstandard
    br, br:LEVEL             .br              brotli, else brotlicffi
    snappy                   .snappy          snappy (python-snappy: raw snappy blocks)

(``streaming/base/compression.py`` of mosaicml-streaming 0.13; Composer's legacy writer knows
only gz.) The codecs outside the standard library are optional: ``pip install
'mmidx-builder[mosaic]'`` installs the very packages mosaicml-streaming compresses with (the
MDS writer of ``mmidx convert`` needs them to write the same bytes). A shard whose codec is not
installed is a MissingCodecError naming the shard and what to install, not an ImportError
from deep inside a reader.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import io

from ..errors import FormatError, MissingCodecError

MOSAIC_EXTRA = "mmidx-builder[mosaic]"
FAMILIES = ("br", "bz2", "gz", "snappy", "zstd")
# Levels each family takes (LevelledCompression.levels); snappy has none.
_LEVELS = {"br": range(12), "bz2": range(1, 10), "gz": range(10), "zstd": range(1, 23)}


def family(name, path: str) -> str:
    """The family (``"zstd"``) of a compression name (``"zstd:7"``), which is also the shard's
    file extension; a FormatError naming ``path`` for one the writers do not make."""
    text = str(name)
    base, _, level = text.partition(":")
    if base not in FAMILIES or (level and (base not in _LEVELS or not level.isdigit()
                                           or int(level) not in _LEVELS[base])):
        raise FormatError(path, "compression", f"one of {', '.join(FAMILIES)}, optionally with a level "
                          "('zstd:7'), as mosaicml-streaming writes", repr(name))
    return base


def decompress(name: str, data: bytes, path: str) -> bytes:
    """``data`` (the file at ``path``, compressed with ``name``) decompressed. A corrupt stream
    is a FormatError naming the file; a codec that is not installed a MissingCodecError."""
    base = family(name, path)
    try:
        if base == "gz":
            return gzip.decompress(data)
        if base == "bz2":
            return bz2.decompress(data)
        return _optional(base, path)(data)
    except MissingCodecError:
        raise
    except Exception as error:  # noqa: BLE001  every codec has its own error types
        raise FormatError(path, f"{base} stream", f"a whole {base}-compressed shard", f"{type(error).__name__}: {error}",
                          hint="the file is corrupt or cut short; fetch it again") from None


def _optional(base: str, path: str):
    """The decompressor of ``base``: from the package mosaicml-streaming uses, else another."""
    for module_name, function in _DECOMPRESSORS[base]:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        return function(module)
    raise MissingCodecError(path, base, MOSAIC_EXTRA)


def _zstandard(module):
    # A stream reader: a frame written without its content size fails ZstdDecompressor.decompress.
    return lambda data: module.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read()


_DECOMPRESSORS = {
    "zstd": [("zstd", lambda m: m.decompress), ("zstandard", _zstandard)],
    "br": [("brotli", lambda m: m.decompress), ("brotlicffi", lambda m: m.decompress)],
    "snappy": [("snappy", lambda m: m.decompress)],
}


def compressor(name: str, path: str):
    """The function mosaicml-streaming compresses ``name`` (``"zstd:7"``) with, for writers that
    must write its bytes (``streaming.base.compression``: the same packages and default levels)."""
    base = family(name, path)
    _, _, level = str(name).partition(":")
    level = int(level) if level else _DEFAULT_LEVELS.get(base)
    if base == "gz":
        return lambda data: gzip.compress(data, level)
    if base == "bz2":
        return lambda data: bz2.compress(data, level)
    module_name = {"zstd": "zstd", "br": "brotli", "snappy": "snappy"}[base]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise MissingCodecError(path, f"{base} (the {module_name} package, as mosaicml-streaming)", MOSAIC_EXTRA) from None
    if base == "zstd":
        return lambda data: module.compress(data, level)
    if base == "br":
        return lambda data: module.compress(data, quality=level)
    return module.compress


# LevelledCompression defaults in streaming 0.13: Brotli(11), Bzip2(9), Gzip(9), Zstandard(3).
_DEFAULT_LEVELS = {"br": 11, "bz2": 9, "gz": 9, "zstd": 3}


__all__ = ["FAMILIES", "MOSAIC_EXTRA", "compressor", "decompress", "family"]
