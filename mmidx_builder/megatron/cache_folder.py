"""An index cache folder as entries: what each is, its size and age, and whether any current
file still uses it; and pruning the unused ones (``mmidx cache``, as ``huggingface-cli
delete-cache`` is for the Hub's cache).

Entries, by their file names (each written by its own module, keyed as it says):

    opened-KEY-meta.json                            an opened pair's record (sources/indexed.py):
                                                    in use while the .idx it names has the
                                                    identity KEY is made from (records of
                                                    earlier versions have an
                                                    opened-KEY-arrays.npy too)
    KEY-meta.json + KEY-indices.npy                 sampling indices (sampling.py): in use while
                                                    every file its lengths were read from still
                                                    has the identity recorded
    KEY-blending.json + KEY-dataset_*.npy           blending indices (blending_indices.py): tied
                                                    to weights and sizes, not to files: "unknown"

An entry written by an earlier version (no record of its files, or an older record format)
is unused: this version's keys never find it. One whose files cannot be checked here (remote
files, lengths given in memory) is "unknown" and kept unless older than ``older_than``.
Arrays whose meta file is missing for more than an hour are what a killed writer left:
unused. Pruning removes the meta file first (a reader then sees no entry, never half of one);
a process that maps a removed array keeps reading it whole.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
from dataclasses import dataclass, field

from ..sources.indexed import RECORD_PREFIX, _RECORD_FORMAT, record_key
from ..sources.token_source import _identity_path
from ..storage.files import file_identity, remove_quietly
from .sampling import FILES_FIELD

IN_USE, UNUSED, UNKNOWN = "in use", "unused", "unknown"
# The meta files of the three kinds: keys are 32 hex digits (a record's after its prefix).
_NAMES = re.compile(rf"({re.escape(RECORD_PREFIX)})?([0-9a-f]{{32}})-(meta|blending)\.json")
# Arrays without their meta file younger than this may be a writer's, about to write it.
ORPHAN_SECONDS = 3600


@dataclass
class CacheEntry:
    kind: str  # "pair record", "sampling indices", "blending indices", "incomplete"
    key: str
    paths: list[str]
    bytes: int
    age_seconds: float  # since its meta file (or newest file) was written
    status: str  # IN_USE, UNUSED or UNKNOWN
    why: str = ""
    files: list[str] = field(default_factory=list)  # the data files it is of, where known


# hf/base_builder.INDEX_CACHE_FOLDER (importing it imports datasets: ~2 s for `mmidx cache`).
INDEX_CACHE_FOLDER = "mmidx_indices"


def default_folder() -> str:
    """``<datasets cache>/mmidx_indices``, where load_dataset keeps the index caches unless
    given ``index_cache_dir`` or ``cache_dir``: ``datasets.config.HF_DATASETS_CACHE``'s own
    rule (HF_DATASETS_CACHE, else HF_HOME/datasets, else XDG_CACHE_HOME/huggingface/datasets),
    read from the environment without importing datasets (tests compare the two)."""
    home = os.path.expanduser(os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"),
                                                                "huggingface")))
    return os.path.join(os.getenv("HF_DATASETS_CACHE", os.path.join(home, "datasets")), INDEX_CACHE_FOLDER)


def _fields(meta_path: str) -> dict | None:
    try:
        with open(meta_path, "rb") as f:
            fields = json.loads(f.read())
    except (OSError, ValueError):
        return None
    return fields if isinstance(fields, dict) else None


def _record_status(fields: dict | None, key: str) -> tuple[str, str, list[str]]:
    if not fields or fields.get("format") != _RECORD_FORMAT or not isinstance(fields.get("idx_path"), str):
        return UNUSED, "written by an earlier version", []
    path = fields["idx_path"]
    try:
        current = record_key(os.stat(path))
    except OSError:
        return UNUSED, f"{path} is gone", [path]
    return (IN_USE, "", [path]) if current == key else (UNUSED, f"{path} has changed since", [path])


def _sampling_status(fields: dict | None) -> tuple[str, str, list[str]]:
    files = fields.get(FILES_FIELD) if fields else None
    if not isinstance(files, list):
        return UNUSED, "written by an earlier version", []
    paths = [_identity_path(identity) for identity in files]
    if not files or None in paths:
        return UNKNOWN, "its lengths came from no local file", []
    # Keyed by all of them: one changed or gone, and no load finds this entry again.
    for identity, path in zip(files, paths):
        try:
            if file_identity(path) != identity:
                return UNUSED, f"{path} has changed since", paths
        except OSError:
            return UNUSED, f"{path} is gone", paths
    return IN_USE, "", paths


def scan(folder: str, now: float | None = None) -> list[CacheEntry]:
    """The entries of an index cache folder (an empty list for a missing folder)."""
    now = time.time() if now is None else now
    if not os.path.isdir(folder):
        return []
    entries, claimed = [], set()
    for meta_path in sorted(glob.glob(os.path.join(glob.escape(folder), "*.json"))):
        name = os.path.basename(meta_path)
        if name.startswith("."):
            continue  # a writer's temporary: the loader removes those of dead writers
        named = _NAMES.fullmatch(name)
        if named is None:
            continue  # another kind's file (MosaicML's caches): not ours to judge
        record, key, suffix = named.groups()
        if record and suffix != "meta":
            continue
        fields = _fields(meta_path)
        if record:
            kind, arrays = "pair record", [f"{RECORD_PREFIX}{key}-arrays.npy"]
            status, why, files = _record_status(fields, key)
        elif suffix == "meta":
            kind, arrays = "sampling indices", [f"{key}-indices.npy"]
            status, why, files = _sampling_status(fields)
        else:
            kind, arrays = "blending indices", [f"{key}-dataset_index.npy", f"{key}-dataset_sample_index.npy"]
            status, why, files = UNKNOWN, "tied to weights and sizes, not to files", []
        paths = [meta_path] + [os.path.join(folder, a) for a in arrays if os.path.exists(os.path.join(folder, a))]
        claimed.update(paths)
        entries.append(_entry(kind, key, paths, now, status, why, files, meta_path))
    for path in sorted(glob.glob(os.path.join(glob.escape(folder), "*.npy"))):
        if path in claimed or os.path.basename(path).startswith("."):
            continue
        entry = _entry("incomplete", os.path.basename(path), [path], now, UNUSED, "no meta file", [], path)
        if entry.age_seconds > ORPHAN_SECONDS:
            entries.append(entry)
    return entries


def _entry(kind, key, paths, now, status, why, files, dated) -> CacheEntry:
    sizes = [os.stat(p).st_size for p in paths if os.path.exists(p)]
    try:
        age = now - os.stat(dated).st_mtime
    except OSError:
        age = 0.0
    return CacheEntry(kind, key, paths, sum(sizes), age, status, why, files)


def prunable(entries: list[CacheEntry], older_than: float | None = None) -> list[CacheEntry]:
    """The entries ``prune`` removes: the unused ones, and with ``older_than`` (seconds) also
    the unknown ones written longer ago than that. Never one in use."""
    return [e for e in entries if e.status == UNUSED
            or (e.status == UNKNOWN and older_than is not None and e.age_seconds > older_than)]


def prune(entries: list[CacheEntry]) -> int:
    """Removes the entries' files, each meta file first; returns the bytes freed."""
    for entry in entries:
        for path in entry.paths:  # the meta file is first in every entry
            remove_quietly(path)
    return sum(entry.bytes for entry in entries)


__all__ = ["CacheEntry", "IN_USE", "INDEX_CACHE_FOLDER", "UNKNOWN", "UNUSED", "default_folder", "prunable", "prune",
           "scan"]
