"""mosaic_rank_stream against mosaicml-streaming 0.13.0's StreamingDataset.

Fixtures are MDS folders written by MDSWriter whose ``id`` column is each sample's id in
StreamingDataset (stream after stream, shard after shard; test_mosaic_order.write_layout), so
the rows a loader yields name the samples. The expected ids are StreamingDataset's own: its
``_resume`` and ``generate_work`` for the world (test_mosaic_order.Theirs), dealt out as a
DataLoader takes its workers' batches; and, for the resumptions, a real StreamingDataset
iterated through real DataLoader workers. Each configuration is read as every rank of its
world, through ``torch.utils.data.DataLoader(stream, batch_size=B)`` with 0 and 2 workers, for
two epochs running, and after loading StreamingDataset's state (and ours loaded into it).
"""

import numpy as np
import pytest

import mosaic_oracle
from mmidx_builder.errors import MosaicOrderError, ParameterError
from mmidx_builder.mosaic.order import OrderSettings, OrderWorld, StreamWeights
from mosaic_oracle import environment
from test_mosaic_order import Theirs, dataloader_ids, in_dataloader_order, quiet, their_dataset, write_layout

SIZES = [[12, 1, 9], [7, 7, 3]]  # two streams, partial shards


@pytest.fixture(scope="module")
def mosaic_streaming():
    return mosaic_oracle.streaming_or_skip()


@pytest.fixture(scope="module")
def layout(mosaic_streaming, tmp_path_factory):
    return write_layout(tmp_path_factory.mktemp("mds"), SIZES)


@pytest.fixture(scope="module")
def loaded(layout, tmp_path_factory):
    """The two folders as this package loads them, prepared (Arrow) and streaming."""
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401  (registers the builders)

    cache = str(tmp_path_factory.mktemp("cache"))
    files = [f"{folder}/index.json" for folder in layout.folders]
    return {"arrow": load_dataset("mmidx", data_files=files, split="train", cache_dir=cache),
            "stream": load_dataset("mmidx", data_files=files, split="train", streaming=True, cache_dir=cache)}


def stream_of(dataset, settings: OrderSettings, weights, rank: int, world: OrderWorld, cache_dir=None):
    from mmidx_builder.training import mosaic_rank_stream

    kwargs = {name: getattr(settings, name) for name in ("shuffle", "shuffle_algo", "shuffle_seed", "shuffle_block_size",
                                                         "num_canonical_nodes", "partition_algo", "sampling_method",
                                                         "sampling_granularity", "batching_method", "epoch_size")}
    return mosaic_rank_stream(dataset, rank=rank, world_size=world.num_ranks, batch_size=settings.batch_size,
                              local_world_size=world.ranks_per_node, streams=weights, cache_dir=cache_dir, **kwargs)


def loader_ids(stream, batch_size: int, workers: int) -> list[int]:
    from torch.utils.data import DataLoader

    with quiet():
        loader = DataLoader(stream, batch_size=batch_size, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
        return [int(i) for batch in loader for i in batch["id"]]


def expected_ids(theirs: Theirs, world: OrderWorld, state, epoch: int, rank: int, batch_size: int) -> list[int]:
    """What StreamingDataset's workers of ``rank`` yield in ``epoch``, in a DataLoader's order."""
    _, work = theirs.epoch(world, state, epoch)
    mine = work[rank // world.ranks_per_node, rank % world.ranks_per_node]
    return in_dataloader_order([w.reshape(-1)[w.reshape(-1) != -1] for w in mine], batch_size)


def expected_steps(theirs: Theirs, world: OrderWorld, state, epoch: int, batch_size: int) -> list[list[int]]:
    """Each rank's ids in a DataLoader's order, cut where accelerate can deal them no further:
    at the first step (a batch of every rank) where some rank's batch is short."""
    _, work = theirs.epoch(world, state, epoch)
    per_rank = []
    for rank in range(world.num_ranks):
        mine = work[rank // world.ranks_per_node, rank % world.ranks_per_node]
        ids = [w.reshape(-1)[w.reshape(-1) != -1].tolist() for w in mine]
        cut = [[i[k:k + batch_size] for k in range(0, len(i), batch_size)] for i in ids]
        per_rank.append([b for turn in range(max(map(len, cut))) for b in (w[turn] for w in cut if turn < len(w))])
    steps = min(next((s for s, b in enumerate(r) if len(b) < batch_size), len(r)) for r in per_rank)
    return [[i for b in r[:steps] for i in b] for r in per_rank]


CONFIGS = [  # weights, settings, (nodes, ranks per node), source
    ([StreamWeights(proportion=0.7), StreamWeights(proportion=0.3)],
     OrderSettings(shuffle=True, batch_size=3, shuffle_block_size=8, epoch_size=40), (2, 1), "arrow"),
    (None, OrderSettings(shuffle=True, shuffle_algo="py1s", batch_size=2, batching_method="stratified"), (1, 2),
     "stream"),
    ([StreamWeights(repeat=1.5), StreamWeights(choose=9)],
     OrderSettings(shuffle=True, shuffle_algo="py2s", batch_size=2, batching_method="per_stream",
                   num_canonical_nodes=4), (2, 2), "stream"),
    (None, OrderSettings(batch_size=4, partition_algo="orig"), (1, 1), "arrow"),
]


@pytest.mark.parametrize("weights, settings, shape, source", CONFIGS)
def test_each_rank_and_worker_reads_streaming_datasets_order_two_epochs(
        mosaic_streaming, layout, loaded, weights, settings, shape, source):
    theirs = Theirs(their_dataset(mosaic_streaming, layout, weights or [StreamWeights()] * 2, settings))
    try:
        for workers in (0, 2):
            world = OrderWorld(*shape, max(workers, 1))
            for rank in range(world.num_ranks):
                stream = stream_of(loaded[source], settings, weights, rank, world)
                for epoch in (0, 1):
                    assert loader_ids(stream, settings.batch_size, workers) == expected_ids(
                        theirs, world, None, epoch, rank, settings.batch_size), (workers, rank, epoch)
    finally:
        theirs.release()


@pytest.mark.parametrize("config", [0, 1], ids=["random", "stratified"])
def test_a_node_shares_one_epoch_through_cache_dir_in_the_same_order(mosaic_streaming, layout, loaded, config,
                                                                    tmp_path):
    """With cache_dir, the first worker to ask saves the epoch's ids and the rank's other
    workers and the next rank map them: the same order, one file per epoch, not one per process."""
    weights, settings, shape, source = CONFIGS[config]
    theirs = Theirs(their_dataset(mosaic_streaming, layout, weights or [StreamWeights()] * 2, settings))
    try:
        world = OrderWorld(*shape, 2)
        for rank in range(world.num_ranks):
            stream = stream_of(loaded[source], settings, weights, rank, world, cache_dir=str(tmp_path))
            for epoch in (0, 1):
                assert loader_ids(stream, settings.batch_size, 2) == expected_ids(
                    theirs, world, None, epoch, rank, settings.batch_size), (rank, epoch)
    finally:
        theirs.release()
    assert len([p for p in tmp_path.iterdir() if p.suffix == ".npy"]) == 2  # epochs 0 and 1, for every process


# Resumed on one rank per node: a real StreamingDataset's workers wait for every rank of their node.
RESUMED = [  # weights, settings, saved on (nodes, ranks), resumed on (nodes, ranks), workers
    ([StreamWeights(proportion=0.7), StreamWeights(proportion=0.3)],
     OrderSettings(shuffle=True, batch_size=3, shuffle_block_size=8, epoch_size=40), (2, 2), (2, 1), 2),
    (None, OrderSettings(shuffle=True, shuffle_algo="py1br", batch_size=2, shuffle_block_size=6), (2, 1), (2, 1), 0),
]


@pytest.mark.parametrize("weights, settings, saved_on, resumed_on, workers", RESUMED)
def test_a_streaming_dataset_state_resumes_here_and_ours_resumes_there(
        mosaic_streaming, layout, loaded, weights, settings, saved_on, resumed_on, workers):
    weights_ = weights or [StreamWeights()] * 2
    theirs = Theirs(their_dataset(mosaic_streaming, layout, weights_, settings))
    try:
        saved = OrderWorld(*saved_on)
        state = theirs.state_dict(saved, None, 0, 2 * settings.batch_size * saved.num_ranks, True)
        world = OrderWorld(*resumed_on, max(workers, 1))
        for rank in range(world.num_ranks):
            stream = stream_of(loaded["arrow"], settings, weights, rank, world)
            stream.load_state_dict(state)
            assert stream.state_dict(5) == theirs.state_dict(world, state, 0, 5, False)
            # The rest of epoch 0, then epoch 1 from its start (the state is stale by then).
            assert loader_ids(stream, settings.batch_size, workers) == expected_ids(
                theirs, world, state, 0, rank, settings.batch_size)
            assert loader_ids(stream, settings.batch_size, workers) == expected_ids(
                theirs, world, state, 1, rank, settings.batch_size)
    finally:
        theirs.release()

    # Ours, taken part way with num_workers=0, loaded into a real StreamingDataset iterated by real workers.
    world = OrderWorld(*resumed_on, 1)
    stream = stream_of(loaded["arrow"], settings, weights, 0, world)
    rows = iter(stream)
    for _ in range(settings.batch_size):
        next(rows)
    ours = stream.state_dict()
    assert ours["sample_in_epoch"] == settings.batch_size * world.num_ranks and ours["epoch"] == 0
    for rank in range(world.num_ranks):
        resumed = stream_of(loaded["arrow"], settings, weights, rank, OrderWorld(*resumed_on, 2))
        resumed.load_state_dict(ours)
        dataset = their_dataset(mosaic_streaming, layout, weights_, settings)
        try:
            dataset.load_state_dict(ours)
            from streaming.base.world import World

            with environment(RANK=rank, WORLD_SIZE=world.num_ranks, LOCAL_RANK=rank % world.ranks_per_node,
                             LOCAL_WORLD_SIZE=world.ranks_per_node, NODE_RANK=rank // world.ranks_per_node):
                dataset._unique_rank_world = World.detect()
            dataset._parallel_rank_world = dataset._unique_rank_world.copy()
            assert loader_ids(resumed, settings.batch_size, 2) == dataloader_ids(dataset, settings.batch_size, 2)
        finally:
            mosaic_oracle._release(dataset)


def test_stateful_dataloader_worker_states_resume_where_the_loader_stopped(mosaic_streaming, layout, loaded):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    settings = OrderSettings(shuffle=True, batch_size=2, shuffle_block_size=8)
    world = OrderWorld(1, 1, 2)
    stream = stream_of(loaded["arrow"], settings, None, 0, world)
    loader = stateful.StatefulDataLoader(stream, batch_size=2, num_workers=2, multiprocessing_context="fork")
    batches = iter(loader)
    seen = [int(i) for _ in range(3) for i in next(batches)["id"]]
    state = loader.state_dict()
    resumed = stream_of(loaded["arrow"], settings, None, 0, world)
    resumed.load_state_dict(state)
    assert resumed.state_dict(0)["sample_in_epoch"] == 3 * 2
    whole = loader_ids(stream_of(loaded["arrow"], settings, None, 0, world), 2, 2)
    assert seen + loader_ids(resumed, 2, 2) == whole


def test_misuse_is_refused_with_the_fix(loaded):
    import datasets
    from torch.utils.data import DataLoader

    from mmidx_builder.training import mosaic_rank_stream

    with pytest.raises(ParameterError, match=r"rank must lie in \[0, world_size\) = \[0, 2\), got 2"):
        mosaic_rank_stream(loaded["arrow"], rank=2, world_size=2, batch_size=2)
    with pytest.raises(ParameterError, match="world_size=3 is not a multiple of local_world_size=2"):
        mosaic_rank_stream(loaded["arrow"], rank=0, world_size=3, batch_size=2, local_world_size=2)
    with pytest.raises(MosaicOrderError, match="shuffle_algo"):
        mosaic_rank_stream(loaded["arrow"], rank=0, world_size=1, batch_size=2, shuffle=True, shuffle_algo="py3")
    stream = mosaic_rank_stream(loaded["arrow"], rank=0, world_size=1, batch_size=2)
    for workers in (0, 2):
        with pytest.raises(ParameterError, match=r"only DataLoader\(batch_size=2\) gives its order"):
            list(DataLoader(stream, batch_size=3, num_workers=workers, multiprocessing_context="fork" if workers else None))
    with pytest.raises(ParameterError, match="streams= names folders"):
        mosaic_rank_stream(loaded["arrow"], rank=0, world_size=1, batch_size=2, streams={"nope": {"proportion": 1}})
    with pytest.raises(ParameterError, match="this dataset was not loaded by this package's builders"):
        mosaic_rank_stream(datasets.Dataset.from_dict({"id": [1]}), rank=0, world_size=1, batch_size=2)
    with pytest.raises(ParameterError, match="no longer has one row per sample id"):
        mosaic_rank_stream(loaded["arrow"].select(range(5)), rank=0, world_size=1, batch_size=2)


def test_streams_by_folder_name_and_epochs_by_set_epoch(mosaic_streaming, layout, loaded):
    settings = OrderSettings(shuffle=True, batch_size=2, shuffle_block_size=8)
    weights = [StreamWeights(proportion=1), StreamWeights(proportion=3)]
    by_name = stream_of(loaded["arrow"], settings, {"stream0": {"proportion": 1}, "stream1": {"proportion": 3}}, 0,
                        OrderWorld(1, 1))
    by_list = stream_of(loaded["arrow"], settings, weights, 0, OrderWorld(1, 1))
    by_name.set_epoch(3)
    by_list.sample_ids(3)
    assert loader_ids(by_name, 2, 0) == by_list.sample_ids(3).tolist()
    assert np.array_equal(by_name.sample_ids(4), np.array(loader_ids(by_name, 2, 0)))


# --- mosaic_global_stream: every rank's batches, dealt out by accelerate ---------------------------

def global_stream_of(dataset, settings: OrderSettings, weights, world: OrderWorld):
    from mmidx_builder.training import mosaic_global_stream

    kwargs = {name: getattr(settings, name) for name in ("shuffle", "shuffle_algo", "shuffle_seed", "shuffle_block_size",
                                                         "num_canonical_nodes", "partition_algo", "sampling_method",
                                                         "sampling_granularity", "batching_method", "epoch_size")}
    return mosaic_global_stream(dataset, world_size=world.num_ranks, batch_size=settings.batch_size,
                                local_world_size=world.ranks_per_node, streams=weights, **kwargs)


def sharded_ids(stream, process: int, num_processes: int, batch_size: int, workers: int) -> list[int]:
    """What accelerate's non-dispatching loader gives ``process`` (prepare_data_loader's
    wrapping without a process group: IterableDatasetShard, then the process's DataLoader)."""
    from accelerate.data_loader import IterableDatasetShard
    from torch.utils.data import DataLoader

    shard = IterableDatasetShard(stream, batch_size=batch_size, num_processes=num_processes, process_index=process)
    shard.set_epoch(stream._epochs.next())
    with quiet():
        loader = DataLoader(shard, batch_size=batch_size, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
        return [int(i) for batch in loader for i in batch["id"]]


def dispatched_ids(stream, num_processes: int, batch_size: int, workers: int, split: bool) -> list[list[int]]:
    """What accelerate's DataLoaderDispatcher hands each process: process 0's loader read,
    ``num_processes`` loader batches joined (or one of ``num_processes * batch_size`` rows,
    split_batches) and cut in ``batch_size`` rows, process p taking the p-th. The dealing is
    told to the stream as accelerate's set_epoch tells it (launchers.py reads it from the frame;
    the launched test, tests/test_training_launchers.py, runs the real dispatcher)."""
    from torch.utils.data import DataLoader

    from mmidx_builder.training.launchers import Dealing

    loader_batch = batch_size * (num_processes if split else 1)
    stream._dealt(Dealing("dispatch", num_processes, 0, loader_batch, batch_size, batch_size * num_processes, split))
    with quiet():
        loader = DataLoader(stream, batch_size=loader_batch, num_workers=workers,
                            multiprocessing_context="fork" if workers else None)
        rows = [int(i) for batch in loader for i in batch["id"]]
    step = batch_size * num_processes
    assert len(rows) % step == 0
    return [[i for s in range(0, len(rows), step) for i in rows[s + p * batch_size:s + (p + 1) * batch_size]]
            for p in range(num_processes)]


@pytest.mark.parametrize("weights, settings, shape, source", CONFIGS)
def test_accelerate_gives_each_process_of_a_global_stream_streaming_datasets_batches(
        mosaic_streaming, layout, loaded, weights, settings, shape, source):
    """Sharded (IterableDatasetShard, in process) and dispatched, with and without
    split_batches, 0 and 2 workers, two epochs: process p gets StreamingDataset's rank p's
    batches on a world of as many workers, up to the first step where some rank's is short."""
    pytest.importorskip("accelerate")
    theirs = Theirs(their_dataset(mosaic_streaming, layout, weights or [StreamWeights()] * 2, settings))
    batch = settings.batch_size
    try:
        for workers in (0, 2):
            world = OrderWorld(*shape, max(workers, 1))
            want = [expected_steps(theirs, world, None, epoch, batch) for epoch in (0, 1)]
            assert all(len(ids) >= batch for ids in want[0])
            for process in range(world.num_ranks):
                stream = global_stream_of(loaded[source], settings, weights, world)
                for epoch in (0, 1):
                    stream.set_epoch(epoch)
                    assert sharded_ids(stream, process, world.num_ranks, batch, workers) == want[epoch][process], \
                        (workers, process, epoch)
                assert stream.rank_sample_ids(1, process, max(workers, 1)).tolist() == want[1][process]
            for split in (False, True):
                stream = global_stream_of(loaded[source], settings, weights, world)
                for epoch in (0, 1):
                    stream.set_epoch(epoch)
                    got = dispatched_ids(stream, world.num_ranks, batch, workers, split)
                    assert got == want[epoch], (workers, split, epoch)
    finally:
        theirs.release()


def test_a_global_stream_resumes_from_a_streaming_dataset_state_on_another_world(mosaic_streaming, layout, loaded):
    """A Composer checkpoint's state taken on 2 nodes of 2 ranks, resumed by accelerate on 2
    processes (2 nodes of 1): the rest of the epoch as StreamingDataset deals it there."""
    pytest.importorskip("accelerate")
    weights, settings, _, _, _ = RESUMED[0]
    theirs = Theirs(their_dataset(mosaic_streaming, layout, weights, settings))
    try:
        state = theirs.state_dict(OrderWorld(2, 2), None, 0, 2 * settings.batch_size * 4, True)
        world = OrderWorld(2, 1, 2)
        want = expected_steps(theirs, world, state, 0, settings.batch_size)
        stream = global_stream_of(loaded["arrow"], settings, weights, world)
        stream.load_state_dict(state)
        stream.set_epoch(0)
        assert dispatched_ids(stream, 2, settings.batch_size, 2, False) == want
        assert stream.state_dict(6) == theirs.state_dict(world, state, 0, 6, False)
    finally:
        theirs.release()


def test_a_global_stream_misused_is_refused_with_the_fix(loaded):
    pytest.importorskip("accelerate")
    settings = OrderSettings(shuffle=True, batch_size=3)
    world = OrderWorld(1, 2, 1)
    stream = global_stream_of(loaded["arrow"], settings, None, world)
    with pytest.raises(ParameterError, match=r"without accelerate dealing them out.*mosaic_rank_stream"):
        next(iter(stream))
    with pytest.raises(ParameterError, match="make it with world_size=3"):
        sharded_ids(stream, 0, 3, 3, 0)
    with pytest.raises(ParameterError, match="per_device_train_batch_size=6, which split_batches cuts in 2"):
        from mmidx_builder.training.launchers import Dealing

        stream._dealt(Dealing("dispatch", 2, 0, 3, 1, 3, True))
    with pytest.raises(ParameterError, match="pass num_samples="):
        stream.state_dict()
    with pytest.raises(ParameterError, match="OrderSettings' fields"):
        from mmidx_builder.training import mosaic_global_stream

        mosaic_global_stream(loaded["arrow"], 2, 3, shuffle_sead=1)
    alone = global_stream_of(loaded["arrow"], settings, None, OrderWorld(1, 1, 1))
    assert [row["id"] for row in alone] == alone.rank_sample_ids(0, 0).tolist()
