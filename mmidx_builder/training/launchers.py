"""How accelerate (and so the Hugging Face ``Trainer``) deals a torch ``IterableDataset``'s rows
out to its processes, as the stream being dealt sees it.

``accelerator.prepare(DataLoader(stream, batch_size=B))`` on N > 1 processes (accelerate 1.x,
read in ``accelerate/data_loader.py``; the Trainer's ``get_train_dataloader`` calls it) wraps
the loader one of two ways, and both call ``stream.set_epoch(epoch)`` in each process's main
process before that process's loader starts its workers:

- ``DataLoaderDispatcher`` (the default for an ``IterableDataset``, ``dispatch_batches``):
  process 0 alone reads the stream; it takes N loader batches in a row, concatenates them and
  sends process p the p-th B rows (``split_batches=True``: one loader batch, cut in N). The
  other processes start their loaders too but never read them. ``set_epoch`` is called from
  ``DataLoaderDispatcher.set_epoch``.
- ``IterableDatasetShard`` (``dispatch_batches=False``): every process reads the whole
  stream, inside each of its loader workers, buffers ``B * N`` rows (``split_batches``: B) and
  keeps its own slice of them. ``set_epoch`` is called from ``IterableDatasetShard.set_epoch``
  and the stream's ``__iter__`` from its ``__iter__``.

:func:`from_set_epoch` and :func:`from_iter` recognise the caller by its frame (accelerate has
no hook for this); a rank stream refuses both wrappers, a global stream arranges its rows for
each (global_stream.py).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..errors import ParameterError


@dataclass(frozen=True)
class Dealing:
    """How accelerate hands this stream's rows out: ``kind`` "dispatch" or "shard", over
    ``num_processes`` processes, this process being ``process_index``; ``loader_batch_size``
    rows per loader batch, ``process_rows`` of which (a slice of each ``group_rows`` rows read)
    reach each process per step."""

    kind: str
    num_processes: int
    process_index: int
    loader_batch_size: int | None
    process_rows: int | None
    group_rows: int | None
    split_batches: bool


def check_dealing(dealing: Dealing, stream: str, world_size: int, batch_name: str, batch_size: int) -> None:
    """Refuses a deal that would not give each process one rank's batch of a global stream made
    as ``stream(world_size=..., batch_name=batch_size)``: another process count, or another
    number of rows per process per step; the message names the setting that works."""
    if dealing.num_processes != world_size:
        raise ParameterError(
            f"{stream}(world_size={world_size}) is dealt out by accelerate over {dealing.num_processes} processes: "
            f"make it with world_size={dealing.num_processes} (with the HF Trainer, TrainingArguments.world_size; "
            "with accelerate, accelerator.num_processes)")
    if dealing.process_rows != batch_size:
        wanted = batch_size * (dealing.num_processes if dealing.split_batches else 1)
        other = "" if dealing.process_rows is None else f", or make the stream with {batch_name}={dealing.process_rows}"
        # The Trainer's loader batch is per_device_train_batch_size, which split_batches then cuts.
        cut = f", which split_batches cuts in {dealing.num_processes}" if dealing.split_batches else ""
        raise ParameterError(
            f"accelerate gives each process {dealing.process_rows} rows per step from a loader of "
            f"batch_size={dealing.loader_batch_size}, but the stream's {batch_name} is {batch_size}: use "
            f"batch_size={wanted} (with the HF Trainer, per_device_train_batch_size={wanted}{cut}){other}")


def _caller(depth: int):
    """The object whose method is ``depth`` frames above the caller of this function, if it is
    one of accelerate's data loader classes; None otherwise."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return None
    owner = frame.f_locals.get("self")
    kind = type(owner)  # not owner.__class__: accelerate's DataLoaderAdapter reports the wrapped class there
    if kind.__module__.startswith("accelerate.") and kind.__name__ in ("DataLoaderDispatcher", "IterableDatasetShard"):
        return owner
    return None


def _dealing(owner) -> Dealing:
    if type(owner).__name__ == "IterableDatasetShard":
        split = bool(owner.split_batches)
        processes = int(owner.num_processes)
        group = owner.batch_size if split else owner.batch_size * processes
        return Dealing("shard", processes, int(owner.process_index), owner.batch_size,
                       group // processes, group, split)
    state = owner.state
    split = bool(owner.split_batches)
    batch = owner.batch_size  # the base DataLoader's, through DataLoaderAdapter.__getattr__
    processes = int(state.num_processes)
    rows = None if batch is None else (batch // processes if split else batch)
    group = None if batch is None else (batch if split else batch * processes)
    return Dealing("dispatch", processes, int(state.process_index), batch, rows, group, split)


def from_set_epoch() -> Dealing | None:
    """Called in a stream's ``set_epoch``: how accelerate deals its rows, or None when the
    caller is not accelerate."""
    owner = _caller(2)  # 0: this function, 1: the stream's set_epoch, 2: who called it
    return None if owner is None else _dealing(owner)


def from_iter() -> Dealing | None:
    """Called at the first step of a stream's ``__iter__`` generator: the
    ``IterableDatasetShard`` iterating it, or None."""
    owner = _caller(2)  # 0: this function, 1: the generator, 2: who called next() on it
    return None if owner is None else _dealing(owner)


__all__ = ["Dealing", "check_dealing", "from_iter", "from_set_epoch"]
