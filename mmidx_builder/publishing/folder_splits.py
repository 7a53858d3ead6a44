"""A folder's data files by split, found as ``load_dataset(FOLDER)`` finds them (datasets' split
patterns), for the card and the upload of a folder of pairs or of MosaicML shards: a file the
split patterns leave out, or one that is broken (a dangling link, a FIFO), is reported, never
skipped, since the loader would leave it out without a word."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def folder_splits(directory: str | os.PathLike, is_data_file: Callable[[str], bool],
                  allowed_extensions: list[str] | None = None) -> tuple[dict[str, list[str]], list[str], list]:
    """``(splits, left_out, dropped)``: ``{split: [data file names relative to the folder]}``,
    the data files that fall in no split, and an error for each file datasets' listing dropped
    (a dangling link, a FIFO: hf/pair_listing.py). ``is_data_file(path)`` says which listed
    files count."""
    from datasets.data_files import DataFilesList, get_data_patterns
    from datasets.exceptions import DataFilesNotFoundError

    from ..hf.registry import accounting

    base = os.path.abspath(directory)
    splits = {}
    with accounting() as dropped:
        try:
            patterns = get_data_patterns(base)
        except (DataFilesNotFoundError, FileNotFoundError):
            patterns = {}
        for split, split_patterns in patterns.items():
            try:
                files = DataFilesList.from_patterns(split_patterns, base_path=base,
                                                    allowed_extensions=allowed_extensions)
            except FileNotFoundError:
                continue  # this split's files are of another kind (e.g. a test.jsonl beside the data)
            names = sorted(Path(f).relative_to(base).as_posix() for f in files if is_data_file(str(f)))
            if names:
                splits[str(split)] = names
    every = DataFilesList.from_patterns(["**"], base_path=base, allowed_extensions=allowed_extensions)
    listed = {name for names in splits.values() for name in names}
    left_out = sorted(name for name in (Path(f).relative_to(base).as_posix() for f in every if is_data_file(str(f)))
                      if name not in listed)
    return splits, left_out, dropped


__all__ = ["folder_splits"]
