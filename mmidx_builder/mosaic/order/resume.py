"""Where an epoch starts: a fresh epoch, or a resumption from a StreamingDataset state dict.

Follows mosaicml-streaming 0.13.0's ``StreamingDataset._resume``, ``_set_shuffle_block_size``
and ``state_dict`` (dataset.py), for a StreamingDataset iterated once after it was made (and
after ``load_state_dict(state)`` when there is a state): the first ``_resume`` fixes its
canonical nodes and block size for good, so a later epoch of one object gives what this gives
for that epoch only while its world and state stay the same.

    no state, or state["epoch"] < epoch   epoch as given, from its first sample; canonical
                                          nodes as set, else 64 x physical nodes for py1s and
                                          py2s, else the physical nodes; the seed as set
    otherwise                             the state's epoch, sample_in_epoch, canonical nodes,
                                          seed and initial physical nodes (None if absent)

and the block size, when not set, ``max(4_000_000 // num_canonical_nodes, 1 << 18)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .settings import OrderSettings, OrderWorld, is_int, refuse

STATE_KEYS = ("epoch", "sample_in_epoch", "num_canonical_nodes", "shuffle_seed")


@dataclasses.dataclass(frozen=True)
class ResumePlan:
    """An epoch for a world, resolved as StreamingDataset resolves it at ``iter``: which epoch,
    from which sample of it (the samples before it are not dealt again), with which canonical
    nodes, seed, initial physical nodes (None for a run not resumed) and shuffle block size."""

    world: OrderWorld
    epoch: int
    sample_in_epoch: int
    num_canonical_nodes: int
    shuffle_seed: int
    initial_physical_nodes: int | None
    shuffle_block_size: int


def _default_canonical_nodes(settings: OrderSettings, world: OrderWorld) -> int:
    if settings.num_canonical_nodes:  # 0 reads as unset, as `not self.num_canonical_nodes` there
        return settings.num_canonical_nodes
    return 64 * world.num_nodes if settings.shuffle_algo in ("py1s", "py2s") else world.num_nodes


def _block_size(settings: OrderSettings, num_canonical_nodes: int) -> int:
    if settings.shuffle_block_size is not None:
        return settings.shuffle_block_size
    return max(4_000_000 // num_canonical_nodes, 1 << 18)


def resolve(settings: OrderSettings, world: OrderWorld, state: Mapping | None, epoch: int) -> ResumePlan:
    """The plan of epoch ``epoch`` (the epoch the run is at: 0, then 1 ...) for ``world``,
    resuming from ``state`` (what ``StreamingDataset.state_dict`` returned) unless it is None
    or of an earlier epoch."""
    if state is not None:
        missing = [key for key in STATE_KEYS if key not in state]
        if missing:
            raise refuse("state", f"a StreamingDataset state dict with {', '.join(STATE_KEYS)}",
                         f"no {', '.join(missing)}")
    if state is None or state["epoch"] < epoch:
        canonical = _default_canonical_nodes(settings, world)
        plan = ResumePlan(world, epoch, 0, canonical, settings.shuffle_seed, None, _block_size(settings, canonical))
    else:
        canonical = state["num_canonical_nodes"]
        if not is_int(canonical) or canonical < 1:
            # StreamingDataset: "`num_canonical_nodes` can never be None" (0 divides by zero).
            raise refuse("state['num_canonical_nodes']", "a positive integer", canonical)
        plan = ResumePlan(world, state["epoch"], state["sample_in_epoch"], canonical, state["shuffle_seed"],
                          state.get("initial_physical_nodes"), _block_size(settings, canonical))
    for name in ("epoch", "sample_in_epoch", "shuffle_seed"):
        value = getattr(plan, name)
        if not is_int(value) or value < 0:
            raise refuse(name, "a non-negative integer", value)
    return plan


def state_dict(plan: ResumePlan, num_samples: int, from_beginning: bool) -> dict:
    """What ``StreamingDataset.state_dict(num_samples, from_beginning)`` returns during the
    plan's epoch: ``num_samples`` counted from the epoch's start (``from_beginning``) or from
    where this run resumed it."""
    sample_in_epoch = num_samples if from_beginning else plan.sample_in_epoch + num_samples
    initial = plan.world.num_nodes if plan.initial_physical_nodes is None else plan.initial_physical_nodes
    return {"epoch": plan.epoch, "sample_in_epoch": sample_in_epoch, "num_canonical_nodes": plan.num_canonical_nodes,
            "shuffle_seed": plan.shuffle_seed, "initial_physical_nodes": initial}
