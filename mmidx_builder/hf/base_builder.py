"""BaseConfig and BaseBuilder: what every kind of builder shares.

Every kind: num_shards, validation on every setattr path, a cache hash that covers this
package's source and the data files' identity (both files of a pair), the dataset card's
sha256 of every file read (all_checks), provenance, splits cut into contiguous shard ranges,
tables made one ahead in a thread, one gather (and, in the Arrow cache, one table) for
consecutive small shards. A kind subclasses BaseBuilder (or gpt_samples.GPTSamplesBuilder)
and says how a split's files become a plan (``_plan``) and how a plan is opened
(``open_plan``); it never branches on another kind.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
from dataclasses import dataclass
from typing import Iterator

import datasets
import pyarrow as pa

from ..sources import provenance
from ..storage.files import failure_words, file_identity, free_bytes, nearest_existing, out_of_room
from ..checks import check_bool, check_int
from ..errors import MMIdxError, OutOfSpaceError, ParameterError, UnwritableFolderError
from ..storage.remote import RemoteAccess
from . import registry
from .card_checksums import verify_against_card
from .data_files import identity_paths, split_files
from .plans import OpenedSplit, Plan, opened_split
from .prepared_size import STREAMING_HINT, check_room
from .registry import record_checksums
from .tables import ROWS_PER_TABLE, joined_batches, one_ahead, shard_ranges, table_rows

logger = datasets.utils.logging.get_logger(__name__)

# Default shard count: a split is cut into this many ranges of its training order (fewer
# if it has fewer rows). 960 = 2**6 * 3 * 5 divides by the usual world sizes (1-6, 8, 10,
# 12, 16, 32, 64...), so split_dataset_by_node reads whole shards instead of every rank
# reading everything.
DEFAULT_NUM_SHARDS = 960
INDEX_CACHE_FOLDER = "mmidx_indices"


@dataclass
class BaseConfig(datasets.BuilderConfig):
    """Settings every kind has.

    Args:
        num_shards (`int`, optional): contiguous ranges of each split's rows; defaults to
            ``min(960, rows)``.
        features (`Features`, optional): overrides the inferred features.
        remote_cache_dir (`str`, optional): a local block cache for remote token files
            (docs/remote.md); none by default.
        max_remote_cache_bytes (`int`, optional): the block cache's size bound, 16 GiB by default.
    """

    num_shards: int | None = None
    features: datasets.Features | None = None
    remote_cache_dir: str | None = None
    max_remote_cache_bytes: int | None = None

    def __post_init__(self):
        super().__post_init__()
        self.validate()

    def validate(self) -> None:
        """Raises ParameterError for a setting that cannot work. Also called by the builder:
        ``load_dataset`` sets call kwargs on a copied config with setattr, past __post_init__."""
        check_int("num_shards", self.num_shards, 1, allow_none=True)
        check_int("max_remote_cache_bytes", self.max_remote_cache_bytes, 1, allow_none=True)
        # A card's YAML can give any type: "no" is a true string, and 'no' a string.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type == "bool":
                check_bool(f.name, value)
        if self.features is not None and not isinstance(self.features, datasets.Features):
            raise ParameterError(f"features must be datasets.Features, got {self.features!r} "
                                 f"({type(self.features).__name__})")


def _our_error(error: BaseException | None) -> MMIdxError | None:
    """The first of our typed errors in ``error``'s chain of causes, if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, MMIdxError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _unwritable_cache(error: OSError, cache_dir) -> UnwritableFolderError | None:
    """datasets' builder takes a lock file in its cache folder before anything else, streaming
    or not; a cache folder that cannot be written is then an untyped error from filelock.
    Said here as what it is, naming the folder and the setting that moves it."""
    root = os.path.abspath(os.path.expanduser(str(cache_dir or datasets.config.HF_DATASETS_CACHE)))
    where = os.path.abspath(error.filename) if isinstance(error.filename, str) else None
    if error.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or where is None:
        return None
    if os.path.commonpath([root, where]) not in (root, where):  # not in the cache folder nor on the way to it
        return None
    setting = ("cache_dir= a folder you can write" if cache_dir else
               "HF_DATASETS_CACHE to a folder you can write (or pass cache_dir=)")
    unwritable = UnwritableFolderError(
        root, error.errno, error.strerror or str(error), "the datasets cache folder",
        f"load_dataset writes its lock there even with streaming=True (and the Arrow cache and sampling "
        f"indices); set {setting}")
    unwritable.__cause__ = error
    return unwritable


class BaseBuilder(datasets.ArrowBasedBuilder):
    """What every kind shares. A kind says how a split's files become a :class:`Plan`
    (``_plan``: downloads, nothing opened) and how a plan is opened (``open_plan``); the base
    does the rest once for all: the cache hash from the files' identity, the dataset card's
    sha256 of every file read (``verification_mode="all_checks"``), the one cache of opened
    splits, provenance, features, shards and tables."""

    BUILDER_CONFIG_CLASS = BaseConfig

    def __init__(self, *args, **kwargs):
        try:
            super().__init__(*args, **kwargs)
        except OSError as error:
            raise _unwritable_cache(error, kwargs.get("cache_dir")) or error

    def _create_builder_config(self, *args, **kwargs):
        builder_config, config_id = super()._create_builder_config(*args, **kwargs)
        builder_config.validate()
        # The cache hash: datasets keys local files by the .bin's mtime only, which misses a
        # rewrite whose mtime was put back and any change to an .idx. Both files' identity
        # (inode, size, mtime, ctime) and this package's source are folded in.
        digest = hashlib.sha256(f"{self.hash}:{registry.package_source_hash()}".encode())
        for path in self._identity_paths(builder_config):
            digest.update(b"\0" + file_identity(path).encode())
        self.hash = digest.hexdigest()[:16]
        return builder_config, config_id

    def _remote(self) -> RemoteAccess:
        """How remote files are read (remote.py): datasets' storage options and token, the cache.
        Made once per builder: a stream asks for it at every shard (960 times a pass), and
        resolving the options of every protocol took ~15% of a local stream's time."""
        if getattr(self, "_remote_access", None) is None:
            self._remote_access = registry.remote_access(self, self.config.remote_cache_dir,
                                                         self.config.max_remote_cache_bytes)
        return self._remote_access

    @staticmethod
    def _identity_paths(config) -> list[str]:
        return identity_paths([f for files in (config.data_files or {}).values() for f in files])

    def download_and_prepare(self, *args, verification_mode=None, **kwargs):
        mode = datasets.VerificationMode(verification_mode or datasets.VerificationMode.BASIC_CHECKS)
        record_checksums(self, mode == datasets.VerificationMode.ALL_CHECKS)
        self._arrow_bytes = None
        try:
            return super().download_and_prepare(*args, verification_mode=verification_mode, **kwargs)
        except OutOfSpaceError:
            raise
        except Exception as error:
            # datasets says "An error occurred while generating the dataset" and removes its
            # incomplete folder; what went wrong is in the chain, said here as it is: one of
            # our typed errors (a shard found damaged while its rows were written), or a lack
            # of space.
            ours = _our_error(error)
            if ours is not None and ours is not error:
                raise ours from error
            cause = out_of_room(error)
            if cause is None:
                raise
            # datasets has removed its incomplete folder by now: the folder named is the nearest
            # that is still there, and its free bytes are measured now, after the failure.
            folder = nearest_existing(self._output_dir)
            raise OutOfSpaceError(folder, self._arrow_bytes, free_bytes(folder), "the Arrow cache",
                                  hint=STREAMING_HINT, failed=failure_words(cause)) from error

    def _info(self):
        return datasets.DatasetInfo(features=self.config.features)

    def _set_features(self, features: list[datasets.Features]) -> None:
        if self.config.features is not None:
            self.info.features = self.config.features
        elif self.info.features is None:
            distinct = [f for i, f in enumerate(features) if f not in features[:i]]
            if len(distinct) > 1:
                raise ParameterError(f"splits would have different features {[str(f) for f in distinct]}: "
                                     "their token dtypes (or class labels) differ; load them separately or "
                                     "convert them with one tokenizer")
            self.info.features = distinct[0]

    # --- what a kind implements ----------------------------------------------------------

    def _plan(self, split: str, files: list[str], dl_manager) -> Plan:
        """The split's plan: its files downloaded (or their URLs, streaming), none opened."""
        raise NotImplementedError

    def _identity(self, files, **options) -> str:
        """What a plan's files hold (their identities, .idx partners and sidecars included)
        and which kind reads them with which of its own settings: keys the opened splits and
        the sampling index cache."""
        return "|".join([f"{type(self).__name__}{tuple(sorted(options.items()))}"]
                        + [file_identity(p) for p in identity_paths(files)])

    def _plans(self, dl_manager) -> list[Plan]:
        return [self._plan(split, files, dl_manager) for split, files in split_files(self.config).items()]

    @staticmethod
    def open_plan(plan: Plan, opener) -> OpenedSplit:
        """The plan's files opened through ``opener`` (``open``, which streaming patches)."""
        raise NotImplementedError

    def _order(self, plan: Plan) -> dict:
        """The settings provenance records as deciding which row comes where."""
        return {}

    def _token_facts(self, plan: Plan, dl_manager) -> dict | None:
        """Tokenizer and EOD id of the split's tokens, for provenance (None: unknown)."""
        return None

    def _fetched_sidecars(self) -> dict:
        """The sidecars this builder fetched ({.bin path: fields or None}, for
        provenance.tokenizer_facts(fetched=)): the splits of a blend share files, and each
        remote sidecar is then fetched once per load, not once per split."""
        return self.__dict__.setdefault("_sidecars", {})

    # --- the same for every kind -----------------------------------------------------------

    def as_streaming_dataset(self, split=None, *args, **kwargs):
        # datasets makes every split's generator before it picks the one asked for; here a
        # stream of one named split opens and samples that split alone (_split_generators):
        # with Megatron's "969,30,1" the validation and test indices of every prefix of a
        # blend were built (and checked) for a train stream that never reads them.
        self._requested_split = None if split is None else str(split)
        try:
            return super().as_streaming_dataset(split, *args, **kwargs)
        finally:
            self._requested_split = None

    def _split_generators(self, dl_manager):
        plans = self._plans(dl_manager)
        requested = getattr(self, "_requested_split", None)
        if any(plan.split == requested for plan in plans):  # else (a slice, "all"): every split
            plans = [plan for plan in plans if plan.split == requested]
        # all_checks: the card's sha256 of every file downloaded, before any is opened.
        verify_against_card(dl_manager, self.base_path)
        generators, features, rows = [], [], 0
        for plan in plans:
            opened = opened_split(type(self).open_plan, plan, self._remote())
            provenance.record_split(self.info, plan.split, kind=self.name, files=plan.files, rows=opened.num_rows,
                                    settings=self._order(plan), source=opened.source,
                                    sources=opened.sources,
                                    facts=self._token_facts(plan, dl_manager))
            features.append(opened.features)
            rows += opened.num_rows
            generators.append(self._split_generator(plan.split, plan, opened.num_rows, f"{len(plan.files)} file(s)"))
        self._set_features(features)
        if not isinstance(dl_manager, datasets.StreamingDownloadManager):  # an Arrow cache is about to be written
            self._arrow_bytes = check_room(self._output_dir, rows, self.info.features)
        return generators

    def _split_generator(self, split: str, plan, num_rows: int, what: str) -> datasets.SplitGenerator:
        ranges = shard_ranges(num_rows, self.config.num_shards or DEFAULT_NUM_SHARDS)
        logger.info(f"{split}: {what}, {num_rows:,} examples in {len(ranges)} shards")
        return datasets.SplitGenerator(name=split, gen_kwargs={"plan": plan, "ranges": ranges})

    def _generate_shards(self, plan, ranges: list[tuple[int, int]]):
        for start, stop in ranges:
            yield {"split": plan.split, "samples": (start, stop)}

    def _generate_more_gen_kwargs(self, plan, ranges: list[tuple[int, int]]):
        """For ``IterableDataset.reshard()``: each range splits in two."""
        for start, stop in ranges:
            middle = (start + stop) // 2
            for part in ((start, middle), (middle, stop)):
                if part[1] > part[0]:
                    yield {"plan": plan, "ranges": [part]}

    def _generate_tables(self, plan, ranges: list[tuple[int, int]]):
        alone, batches = table_rows(ranges)
        # One gather for consecutive tables of up to ROWS_PER_TABLE rows in all: 960 shards of a
        # small corpus are a few dozen rows each, and a gather (and a thread hand-off) per shard
        # would cost more than its rows. The gather is cut back into the (shard, batch) tables
        # only when datasets is told to save each shard's row count (off by default): it
        # writes every table it is given as a record batch of its own, and 960 tables of a few
        # dozen rows a pass took it about twice as long as tables of 1,000 rows (issue 43).
        # Whole gathers are keyed by their number, as datasets 4.5 needs (it counts rows by
        # key.original_shard_id and fails on a gap). A stream asks for one shard at a time,
        # whose batches never join.
        groups = [([(key, len(rows))], rows) for key, rows in alone] + joined_batches(batches, ROWS_PER_TABLE)
        per_shard = datasets.config.SAVE_ORIGINAL_SHARD_LENGTHS or all(len(group) == 1 for group, _ in groups)
        for number, (group, table) in enumerate(self._tables(plan, groups)):
            if not per_shard:
                yield datasets.builder.Key(number, 0), table
                continue
            if len(group) == 1:
                yield group[0][0], table
                continue
            offset = 0
            for key, rows in group:
                yield key, table.slice(offset, rows)
                offset += rows

    def _tables(self, plan: Plan, batches):
        """``(key, table)`` for each ``(key, rows)`` of ``batches``, in order."""
        return one_ahead(self._table_maker(plan), batches)

    def _table_maker(self, plan: Plan):
        """A function from row numbers (an int64 array) to the Arrow table of those rows."""
        return opened_split(type(self).open_plan, plan, self._remote()).table

    def row_tables(self, plan: Plan, range_batches) -> Iterator[pa.Table]:
        """Arrow tables of the rows in each batch of ``(start, stop)`` ranges (positions in the
        split's order) that ``range_batches`` yields, in order: how a reader that knows which
        rows it needs reads them (hf/streams.py; one rank's micro-batches)."""
        for ranges in range_batches:
            for _, table in self._generate_tables(plan, list(ranges)):
                yield table
