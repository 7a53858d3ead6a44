"""What every mmidx builder shares; each source kind's module adds only what is its own.

    Plan / opened_split            one plan type for every kind (the split's files, where they
                                   are read from, their identity, the kind's settings) and one
                                   per-process cache of opened splits keyed by it
    BaseConfig / BaseBuilder       every kind: num_shards, validation on every setattr path,
                                   a cache hash that covers this package's source and the data
                                   files' identity (both files of a pair), the dataset card's
                                   sha256 of every file read (all_checks), provenance, splits
                                   cut into contiguous shard ranges, tables made one ahead in a
                                   thread, one gather for consecutive small shards
    SamplesConfig / GPTConfig /    kinds whose rows are token samples over a token source
    GPTSamplesBuilder              (.bin/.idx pairs, Megatron blends and splits, raw files, raw
                                   chunks): the sampling settings, the index cache, the
                                   ``input_ids`` tables, read ahead across shards when a stream
                                   asks shard by shard, and ahead in background threads for
                                   remote files (``read_ahead_bytes``)

A kind subclasses one of these and says how a split's files become a plan (``_plan``) and
how a plan is opened (``open_plan``); it never branches on another kind. Streaming patches ``open`` in this module too (datasets patches
the modules of a builder's base classes), so the opener handed to the format layer here
reads remote files.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterator

import datasets
import numpy as np
import pyarrow as pa

from ..sources import provenance
from ..megatron import sampling
from ..storage.files import file_identity, is_remote
from ..checks import check_bool, check_int
from ..dtypes import cast_tokens, integer_dtype
from ..errors import MissingPartnerError, ParameterError
from ..sources.indexed import check_partners, split_prefix
from ..storage.remote import RemoteAccess
from ..sources.token_source import check_opened, check_still_named
from . import registry
from .card_checksums import verify_against_card
from .readahead import ReadAhead, ShardReadAhead
from .registry import cache_root, record_checksums

logger = datasets.utils.logging.get_logger(__name__)

# Rows per Arrow table: large enough to amortise per-table costs, small enough that a
# table of 2,049-token samples stays a few MB.
ROWS_PER_TABLE = 1000
# Default shard count: a split is cut into this many ranges of its training order (fewer
# if it has fewer rows). 960 = 2**6 * 3 * 5 divides by the usual world sizes (1-6, 8, 10,
# 12, 16, 32, 64...), so split_dataset_by_node reads whole shards instead of every rank
# reading everything.
DEFAULT_NUM_SHARDS = 960
INDEX_CACHE_FOLDER = "mmidx_indices"


def shard_ranges(num_rows: int, num_shards: int) -> list[tuple[int, int]]:
    """``num_shards`` contiguous ranges of ``range(num_rows)``, sizes differing by at most
    one, larger first: any round-robin assignment of shards to ranks then gives ranks row
    counts that differ by at most one."""
    num_shards = max(1, min(num_shards, num_rows))
    size, extra = divmod(num_rows, num_shards)
    bounds = np.cumsum([0] + [size + (i < extra) for i in range(num_shards)])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def one_ahead(make, batches):
    """Yields ``(key, make(rows))`` while the next table is being made in a worker thread,
    so gathering tokens overlaps with what the caller does with the table (datasets writing
    it to the Arrow cache). numpy's copies and file I/O release the GIL. Streaming asks for
    one shard (often one table) at a time: nothing to overlap then, and a thread only costs."""
    if len(batches) < 2:
        for key, rows in batches:
            yield key, make(rows)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for key, rows in batches:
            future = pool.submit(make, rows)
            if pending is not None:
                yield pending[0], pending[1].result()
            pending = (key, future)
        if pending is not None:
            yield pending[0], pending[1].result()


def joined_batches(batches, limit: int) -> list:
    """``(keys, rows)`` from ``(key, rows)`` batches: consecutive batches joined while their
    rows add up to at most ``limit`` (a larger batch stays alone). ``keys`` lists each batch's
    ``(key, row count)``; ``rows`` is their rows, concatenated."""
    joined, keys, parts, size = [], [], [], 0
    for key, rows in batches:
        if keys and size + len(rows) > limit:
            joined.append((keys, parts[0] if len(parts) == 1 else np.concatenate(parts)))
            keys, parts, size = [], [], 0
        keys.append((key, len(rows)))
        parts.append(rows)
        size += len(rows)
    if keys:
        joined.append((keys, parts[0] if len(parts) == 1 else np.concatenate(parts)))
    return joined


def fixed_size_lists(values: np.ndarray, length: int) -> pa.FixedSizeListArray:
    """Rows of ``length`` values, zero-copy from a C-contiguous array."""
    return pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(values).reshape(-1)), length)


def sample_features(dtype: np.dtype, sample_length: int, document_structure: bool = False) -> datasets.Features:
    """``input_ids`` as a fixed-length list of the files' own dtype (no upcast in storage)."""
    features = {"input_ids": datasets.List(datasets.Value(np.dtype(dtype).name), length=sample_length)}
    if document_structure:
        features["position_ids"] = datasets.List(datasets.Value("int32"), length=sample_length)
        features["piece_lengths"] = datasets.List(datasets.Value("int32"))
    return datasets.Features(features)


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


def pair_data_files(split: str, files: list[str]) -> list[tuple[str, str]]:
    """(bin, idx) per pair, in the given order, matched on the original names. A local pair
    missing a file is named before anything is downloaded or read."""
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
                                     else ShardReadAhead(self.table, layout, ROWS_PER_TABLE))
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


class BaseBuilder(datasets.ArrowBasedBuilder):
    """What every kind shares. A kind says how a split's files become a :class:`Plan`
    (``_plan``: downloads, nothing opened) and how a plan is opened (``open_plan``); the base
    does the rest once for all: the cache hash from the files' identity, the dataset card's
    sha256 of every file read (``verification_mode="all_checks"``), the one cache of opened
    splits, provenance, features, shards and tables."""

    BUILDER_CONFIG_CLASS = BaseConfig

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
        return super().download_and_prepare(*args, verification_mode=verification_mode, **kwargs)

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

    # --- the same for every kind -----------------------------------------------------------

    def _split_generators(self, dl_manager):
        plans = self._plans(dl_manager)
        # all_checks: the card's sha256 of every file downloaded, before any is opened.
        verify_against_card(dl_manager, self.base_path)
        generators, features = [], []
        for plan in plans:
            opened = opened_split(type(self).open_plan, plan, self._remote())
            provenance.record_split(self.info, plan.split, kind=self.name, files=plan.files, rows=opened.num_rows,
                                    settings=self._order(plan), source=opened.source,
                                    sources=opened.sources,
                                    facts=self._token_facts(plan, dl_manager))
            features.append(opened.features)
            generators.append(self._split_generator(plan.split, plan, opened.num_rows, f"{len(plan.files)} file(s)"))
        self._set_features(features)
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
        batches = [(datasets.builder.Key(shard, batch), np.arange(first, min(first + ROWS_PER_TABLE, stop)))
                   for shard, (start, stop) in enumerate(ranges)
                   for batch, first in enumerate(range(start, stop, ROWS_PER_TABLE))]
        # One gather for consecutive tables of up to ROWS_PER_TABLE rows in all, cut back into
        # the (shard, batch) tables datasets counts: 960 shards of a small corpus are a few dozen
        # rows each, and a gather (and a thread hand-off) per shard would cost more than its rows.
        for group, table in self._tables(plan, joined_batches(batches, ROWS_PER_TABLE)):
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


# --- GPT samples over a token source ----------------------------------------------------

# Read-ahead of remote files holds at most this many bytes of tables made ahead (as
# megatron-core's _S3BinReader keeps a 256 MB block).
DEFAULT_READ_AHEAD_BYTES = 256 * 2**20


@dataclass
class SamplesConfig(BaseConfig):
    """Settings of every kind whose rows are token samples.

    Args:
        dtype (`str`, optional): store ``input_ids`` as this integer dtype instead of the
            files' own (e.g. "int64" for frameworks that want it); values must fit.
        read_ahead_bytes (`int`, defaults to 256 MiB): for files read over the network
            (streaming from the Hub, HTTP, S3...), the tables of the rows a stream will ask for
            next are made ahead in background threads, holding at most this many bytes; 0
            reads only what is asked for. Local files are read when asked (no threads).
    """

    dtype: str | None = None
    read_ahead_bytes: int = DEFAULT_READ_AHEAD_BYTES

    def validate(self) -> None:
        super().validate()
        check_int("read_ahead_bytes", self.read_ahead_bytes, 0)
        if self.dtype is not None:
            integer_dtype(self.dtype)


@dataclass
class GPTConfig(SamplesConfig):
    """Megatron GPTDataset sampling settings.

    Args:
        seq_length (`int`, defaults to 2048): tokens per training sample, as Megatron's
            ``--seq-length``; each row holds ``seq_length + add_extra_token`` tokens.
        num_epochs (`int`, optional): whole epochs over the split's sequences.
        num_samples (`int`, optional): samples to train on, Megatron's way (may end inside
            an epoch; the final partial epoch is shuffled apart). At most one of the two;
            with neither, one epoch.
        seed (`int`, defaults to 1234): Megatron's ``--seed`` for the document and sample shuffles.
        add_extra_token (`bool`, defaults to True): Megatron's ``add_extra_token_to_sequence``:
            samples of ``seq_length + 1`` tokens overlapping by one, so ``tokens = row[:-1]``
            and ``labels = row[1:]``.
        document_structure (`bool`, defaults to False): add ``position_ids`` (restarting at
            each document inside a sample) and ``piece_lengths`` (for ``cu_seqlens``).
        index_cache_dir (`str`, optional): where the sampling indices are cached; defaults to
            ``<datasets cache>/mmidx_indices``.
        dtype, read_ahead_bytes: see :class:`SamplesConfig`.
    """

    # None: not given (2048 and 1234, or what a Megatron command line says; resolved()).
    seq_length: int | None = None
    num_epochs: int | None = None
    num_samples: int | None = None
    seed: int | None = None
    add_extra_token: bool = True
    document_structure: bool = False
    index_cache_dir: str | None = None

    def validate(self) -> None:
        super().validate()
        self._check_sampling()

    def _check_sampling(self) -> None:
        settings = self.sampling_kwargs()
        sampling.check_settings(**{name: settings[name] for name in ("seq_length", "seed", "num_epochs",
                                                                      "num_samples")})

    def resolved(self) -> dict:
        """The settings with their defaults filled in."""
        return {"seq_length": sampling.DEFAULT_SEQ_LENGTH if self.seq_length is None else self.seq_length,
                "seed": sampling.DEFAULT_SEED if self.seed is None else self.seed}

    @property
    def sample_length(self) -> int:
        return sampling.sample_length(self.resolved()["seq_length"], self.add_extra_token)

    def sampling_kwargs(self) -> dict:
        settings = self.resolved()
        return dict(seq_length=settings["seq_length"], seed=settings["seed"], num_epochs=self.num_epochs,
                    num_samples=self.num_samples, add_extra_token=self.add_extra_token)


def pooled_samples(source, indices: sampling.SamplingIndices, sample_ids: np.ndarray) -> np.ndarray:
    """``sampling.assemble_samples``, gathered into a buffer of pyarrow's memory pool. The pool
    hands back the memory of tables already consumed; a fresh numpy array of a few MB is new
    pages from the kernel, each faulted in as the gather first writes it (measured: the gather
    ran ~20% faster from the pool, with no page faults)."""
    sequence_ids, offsets, lengths, _ = sampling.sample_pieces(indices, source.sequence_lengths, sample_ids)
    dtype = np.dtype(source.dtype)
    out = np.frombuffer(pa.allocate_buffer(int(lengths.sum()) * dtype.itemsize), dtype)
    source.read_pieces(sequence_ids, offsets, lengths, out=out)
    return out.reshape(-1, indices.sample_length)


def sample_table(source, indices: sampling.SamplingIndices, sample_ids: np.ndarray,
                 document_structure: bool, dtype: str | None = None) -> pa.Table:
    """The rows for ``sample_ids`` (positions in the training order) as one Arrow table."""
    tokens = cast_tokens(pooled_samples(source, indices, sample_ids), dtype)
    columns = {"input_ids": fixed_size_lists(tokens, indices.sample_length)}
    if document_structure:
        columns.update(structure_columns(*sampling.document_structure(indices, source.sequence_lengths, sample_ids),
                                         indices.sample_length))
    return pa.table(columns)


def structure_columns(position_ids: np.ndarray, piece_lengths: list, length: int) -> dict:
    """The ``document_structure`` columns: position ids (fixed-size lists) and each row's pieces."""
    offsets = np.concatenate(([0], np.cumsum([len(p) for p in piece_lengths]))).astype(np.int32)
    flat = np.concatenate(piece_lengths).astype(np.int32) if piece_lengths else np.zeros(0, np.int32)
    return {"position_ids": fixed_size_lists(position_ids.astype(np.int32, copy=False), length),
            "piece_lengths": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat))}


def opened_samples(source, plan: Plan, files=()) -> OpenedSplit:
    """A kind's token source sampled the Megatron GPTDataset way with the plan's settings
    (``sampling``, ``index_cache_dir``, ``document_structure``, ``dtype``)."""
    indices = sampling.load_or_build_indices(source.sequence_lengths, cache_dir=plan["index_cache_dir"],
                                             identity=plan.identity, **dict(plan["sampling"]))
    dtype = np.dtype(plan["dtype"]) if plan["dtype"] else source.dtype
    features = sample_features(dtype, indices.sample_length, plan["document_structure"])
    table = functools.partial(sample_table_for, source, indices, plan["document_structure"], plan["dtype"])
    return OpenedSplit(indices.num_samples, features, table, files=files or (source,), source=source)


def sample_table_for(source, indices, document_structure: bool, dtype: str | None, rows: np.ndarray) -> pa.Table:
    return sample_table(source, indices, rows, document_structure, dtype)


class GPTSamplesBuilder(BaseBuilder):
    """Rows are token samples of a split's token source (Megatron GPTDataset samples for a
    :class:`GPTConfig`). A kind implements ``_plan`` and ``open_plan`` (BaseBuilder); this
    adds the samples' settings to the plan (``_sample_settings``), keeps a card's
    ``dataset_info`` only while it fits, and makes a stream's tables through the split's
    table maker: one gather for several small shards, or, for remote files, read ahead in
    background threads along the rows the stream asks for next, within ``read_ahead_bytes``."""

    BUILDER_CONFIG_CLASS = GPTConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._drop_card_info_that_does_not_fit()

    def _card_fits(self, features: datasets.Features) -> bool:
        """Whether a card's features can be this config's samples."""
        config = self.config
        columns = {"input_ids", "position_ids", "piece_lengths"} if config.document_structure else {"input_ids"}
        ids = features["input_ids"]
        return (getattr(ids, "length", None) == config.sample_length and set(features) == columns
                and (config.dtype is None or ids.feature.dtype == config.dtype))

    def _card_counts_apply(self) -> bool:
        """Whether a card's split sizes can count this config's rows: the card cannot say which
        epochs or sample count its split sizes were counted for."""
        return self.config.num_epochs is None and self.config.num_samples is None

    def _drop_card_info_that_does_not_fit(self) -> None:
        """A dataset card's ``dataset_info`` describes the samples of the card's own settings,
        and ``datasets`` hands it over whatever the call's settings are. Keep it only while it
        can describe what this config makes, else its features would fail the cast and its
        split sizes the verification."""
        if self.config.features is not None or self.info.features is None:
            return
        if "input_ids" in self.info.features and not self._card_fits(self.info.features):
            self.info.features = None
            self.info.splits = None
        if not self._card_counts_apply():
            self.info.splits = None

    def _sample_settings(self) -> dict:
        """The plan's settings for ``opened_samples``: sampling, index cache, columns, dtype."""
        config = self.config
        return {"sampling": tuple(sorted(config.sampling_kwargs().items())),
                "index_cache_dir": config.index_cache_dir or os.path.join(cache_root(self), INDEX_CACHE_FOLDER),
                "document_structure": config.document_structure, "dtype": config.dtype}

    def _order(self, plan: Plan) -> dict:
        return dict(plan["sampling"])

    def _tables(self, plan: Plan, batches):
        maker = self._table_maker(plan)
        return maker.tables(batches) if isinstance(maker, ReadAhead) else one_ahead(maker, batches)

    def _table_maker(self, plan: Plan):
        return opened_split(type(self).open_plan, plan, self._remote()).maker(self.config.num_shards or DEFAULT_NUM_SHARDS,
                                                                    self.config.read_ahead_bytes)

    def row_tables(self, plan: Plan, range_batches) -> Iterator[pa.Table]:
        # Any rows in one gather (measured 4x faster for a rank's micro-batches than a table each).
        maker = self._table_maker(plan)
        positions = (np.concatenate([np.arange(a, b) for a, b in ranges]) for ranges in range_batches)
        if isinstance(maker, ReadAhead):  # remote: the batches after the one asked for are fetched meanwhile
            for _, table in maker.tables((None, rows) for rows in positions):
                yield table
            return
        for rows in positions:
            yield maker(rows)


__all__ = ["BaseBuilder", "BaseConfig", "DEFAULT_READ_AHEAD_BYTES", "GPTConfig", "GPTSamplesBuilder", "OpenedSplit",
           "Plan", "SamplesConfig", "fixed_size_lists", "opened_samples", "opened_split",
           "pair_data_files", "ranged", "sample_features", "sample_table", "shard_ranges", "split_files"]
