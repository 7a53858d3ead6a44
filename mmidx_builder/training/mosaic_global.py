"""Every rank's rows of MosaicML shards in StreamingDataset's order, for accelerate and the
Hugging Face Trainer, which deal them out so that each process trains on exactly the batches
StreamingDataset's rank of the same index gives a ``DataLoader(batch_size=B, num_workers=K)``.

A launcher that splits the data itself cannot be given one rank's stream (mosaic_stream.py
refuses that). It is given the whole: global step s is the s-th loader batch of every rank,
rank 0's first, each rank's batches being StreamingDataset's on a world of ``world_size`` ranks
(``local_world_size`` a node) of K workers each, K the loader's own ``num_workers``; a rank's
loader takes one batch of each of its workers in turn (mosaic_stream.py). How accelerate deals
(launchers.py) decides which DataLoader worker of ours makes which rows:

- dispatch (accelerate's default): process 0 alone reads. Its loader batch k is the k-th block
  of ``loader_batch_size`` rows of the global steps laid end to end (B rows: rank k mod N's
  batch of step k // N; N * B rows with ``split_batches``: all of step k), and its worker w
  makes loader batches w, w + K, ...; accelerate hands process p rows ``p * B ..`` of each
  step.
- shard (``dispatch_batches=False``): every process reads; its worker w makes steps w, w + K,
  ... of which ``IterableDatasetShard`` keeps the process's B rows: only those are read, None
  stands for the other ranks' rows.

The end of an epoch. A rank's last loader batches may be short (StreamingDataset pads each
worker's last batch with -1 and skips those) and accelerate cannot deal short batches to the
right ranks. The stream ends at the first step where some rank's batch is short: at most K - 1
full batches and one short batch per rank are dropped, as a ``DataLoader(drop_last=True)``
drops a rank's short batch (LLM Foundry's default).

Epochs are the ones accelerate gives ``set_epoch`` (the Trainer counts them); a checkpoint of
the Trainer resumes by skipping the batches it trained on, which gives the same batches.
``load_state_dict`` takes StreamingDataset's state dict (a Composer or LLM Foundry checkpoint):
the next epoch read resumes there, dealt to this world as StreamingDataset deals a resumption.
"""

from __future__ import annotations

import numpy as np

from ..checks import check_int
from ..errors import ParameterError
from ..mosaic.order import OrderSettings
from . import launchers
from .mosaic_stream import MosaicRankStream, _ranges, torch
from .rank_stream import _loader_batch_size

__all__ = ["MosaicGlobalStream", "mosaic_global_stream"]


def mosaic_global_stream(dataset, world_size: int, batch_size: int, local_world_size: int | None = None,
                         streams=None, cache_dir: str | None = None, **order_settings) -> "MosaicGlobalStream":
    """Every rank's rows of ``dataset`` (MDS folders loaded by this package) in
    StreamingDataset's order, for ``accelerator.prepare(DataLoader(stream, batch_size=
    batch_size, num_workers=K))`` or as the HF Trainer's ``train_dataset``
    (``per_device_train_batch_size=batch_size``, ``dataloader_num_workers=K``) on
    ``world_size`` processes: process p trains on the batches StreamingDataset's rank p gives
    a DataLoader of K workers. ``order_settings``: StreamingDataset's (``shuffle``,
    ``shuffle_algo``, ``shuffle_seed``, ..., as :func:`mosaic_rank_stream` takes them);
    ``streams``, ``local_world_size`` and ``cache_dir`` as there. See the module docstring."""
    try:
        settings = OrderSettings(batch_size=batch_size, **order_settings)
    except TypeError as error:
        raise ParameterError(f"mosaic_global_stream: {error}; the order's settings are OrderSettings' fields "
                             "(StreamingDataset's arguments)") from None
    return MosaicGlobalStream(dataset, world_size, settings, local_world_size, streams, cache_dir)


class MosaicGlobalStream(MosaicRankStream):
    """What :func:`mosaic_global_stream` returns: a torch ``IterableDataset`` of every rank's rows."""

    def __init__(self, dataset, world_size: int, settings: OrderSettings, local_world_size: int | None = None,
                 streams=None, cache_dir: str | None = None):
        super().__init__(dataset, 0, world_size, settings, local_world_size, streams, cache_dir)
        self.rank = None
        self._dealing = None  # how accelerate deals the rows, once it said (set_epoch or iter)

    def sample_ids(self, epoch: int, worker_id: int = 0, num_workers: int = 1) -> np.ndarray:
        raise ParameterError("a global stream holds every rank's samples; rank_sample_ids(epoch, rank, num_workers) "
                             "gives one rank's, in its loader's order")

    def rank_sample_ids(self, epoch: int, rank: int, num_workers: int = 1) -> np.ndarray:
        """The sample ids accelerate's process ``rank`` trains on in ``epoch`` (resumed from a
        loaded state when it is of that epoch) with loaders of ``num_workers`` workers, in order."""
        plan = self.order.resume_point(self._world(num_workers), self._state, epoch)
        steps = every_rank_steps(self.order, plan, self.batch_size)
        rank = check_int("rank", rank, 0)
        return np.concatenate([steps.batch(rank, s) for s in range(steps.count)] or [np.zeros(0, np.int64)])

    # --- how accelerate deals ------------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` reads epoch ``epoch``; accelerate calls it, saying how it deals."""
        dealing = launchers.from_set_epoch()
        if dealing is not None:
            self._dealt(dealing)
        self._epochs.set(check_int("epoch", epoch, 0))

    def _dealt(self, dealing: launchers.Dealing) -> None:
        launchers.check_dealing(dealing, "mosaic_global_stream", self.world_size, "batch_size", self.batch_size)
        self._dealing = dealing

    def __iter__(self):
        # Both read the caller's frame: first, before any other call (launchers.py, _loader_batch_size).
        dealing = launchers.from_iter()
        loader_batch_size = _loader_batch_size()
        if dealing is not None:
            self._dealt(dealing)
        dealing = self._dealing
        if dealing is None and self.world_size > 1:
            raise ParameterError(
                f"mosaic_global_stream(world_size={self.world_size}) holds every rank's samples and is read here "
                "without accelerate dealing them out (accelerator.prepare(DataLoader(...)) or the HF Trainer): "
                "each process would train on all of them. In a loop of your own use mosaic_rank_stream(dataset, "
                "rank, world_size, batch_size) on each rank")
        info = torch.utils.data.get_worker_info()
        worker_id, num_workers = (info.id, info.num_workers) if info is not None else (0, 1)
        # Every process counts the epoch, read or not: its state_dict names the epoch being trained.
        presumed = self._epochs.arrive(num_workers)
        plan = self.order.resume_point(self._world(num_workers), self._state, presumed)
        self._epochs.settle(plan.epoch + 1)
        progress = {"plan": plan, "worker": worker_id, "workers": num_workers, "rows": 0}
        self._progress = progress
        if dealing is not None and dealing.kind == "dispatch" and dealing.process_index != 0:
            return  # accelerate reads process 0's loader only
        unit = self._unit_rows()
        if loader_batch_size is not None and loader_batch_size != unit:
            raise ParameterError(
                f"DataLoader(batch_size={loader_batch_size}) over a mosaic_global_stream of batch_size="
                f"{self.batch_size}: each loader batch comes whole from one worker, so only batch_size={unit} "
                f"hands the ranks StreamingDataset's batches (with the HF Trainer, per_device_train_batch_size="
                f"{self.batch_size})")
        steps = every_rank_steps(self.order, plan, self.batch_size)
        for before, ids, after in self._units(steps, worker_id, num_workers):
            for row in [None] * before:
                yield row
            for row in self._rows.iter_rows(_ranges(ids)):
                progress["rows"] += 1
                yield row
            for row in [None] * after:
                yield row

    def _unit_rows(self) -> int:
        dealing = self._dealing
        if dealing is None:
            return self.batch_size
        if dealing.kind == "dispatch":
            return dealing.loader_batch_size  # B, or N * B with split_batches (checked in _dealt)
        return self.batch_size * self.world_size  # shard: a whole step, mostly placeholders

    def _units(self, steps: "_Steps", worker_id: int, num_workers: int):
        """(rows before, sample ids, rows after) of each unit worker ``worker_id`` makes."""
        dealing, batch, ranks = self._dealing, self.batch_size, self.world_size
        if dealing is not None and dealing.kind == "shard":
            p = dealing.process_index
            for step in range(worker_id, steps.count, num_workers):
                yield p * batch, steps.batch(p, step), (ranks - 1 - p) * batch
            return
        per_unit = self._unit_rows() // batch  # ranks' batches a loader batch holds: 1, or N (split)
        for unit in range(worker_id, steps.count * ranks // per_unit, num_workers):
            first = unit * per_unit
            ids = [steps.batch(k % ranks, k // ranks) for k in range(first, first + per_unit)]
            yield 0, np.concatenate(ids), 0

    # --- state ---------------------------------------------------------------------------------

    def state_dict(self, num_samples: int | None = None, from_beginning: bool = False) -> dict:
        """StreamingDataset's ``state_dict(num_samples, from_beginning)`` of the epoch being read:
        ``num_samples`` is the global count of samples trained on (steps x batch_size x
        world_size), which only the training loop knows here."""
        if num_samples is None:
            raise ParameterError("a mosaic_global_stream is read by accelerate, which does not say how many samples "
                                 "were trained on: pass num_samples= (optimizer steps x batch_size x world_size "
                                 "this epoch, as Composer does)")
        return super().state_dict(num_samples, from_beginning)

def every_rank_steps(order, plan, batch_size: int) -> "_Steps":
    """The plan's epoch as global steps of its world's ranks (rank = node x ranks per node +
    rank of node). Dealt whole, as StreamingDataset's local leader deals it (``epoch_work``;
    mapped from ``cache_dir`` when the order has one): one worker's share at a time would
    cost a pass over the epoch per worker of the world."""
    work = order.epoch_work(plan)  # (nodes, ranks per node, workers, batches, batch size), -1 pads
    per_worker = []
    for node_work in work:
        for rank_work in node_work:
            per_worker.append([ids[ids != -1] for ids in rank_work.reshape(len(rank_work), -1)])
    return _Steps(per_worker, batch_size)


class _Steps:
    """An epoch's global steps: each rank's batches as its DataLoader hands them out (one
    batch of each worker in turn, a worker that has run out skipped), up to the first step
    where some rank's batch is short. A batch is kept as (turn, worker): the worker's
    ``turn``-th ``batch_size`` ids, so an epoch costs two ints a batch beyond the ids."""

    def __init__(self, per_worker: list[list[np.ndarray]], batch_size: int):
        self.per_worker, self.batch_size = per_worker, batch_size
        self.order = [_full_batches([len(ids) for ids in workers], batch_size) for workers in per_worker]
        self.count = min(len(turns) for turns, _ in self.order)

    def batch(self, rank: int, step: int) -> np.ndarray:
        turns, workers = self.order[rank]
        first = int(turns[step]) * self.batch_size
        return self.per_worker[rank][int(workers[step])][first:first + self.batch_size]


def _full_batches(counts: list[int], batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(turn, worker) of each batch a DataLoader takes from workers holding ``counts`` ids, in
    its order, up to the first short batch."""
    counts = np.asarray(counts, np.int64)
    full, batches = counts // batch_size, -(-counts // batch_size)
    turns = np.repeat(np.arange(batches.max(initial=0)), len(counts))
    workers = np.tile(np.arange(len(counts)), batches.max(initial=0))
    there = turns < batches[workers]
    turns, workers = turns[there], workers[there]
    short = np.flatnonzero(turns >= full[workers])
    end = short[0] if len(short) else len(turns)
    return turns[:end], workers[:end]
