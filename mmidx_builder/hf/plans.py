"""One plan type for every kind (a split's files, where they are read from, their identity,
the kind's settings) and the per-process cache of the splits opened from plans."""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass

import datasets

from ..sources.token_source import check_opened, check_still_named
from .readahead import LOCAL_GATHER_BYTES, ReadAhead, ShardReadAhead
from .tables import ROWS_PER_TABLE, shard_ranges


@dataclass(frozen=True)
class Plan:
    """What a worker needs to make a split's rows, in every kind; small, picklable, hashable.

    ``files`` are the split's files (or Megatron prefixes) as given, the names provenance
    records; ``read_paths`` are where the kind reads them from (local paths, downloads or
    URLs), in the kind's own layout; ``identity`` names their contents (file identities);
    ``settings`` are the kind's settings that decide the rows, as sorted items. Together they
    key the one in-process cache of opened splits (:func:`opened_split`), so a rewritten file
    or another setting opens again.
    """

    split: str
    files: tuple[str, ...]
    read_paths: tuple
    identity: str
    settings: tuple[tuple[str, object], ...]

    @classmethod
    def of(cls, split: str, files, read_paths, identity: str, **settings) -> "Plan":
        return cls(split=split, files=tuple(files), read_paths=tuple(read_paths), identity=identity,
                   settings=tuple(sorted(settings.items())))

    def __getitem__(self, name: str):
        return dict(self.settings)[name]


class OpenedSplit:
    """A split's files opened, once per process and plan: its row count, its features and the
    function from row numbers (an int64 array) to the Arrow table of those rows.

    ``files`` are the opened token files (their ``remote`` attribute says whether reads go
    over the network); ``source`` is the token source provenance describes (its sequence
    lengths), when the split has one; ``sources`` the several of a blend or a language pair.
    Table makers with their read-ahead state are kept here
    too, one per shard layout and bound."""

    def __init__(self, num_rows: int, features: datasets.Features, table, files=(), source=None, sources=()):
        self.num_rows = int(num_rows)
        self.sources = tuple(sources)
        self.features = features
        self.table = table
        self.files = tuple(files)
        self.source = source
        self.process = None  # the process that opened or last checked the files (opened_split)
        self._makers = {}
        self._lock = threading.Lock()

    @property
    def remote(self) -> bool:
        return any(getattr(f, "remote", False) for f in self.files)

    def maker(self, num_shards: int, read_ahead_bytes: int):
        """The split's table maker for streams: read ahead in background threads for remote
        files (readahead.ReadAhead), one gather for several small shards for local ones."""
        remote = self.remote  # a remote file is local once the block cache holds all of it
        key = (num_shards, read_ahead_bytes, remote)
        with self._lock:
            fetching = self._makers.pop((num_shards, read_ahead_bytes, True), None) if not remote else None
            if fetching is not None:
                fetching.drop_all()  # what it read ahead is in the cache now
            if key not in self._makers:
                layout = shard_ranges(self.num_rows, num_shards)
                self._makers[key] = (ReadAhead(self.table, layout, ROWS_PER_TABLE, read_ahead_bytes) if remote
                                     else ShardReadAhead(self.table, layout, ROWS_PER_TABLE, LOCAL_GATHER_BYTES))
            return self._makers[key]


def opened_split(open_plan, plan: Plan, opener) -> OpenedSplit:
    """``open_plan(plan, opener)``, kept per process: streaming calls the table generator once
    per shard, and opening the files and validating the indices each time would dominate.
    Keyed by the plan, which holds the files' identity: a changed file is a new entry.

    A process that starts reading a split checks that its files are still the ones the plan
    was made from, whatever its start method: a spawn worker opens them again by name
    (:func:`_opened_split`); a fork worker inherits the ones its parent opened, and checks
    that their paths still name them. Either way a pair replaced since the plan is the same
    FormatError, never the old pair in one kind of worker and a refusal in the other."""
    opened = _opened_split(open_plan, plan, opener)
    if opened.process != os.getpid():  # inherited through fork
        for token_file in opened.files:
            check_still_named(token_file)
        opened.process = os.getpid()
    return opened


@functools.lru_cache(maxsize=8)
def _opened_split(open_plan, plan: Plan, opener) -> OpenedSplit:
    opened = open_plan(plan, opener)
    for token_file in opened.files:
        # The very files the plan was made from, also in a process that opens them again (a
        # spawn worker): a pair replaced since would serve its tokens under the old row count.
        check_opened(token_file, plan.identity)
    opened.process = os.getpid()
    return opened
