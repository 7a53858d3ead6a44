"""One data-parallel rank's rows, in the order Megatron-LM's sampler gives them, for any worker count.

Megatron-LM's ``MegatronPretrainingSampler(total_samples, consumed_samples, micro_batch_size,
data_parallel_rank, data_parallel_size)`` (``megatron/training/datasets/data_samplers.py``;
the same at ``core_v0.16.1`` and today) walks training positions ``consumed_samples ..
total_samples - 1`` in global batches of ``micro_batch_size * world_size`` and hands rank r
the r-th micro-batch of each; a last partial global batch is dropped. So rank r reads,
for global batch ``g = 0, 1, ... G - 1`` with ``G = (total - consumed) // (mbs * W)``::

    consumed + g * mbs * W + r * mbs  ...  + mbs - 1

Every rank gets exactly G micro-batches (no DDP hang on a short last batch).

With ``DataLoader(stream, batch_size=mbs, num_workers=K)``, worker w produces micro-batches
``g = w, w + K, w + 2K, ...`` and the loader hands them out round robin (worker 0's first,
worker 1's first, ...), which is the order g = 0, 1, 2, ... again: the loss curve does not
depend on K. (MosaicML streaming hands out whole batches to workers the same way.) This
needs ``batch_size=micro_batch_size`` and the loader's default ``in_order=True``: with two
or more workers each loader batch comes whole from one worker, so another batch size (the
HF Trainer's ``per_device_train_batch_size`` set apart from the stream's) would interleave
the workers' micro-batches out of Megatron's order. Each worker therefore reads the batch
size its loader asks for and refuses one that differs, naming the ``batch_size`` to use.
With ``num_workers`` 0 or 1 any batch size keeps the order.

Reading. Rows come from the dataset given:
- a ``datasets.Dataset`` (Arrow cache): ``dataset[i]`` for each row this worker needs;
- a stream from this package's builder (hf/streams.py finds it): the builder is asked for
  just this worker's micro-batch ranges, so only the tokens of this rank's samples are
  gathered (and, for remote files, fetched, the next micro-batches while these are used);
- any other ``IterableDataset`` (after ``map``, ``skip`` ...): read through in Arrow form and
  only this worker's rows formatted; correct, with every worker reading everything.
Rows have the dataset's format (``with_format``) as iterating the dataset would give them.

State. ``state_dict()`` is ``{"consumed_samples": C, "fingerprint": {...}, ...}``: C is the
global count of samples consumed by all ranks, Megatron's ``consumed_samples``, so a state
loads into a stream of any ``world_size`` and ``micro_batch_size`` (elastic resume). The
fingerprint is what fixes which sample sits at which position (the files' names, sequence and
token counts, a hash of their lengths and a split's sequence range, ``seq_length``, ``seed``,
``num_epochs``/``num_samples``, ``add_extra_token``, the row count), read from what the
builder recorded in ``dataset.info`` (provenance.order_fingerprint, one function for every
kind); a state of another dataset
is refused with :class:`ParameterError` naming the setting that differs, and so is a state
whose counts or fingerprint are not whole (state.py checks every field).

The count is kept by the process that iterates: exact in the main process with
``num_workers=0``. With workers, each worker's copy counts its own micro-batches, which is
what torchdata's ``StatefulDataLoader`` snapshots: its ``state_dict()`` can be loaded back
into the same loader, or given to ``load_state_dict`` of a new rank stream (any world size),
which combines the workers' counts into the global one.

Launchers. A rank stream is for a loop of one's own (torchrun). accelerate, and so the HF
Trainer, deals a dataset's batches out to its processes itself (launchers.py): a rank stream
handed to it on several processes would be split a second time, so it refuses (``set_epoch``,
which accelerate calls first, finds out); global_stream.py is what to hand it instead.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping

import numpy as np

from ..sources import provenance
from ..checks import check_int
from ..errors import ParameterError
from ..extras import require_torch
from . import launchers
from .state import STATE_FORMAT, STATE_VERSION, checked_state, combine_workers, find_states, one_state

torch = require_torch("megatron_rank_stream")

__all__ = ["MegatronRankStream", "megatron_rank_stream"]

# Micro-batches gathered per call of the builder: one table of a few hundred rows amortises
# the per-call cost and stays a few MB. The first calls ask for fewer (1, 8, then 64), so the
# first row costs about one micro-batch's reads, not 64 of them.
_RANGES_PER_CALL = 64
_FIRST_CALLS = (1, 8)


def megatron_rank_stream(dataset, rank: int, world_size: int, micro_batch_size: int,
                         consumed_samples: int = 0, gradient_accumulation_steps: int = 1) -> "MegatronRankStream":
    """Rank ``rank``'s rows of ``dataset`` in the order of Megatron-LM's
    ``MegatronPretrainingSampler(len(dataset), consumed_samples, micro_batch_size, rank,
    world_size)`` (drop_last), read through ``DataLoader(..., batch_size=micro_batch_size)``
    with any ``num_workers``. With ``gradient_accumulation_steps=A`` it ends at a whole number
    of Megatron's global batches (``micro_batch_size x world_size x A`` samples), where
    Megatron-LM's training stops, instead of a last optimizer step of fewer micro-batches. See
    the module docstring."""
    return MegatronRankStream(dataset, rank, world_size, micro_batch_size, consumed_samples,
                              gradient_accumulation_steps)


class MegatronRankStream(torch.utils.data.IterableDataset):
    """What :func:`megatron_rank_stream` returns: a torch ``IterableDataset`` of one rank's rows."""

    def __init__(self, dataset, rank: int, world_size: int, micro_batch_size: int, consumed_samples: int = 0,
                 gradient_accumulation_steps: int = 1):
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ParameterError(f"rank must lie in [0, world_size) = [0, {self.world_size}), got {self.rank}")
        self._init_rows(dataset, micro_batch_size, consumed_samples, gradient_accumulation_steps)

    def _init_rows(self, dataset, micro_batch_size, consumed_samples, gradient_accumulation_steps=1) -> None:
        self.micro_batch_size = check_int("micro_batch_size", micro_batch_size, 1)
        self.gradient_accumulation_steps = check_int("gradient_accumulation_steps", gradient_accumulation_steps, 1)
        self.dataset = dataset
        self._rows = _row_reader(dataset)
        self.total_samples = self._rows.num_rows
        self.fingerprint = _fingerprint(dataset, self.total_samples)
        self._start = self._checked_consumed(check_int("consumed_samples", consumed_samples, 0))
        self._resume_worker = None  # (iteration start, units done) from one worker's state
        self._progress = None  # the current iteration: start, worker, workers, units done before, rows, unit

    # --- what this rank reads ---------------------------------------------------------------

    @property
    def global_batch_size(self) -> int:
        return self.micro_batch_size * self.world_size

    @property
    def consumed_samples(self) -> int:
        """Where the next ``iter()`` starts: the global count given or loaded."""
        return self._start

    @property
    def info(self):
        return getattr(self.dataset, "info", None)

    @property
    def split(self):
        return getattr(self.dataset, "split", None)

    def num_micro_batches(self) -> int:
        """Micro-batches every rank reads from :attr:`consumed_samples` on."""
        return self._rounds(self._start)

    def _rounds(self, start: int) -> int:
        """Micro-batches of every rank from ``start``: whole global batches (the last partial one
        dropped, as the sampler does), and whole optimizer steps of gradient_accumulation_steps."""
        steps = self.gradient_accumulation_steps
        return (self.total_samples - start) // (self.global_batch_size * steps) * steps

    def __len__(self) -> int:
        return self.num_micro_batches() * self.micro_batch_size

    def sample_positions(self, worker_id: int = 0, num_workers: int = 1) -> np.ndarray:
        """Training positions this rank (and DataLoader worker) reads, in order."""
        return np.concatenate([np.arange(a, b) for a, b, _, _ in self._units(self._start, worker_id, num_workers)]
                              or [np.zeros(0, np.int64)])

    # A unit is what one DataLoader worker produces in one go, so that the loader's round robin
    # over workers restores the order: here one micro-batch of this rank. Each unit is
    # (first, stop, before, after): rows first .. stop - 1, after ``before`` and before
    # ``after`` placeholders (None: rows another process keeps, global_stream.py).

    def _unit_samples(self) -> int:
        """Global samples consumed per unit."""
        return self.global_batch_size

    def _unit_rows(self) -> int:
        return self.micro_batch_size

    def _units(self, start: int, worker_id: int, num_workers: int, skip: int = 0) -> Iterator[tuple]:
        batches = self._rounds(start)
        # Straight to the (skip + 1)-th of this worker's micro-batches: a resume costs nothing per
        # micro-batch before it.
        for g in range(worker_id + skip * num_workers, batches, num_workers):
            first = start + g * self.global_batch_size + self.rank * self.micro_batch_size
            yield first, first + self.micro_batch_size, 0, 0

    def set_epoch(self, epoch: int) -> None:
        """What accelerate calls before each pass (the HF Trainer through it). The order does
        not depend on the epoch (Megatron's depends on ``consumed_samples`` only); the call
        tells how accelerate deals the rows out (launchers.py)."""
        dealing = launchers.from_set_epoch()
        if dealing is not None:
            self._dealt(dealing)

    def _dealt(self, dealing: launchers.Dealing) -> None:
        if dealing.num_processes > 1:
            raise ParameterError(
                f"a megatron_rank_stream (rank={self.rank}, world_size={self.world_size}) was handed to accelerate "
                f"(accelerator.prepare or the Hugging Face Trainer), which splits it again over its "
                f"{dealing.num_processes} processes ({_DEALINGS[dealing.kind]}): ranks would train on other ranks' "
                f"samples and skip some. Hand it megatron_global_stream(dataset, world_size={dealing.num_processes}, "
                f"micro_batch_size={self.micro_batch_size}) instead, which accelerate deals out as "
                "MegatronPretrainingSampler does; keep megatron_rank_stream for loops of your own (torchrun)")

    def _begin(self, dealing: launchers.Dealing | None, batch_size: int | None, num_workers: int) -> bool:
        """Checks before the first row; False: this process reads nothing."""
        if dealing is not None:
            self._dealt(dealing)
        if num_workers > 1:
            self._check_loader_batch_size(batch_size, num_workers)
        return True

    def __iter__(self):
        # Both read the caller's frame: first, before any other call (launchers.py, _loader_batch_size).
        dealing = launchers.from_iter()
        batch_size = _loader_batch_size()
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if not self._begin(dealing, batch_size, num_workers):
            return
        start, skip = self._start, 0
        if self._resume_worker is not None:
            start, skip = self._resume_worker
        progress = {"start": start, "worker": worker_id, "workers": num_workers, "done": skip, "rows": 0,
                    "unit_rows": self._unit_rows(), "unit_samples": self._unit_samples()}
        self._progress = progress
        units, wanted = itertools.tee(self._units(start, worker_id, num_workers, skip))
        rows = self._rows.iter_rows((first, stop) for first, stop, _, _ in wanted)
        for first, stop, before, after in units:
            for _ in range(before):
                progress["rows"] += 1
                yield None
            for row in itertools.islice(rows, stop - first):
                progress["rows"] += 1  # before the yield: a unit counts once its last row is out
                yield row
            for _ in range(after):
                progress["rows"] += 1
                yield None

    def _check_loader_batch_size(self, batch_size: int | None, num_workers: int) -> None:
        if batch_size is None or batch_size == self._unit_rows():
            return
        raise ParameterError(
            f"DataLoader(batch_size={batch_size}, num_workers={num_workers}) over a megatron_rank_stream of "
            f"micro_batch_size={self.micro_batch_size} would hand out this rank's samples out of Megatron's order "
            f"(each loader batch comes whole from one worker): use batch_size={self.micro_batch_size} (with the HF "
            f"Trainer, per_device_train_batch_size={self.micro_batch_size}), or make the stream with "
            f"micro_batch_size={batch_size}, or num_workers=0")

    # --- state ---------------------------------------------------------------------------------

    def _checked_consumed(self, consumed: int) -> int:
        if consumed > self.total_samples:
            raise ParameterError(f"consumed_samples={consumed} exceeds the dataset's {self.total_samples} samples")
        return consumed

    def state_dict(self) -> dict:
        """The global consumed-sample count and the dataset's fingerprint (module docstring).
        Inside a DataLoader worker, the worker's own count (for StatefulDataLoader)."""
        state = {"format": STATE_FORMAT, "version": STATE_VERSION, "fingerprint": dict(self.fingerprint),
                 "world_size": self.world_size, "micro_batch_size": self.micro_batch_size}
        progress = self._progress
        if progress is None:
            return {**state, "consumed_samples": self._start}
        done = progress["done"] + progress["rows"] // progress["unit_rows"]
        if progress["workers"] == 1:
            return {**state, "consumed_samples": progress["start"] + done * progress["unit_samples"]}
        # One worker of several: its units are id, id + K, ...; the global count needs every
        # worker's (load_state_dict combines them).
        return {**state, "consumed_samples": None,
                "worker": {"id": progress["worker"], "num_workers": progress["workers"],
                           "iteration_start": progress["start"], "micro_batches": done,
                           "unit_samples": progress["unit_samples"]}}

    def load_state_dict(self, state: Mapping) -> None:
        """Continues from a state of :meth:`state_dict`, or from a container of them (a
        StatefulDataLoader's ``state_dict()``): the next ``iter()`` starts at the state's
        global sample, for this stream's world size and micro-batch size. Every field is
        checked (state.py): a state that is not one this dataset could have written is a
        ParameterError naming the field."""
        states = list(find_states(state))
        if not states:
            raise ParameterError("not a megatron_rank_stream state: no dict with format "
                                 f"{STATE_FORMAT!r} found in it")
        states = one_state([checked_state(found, self.fingerprint, self.total_samples) for found in states])
        globals_ = [s for s in states if s["worker"] is None]
        if globals_:
            self._start = globals_[0]["consumed_samples"]
            self._resume_worker = None
            self._progress = None
            return
        info = torch.utils.data.get_worker_info()
        if info is not None and len(states) == 1:
            worker = states[0]["worker"]
            if (worker["id"], worker["num_workers"]) != (info.id, info.num_workers):
                raise ParameterError(
                    f"this is worker {worker['id']} of {worker['num_workers']}'s state, loaded into worker {info.id} "
                    f"of {info.num_workers}: load the whole loader state into the stream instead")
            self._check_same_batches(states[0])
            self._resume_worker = (worker["iteration_start"], worker["micro_batches"])
            self._progress = None
            return
        self._start = self._checked_consumed(combine_workers(states))
        self._resume_worker = None
        self._progress = None

    def _check_same_batches(self, state: Mapping) -> None:
        theirs = (state["world_size"], state["micro_batch_size"], state["worker"]["unit_samples"])
        ours = (self.world_size, self.micro_batch_size, self._unit_samples())
        if theirs != ours:
            raise ParameterError(f"a worker's state of world_size={theirs[0]}, micro_batch_size={theirs[1]} "
                                 f"({theirs[2]} samples per worker batch) cannot resume a worker of "
                                 f"world_size={ours[0]}, micro_batch_size={ours[1]} ({ours[2]}); load the whole "
                                 "loader state into a new stream instead")


_DEALINGS = {"dispatch": "its process 0 reads the stream and deals each batch out, dispatch_batches",
             "shard": "every process reads it and keeps every n-th batch, IterableDatasetShard"}


def _loader_batch_size() -> int | None:
    """The batch size of the DataLoader pulling rows from this iterator, as its worker sees it.

    torch tells a worker its id and the worker count, not the batch size: that lives in the
    main process's batch sampler, which sends each worker the list of indices of its next
    batch. The worker's fetcher (torch.utils.data._utils.fetch._IterableDatasetFetcher.fetch,
    unchanged from torch 1.x to 2.13) calls ``next()`` on this generator once per index of that
    list, so its frame, the caller of the generator's first step, holds the list. Read from
    there; None when the caller is not that fetcher (a plain loop, another loader)."""
    import sys

    frame = sys._getframe(2)  # 0: this function, 1: __iter__'s generator, 2: who called next()
    if frame.f_code.co_name != "fetch" or "possibly_batched_index" not in frame.f_locals:
        return None
    fetcher = frame.f_locals.get("self")
    if not getattr(fetcher, "auto_collation", False):
        return 1  # batch_size=None: the loader hands out single rows, one worker after another
    return len(frame.f_locals["possibly_batched_index"])


def _fingerprint(dataset, total_samples: int) -> dict:
    record = provenance.dataset_record(dataset)
    fingerprint = dict(record["order"]) if record and isinstance(record.get("order"), Mapping) else {}
    fingerprint["rows"] = int(total_samples)
    return fingerprint


# --- reading rows ------------------------------------------------------------------------------

def _row_reader(dataset):
    import datasets

    from ..hf import streams

    if isinstance(dataset, datasets.Dataset):
        return _ArrowRows(dataset)
    if isinstance(dataset, datasets.IterableDataset):
        if streams.split_by_node(dataset):
            raise ParameterError("the stream is already split by node (split_dataset_by_node); pass the whole "
                                 "stream: megatron_rank_stream gives each rank its own rows")
        split = streams.builder_stream(dataset)
        return _BuilderRows(split, dataset) if split is not None else _StreamRows(dataset)
    raise ParameterError(f"expected a datasets Dataset or IterableDataset, got {type(dataset).__name__}")


class _ArrowRows:
    """A map-style dataset: random access, any format."""

    def __init__(self, dataset):
        self.dataset = dataset
        self.num_rows = len(dataset)

    def iter_rows(self, ranges):
        for first, stop in ranges:
            for i in range(first, stop):
                yield self.dataset[i]


def _formatter(stream):
    from datasets.formatting import get_formatter

    from ..hf.streams import format_type

    return get_formatter(format_type(stream), features=stream.features)


def _stream_rows_from_record(stream) -> int:
    record = provenance.dataset_record(stream)
    if record and "rows" in record.get("order", {}):
        return int(record["order"]["rows"])
    splits = getattr(stream.info, "splits", None) or {}
    split = str(stream.split) if stream.split is not None else None
    if split in splits and splits[split].num_examples:
        return int(splits[split].num_examples)
    raise ParameterError("the stream does not say how many rows it has (megatron_rank_stream needs "
                         "Megatron's total_samples); load it with this package's builder")


class _BuilderRows:
    """A stream straight from our builder (hf/streams.py): only the rows we read are gathered,
    a chunk of our micro-batches per call (for packed samples one gather per chunk, measured
    4x faster than a table per micro-batch)."""

    def __init__(self, split, stream):
        self.split = split
        self.num_rows = split.num_rows
        self.stream = stream

    def iter_rows(self, ranges):
        formatter = _formatter(self.stream)
        ranges = iter(ranges)
        sizes = itertools.chain(_FIRST_CALLS, itertools.repeat(_RANGES_PER_CALL))
        chunks = iter(lambda: list(itertools.islice(ranges, next(sizes))), [])
        for table in self.split.tables(chunks):
            for i in range(table.num_rows):
                yield formatter.format_row(table.slice(i, 1))


class _StreamRows:
    """Any other stream: read in order as Arrow batches (cheap), format only our rows."""

    def __init__(self, stream):
        self.stream = stream
        self.num_rows = _stream_rows_from_record(stream)

    def iter_rows(self, ranges):
        formatter = _formatter(self.stream)
        ranges = iter(ranges)
        wanted = next(ranges, None)
        if wanted is None:
            return
        position = 0
        for table in self.stream.with_format("arrow").iter(batch_size=1000):
            end = position + table.num_rows
            while wanted is not None and wanted[0] < end:
                first, stop = max(wanted[0], position), min(wanted[1], end)
                for i in range(first, stop):
                    yield formatter.format_row(table.slice(i - position, 1))
                if wanted[1] <= end:
                    wanted = next(ranges, None)
                else:
                    wanted = (end, wanted[1])
                    break
            if wanted is None:
                return
            position = end
        if wanted is not None:
            raise ParameterError(f"the stream ended at row {position}, before row {wanted[0]}; it has fewer rows "
                                 f"than the {self.num_rows} recorded")
