"""Downloading the files of ``.bin``/``.idx`` pairs: indexes first, and a missing partner named.

For a Hub repo or URL, ``load_dataset`` (Arrow cache) downloads every data file before the
builder reads any. Two things go wrong with a plain ``dl_manager.download`` of the pairs:

- a missing ``.idx`` surfaces as ``datasets``' ``FileNotFoundError("404 Client Error ...
  Entry Not Found for url ...")``, which does not say that the file is the partner of a
  ``.bin``, nor that a repo whose ``.bin`` files are not token files (model weights are often
  named ``*.bin``) is no dataset of pairs;
- the ``.bin`` files, usually gigabytes, are fetched before the missing ``.idx`` is noticed.

So the ``.idx`` files (small) are downloaded first, then the ``.bin`` files, and a missing
file becomes a :class:`MissingPartnerError`. Streaming ``dl_manager.download`` returns the
URLs untouched; there ``IndexedFile.open`` finds a missing partner itself.
"""

from __future__ import annotations

from ..errors import NO_SUCH_FILE, PAIR_HINT, MissingPartnerError
from ..storage.files import is_remote, local_kind

NOT_PAIRS_HINT = (f"{PAIR_HINT}; if the .bin files here are not token files "
                  "(model weights are often named .bin), this is not a dataset of .bin/.idx pairs")


def _partner(path: str) -> str:
    return path[:-4] + (".bin" if path.endswith(".idx") else ".idx")


def _found(path: str, dl_manager) -> str | None:
    """None when ``path`` is a file, else what is there (a local link loop is named as one)."""
    if not is_remote(path):
        return local_kind(path)
    from datasets.utils.file_utils import xexists

    return None if xexists(path, download_config=dl_manager.download_config) else NO_SUCH_FILE


def download_many(dl_manager, urls: list[str]) -> list[str]:
    """``dl_manager.download(urls)``, also for 16 files or more of one protocol given options per
    protocol (``storage_options={"s3": {...}}``): datasets' batched download (16 files and up,
    datasets 5.2's ``_download_batched``) hands the whole nested dict to the filesystem
    (``TypeError: AioSession.__init__() got an unexpected keyword argument 'hf'``). One
    protocol's own options, given flat, are what both of datasets' download paths take."""
    from fsspec.core import split_protocol

    config = dl_manager.download_config
    options = config.storage_options or {}
    protocols = {split_protocol(str(url))[0] for url in urls}
    if len(urls) < 16 or len(protocols) != 1 or None in protocols or "hf" in protocols:
        return dl_manager.download(urls)
    (protocol,) = protocols
    if not isinstance(options.get(protocol), dict):
        return dl_manager.download(urls)
    flat = config.copy()
    flat.storage_options = dict(options[protocol])
    dl_manager.download_config = flat
    try:
        return dl_manager.download(urls)
    finally:
        dl_manager.download_config = config


def download_pairs(dl_manager, paths: list[str], hint: str = PAIR_HINT) -> list[str]:
    """``dl_manager.download(paths)`` for a flat ``[bin, idx, bin, idx, ...]`` list, returning
    the downloaded paths in the same order; every ``.idx`` is fetched before any ``.bin``. A
    file that is not there raises :class:`MissingPartnerError` naming it and its partner (or
    both, worded as everywhere: MissingPartnerError.of_pair); ``hint`` is said when one is."""
    result = list(paths)
    for suffix in (".idx", ".bin"):
        positions = [i for i, path in enumerate(paths) if path.endswith(suffix)]
        wanted = [paths[i] for i in positions]
        try:
            downloaded = download_many(dl_manager, wanted)
        except FileNotFoundError as error:
            for path in wanted:
                idx_path, bin_path = (path, _partner(path)) if suffix == ".idx" else (_partner(path), path)
                found = MissingPartnerError.of_pair(idx_path, bin_path, _found(idx_path, dl_manager),
                                                    _found(bin_path, dl_manager), hint=hint)
                if found is not None:
                    raise found from error
            raise
        for i, path in zip(positions, downloaded):
            result[i] = path
    return result


__all__ = ["download_many", "download_pairs"]
