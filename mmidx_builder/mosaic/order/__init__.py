"""MosaicML's own sample order, pure numpy: which sample ids each node, rank and DataLoader
worker of a world reads, in which order, per epoch and on resumption, exactly as
mosaicml-streaming 0.13.0's ``StreamingDataset`` yields them (its ``_each_sample_id``).

    from mmidx_builder.mosaic.order import MosaicOrder, OrderSettings, StreamWeights, OrderWorld

    order = MosaicOrder(samples_per_shard=[np.array([100, 100, 37]), np.array([5, 1])],  # per stream
                        weights=[StreamWeights(proportion=0.75), StreamWeights(proportion=0.25)],
                        settings=OrderSettings(shuffle=True, batch_size=8))   # StreamingDataset's defaults
    order.epoch_size                      # samples per epoch once weighted
    world = OrderWorld(num_nodes=2, ranks_per_node=2, workers_per_rank=2)
    plan = order.resume_point(world, state=None, epoch=0)     # or state=a StreamingDataset state_dict()
    ids = order.worker_sample_ids(plan, node=0, rank_of_node=1, worker_of_rank=0)   # int64, in order
    order.state_dict(plan, num_samples=96, from_beginning=False)   # StreamingDataset.state_dict's dict
    order.epoch_work(plan)                # the whole epoch, (nodes, ranks, workers, batches, batch), -1 pads

``resume_point`` returns a :class:`ResumePlan`: the epoch, sample_in_epoch, canonical nodes,
seed, initial physical nodes and block size that StreamingDataset's ``_resume`` settles on for
that world (a state of an earlier epoch than ``epoch`` is stale and ignored, as there). What
StreamingDataset refuses (settings, weights, a resumption on a node count it cannot deal) is
refused with :class:`~mmidx_builder.errors.MosaicOrderError` (a ParameterError).

Not modelled: ``replication`` (always None here), and a StreamingDataset object iterated again
after its world or state changed (its first ``_resume`` fixes canonical nodes and block size
for the object's life; see resume.py).

The data flow, one module each, every one naming the function of theirs it follows:

    settings.py   OrderSettings, StreamWeights, OrderWorld: StreamingDataset's arguments and checks
    weights.py    each stream's choose per epoch (Stream.apply_weights)
    sampling.py   each shard's choose, shuffle units, big id -> sample id (get_sampling, resample_streams)
    partition.py  big ids dealt to nodes, ranks, workers, batches (get_partitions: orig, relaxed)
    worker_partition.py  one worker's share of that deal, as formulas of its places
    shuffle/      the epoch's permutation of big ids (naive, py1s, py1br, py1e, py2s)
    epoch.py      one epoch's inputs and the three steps above, as a batching method calls them
    batching/     random, stratified, per_stream, device_per_stream (generate_work)
    resume.py     ResumePlan, _resume's resolution and state_dict
    work.py       MosaicOrder: the corpus, and each worker's ids (_get_work, _each_sample_id)
    cache.py      an epoch's array built once per node, saved as .npy, mapped by its workers
                  (StreamingDataset's _share_work / _attach_work do this in shared memory)

Cost: see work.py (with random batching a worker deals only its share, but the resampling
and the shuffle are the whole epoch's, built once per plan and process, or once per node with
``MosaicOrder(..., cache_dir=...)``, as StreamingDataset's local leader builds them once per
node). May import the foundation (errors) and numpy only.
"""

from __future__ import annotations

from .resume import ResumePlan
from .settings import OrderSettings, OrderWorld, StreamWeights
from .work import MosaicOrder

__all__ = ["MosaicOrder", "OrderSettings", "OrderWorld", "ResumePlan", "StreamWeights"]
