"""A split's data files: the config's files per split, .bin/.idx pairs listed from them (a
pair missing a file named before anything is read), the files whose identity stands for
them, and the opener remote token reads go through."""

from __future__ import annotations

import functools
import os

from ..sources import provenance
from ..storage.files import is_remote
from ..errors import MissingPartnerError, ParameterError
from ..sources.indexed import split_prefix
from ..storage.pairs import check_partners
from ..storage.remote import RemoteAccess


def identity_paths(files) -> list[str]:
    """The files whose identity stands for ``files``' contents: each file, and the .idx
    partner (a rewritten .idx changes the samples too) and provenance sidecar of each local .bin."""
    paths = []
    for f in map(str, files):
        if is_remote(f):
            paths.append(f)
        elif os.path.exists(f):
            paths.append(f)
            if f.endswith(".bin"):
                # The .idx partner and the provenance sidecar change what a split is too.
                paths += [p for p in (split_prefix(f) + ".idx", provenance.sidecar_path(f)) if os.path.isfile(p)]
    return paths


def named_like_a_pair_file(path: str) -> bool:
    """Whether ``.bin`` or ``.idx`` is among the suffixes of ``path``'s name (``x.bin``, and
    ``x.bin.gz``, which is refused by name rather than left out): datasets' own extension rule."""
    return any(suffix in ("bin", "idx") for suffix in os.path.basename(path).split(".")[1:])


def without_files_beside_pairs(files: list[str]) -> list[str]:
    """A split's files without what lies beside its ``.bin``/``.idx`` pairs: the
    ``.mmidx-info`` sidecars ``mmidx convert`` writes, a card and its histogram, tokenizer files,
    notes. datasets' folder loads leave those out by extension; ``data_dir=`` and patterns
    (``corpus/*``) hand them to the builder, which leaves them out here the same way. Files
    of a split that names no pair file are returned as they are (and refused by name)."""
    if not any(named_like_a_pair_file(f) for f in files):
        return list(files)
    return [f for f in files if named_like_a_pair_file(f)]


def pair_data_files(split: str, files: list[str]) -> list[tuple[str, str]]:
    """(bin, idx) per pair, in the given order, matched on the original names. A local pair
    missing a file is named before anything is downloaded or read. Files beside the pairs
    are left out (:func:`without_files_beside_pairs`)."""
    files = without_files_beside_pairs(files)
    prefixes, seen = [], set()
    bins = {split_prefix(f) for f in files if f.endswith(".bin")}
    for f in files:
        if not f.endswith((".bin", ".idx")):
            raise ParameterError(f"split {split!r}: {f} is neither a .bin nor an .idx file; "
                                 "list the .bin files of .bin/.idx pairs (or set n_bytes for raw files)")
        prefix = split_prefix(f)
        if f.endswith(".idx") and prefix not in bins:
            raise MissingPartnerError(prefix + ".bin", "file", f"the partner of {f}", "it is not among the data files",
                                      hint="list .bin files (each is paired with its .idx) or both files of each pair")
        if prefix not in seen:
            seen.add(prefix)
            prefixes.append(prefix)
    pairs = [(p + ".bin", p + ".idx") for p in prefixes]
    for bin_path, idx_path in pairs:
        if not is_remote(bin_path):  # remote partners are checked when opened, through the opener
            check_partners(idx_path, bin_path)
    return pairs


def ranged(opener):
    """The opener for remote token reads: a remote.RemoteAccess as it is (every piece of a
    gather requested at once, exactly its bytes); any other ``open`` wrapped as follows. Samples are a few KB at random places: fsspec's
    read-ahead blocks (MBs) would fetch far more than they hold, so each read asks for
    exactly its bytes (the readers merge neighbouring pieces into one request).

    block_size too: datasets' streaming ``open`` (xopen, datasets 5.2) hands these keywords to
    the filesystem's constructor, not to its ``open``; HfFileSystem ignores cache_type there
    but reads ahead block_size bytes (default 5 MiB) after every read, which fetched 24.8 MB
    per 2,049-token sample from the Hub. 1 byte is the smallest read-ahead it takes."""
    if isinstance(opener, RemoteAccess):
        return opener
    return functools.partial(opener, cache_type="none", block_size=1)


def split_files(config) -> dict[str, list[str]]:
    """The config's data files as {split: [path, ...]}, or a clear error when there are none."""
    data_files = config.data_files or {}
    empty = [str(split) for split, files in data_files.items() if not files]
    if not data_files or empty:
        raise ParameterError("no data files: give data_files (the .bin files of .bin/.idx pairs) or a folder "
                             f"that holds them, got data_files={dict(data_files) if data_files else data_files}"
                             + (f" (no file matched for split(s) {empty})" if empty else ""))
    return {str(split): [str(f) for f in files] for split, files in data_files.items()}
