"""MosaicML's sample order (mmidx_builder/mosaic/order/) against mosaicml-streaming 0.13.0's
StreamingDataset itself (tests/mosaic_oracle.py), id for id, for every node, rank and worker.

The oracle's order is taken the way the library computes it: a real ``StreamingDataset`` over
MDS folders written by ``streaming.MDSWriter`` (one folder per stream, shards of chosen sizes),
then, for each world, its own ``_resume`` (after its own ``load_state_dict`` when resuming) and
its own ``generate_work``, which ``_get_work`` calls to build the whole epoch for every node,
rank and worker; a worker's ids are its row with the -1 padding skipped (``_each_sample_id``).
A few configurations are also iterated for real (``iter(StreamingDataset)``, and after
``load_state_dict``; and through DataLoader worker processes), to show that this shortcut is
the iteration.

The random table is seeded (SEED): shards of random sizes with 1-sample ones, 1-4 streams
weighted by proportion, repeat, choose or not at all, epoch_size, every shuffle algorithm and
off, block sizes, seeds, canonical nodes given or not, 1-4 nodes x ranks x workers, both
partitions, both samplings, granularity, the four batchings, epochs 0-2 and resumptions at
random samples, on other node counts than the run that saved the state. Each world's whole
epoch is compared, and each worker's ids (random batching computes them without the rest of the
epoch). Where StreamingDataset fails, ours must refuse with MosaicOrderError naming the setting
its failure is about (CAUSES), and never where it does not. The table prints its counts
(``pytest -s``): about 1,050 (configuration, world, resume point) cases compared, 15,800
workers, 385 refusals, on two cores in about 30 s with the oracle's import and fixtures.
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
from mmidx_builder.mosaic.order import sampling as order_sampling
from mmidx_builder.mosaic.order.batching import random as order_random

SEED = 44_2026
CONFIGS = 480
WORLDS_PER_CONFIG = 3
ALGOS = ("naive", "py1s", "py1br", "py1e", "py2s")
BATCHINGS = ("random", "stratified", "per_stream", "device_per_stream")
# A shard's first sample carries PAD bytes, so that two never fit under SIZE_LIMIT and every
# shard starts where the layout says (up to MAX_SHARD samples, the small ones 16 bytes each).
PAD, SIZE_LIMIT, MAX_SHARD = 4000, 7000, 120
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
    return [[1 if rng.random() < 0.2 else int(rng.integers(2, 41)) for _ in range(rng.integers(1, 7))]
            for _ in range(rng.integers(1, 5))]


FIXED_LAYOUTS = {"one": [[7]], "single": [[1]], "two": [[5, 3, 1], [4, 4]], "three": [[12, 1, 9], [2], [20, 20]]}


@pytest.fixture(scope="module")
def layouts(streaming, tmp_path_factory) -> dict:
    rng = np.random.default_rng(SEED)
    found = {name: write_layout(tmp_path_factory.mktemp(name), sizes) for name, sizes in FIXED_LAYOUTS.items()}
    for index in range(14):
        found[index] = write_layout(tmp_path_factory.mktemp(f"layout{index}"), random_sizes(rng))
    # Two larger ones: many shards, granules and blocks across shards, canonical nodes of hundreds.
    for index in (14, 15):
        sizes = [[int(rng.integers(1, MAX_SHARD + 1)) for _ in range(rng.integers(15, 40))] for _ in range(1 + index % 2)]
        found[index] = write_layout(tmp_path_factory.mktemp(f"layout{index}"), sizes)
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
    "cannot convert float NaN to integer": "weights:",  # a stream's proportion of an epoch of nothing
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


def our_refusal(order: MosaicOrder, plan, where: str):
    """How ours refuses the plan's epoch (None if it does not): built whole, and for one
    worker (random batching deals only that worker's share), both alike."""
    _, whole = ours_or_error(lambda: order.epoch_work(plan))
    _, worker = ours_or_error(lambda: order.worker_sample_ids(plan, 0, 0, 0))
    assert str(whole) == str(worker), f"{where}: the whole epoch {whole!r}, one worker {worker!r}"
    return whole


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
        shuffle_block_size=[None, int(rng.integers(0, 9)), int(rng.integers(9, 80)), 1 << 18][rng.integers(4)],
        # 0 canonical nodes reads as None there, as does an epoch_size of 0
        num_canonical_nodes=None if rng.random() < 0.4 else int(rng.choice([0, 1, 2, 3, 4, 6, 8])),
        batch_size=int(rng.integers(1, 7)), partition_algo=str(rng.choice(["orig", "relaxed"])),
        sampling_method=str(rng.choice(["balanced", "fixed"])), sampling_granularity=int(rng.choice([1, 1, 2, 5])),
        batching_method=str(rng.choice(BATCHINGS)), epoch_size=0 if epoch_size is None and rng.random() < 0.1 else epoch_size)


def test_every_worker_of_random_configurations_reads_what_streaming_dataset_yields(streaming, layouts, monkeypatch):
    # Epoch-sized arrays are worked on in chunks of 4M elements: small ones here, so that the
    # chunks' seams are crossed (and a chunk reaches the rest of a fractional repeat) all the time.
    for module in (order_sampling, order_random):
        monkeypatch.setattr(module, "CHUNK", 37)
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
            for name in ("proportion", "repeat", "choose"):  # what apply_weights left on each Stream
                assert np.array_equal(getattr(order.weights, name), [getattr(s, name) for s in dataset.streams],
                                      equal_nan=True), where
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
                    if rng.random() < 0.15:
                        del state["initial_physical_nodes"]  # as saved before StreamingDataset kept it
                    counts["states"] += 1
                    counts["resumed_elsewhere"] += initial.num_nodes != world.num_nodes
                    epoch = int(rng.integers(0, saved_epoch + 2))  # an older state is stale
                case = f"{where}, world {world}, epoch {epoch}, state {state}"
                resolved, their_error = theirs_or_error(lambda: theirs.epoch(world, state, epoch))
                plan, our_error = ours_or_error(lambda: order.resume_point(world, state, epoch))
                if plan is not None:
                    our_error = our_refusal(order, plan, case)
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


# --- the real iteration ------------------------------------------------------------------------

def iterate_as_rank(dataset, num_nodes: int, rank: int) -> list[int]:
    """The ids ``iter(dataset)`` yields (samples' ``id`` column) as rank ``rank`` of ``num_nodes``
    nodes of one rank each, without DataLoader workers. The dataset was made as one process (a
    world of several would start torch.distributed and wait for the others); its world becomes
    the one ``World.detect()`` reads from that rank's environment. With one rank per node every
    rank leads its node, as the one process did, so nothing made with the one-process world
    differs."""
    from streaming.base.world import World

    with mosaic_oracle.environment(RANK=rank, WORLD_SIZE=num_nodes, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, NODE_RANK=rank):
        world = World.detect()
    assert (world.num_nodes, world.node, world.ranks_per_node, world.workers_per_rank) == (num_nodes, rank, 1, 1)
    dataset._unique_rank_world, dataset._parallel_rank_world = world, world.copy()
    with quiet():
        return [int(sample["id"]) for sample in dataset]


ITERATED = [  # layout, weights, settings, nodes
    ("three", [StreamWeights(proportion=0.5), StreamWeights(proportion=0.2), StreamWeights(proportion=0.3)],
     OrderSettings(shuffle=True, batch_size=4, shuffle_block_size=16), 2),
    ("two", [StreamWeights(repeat=1.5), StreamWeights(choose=3)],
     OrderSettings(shuffle=True, shuffle_algo="py1br", batch_size=2, shuffle_block_size=6, num_canonical_nodes=4), 2),
    ("three", None, OrderSettings(shuffle=True, shuffle_algo="py2s", batch_size=3, batching_method="per_stream",
                                  epoch_size=200), 1),
    ("three", [StreamWeights(proportion=1), StreamWeights(proportion=1), StreamWeights(proportion=2)],
     OrderSettings(shuffle=True, shuffle_algo="py1s", batch_size=2, batching_method="stratified",
                   partition_algo="orig", sampling_method="fixed", sampling_granularity=3), 3),
    ("two", None, OrderSettings(batch_size=2, batching_method="device_per_stream", num_canonical_nodes=2), 2),
]


@pytest.mark.parametrize("layout_name, weights, settings, nodes", ITERATED)
def test_iterating_streaming_dataset_yields_each_ranks_ids_two_epochs_and_after_a_resumption(
        streaming, layouts, layout_name, weights, settings, nodes):
    """``iter(StreamingDataset)`` itself, two epochs running, as every rank of a world of one
    rank per node; then, resumed from a state saved part way on another node count, after
    ``load_state_dict``."""
    layout = layouts[layout_name]
    weights = weights or [StreamWeights()] * len(layout.sizes)
    order = MosaicOrder([np.array(s) for s in layout.sizes], weights, settings)
    world = OrderWorld(nodes, 1, 1)
    for rank in range(nodes):
        dataset = their_dataset(streaming, layout, weights, settings)
        try:
            for epoch in (0, 1):
                plan = order.resume_point(world, None, epoch)
                assert iterate_as_rank(dataset, nodes, rank) == order.worker_sample_ids(plan, rank, 0, 0).tolist()
        finally:
            mosaic_oracle._release(dataset)
    saved_on = OrderWorld(2 * nodes, 1, 1)  # its canonical nodes divide among ours, as StreamingDataset needs
    state = order.state_dict(order.resume_point(saved_on, None, 1), num_samples=3 * saved_on.num_ranks,
                             from_beginning=True)
    resumed = order.resume_point(world, state, 0)
    assert (resumed.epoch, resumed.sample_in_epoch, resumed.initial_physical_nodes) == (1, 3 * saved_on.num_ranks, saved_on.num_nodes)
    for rank in range(nodes):
        dataset = their_dataset(streaming, layout, weights, settings)
        try:
            dataset.load_state_dict(state)
            ids = iterate_as_rank(dataset, nodes, rank)
            assert ids == order.worker_sample_ids(resumed, rank, 0, 0).tolist()
            assert dataset.state_dict(5, False) == order.state_dict(resumed, 5, False)
        finally:
            mosaic_oracle._release(dataset)


def dataloader_ids(dataset, batch_size: int, workers: int) -> list[int]:
    """The ids a torch DataLoader with ``workers`` worker processes (forked, each with its own
    copy of the dataset, as in training) yields over the dataset: its batches in turn."""
    from torch.utils.data import DataLoader

    with quiet():  # torch warns of more workers than this machine's cores
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, multiprocessing_context="fork")
        return [int(i) for batch in loader for i in batch["id"]]


def in_dataloader_order(per_worker: list[np.ndarray], batch_size: int) -> list[int]:
    """Workers' ids as a DataLoader yields them: one batch of each worker in turn, a worker
    that has run out skipped."""
    batches = [[ids[i:i + batch_size].tolist() for i in range(0, len(ids), batch_size)] for ids in per_worker]
    return [i for turn in range(max(map(len, batches))) for worker in batches if turn < len(worker)
            for i in worker[turn]]


@pytest.mark.parametrize("nodes, workers, resumed", [(2, 2, False), (1, 3, True)])
def test_dataloader_workers_of_each_rank_read_what_ours_gives_them(streaming, layouts, torch, nodes, workers,
                                                                   resumed):
    """Real DataLoader worker processes over StreamingDataset (each calls ``_get_work`` and
    takes its worker's row), for every rank of a world of one rank per node."""
    layout = layouts["three"]
    weights = [StreamWeights(proportion=0.5), StreamWeights(proportion=0.2), StreamWeights(proportion=0.3)]
    settings = OrderSettings(shuffle=True, batch_size=3, shuffle_block_size=10, epoch_size=90)
    order = MosaicOrder([np.array(s) for s in layout.sizes], weights, settings)
    world = OrderWorld(nodes, 1, workers)
    state = None
    if resumed:
        state = order.state_dict(order.resume_point(OrderWorld(2, 1, 2), None, 0), num_samples=12, from_beginning=True)
    plan = order.resume_point(world, state, 0)
    for rank in range(nodes):
        dataset = their_dataset(streaming, layout, weights, settings)
        try:
            if state is not None:
                dataset.load_state_dict(state)
            from streaming.base.world import World

            with mosaic_oracle.environment(RANK=rank, WORLD_SIZE=nodes, LOCAL_RANK=0, LOCAL_WORLD_SIZE=1, NODE_RANK=rank):
                dataset._unique_rank_world = World.detect()  # as iterate_as_rank, before the workers fork
            dataset._parallel_rank_world = dataset._unique_rank_world.copy()
            ours = [order.worker_sample_ids(plan, rank, 0, worker) for worker in range(workers)]
            assert dataloader_ids(dataset, settings.batch_size, workers) == in_dataloader_order(ours, settings.batch_size)
        finally:
            mosaic_oracle._release(dataset)


# --- refusals ------------------------------------------------------------------------------------

W = OrderWorld
REFUSALS = [  # id, layout, weights (Stream kwargs), settings, world, state, epoch, their words, our setting
    ("sampling method", "two", None, dict(sampling_method="random"), None, None, 0,
     "Invalid sampling method", "sampling_method:"),
    ("granularity 0", "two", None, dict(sampling_granularity=0), None, None, 0,
     "`sampling_granularity` must be a positive integer", "sampling_granularity:"),
    ("batching method", "two", None, dict(batching_method="mixed"), None, None, 0,
     "Invalid batching method", "batching_method:"),
    ("negative seed", "two", None, dict(shuffle_seed=-1), None, None, 0, "`shuffle_seed` must be", "shuffle_seed:"),
    ("negative epoch_size", "two", None, dict(epoch_size=-5), None, None, 0, "Epoch size cannot be negative",
     "epoch_size:"),
    ("two weights on a stream", "two", [dict(proportion=1, repeat=2), dict(proportion=1)], {}, None, None, 0,
     "At most one of", "StreamWeights:"),
    ("negative repeat", "two", [dict(repeat=-1), dict()], {}, None, None, 0, "must be non-negative",
     "StreamWeights.repeat:"),
    ("relative and absolute", "two", [dict(proportion=1), dict(choose=3)], {}, None, None, 0,
     "Relative (`proportion`) and absolute", "weights[1]:"),
    ("epoch_size with absolute weights", "two", [dict(repeat=2), dict()], dict(epoch_size=10), None, None, 0,
     "Only provide `choose` when weighting streams relatively", "epoch_size:"),
    ("no batch_size", "two", None, dict(batch_size=None), W(1, 1, 1), None, 0, "Please pass `batch_size`",
     "batch_size:"),
    ("unknown partition", "two", None, dict(partition_algo="mixed", batch_size=2), W(1, 1, 1), None, 0, "mixed",
     "partition_algo:"),
    ("unknown shuffle", "two", None, dict(shuffle=True, shuffle_algo="py1b", batch_size=2), W(1, 1, 1), None, 0,
     "py1b", "shuffle_algo:"),
    ("orig, 3 canonical on 2 nodes", "three", None, dict(num_canonical_nodes=3, partition_algo="orig", batch_size=2),
     W(2, 1, 1), None, 0, "Either canonical or physical nodes must be evenly divisible", "num_canonical_nodes:"),
    ("relaxed resumed, global batch vs initial devices", "three", None, dict(batch_size=1), W(3, 1, 2),
     dict(epoch=0, sample_in_epoch=4, num_canonical_nodes=2, shuffle_seed=9176, initial_physical_nodes=2), 0,
     "is not evenly divisible by the initial total number of devices", "batch_size:"),
    ("resumed past the epoch", "two", None, dict(batch_size=2), W(2, 2, 1),
     dict(epoch=0, sample_in_epoch=40, num_canonical_nodes=2, shuffle_seed=9176, initial_physical_nodes=2), 0,
     "Resuming further into the dataset", "sample_in_epoch:"),
    ("state without canonical nodes", "two", None, dict(batch_size=2), W(1, 1, 1),
     dict(epoch=0, sample_in_epoch=0, num_canonical_nodes=None, shuffle_seed=1), 0, "can never be None",
     "state['num_canonical_nodes']:"),
    ("device_per_stream, 3 canonical on 2 nodes", "two", None,
     dict(batching_method="device_per_stream", num_canonical_nodes=3, batch_size=1), W(2, 1, 1), None, 0,
     "num_canonical_nodes must be divisible by physical nodes", "num_canonical_nodes:"),
    ("device_per_stream, a stream's block share 0", "two", None,
     dict(batching_method="device_per_stream", shuffle=True, shuffle_block_size=1, batch_size=1), W(1, 1, 1), None, 0,
     "are not being used", "shuffle_block_size:"),
    ("device_per_stream, no full device batch", "two", [dict(), dict(choose=1)],
     dict(batching_method="device_per_stream", batch_size=4), W(1, 1, 1), None, 0,
     "does not have an adequate number of samples", "stream 1:"),
    ("per_stream, no full global batch", "two", [dict(), dict(choose=1)],
     dict(batching_method="per_stream", batch_size=4), W(1, 2, 1), None, 0,
     "does not have an adequate number of samples", "stream 1:"),
    ("stratified, a stream's portion 0", "three", [dict(proportion=0.9), dict(proportion=0.01), dict(proportion=0.09)],
     dict(batching_method="stratified", batch_size=2), W(1, 1, 1), None, 0, "because the portion of this stream",
     "batch_size:"),
    ("py1e, canonical nodes without samples", "single", None,
     dict(shuffle=True, num_canonical_nodes=2, batch_size=1), W(1, 1, 1), None, 0,
     "The number of samples assigned to a canonical node is 0", "num_canonical_nodes:"),
    ("py1e, block 0", "one", None, dict(shuffle=True, shuffle_block_size=0, batch_size=1), W(1, 1, 1), None, 0,
     "high <= 0", "shuffle_block_size:"),
    ("py1br, block 1", "one", None, dict(shuffle=True, shuffle_algo="py1br", shuffle_block_size=1, batch_size=1),
     W(1, 1, 1), None, 0, "high <= 0", "shuffle_block_size:"),
    ("nothing chosen", "two", [dict(choose=0), dict(choose=0)], dict(batch_size=1), W(1, 1, 1), None, 0,
     "need at least one array to concatenate", "weights:"),
    ("orig, rows too short to pad", "one", None, dict(num_canonical_nodes=1, partition_algo="orig", batch_size=1),
     W(6, 1, 1), None, 0, "could not broadcast", "num_canonical_nodes:"),
]


@pytest.mark.parametrize("layout_name, weights, settings, world, state, epoch, their_words, our_setting",
                         [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_what_streaming_dataset_refuses_is_refused_with_a_typed_error(
        streaming, layouts, layout_name, weights, settings, world, state, epoch, their_words, our_setting):
    layout = layouts[layout_name]
    weights = weights or [{}] * len(layout.sizes)

    def theirs():
        streams = [streaming.Stream(local=folder, **w) for folder, w in zip(layout.folders, weights)]
        with mosaic_oracle._one_process_world(), quiet():
            dataset = streaming.StreamingDataset(streams=streams, **settings)
        oracle = Theirs(dataset)
        try:
            if world is None:
                return
            if settings.get("batch_size") is None:
                with mosaic_oracle._one_process_world(), quiet():
                    next(iter(dataset))  # _get_work's own check, on the real iteration
            oracle.epoch(world, state, epoch)
        finally:
            oracle.release()

    def ours():
        order = MosaicOrder([np.array(s) for s in layout.sizes], [StreamWeights(**w) for w in weights],
                            OrderSettings(**settings))
        if world is not None:
            error = our_refusal(order, order.resume_point(world, state, epoch), "ours")
            if error is not None:
                raise error

    with pytest.raises(Exception) as their_error:
        theirs()
    assert their_words in str(their_error.value), repr(their_error.value)
    with pytest.raises(MosaicOrderError) as our_error:
        ours()
    assert str(our_error.value).startswith(our_setting), str(our_error.value)


EPOCH_SIZES = ["40", "0.04k", " 4.35K", "0.0000435m", "1e3", "-5k", "k", "abck", "4.2", "", "0k", 37.9, 0, 41, True, -3]


def test_epoch_size_as_streaming_dataset_reads_it_abbreviations_included(streaming, layouts):
    """``epoch_size="10k"``, floats, falsy values: the epoch ours resolves is StreamingDataset's
    (number_abbrev_to_int's float arithmetic included), and what it refuses is refused."""
    layout = layouts["three"]
    weights = [StreamWeights(proportion=0.5), StreamWeights(proportion=0.2), StreamWeights(proportion=0.3)]
    for raw in EPOCH_SIZES:
        try:
            settings = OrderSettings(shuffle=True, batch_size=3, epoch_size=raw)
            ours = MosaicOrder([np.array(s) for s in layout.sizes], weights, settings).epoch_size
        except MosaicOrderError as error:
            ours = error
        streams = [streaming.Stream(local=folder, **stream_kwargs(w)) for folder, w in zip(layout.folders, weights)]
        try:
            with mosaic_oracle._one_process_world(), quiet():
                dataset = streaming.StreamingDataset(streams=streams, shuffle=True, batch_size=3, epoch_size=raw)
            theirs = dataset.epoch_size
            mosaic_oracle._release(dataset)
        except (ValueError, TypeError) as error:
            theirs = error
        if isinstance(theirs, Exception) or isinstance(raw, bool):  # True: theirs 1; refused here, as a mistake
            assert isinstance(ours, MosaicOrderError) and "epoch_size:" in str(ours), (raw, theirs, ours)
        else:
            assert ours == theirs, raw
