"""One rank's rows of MosaicML shards, in the order mosaicml-streaming 0.13.0's
``StreamingDataset`` gives them, for any DataLoader worker count, resuming as it resumes.

``StreamingDataset(streams=..., batch_size=B, shuffle=...)`` on a world of N nodes of L ranks
deals every epoch to nodes, ranks, DataLoader workers and batches (mosaic/order/ computes the
same, pure numpy). :func:`mosaic_rank_stream` reads, in each DataLoader worker, exactly the
sample ids StreamingDataset's worker of the same (node, rank of node, worker) yields, with
``node = rank // local_world_size``, and reads their rows from the dataset this package loaded
from the same folders (row i is sample id i: stream after stream, shard after shard). The
shards' sample counts come from what the builder recorded when it loaded them
(hf/mmidx_mosaic.py ``recorded_streams``); no file is listed again.

Epochs. StreamingDataset counts its iterations: each ``iter()`` is the next epoch (its DataLoader
workers share the count in shared memory). So does this stream: the count lives in a small
shared array made with the stream, which forked or spawned DataLoader workers inherit, and each
worker of one iteration takes the same epoch. ``set_epoch(e)`` makes the next iteration epoch e.

Batch size. StreamingDataset's order is dealt in batches of ``batch_size`` per rank, and the
DataLoader takes one batch of each worker in turn: only with ``DataLoader(batch_size=
batch_size)`` are its batches StreamingDataset's and a resumption lands on a batch boundary.
Another loader batch size is refused, naming the one to use.

State. ``state_dict(num_samples, from_beginning)`` and ``load_state_dict(obj)`` take and give
StreamingDataset's own dict (epoch, sample_in_epoch, num_canonical_nodes, shuffle_seed,
initial_physical_nodes): a Composer or LLM Foundry checkpoint's dataset state resumes here and
ours resumes there. ``num_samples`` is the global count of samples trained on (Composer passes
it); without it, the count this rank read in the process that iterates (``num_workers=0``)
times the number of ranks. Inside a DataLoader worker, ``state_dict()`` gives the worker's own
count, in a container torchdata's ``StatefulDataLoader`` collects; ``load_state_dict`` of the
loader's whole state combines them into StreamingDataset's dict. A state is loaded before
``iter()`` (persistent workers keep the state they were started with).

Launchers. As megatron_rank_stream: for a loop of one's own (torchrun). accelerate (and the HF
Trainer) deals a stream's batches out to its processes itself; this stream is one rank's
already, so on several processes it is refused (launchers.py): they take
mosaic_global_stream (mosaic_global.py), every rank's batches.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Mapping, Sequence

import numpy as np

from ..checks import check_int
from ..errors import ParameterError
from ..extras import require_torch
from ..mosaic.order import MosaicOrder, OrderSettings, OrderWorld, StreamWeights
from ..sources import provenance
from . import launchers
from .rank_stream import _loader_batch_size, _row_reader

torch = require_torch("mosaic_rank_stream")

__all__ = ["MosaicRankStream", "mosaic_rank_stream"]

WORKER_STATE_FORMAT = "mmidx-mosaic-rank-stream-worker"


def mosaic_rank_stream(dataset, rank: int, world_size: int, batch_size: int, local_world_size: int | None = None,
                       streams=None, shuffle: bool = False, shuffle_algo: str = "py1e", shuffle_seed: int = 9176,
                       shuffle_block_size: int | None = None, num_canonical_nodes: int | None = None,
                       partition_algo: str = "relaxed", sampling_method: str = "balanced",
                       sampling_granularity: int = 1, batching_method: str = "random",
                       epoch_size: int | str | None = None, cache_dir: str | None = None) -> "MosaicRankStream":
    """Rank ``rank``'s rows of ``dataset`` (loaded by this package from MDS folders, prepared or
    ``streaming=True``) in the order of ``StreamingDataset(streams=[one Stream per folder, with
    streams[i]'s weights], batch_size=batch_size, shuffle=..., ...)`` on ``world_size`` ranks of
    ``local_world_size`` per node (default: the ``LOCAL_WORLD_SIZE`` torchrun sets, else one
    node), read through ``DataLoader(stream, batch_size=batch_size)`` with any ``num_workers``.

    ``streams``: one weight per folder, in the order the dataset's streams were given: a
    :class:`~mmidx_builder.mosaic.order.StreamWeights`, a dict of ``proportion``/``repeat``/
    ``choose`` (``streaming.Stream``'s), or None; or a dict {folder name: weight}. The other
    settings are StreamingDataset's, with its defaults. See the module docstring.

    ``cache_dir``: a folder every rank and worker of a node can reach (``/dev/shm`` is where
    StreamingDataset keeps its epoch): the first to ask builds the epoch's ids and saves them
    there, the others map them (``MosaicOrder(cache_dir=...)``; files are named by what fixes
    the order and never deleted). None: each DataLoader worker builds its own (at 100M samples
    an 800 MB array a worker; benchmarks/bench_mosaic_order.py)."""
    settings = OrderSettings(shuffle=shuffle, shuffle_algo=shuffle_algo, shuffle_seed=shuffle_seed,
                             shuffle_block_size=shuffle_block_size, num_canonical_nodes=num_canonical_nodes,
                             batch_size=batch_size, partition_algo=partition_algo, sampling_method=sampling_method,
                             sampling_granularity=sampling_granularity, batching_method=batching_method,
                             epoch_size=epoch_size)
    return MosaicRankStream(dataset, rank, world_size, settings, local_world_size, streams, cache_dir)


class MosaicRankStream(torch.utils.data.IterableDataset):
    """What :func:`mosaic_rank_stream` returns: a torch ``IterableDataset`` of one rank's rows."""

    def __init__(self, dataset, rank: int, world_size: int, settings: OrderSettings,
                 local_world_size: int | None = None, streams=None, cache_dir: str | None = None):
        self.world_size = check_int("world_size", world_size, 1)
        self.rank = check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ParameterError(f"rank must lie in [0, world_size) = [0, {self.world_size}), got {self.rank}")
        if local_world_size is None:
            local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", self.world_size))
        self.local_world_size = check_int("local_world_size", local_world_size, 1)
        if self.world_size % self.local_world_size:
            raise ParameterError(f"world_size={self.world_size} is not a multiple of local_world_size="
                                 f"{self.local_world_size}: every node runs the same number of ranks "
                                 "(StreamingDataset's World); give the ranks per node as local_world_size")
        self.batch_size = check_int("batch_size", settings.batch_size, 1)
        self.settings = settings
        self.dataset = dataset
        self._rows = _row_reader(dataset)
        recorded = _recorded_streams(dataset)
        self.stream_folders = [s["folder"] for s in recorded]
        sizes = [np.repeat(np.array([n for n, _ in s["samples_per_shard"]], np.int64),
                           [k for _, k in s["samples_per_shard"]]) for s in recorded]
        total = int(sum(s.sum() for s in sizes))
        if total != self._rows.num_rows:
            raise ParameterError(f"the dataset has {self._rows.num_rows} rows, its MDS shards {total}: a dataset "
                                 "sliced, filtered or concatenated no longer has one row per sample id; pass the "
                                 "whole split as loaded")
        self.order = MosaicOrder(sizes, _weights(streams, self.stream_folders), settings, cache_dir=cache_dir)
        self._state: Mapping | None = None  # StreamingDataset's dict, from load_state_dict
        self._epochs = _SharedEpochs()
        self._progress = None  # this process's current iteration: plan, worker, workers, rows

    @property
    def num_nodes(self) -> int:
        return self.world_size // self.local_world_size

    @property
    def node(self) -> int:
        return self.rank // self.local_world_size

    @property
    def rank_of_node(self) -> int:
        return self.rank % self.local_world_size

    @property
    def epoch_size(self) -> int:
        """Samples per epoch over all ranks, once weighted (StreamingDataset's ``epoch_size``)."""
        return self.order.epoch_size

    def _world(self, num_workers: int = 1) -> OrderWorld:
        return OrderWorld(self.num_nodes, self.local_world_size, num_workers)

    def sample_ids(self, epoch: int, worker_id: int = 0, num_workers: int = 1) -> np.ndarray:
        """The sample ids this rank's DataLoader worker ``worker_id`` of ``num_workers`` reads in
        epoch ``epoch`` (resumed from a loaded state when it is of that epoch), in order."""
        plan = self.order.resume_point(self._world(num_workers), self._state, epoch)
        return self.order.worker_sample_ids(plan, self.node, self.rank_of_node, worker_id)

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` reads epoch ``epoch`` (StreamingDataset's next_epoch). accelerate
        calls it first; on several processes it would deal this rank's rows out again: refused."""
        dealing = launchers.from_set_epoch()
        if dealing is not None:
            self._dealt(dealing)
        self._epochs.set(check_int("epoch", epoch, 0))

    def _dealt(self, dealing: launchers.Dealing) -> None:
        if dealing.num_processes > 1:
            raise ParameterError(
                f"a mosaic_rank_stream (rank={self.rank}, world_size={self.world_size}) was handed to accelerate "
                f"(accelerator.prepare or the Hugging Face Trainer), which splits it again over its "
                f"{dealing.num_processes} processes: ranks would train on other ranks' samples. Hand accelerate "
                f"(or the Trainer) mosaic_global_stream(dataset, world_size={dealing.num_processes}, "
                f"batch_size={self.batch_size}, ...the same settings), which holds every rank's batches; or iterate "
                "this stream's DataLoader unprepared in a loop of your own (torchrun)")

    def __iter__(self):
        # Both read the caller's frame: first, before any other call (launchers.py, _loader_batch_size).
        dealing = launchers.from_iter()
        loader_batch_size = _loader_batch_size()
        if dealing is not None:
            self._dealt(dealing)
        if loader_batch_size is not None and loader_batch_size != self.batch_size:
            raise ParameterError(
                f"DataLoader(batch_size={loader_batch_size}) over a mosaic_rank_stream of batch_size="
                f"{self.batch_size}: StreamingDataset deals each rank's samples in batches of batch_size and the "
                f"loader takes one batch of each worker in turn, so only DataLoader(batch_size={self.batch_size}) "
                f"gives its order and resumes where it resumes (with the HF Trainer, per_device_train_batch_size="
                f"{self.batch_size}); or make the stream with batch_size={loader_batch_size}")
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        presumed = self._epochs.arrive(num_workers)
        plan = self.order.resume_point(self._world(num_workers), self._state, presumed)
        self._epochs.settle(plan.epoch + 1)
        ids = self.order.worker_sample_ids(plan, self.node, self.rank_of_node, worker_id)
        progress = {"plan": plan, "worker": worker_id, "workers": num_workers, "rows": 0}
        self._progress = progress
        for row in self._rows.iter_rows(_ranges(ids)):
            progress["rows"] += 1
            yield row

    # --- state ---------------------------------------------------------------------------------

    def state_dict(self, num_samples: int | None = None, from_beginning: bool = False) -> dict:
        """StreamingDataset's ``state_dict(num_samples, from_beginning)``: the epoch being read
        and where in it, for any world to resume. ``num_samples`` None: this rank's rows read so
        far in this process times the ranks (exact with ``num_workers=0``). Inside one of several
        DataLoader workers: that worker's count, for StatefulDataLoader (module docstring)."""
        progress = self._progress
        if progress is not None and progress["workers"] > 1 and num_samples is None:
            return {"format": WORKER_STATE_FORMAT, "worker": progress["worker"], "num_workers": progress["workers"],
                    "batches": progress["rows"] // self.batch_size,
                    "iteration": self.order.state_dict(progress["plan"], 0, False)}
        plan = progress["plan"] if progress is not None else None
        if plan is None or plan.epoch != self._epochs.next() - 1:
            # StreamingDataset: the epoch before next_epoch (-1 before any iteration), as _resume resolves it.
            epoch = self._epochs.next() - 1
            plan = self.order.resume_point(self._world(), self._state, max(epoch, 0))
            if epoch < 0 and self._state is None:
                return {**self.order.state_dict(plan, 0, True), "epoch": -1,
                        "sample_in_epoch": num_samples or 0}
        if num_samples is None:
            if progress is None or progress["plan"] is not plan:
                raise ParameterError("state_dict() cannot tell how many samples were read: pass num_samples= (the "
                                     "global count of samples trained on this epoch, as Composer does)")
            num_samples, from_beginning = progress["rows"] * self.world_size, False
        check_int("num_samples", num_samples, 0)
        return self.order.state_dict(plan, num_samples, from_beginning)

    def load_state_dict(self, obj: Mapping) -> None:
        """Resumes from StreamingDataset's state dict (Composer's checkpoint holds it under the
        train dataloader's state), or from a StatefulDataLoader's whole state of this stream's
        workers. The next ``iter()`` resumes there when the state's epoch is not behind it."""
        workers = list(_worker_states(obj))
        if workers:
            obj = _combine_workers(workers, self.batch_size * self.world_size)
        if not isinstance(obj, Mapping):
            raise ParameterError(f"expected StreamingDataset's state dict (epoch, sample_in_epoch, "
                                 f"num_canonical_nodes, shuffle_seed), got {type(obj).__name__}")
        state = dict(obj)
        self.order.resume_point(self._world(), state, 0)  # every field checked now, not at iter
        self._state = state  # kept, as StreamingDataset keeps it: stale once the epochs pass it
        self._progress = None


class _SharedEpochs:
    """StreamingDataset's ``next_epoch``, shared by this stream's DataLoader workers: the
    workers of one iteration all take the epoch the first of them found, and the last to arrive
    moves it on. Three int64: next epoch, workers arrived in this iteration, its epoch."""

    def __init__(self, values=(0, 0, 0)):
        self._shared = multiprocessing.Array("q", list(values))

    def __getstate__(self):
        # Inherited by a spawned DataLoader worker (shared); copied anywhere else (a snapshot).
        from multiprocessing.context import get_spawning_popen

        return {"shared": self._shared} if get_spawning_popen() is not None else {"values": tuple(self._shared[:])}

    def __setstate__(self, state):
        if "shared" in state:
            self._shared = state["shared"]
        else:
            self.__init__(state["values"])

    def next(self) -> int:
        return int(self._shared[0])

    def set(self, epoch: int) -> None:
        with self._shared.get_lock():
            self._shared[:] = [epoch, 0, epoch]

    def arrive(self, num_workers: int) -> int:
        """The epoch this iteration presumes (before a loaded state is resolved)."""
        with self._shared.get_lock():
            if self._shared[1] == 0:
                self._shared[2] = self._shared[0]
            self._shared[1] += 1
            self._last = self._shared[1] == num_workers
            if self._last:
                self._shared[1] = 0
            return int(self._shared[2])

    def settle(self, next_epoch: int) -> None:
        if self._last:
            with self._shared.get_lock():
                self._shared[0] = next_epoch


def _ranges(ids: np.ndarray):
    """Consecutive runs of ``ids`` as (start, stop): one read per run, in the order given."""
    if not len(ids):
        return
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [len(ids)]))
    for a, b in zip(starts.tolist(), stops.tolist()):
        yield int(ids[a]), int(ids[b - 1]) + 1


def _recorded_streams(dataset) -> list[dict]:
    record = provenance.dataset_record(dataset)
    order = record.get("order") if isinstance(record, Mapping) else None
    if not isinstance(order, Mapping) or order.get("mode") != "mmidx_mosaic" or "mosaic_streams" not in order:
        found = (f"was loaded as {order.get('mode')!r}" if isinstance(order, Mapping)
                 else "was not loaded by this package's builders")
        raise ParameterError(
            f"mosaic_rank_stream reads MosaicML MDS shards as StreamingDataset orders them; this dataset {found}. "
            "Load the MDS folders with this package, rows as stored: load_dataset(folder) or load_dataset(folder, "
            "token_column='tokens') (not seq_length=, which packs Megatron samples); a cache written by an older "
            "release lacks the shard sizes: load it with download_mode='force_redownload'")
    streams = order["mosaic_streams"]
    legacy = [s["folder"] for s in streams if s.get("layout") != "mds"]
    if legacy:
        raise ParameterError(f"streams {legacy} are Composer's legacy index.mds, which StreamingDataset does not "
                             "read: convert them to MDS (mmidx convert --to mds)")
    return streams


def _weights(streams, folders: list[str]) -> list[StreamWeights]:
    if streams is None:
        return [StreamWeights()] * len(folders)
    if isinstance(streams, Mapping):
        unknown = sorted(set(streams) - set(folders))
        if unknown:
            raise ParameterError(f"streams= names folders {unknown}; the dataset's streams are {folders}")
        if len(set(folders)) != len(folders):
            raise ParameterError(f"streams= by folder name, but two streams share a name ({folders}): give a list, "
                                 "one weight per stream in order")
        streams = [streams.get(folder) for folder in folders]
    if not isinstance(streams, Sequence) or len(streams) != len(folders):
        raise ParameterError(f"streams= must hold one weight per stream ({len(folders)}: {folders}), got {streams!r}")
    return [_weight(w, i) for i, w in enumerate(streams)]


def _weight(weight, index: int) -> StreamWeights:
    if weight is None:
        return StreamWeights()
    if isinstance(weight, StreamWeights):
        return weight
    if isinstance(weight, Mapping):
        unknown = sorted(set(weight) - {"proportion", "repeat", "choose"})
        if unknown:
            raise ParameterError(f"streams[{index}]: unknown keys {unknown}; a stream's weight is one of proportion, "
                                 "repeat and choose")
        return StreamWeights(**weight)
    raise ParameterError(f"streams[{index}]: expected StreamWeights, a dict or None, got {weight!r}")


def _worker_states(state):
    if isinstance(state, Mapping):
        if state.get("format") == WORKER_STATE_FORMAT:
            yield state
            return
        for value in state.values():
            yield from _worker_states(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from _worker_states(value)


def _combine_workers(states: list[Mapping], samples_per_batch: int) -> dict:
    """StreamingDataset's dict from every worker's count: after the loader handed out b batches,
    worker w's next batch is the first u >= b with u = w (mod K), so b is the least of them."""
    iterations = {tuple(sorted(s["iteration"].items())) for s in states}
    counts = {s["num_workers"] for s in states}
    found = sorted(s["worker"] for s in states)
    if len(iterations) != 1 or len(counts) != 1 or found != list(range(next(iter(counts)))):
        raise ParameterError(f"need the states of every worker of one iteration, found workers {found} of "
                             f"{sorted(counts)} over {len(iterations)} iteration(s)")
    num_workers = counts.pop()
    handed_out = min(s["worker"] + s["batches"] * num_workers for s in states)
    state = dict(states[0]["iteration"])
    state["sample_in_epoch"] += handed_out * samples_per_batch
    return state
