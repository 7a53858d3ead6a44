"""Every rank's rows in Megatron's global order, for accelerate and the Hugging Face Trainer,
which deal them out so that each process trains on exactly its MegatronPretrainingSampler rows.

A launcher that splits the data itself cannot be given one rank's stream (it would split it
again, rank_stream.py refuses that). It is given the whole: global batch g of
``micro_batch_size * world_size`` samples holds rank r's micro-batch at rows
``r * micro_batch_size ..``, and the global batches come in order, the last partial one dropped
(Megatron's drop_last), so the stream is positions ``consumed .. consumed + G * W * M - 1``
with ``G = (total - consumed) // (W * M)``. How accelerate deals (launchers.py) decides how
the rows are cut between DataLoader workers (each loader batch comes whole from one worker,
and the loader takes one of each worker in turn):

- dispatch (the default): process 0's loader must give loader batch k = rows
  ``k * B ..`` in order, so worker w makes loader batches w, w + K, ...; accelerate then
  joins N batches of B = M rows (or cuts one of B = N * M, ``split_batches``) and sends
  process p rows ``p * M ..``: rank p's micro-batch. The other processes read nothing.
- shard (``dispatch_batches=False``): each process's worker w makes whole global batches
  w, w + K, ..., of which ``IterableDatasetShard`` keeps the process's M rows; the rows of the
  other ranks are never read, a placeholder (None) stands in their place.

With one process and no accelerate (a plain DataLoader) the stream is the whole order, for
``world_size=1`` only (for more, it would give one process every rank's samples: refused).
The batch size accelerate's loader uses must be ``micro_batch_size`` (the Trainer's
``per_device_train_batch_size``), and accelerate's process count ``world_size``: both are
checked when accelerate first calls ``set_epoch``, before anything is read.

Resuming: the Trainer resumes a checkpoint by skipping the batches it trained on, which gives
the same batches afterwards; ``consumed_samples=`` starts a new run at Megatron's count.
"""

from __future__ import annotations

from ..checks import check_int
from ..errors import ParameterError
from . import launchers
from .rank_stream import MegatronRankStream

__all__ = ["MegatronGlobalStream", "megatron_global_stream"]


def megatron_global_stream(dataset, world_size: int, micro_batch_size: int, consumed_samples: int = 0,
                           gradient_accumulation_steps: int = 1) -> "MegatronGlobalStream":
    """Every data-parallel rank's rows of ``dataset`` in Megatron-LM's global order, for
    ``accelerator.prepare(DataLoader(stream, batch_size=micro_batch_size))`` or as the HF
    Trainer's ``train_dataset`` (``per_device_train_batch_size=micro_batch_size``) on
    ``world_size`` processes: each process trains on exactly
    ``MegatronPretrainingSampler(len(dataset), consumed_samples, micro_batch_size, rank,
    world_size)``'s samples, with any ``num_workers``. With ``gradient_accumulation_steps=A``
    (the Trainer's) it ends at a whole number of Megatron's global batches (``micro_batch_size x
    world_size x A`` samples), as Megatron-LM's training stops, where accelerate would otherwise
    take a last optimizer step of fewer micro-batches. See the module docstring."""
    return MegatronGlobalStream(dataset, world_size, micro_batch_size, consumed_samples, gradient_accumulation_steps)


class MegatronGlobalStream(MegatronRankStream):
    """What :func:`megatron_global_stream` returns: a torch ``IterableDataset``."""

    rank = None

    def __init__(self, dataset, world_size: int, micro_batch_size: int, consumed_samples: int = 0,
                 gradient_accumulation_steps: int = 1):
        self.world_size = check_int("world_size", world_size, 1)
        self._dealing = None  # how accelerate deals the rows, once it said (set_epoch)
        self._init_rows(dataset, micro_batch_size, consumed_samples, gradient_accumulation_steps)

    def __len__(self) -> int:
        """Rows of every rank: what accelerate divides by its process count."""
        return self.num_micro_batches() * self.global_batch_size

    def sample_positions(self, worker_id: int = 0, num_workers: int = 1):
        raise ParameterError("a global stream holds every rank's samples; megatron_rank_stream(...).sample_positions() "
                             "gives one rank's")

    # --- units: see rank_stream.py --------------------------------------------------------------

    def _unit_rows(self) -> int:
        dealing = self._dealing
        if dealing is None:
            return self.micro_batch_size
        if dealing.kind == "dispatch":
            return dealing.loader_batch_size  # M, or N * M with split_batches (checked in _dealt)
        return self.global_batch_size  # shard: a whole global batch, mostly placeholders

    def _unit_samples(self) -> int:
        return self._unit_rows()

    def _units(self, start: int, worker_id: int, num_workers: int, skip: int = 0):
        rows = self._unit_rows()
        global_batches = self._rounds(start)
        units = range(worker_id, global_batches * (self.global_batch_size // rows), num_workers)[skip:]
        dealing = self._dealing
        if dealing is not None and dealing.kind == "shard":  # a global batch: this process's rows, placeholders
            before = dealing.process_index * self.micro_batch_size
            after = rows - before - self.micro_batch_size
            for unit in units:
                first = start + unit * rows + before
                yield first, first + self.micro_batch_size, before, after
            return
        for unit in units:
            first = start + unit * rows
            yield first, first + rows, 0, 0

    # --- how accelerate deals ------------------------------------------------------------------

    def _dealt(self, dealing: launchers.Dealing) -> None:
        launchers.check_dealing(dealing, "megatron_global_stream", self.world_size, "micro_batch_size",
                                self.micro_batch_size)
        self._dealing = dealing

    def _begin(self, dealing: launchers.Dealing | None, batch_size: int | None, num_workers: int) -> bool:
        if dealing is not None:  # IterableDatasetShard iterates us (in a worker, or the main process)
            self._dealt(dealing)
        if self._dealing is None:
            if self.world_size > 1:
                raise ParameterError(
                    f"megatron_global_stream(world_size={self.world_size}) holds every rank's samples and is read "
                    "here without accelerate dealing them out (accelerator.prepare(DataLoader(...)) or the HF "
                    "Trainer): each process would train on all of them. In a loop of your own use "
                    "megatron_rank_stream(dataset, rank, world_size, micro_batch_size) on each rank")
        elif self._dealing.kind == "dispatch" and self._dealing.process_index != 0:
            return False  # accelerate reads process 0's loader only: nothing to read here
        if num_workers > 1:
            self._check_loader_batch_size(batch_size, num_workers)
        return True

    def _check_loader_batch_size(self, batch_size: int | None, num_workers: int) -> None:
        expected = self._unit_rows() if self._dealing is None or self._dealing.kind == "dispatch" \
            else self.micro_batch_size
        if batch_size is None or batch_size == expected:
            return
        raise ParameterError(
            f"DataLoader(batch_size={batch_size}, num_workers={num_workers}) over a megatron_global_stream of "
            f"micro_batch_size={self.micro_batch_size} would hand out samples out of Megatron's order (each loader "
            f"batch comes whole from one worker): use batch_size={expected} (with the HF Trainer, "
            f"per_device_train_batch_size={expected}), or num_workers=0")
