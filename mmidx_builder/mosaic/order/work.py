"""MosaicML's order for one corpus: each worker's sample ids of an epoch, for any world and
resume point, as mosaicml-streaming 0.13.0's StreamingDataset yields them.

Follows ``StreamingDataset.__init__`` (the shard index and ``Stream.apply_weights``),
``_resume``/``state_dict`` (resume.py), ``_get_work`` (the batch-size check, then
``generate_work``: batching/) and ``_each_sample_id`` (the worker's row of the epoch, -1
skipped), all in dataset.py.

Cost. With ``random`` batching (StreamingDataset's default) a worker's ids are computed in the
same steps as theirs, but only the worker's share is dealt (worker_partition.py): the epoch's
resampling (``units`` and a sample id per place, int64) and the shuffle's permutation are
built whole, as they must be (their random draws run over the whole epoch), and composed once
into one int64 array of the epoch's size, kept for the next worker of the same plan; the
(nodes, ranks, workers, batches, batch size) array is never built. The shuffles' own working
memory: py1e a float64 array of positions per canonical node, py2s and py1s/py1br an int64 array
of the epoch.

The other batchings (and :meth:`MosaicOrder.epoch_work`) build the whole epoch's array, as
StreamingDataset's local leader does, and keep the last one built.

StreamingDataset builds the epoch once per node (its local leader) and shares it in shared
memory. Without ``cache_dir`` each process that asks builds its own, so a node of R ranks x W
workers that each ask costs R x W times the CPU and memory of theirs. With ``cache_dir`` (a
folder of the node's local disk that its workers share) the first worker to ask builds the
epoch's array (random batching: the composed int64 array; the others: the 5-D array) and
saves it as .npy; every worker maps it read-only (cache.py), so a node holds one copy, as
theirs, and each worker keeps only its own ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .batching import epoch_work
from .batching.random import RandomEpoch
from .cache import epoch_key, shared_epoch
from .epoch import Epoch
from .resume import ResumePlan, resolve, state_dict
from .sampling import ShardLayout
from .settings import OrderSettings, OrderWorld, StreamWeights, is_int, refuse
from .weights import ResolvedWeights, resolve_weights


class MosaicOrder:
    """The sample order of StreamingDataset over streams whose shards hold
    ``samples_per_shard[stream]`` samples (shard by shard, in their index's order), weighted by
    ``weights`` (one :class:`StreamWeights` per stream; None: none weighted), with ``settings``.

    Sample ids are StreamingDataset's: stream after stream, each stream's shards in order.

    ``cache_dir`` (None: every process builds its own epoch): a folder the node's workers
    share, where an epoch is built once, saved and mapped by the others (cache.py; the files
    are the epoch's size x 8 bytes each and are left there).
    """

    def __init__(self, samples_per_shard: Sequence, weights: Sequence[StreamWeights] | None = None,
                 settings: OrderSettings | None = None, cache_dir: str | None = None):
        if not len(samples_per_shard):
            raise refuse("samples_per_shard", "at least one stream", "none")
        self.settings = settings if settings is not None else OrderSettings()
        self.layout = ShardLayout.of(samples_per_shard)
        for stream_id in range(self.layout.num_streams):
            sizes = self.layout.samples_per_shard[self.layout.shards_of(stream_id)]
            if not len(sizes) or (sizes < 1).any():
                # StreamingDataset refuses a stream without samples; MDS writes no empty shard.
                raise refuse(f"samples_per_shard[{stream_id}]", "shards of at least one sample each, at least one "
                             "shard", sizes.tolist())
        weights = list(weights) if weights is not None else [StreamWeights()] * self.layout.num_streams
        if len(weights) != self.layout.num_streams:
            raise refuse("weights", f"one per stream ({self.layout.num_streams})", len(weights))
        self.weights: ResolvedWeights = resolve_weights(self.layout.samples_per_stream(), weights,
                                                        self.settings.epoch_size, self.settings.shuffle_seed)
        self.cache_dir = cache_dir
        self._weights_given = tuple(weights)
        self._built: tuple[ResumePlan, np.ndarray] | None = None
        self._random: tuple[ResumePlan, RandomEpoch] | None = None

    @property
    def epoch_size(self) -> int:
        """Samples per epoch once weighted (StreamingDataset's ``epoch_size``)."""
        return self.weights.epoch_size

    def resume_point(self, world: OrderWorld, state: Mapping | None = None, epoch: int = 0) -> ResumePlan:
        """Epoch ``epoch`` for ``world``, or where ``state`` (a StreamingDataset state dict)
        resumes it: see resume.py."""
        if not is_int(epoch) or epoch < 0:
            raise refuse("epoch", "a non-negative integer", epoch)
        return resolve(self.settings, world, state, epoch)

    def epoch_work(self, plan: ResumePlan) -> np.ndarray:
        """The plan's epoch for its whole world: (nodes, ranks per node, workers per rank,
        batches per worker, batch size), -1 for padding, as StreamingDataset's
        ``generate_work``. Kept for the next call with the same plan; with ``cache_dir``, a
        read-only map of the node's file."""
        if self._built is None or self._built[0] != plan:
            self._built = None  # the last epoch is let go before the next is built
            if self.cache_dir is None:
                self._built = (plan, epoch_work(self._epoch(plan)))
            else:
                self._built = (plan, shared_epoch(self.cache_dir, self._cache_name("work", plan),
                                                  lambda: epoch_work(self._epoch(plan))))
        return self._built[1]

    def _cache_name(self, kind: str, plan: ResumePlan) -> str:
        return epoch_key(kind, self.layout.samples_per_shard, self.layout.first_shard_of_stream,
                         self._weights_given, self.settings, plan)

    def _epoch(self, plan: ResumePlan) -> Epoch:
        return Epoch(self.layout, self.weights, self.settings, plan)

    def worker_sample_ids(self, plan: ResumePlan, node: int, rank_of_node: int, worker_of_rank: int) -> np.ndarray:
        """The sample ids one DataLoader worker yields in the plan's epoch, in order (int64)."""
        world = plan.world
        for name, value, count in (("node", node, world.num_nodes), ("rank_of_node", rank_of_node, world.ranks_per_node),
                                   ("worker_of_rank", worker_of_rank, world.workers_per_rank)):
            if not is_int(value) or not 0 <= value < count:
                raise refuse(name, f"0 to {count - 1}", value)
        if self.settings.batching_method == "random":
            if self._random is None or self._random[0] != plan:
                self._random = None
                self._random = (plan, self._random_epoch(plan, node, rank_of_node, worker_of_rank))
            return self._random[1].worker_sample_ids(node, rank_of_node, worker_of_rank).astype(np.int64, copy=False)
        ids = self.epoch_work(plan)[node, rank_of_node, worker_of_rank].reshape(-1)
        return ids[ids != -1].astype(np.int64, copy=True)

    def _random_epoch(self, plan: ResumePlan, node: int, rank_of_node: int, worker_of_rank: int) -> RandomEpoch:
        if self.cache_dir is None:
            return RandomEpoch(self._epoch(plan))

        def build():
            built = RandomEpoch(self._epoch(plan))
            built.worker_places(node, rank_of_node, worker_of_rank)  # a refused deal before the shuffle, as theirs
            return built.shuffled_ids()

        return RandomEpoch(self._epoch(plan), shared_epoch(self.cache_dir, self._cache_name("random", plan), build))

    def state_dict(self, plan: ResumePlan, num_samples: int, from_beginning: bool) -> dict:
        """StreamingDataset's ``state_dict(num_samples, from_beginning)`` during the plan's epoch."""
        return state_dict(plan, num_samples, from_beginning)
