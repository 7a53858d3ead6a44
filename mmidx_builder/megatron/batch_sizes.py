"""The batch sizes of a Megatron-LM command line, checked as Megatron-LM checks them before
any data is read, and the global batch size it derives when none is given.

Megatron-LM (``validate_args`` in ``megatron/training/arguments.py`` and the micro-batch
calculator ``set_global_variables`` builds from megatron-core, at core_v0.16.1 and core_v0.19.0):

- the world size is ``WORLD_SIZE`` (what the launcher sets); it must be divisible by the model
  parallel size, tensor x pipeline x context parallel; the quotient is the data-parallel size;
- ``--micro-batch-size`` must be positive; ``--global-batch-size`` defaults to it times the
  data-parallel size, must be positive and divisible by it times the data-parallel size
  (unless ``--decrease-batch-size-if-needed`` or ``--rampup-batch-size``, under which the
  calculator does otherwise);
- since core_v0.19, ``--eval-global-batch-size`` (default: the global batch size) must be
  divisible by ``--eval-micro-batch-size`` (default: the micro-batch size) times the
  data-parallel size.

The samples do not depend on the micro-batch size, so a command line without
``--micro-batch-size`` (which Megatron-LM requires) is read here without these checks; and where
``WORLD_SIZE`` is not set (a dataset made outside the launcher) the checks that need the world
size are made for every data-parallel size at once (divisible by the micro-batch size).
"""

from __future__ import annotations

import os

from ..errors import ParameterError

# The arguments validate_args derives the data-parallel size from (core_v0.16.1 and core_v0.19.0);
# --tensor-parallel-num-weight-shards (core_v0.19) adds a factor, not followed here.
PARALLEL_SIZES = ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size")


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def world_size() -> tuple[int | None, str | None]:
    """``WORLD_SIZE`` as a number, or (None, why not)."""
    world = os.environ.get("WORLD_SIZE")
    if world is None:
        return None, "the world size is not known here (no WORLD_SIZE: not run under torchrun or another launcher)"
    if not world.strip().isdigit() or int(world) < 1:
        return None, f"WORLD_SIZE is {world!r}, not a whole number of at least 1"
    return int(world), None


def data_parallel_size(args) -> int | None:
    """WORLD_SIZE over the model-parallel size (refused where it does not divide), None where
    WORLD_SIZE is not set or the size is not followed here."""
    world, _ = world_size()
    if world is None or args.tensor_parallel_num_weight_shards is not None:
        return None
    model = 1
    for flag in PARALLEL_SIZES:
        size = getattr(args, _dest(flag))
        if size is not None and size < 1:
            raise ParameterError(f"megatron_args: {flag} is {size}, expected at least 1")
        model *= size or 1
    if world % model:
        raise ParameterError(f"megatron_args: WORLD_SIZE={world} is not divisible by the model-parallel size {model} "
                             "(tensor x pipeline x context parallel sizes; Megatron-LM refuses it)")
    return world // model


def derived_global_batch_size(args, tokens=()) -> int:
    """Megatron-LM's ``validate_args`` without ``--global-batch-size``: ``--micro-batch-size``
    times the data-parallel size."""
    world, why = world_size()
    if args.micro_batch_size is None:
        why = "--micro-batch-size is not given either"
    elif why is None and args.tensor_parallel_num_weight_shards is not None:
        why = "--tensor-parallel-num-weight-shards is not followed here"
    if why is not None:
        raise ParameterError("megatron_args: --global-batch-size is not given; Megatron-LM then uses --micro-batch-size "
                             "x the data-parallel size (WORLD_SIZE over the tensor, pipeline and context parallel "
                             f"sizes), but {why}: give --global-batch-size")
    return args.micro_batch_size * data_parallel_size(args)


def check_batch_sizes(args, tokens, version: str) -> None:
    """Refuses, with Megatron-LM's reason, batch sizes Megatron-LM refuses (module docstring)."""
    for flag in ("--micro-batch-size", "--global-batch-size", "--eval-micro-batch-size", "--eval-global-batch-size"):
        value = getattr(args, _dest(flag))
        if value is not None and value < 1:
            raise ParameterError(f"megatron_args: {flag} is {value}, expected at least 1 (Megatron-LM asserts it)")
    if args.micro_batch_size is None:
        return
    parallel = data_parallel_size(args)
    where = ("" if parallel is None else f" x the data-parallel size {parallel} (WORLD_SIZE={world_size()[0]} over "
             "the tensor, pipeline and context parallel sizes)")
    unit = args.micro_batch_size * (parallel or 1)
    ramped = args.decrease_batch_size_if_needed or args.rampup_batch_size is not None
    if args.global_batch_size is not None and not ramped and args.global_batch_size % unit:
        raise ParameterError(f"megatron_args: --global-batch-size {args.global_batch_size} is not divisible by "
                             f"--micro-batch-size {args.micro_batch_size}{where}: Megatron-LM refuses it (a global "
                             "batch is a whole number of micro-batches on every data-parallel rank)")
    if version == "core_v0.16":
        return  # no evaluation batch sizes of their own (versions.py)
    if args.global_batch_size is None and parallel is None:
        return  # derived later, or refused there
    eval_global = args.eval_global_batch_size or args.global_batch_size or args.micro_batch_size * parallel
    eval_micro = args.eval_micro_batch_size or args.micro_batch_size
    if eval_global % (eval_micro * (parallel or 1)):
        given = "--eval-global-batch-size" if args.eval_global_batch_size else "--global-batch-size"
        micro = "--eval-micro-batch-size" if args.eval_micro_batch_size else "--micro-batch-size"
        raise ParameterError(f"megatron_args: the evaluation batch ({given} {eval_global}) is not divisible by "
                             f"{micro} {eval_micro}{where}: Megatron-LM refuses it")


__all__ = ["PARALLEL_SIZES", "check_batch_sizes", "data_parallel_size", "derived_global_batch_size", "world_size"]
