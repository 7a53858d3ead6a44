"""MosaicML's sample order (mmidx_builder/mosaic/order/) against mosaicml-streaming 0.13.0's
StreamingDataset itself (tests/mosaic_oracle.py), id for id, for every node, rank and worker.

The oracle's order is taken the way the library computes it: a real ``StreamingDataset`` over
MDS folders written by ``streaming.MDSWriter`` (one folder per stream, shards of chosen sizes),
then, for each world, its own ``_resume`` (after its own ``load_state_dict`` when resuming) and
its own ``generate_work``, which ``_get_work`` calls to build the whole epoch for every node,
rank and worker; a worker's ids are its row with the -1 padding skipped (``_each_sample_id``).
A few configurations are also iterated for real (``iter(StreamingDataset)``, and after
``load_state_dict``), to show that this shortcut is the iteration.

The random table is seeded (SEED): shards of random sizes with 1-sample ones, 1-4 streams
weighted by proportion, repeat, choose or not at all, epoch_size, every shuffle algorithm and
off, block sizes, seeds, canonical nodes given or not, 1-4 nodes x ranks x workers, both
partitions, both samplings, granularity, the four batchings, epochs 0-2 and resumptions at
random samples, on other node counts than the run that saved the state. Where StreamingDataset
fails, ours must refuse with MosaicOrderError (and never where it does not).
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import os
import warnings

import numpy as np
import pytest

import mosaic_oracle
from mmidx_builder.errors import MosaicOrderError
from mmidx_builder.mosaic.order import MosaicOrder, OrderSettings, OrderWorld, StreamWeights

SEED = 44_2026
CONFIGS = 360
WORLDS_PER_CONFIG = 3
ALGOS = ("naive", "py1s", "py1br", "py1e", "py2s")
BATCHINGS = ("random", "stratified", "per_stream", "device_per_stream")
# A shard's first sample carries PAD bytes, so that two never fit under SIZE_LIMIT and every
# shard starts where the layout says (MAX_SHARD small samples fit after one).
PAD, SIZE_LIMIT, MAX_SHARD = 4000, 6000, 40
# The attributes StreamingDataset's _resume sets on the object: restored between worlds.
RESUMED = ("num_canonical_nodes", "shuffle_seed", "shuffle_block_size", "initial_physical_nodes")


@pytest.fixture(scope="module")
def streaming():
    return mosaic_oracle.streaming_or_skip()


@dataclasses.dataclass
class Layout:
    folders: list[str]
    sizes: list[list[int]]  # samples per shard, per stream


def write_layout(root, sizes: list[list[int]]) -> Layout:
    """One MDS folder per stream, whose shards hold ``sizes`` samples; each sample's ``id`` is
    its sample id in StreamingDataset (stream after stream, shard after shard)."""
    folders, first = [], 0
    for stream, shard_sizes in enumerate(sizes):
        folder = os.path.join(str(root), f"stream{stream}")
        samples = [{"id": first + sum(shard_sizes[:shard]) + i, "pad": b"\0" * PAD if i == 0 else b""}
                   for shard, size in enumerate(shard_sizes) for i in range(size)]
        index = mosaic_oracle.write_mds(folder, {"id": "int", "pad": "bytes"}, samples, size_limit=SIZE_LIMIT)
        assert [shard["samples"] for shard in index["shards"]] == list(shard_sizes)
        folders.append(folder)
        first += sum(shard_sizes)
    return Layout(folders, sizes)


def random_sizes(rng) -> list[list[int]]:
    return [[1 if rng.random() < 0.2 else int(rng.integers(2, MAX_SHARD + 1)) for _ in range(rng.integers(1, 7))]
            for _ in range(rng.integers(1, 5))]


FIXED_LAYOUTS = {"one": [[7]], "single": [[1]], "two": [[5, 3, 1], [4, 4]], "three": [[12, 1, 9], [2], [20, 20]]}


@pytest.fixture(scope="module")
def layouts(streaming, tmp_path_factory) -> dict:
    rng = np.random.default_rng(SEED)
    found = {name: write_layout(tmp_path_factory.mktemp(name), sizes) for name, sizes in FIXED_LAYOUTS.items()}
    for index in range(14):
        found[index] = write_layout(tmp_path_factory.mktemp(f"layout{index}"), random_sizes(rng))
    return found


# --- the oracle ----------------------------------------------------------------------------

@contextlib.contextmanager
def quiet():
    """StreamingDataset warns and logs freely about small epochs; nothing of it is checked."""
    logger = logging.getLogger("streaming")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def stream_kwargs(weight: StreamWeights) -> dict:
    return {name: value for name, value in dataclasses.asdict(weight).items() if value is not None}


def their_dataset(streaming, layout: Layout, weights, settings: OrderSettings):
    """StreamingDataset over the layout, made as one process of one node; raises what it raises."""
    streams = [streaming.Stream(local=folder, **stream_kwargs(w)) for folder, w in zip(layout.folders, weights)]
    kwargs = dataclasses.asdict(settings)
    with mosaic_oracle._one_process_world(), quiet():
        return streaming.StreamingDataset(streams=streams, **kwargs)


class Theirs:
    """One StreamingDataset, asked for the epochs of many worlds as its local leader builds them."""

    def __init__(self, dataset):
        from streaming.base.batching import generate_work
        from streaming.base.world import World

        self.dataset, self.generate_work, self.World = dataset, generate_work, World
        self.made = {name: getattr(dataset, name) for name in RESUMED}
        self.rank_world = dataset._parallel_rank_world

    def reset(self, state=None):
        """Back to the object as made, with ``state`` loaded (its load_state_dict) if any."""
        dataset = self.dataset
        for name, value in self.made.items():
            setattr(dataset, name, value)
        dataset._parallel_rank_world = self.rank_world
        shm = getattr(dataset, "_resume_shm", None)
        if shm is not None:
            atexit.unregister(shm.cleanup)
            shm.cleanup()
            del dataset._resume_shm
        if state is not None:
            dataset.load_state_dict(state)

    def world(self, world: OrderWorld):
        return self.World(world.num_nodes, world.ranks_per_node, world.workers_per_rank, 0)

    def epoch(self, world: OrderWorld, state, epoch: int):
        """What _get_work builds in the local leader: (resolved plan, the whole epoch)."""
        self.reset(state)
        dataset, world_ = self.dataset, self.world(world)
        with quiet():
            epoch, sample_in_epoch = dataset._resume(world_, epoch)
            resolved = (epoch, sample_in_epoch, *(getattr(dataset, name) for name in RESUMED))
            return resolved, self.generate_work(dataset.batching_method, dataset, world_, epoch, sample_in_epoch)

    def state_dict(self, world: OrderWorld, state, epoch: int, num_samples: int, from_beginning: bool) -> dict:
        """``state_dict`` of the object during ``epoch`` on ``world`` (after ``state`` was loaded)."""
        self.reset(state)
        self.dataset._parallel_rank_world = self.World(world.num_nodes, world.ranks_per_node, 1, 0)
        self.dataset.next_epoch = epoch + 1
        with quiet():
            return self.dataset.state_dict(num_samples, from_beginning)

    def release(self):
        self.reset()
        mosaic_oracle._release(self.dataset)


# What StreamingDataset fails with (a fragment of its message) -> the setting our refusal names.
CAUSES = {
    "Either canonical or physical nodes must be evenly divisible": "num_canonical_nodes:",
    "For `device_per_stream` batching, num_canonical_nodes must be divisible": "num_canonical_nodes:",
    "The number of samples assigned to a canonical node is 0": "num_canonical_nodes:",
    "high <= 0": "shuffle_block_size:",  # numpy's integers(), drawing py1br's stagger
    "low >= high": "shuffle_block_size:",  # numpy's integers(), drawing a block size
    "Samples from stream": "shuffle_block_size:",
    "because the portion of this stream in the global batch": "batch_size:",
    "is not evenly divisible by the initial total number of devices": "batch_size:",
    "does not have an adequate number of samples": "stream ",
    "need at least one array to concatenate": "weights:",  # resample_streams, nothing chosen
    "Resuming further into the dataset": "sample_in_epoch:",
    "cannot reshape array": "num_physical_nodes:",
    "could not broadcast input array": "num_canonical_nodes:",  # orig's padding of too short rows  # the relaxed partition's re-cut
}


def assert_same_cause(their_error, our_error, where: str):
    causes = [setting for fragment, setting in CAUSES.items() if fragment in str(their_error)]
    assert causes, f"{where}: StreamingDataset fails in a way this table does not know: {their_error!r}"
    assert str(our_error).startswith(causes[0]), f"{where}: theirs {their_error!r}, ours {our_error!r}"


def ours_or_error(make):
    try:
        return make(), None
    except MosaicOrderError as error:
        return None, error


def theirs_or_error(make):
    try:
        return make(), None
    except Exception as error:  # noqa: BLE001  (whatever StreamingDataset fails with)
        return None, error


def plan_fields(plan) -> tuple:
    return (plan.epoch, plan.sample_in_epoch, *(getattr(plan, name) for name in RESUMED))


def assert_same_epoch(order: MosaicOrder, plan, work: np.ndarray, where: str) -> int:
    """Every worker's ids equal to the oracle's row, -1 skipped; returns how many workers."""
    world = plan.world
    assert work.shape[:3] == (world.num_nodes, world.ranks_per_node, world.workers_per_rank), where
    ours = order.epoch_work(plan)
    assert ours.shape == work.shape and np.array_equal(ours, work), f"{where}: the epochs differ"
    for node in range(world.num_nodes):
        for rank in range(world.ranks_per_node):
            for worker in range(world.workers_per_rank):
                theirs = work[node, rank, worker].reshape(-1)
                got = order.worker_sample_ids(plan, node, rank, worker)
                assert got.dtype == np.int64
                assert np.array_equal(got, theirs[theirs != -1]), f"{where}: node {node} rank {rank} worker {worker}"
    return world.num_nodes * world.ranks_per_node * world.workers_per_rank


# --- the random table --------------------------------------------------------------------------

def random_weights(rng, sizes) -> tuple[list[StreamWeights], int | None]:
    total = sum(map(sum, sizes))
    kind = rng.choice(["proportion", "absolute", "none", "none with epoch_size"])
    if kind == "proportion":
        weights = [StreamWeights(proportion=round(float(rng.uniform(0.2, 3)), 2)) for _ in sizes]
        return weights, (None if rng.random() < 0.4 else int(rng.integers(1, 3 * total)))
    if kind == "absolute":
        def one(stream):
            n = sum(stream)
            pick = rng.integers(3)
            if pick == 0:
                return StreamWeights(repeat=round(float(rng.uniform(0.3, 3)), 2))
            return StreamWeights(choose=int(rng.integers(1, 3 * n))) if pick == 1 else StreamWeights()
        return [one(stream) for stream in sizes], None
    return [StreamWeights() for _ in sizes], (None if kind == "none" else int(rng.integers(1, 3 * total)))


def random_world(rng) -> OrderWorld:
    return OrderWorld(int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 5)))


def random_settings(rng, epoch_size) -> OrderSettings:
    return OrderSettings(
        shuffle=bool(rng.random() < 0.8), shuffle_algo=str(rng.choice(ALGOS)), shuffle_seed=int(rng.integers(0, 10_000)),
        shuffle_block_size=[None, int(rng.integers(2, 9)), int(rng.integers(9, 80)), 1 << 18][rng.integers(4)],
        num_canonical_nodes=None if rng.random() < 0.4 else int(rng.choice([1, 2, 3, 4, 6, 8])),
        batch_size=int(rng.integers(1, 7)), partition_algo=str(rng.choice(["orig", "relaxed"])),
        sampling_method=str(rng.choice(["balanced", "fixed"])), sampling_granularity=int(rng.choice([1, 1, 2, 5])),
        batching_method=str(rng.choice(BATCHINGS)), epoch_size=epoch_size)


def test_every_worker_of_random_configurations_reads_what_streaming_dataset_yields(streaming, layouts):
    rng = np.random.default_rng(SEED + 1)
    counts = dict(compared=0, workers=0, refused=0, states=0, resumed_elsewhere=0, configs_made=0, made_refused=0)
    covered = set()
    random_layouts = [layout for name, layout in layouts.items() if isinstance(name, int)]
    for config in range(CONFIGS):
        layout = random_layouts[config % len(random_layouts)]
        weights, epoch_size = random_weights(rng, layout.sizes)
        settings = random_settings(rng, epoch_size)
        where = f"config {config}: {layout.sizes} {weights} {settings}"
        dataset, their_error = theirs_or_error(lambda: their_dataset(streaming, layout, weights, settings))
        order, our_error = ours_or_error(lambda: MosaicOrder([np.array(s) for s in layout.sizes], weights, settings))
        assert (their_error is None) == (our_error is None), f"{where}: theirs {their_error!r}, ours {our_error!r}"
        if their_error is not None:
            counts["made_refused"] += 1
            continue
        counts["configs_made"] += 1
        theirs = Theirs(dataset)
        try:
            assert order.epoch_size == dataset.epoch_size, where
            for _ in range(WORLDS_PER_CONFIG):
                world, epoch = random_world(rng), int(rng.integers(0, 3))
                state = None
                if rng.random() < 0.5:
                    # A state saved by a run on another world, part way into an epoch.
                    initial = random_world(rng)
                    saved_epoch = int(rng.integers(0, 3))
                    num_samples = int(rng.integers(0, order.epoch_size + 2 * initial.num_ranks * settings.batch_size))
                    from_beginning = bool(rng.random() < 0.5)
                    state = theirs.state_dict(initial, None, saved_epoch, num_samples, from_beginning)
                    saving = order.resume_point(initial, None, saved_epoch)
                    assert order.state_dict(saving, num_samples, from_beginning) == state, where
                    counts["states"] += 1
                    counts["resumed_elsewhere"] += initial.num_nodes != world.num_nodes
                    epoch = int(rng.integers(0, saved_epoch + 2))  # an older state is stale
                case = f"{where}, world {world}, epoch {epoch}, state {state}"
                resolved, their_error = theirs_or_error(lambda: theirs.epoch(world, state, epoch))
                plan, our_error = ours_or_error(lambda: order.resume_point(world, state, epoch))
                if plan is not None:
                    _, our_error = ours_or_error(lambda: order.epoch_work(plan))
                if their_error is not None or our_error is not None:
                    assert their_error is not None and our_error is not None, \
                        f"{case}: theirs {their_error!r}, ours {our_error!r}"
                    assert_same_cause(their_error, our_error, case)
                    counts["refused"] += 1
                    continue
                (their_plan, work) = resolved
                assert plan_fields(plan) == their_plan, case
                counts["workers"] += assert_same_epoch(order, plan, work, case)
                counts["compared"] += 1
                covered.add((settings.shuffle and settings.shuffle_algo, settings.batching_method,
                             settings.partition_algo, state is not None))
                if state is not None:
                    num_samples, from_beginning = int(rng.integers(0, 50)), bool(rng.random() < 0.5)
                    assert order.state_dict(plan, num_samples, from_beginning) == \
                        theirs.state_dict(world, state, plan.epoch, num_samples, from_beginning), case
        finally:
            theirs.release()
    print(f"\nMosaicML order, {CONFIGS} random configurations: {counts}, {len(covered)} of "
          f"{6 * 4 * 2 * 2} (shuffle algo or off) x batching x partition x resumed combinations")
    # The table must prove something: most cases compared, every algorithm and batching met.
    assert counts["compared"] >= WORLDS_PER_CONFIG * CONFIGS * 0.6, counts
    assert {c[0] for c in covered} == {False, *ALGOS} and {c[1] for c in covered} == set(BATCHINGS), covered
    assert counts["resumed_elsewhere"] >= 40, counts
