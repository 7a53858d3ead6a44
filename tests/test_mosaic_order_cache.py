"""The per-node epoch cache of mosaic/order (cache.py): with ``cache_dir`` every worker reads
the same ids as without it, the epoch is built once and then only mapped, and a file is named
by everything that decides it. Exactness against StreamingDataset itself is
test_mosaic_order.py's; this compares the two paths of ours."""

from __future__ import annotations

import os

import numpy as np
import pytest

from mmidx_builder.mosaic.order import MosaicOrder, OrderSettings, OrderWorld
from mmidx_builder.mosaic.order.epoch import Epoch

SIZES = [np.array([117, 100, 100, 3, 58]), np.array([41, 7])]  # a partial last shard, a tiny one
WORLD = OrderWorld(num_nodes=2, ranks_per_node=2, workers_per_rank=3)


def every_worker(order: MosaicOrder, plan) -> list[np.ndarray]:
    world = plan.world
    return [order.worker_sample_ids(plan, node, rank, worker) for node in range(world.num_nodes)
            for rank in range(world.ranks_per_node) for worker in range(world.workers_per_rank)]


@pytest.mark.parametrize("batching", ["random", "stratified", "per_stream"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_cached_epoch_gives_every_worker_the_same_ids(tmp_path, batching, shuffle):
    settings = OrderSettings(shuffle=shuffle, batch_size=4, batching_method=batching)
    plain = MosaicOrder(SIZES, settings=settings)
    expected = every_worker(plain, plain.resume_point(WORLD, epoch=1))
    for _ in range(2):  # built by the first order, mapped by the second
        cached = MosaicOrder(SIZES, settings=settings, cache_dir=str(tmp_path))
        got = every_worker(cached, cached.resume_point(WORLD, epoch=1))
        for mine, theirs in zip(got, expected):
            np.testing.assert_array_equal(mine, theirs)
    assert len([name for name in os.listdir(tmp_path) if name.endswith(".npy")]) == 1


def test_a_cached_epoch_is_mapped_not_built_again(tmp_path, monkeypatch):
    settings = OrderSettings(shuffle=True, batch_size=4)
    first = MosaicOrder(SIZES, settings=settings, cache_dir=str(tmp_path))
    plan = first.resume_point(WORLD)
    expected = first.worker_sample_ids(plan, 1, 0, 2)

    def refuse_to_build(*args, **kwargs):
        raise AssertionError("the epoch was resampled again")

    monkeypatch.setattr(Epoch, "resample", refuse_to_build)
    second = MosaicOrder(SIZES, settings=settings, cache_dir=str(tmp_path))
    np.testing.assert_array_equal(second.worker_sample_ids(second.resume_point(WORLD), 1, 0, 2), expected)


def test_another_epoch_seed_or_world_is_another_file(tmp_path):
    def files_after(settings: OrderSettings, world: OrderWorld, epoch: int) -> int:
        order = MosaicOrder(SIZES, settings=settings, cache_dir=str(tmp_path))
        order.worker_sample_ids(order.resume_point(world, epoch=epoch), 0, 0, 0)
        return len([name for name in os.listdir(tmp_path) if name.endswith(".npy")])

    settings = OrderSettings(shuffle=True, batch_size=4)
    assert files_after(settings, WORLD, 0) == 1
    assert files_after(settings, WORLD, 1) == 2
    assert files_after(OrderSettings(shuffle=True, batch_size=4, shuffle_seed=1), WORLD, 1) == 3
    assert files_after(settings, OrderWorld(1, 2, 3), 1) == 4
    assert files_after(settings, WORLD, 1) == 4
