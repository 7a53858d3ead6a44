"""The resume state of a Megatron rank or global stream: what ``state_dict()`` writes, and the
checks ``load_state_dict()`` makes before trusting one.

A state is ``{"format": "mmidx-megatron-rank-stream", "version": 1, "fingerprint": {...},
"world_size": W, "micro_batch_size": M, "consumed_samples": C}``; inside one of several
DataLoader workers, ``"consumed_samples": None`` and ``"worker": {"id", "num_workers",
"iteration_start", "micro_batches", "unit_samples"}`` (``micro_batches`` counts the worker's
units of ``unit_samples`` global samples each: one micro-batch of every rank for a rank
stream; absent in states written before global streams, meaning W * M).

A state may have been edited, damaged or written for another dataset, and a wrong count does
not fail later: a negative one makes an Arrow dataset serve rows from its end. So every field
is checked whole (:func:`checked_state`): each count a whole number within the dataset, the
fingerprint present, a mapping, with every key this dataset's has and the same values.
Anything else is a ParameterError naming the field, the value found and what was expected.

The fields are then checked together: a worker's ``unit_samples`` is ``world_size x
micro_batch_size`` (or ``micro_batch_size``: one rank's rows, for a global stream accelerate
dispatches); the workers' counts are what a DataLoader leaves (it asks them in turn, so no count
is more than one above another's: :func:`dealt_counts`); and a container holds one global
state or one state per worker, never two that could each say where to resume (:func:`one_state`).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping

from ..errors import ParameterError

STATE_FORMAT = "mmidx-megatron-rank-stream"
STATE_VERSION = 1
WORKER_FIELDS = ("id", "num_workers", "iteration_start", "micro_batches")


def find_states(state) -> Iterator[Mapping]:
    """Our states anywhere inside ``state`` (a StatefulDataLoader nests them per worker)."""
    if isinstance(state, Mapping):
        if state.get("format") == STATE_FORMAT:
            yield state
            return
        for value in state.values():
            yield from find_states(value)
    elif isinstance(state, (list, tuple)):
        for value in state:
            yield from find_states(value)


def _whole(field: str, value, low: int, high: int | None = None, why: str = "") -> int:
    """``value`` as an int in [low, high], or a ParameterError naming the state's ``field``."""
    expected = f"a whole number of at least {low}" if high is None else f"a whole number in [{low}, {high}]"
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or number < low or (high is not None and number > high):
        raise ParameterError(f"the state's {field} is {value!r}, expected {expected}{why}")
    return number


def checked_state(state: Mapping, fingerprint: Mapping, total_samples: int) -> dict:
    """``state`` with every field checked against this dataset (``fingerprint``, ``total_samples``
    rows): ``{"consumed_samples", "world_size", "micro_batch_size", "worker"}``, ``worker`` None
    or its fields as ints."""
    version = state.get("version")
    if type(version) is not int or version != STATE_VERSION:
        raise ParameterError(f"the state's version is {version!r}, expected {STATE_VERSION}")
    compare_fingerprints(state.get("fingerprint", None), fingerprint)
    world_size = _whole("world_size", state.get("world_size"), 1)
    micro_batch_size = _whole("micro_batch_size", state.get("micro_batch_size"), 1)
    within = f" (the dataset has {total_samples} samples)"
    worker = state.get("worker")
    if worker is None:
        consumed = _whole("consumed_samples", state.get("consumed_samples"), 0, total_samples, within)
        return {"consumed_samples": consumed, "world_size": world_size, "micro_batch_size": micro_batch_size,
                "worker": None}
    if not isinstance(worker, Mapping):
        raise ParameterError(f"the state's worker is {worker!r}, expected a mapping with {', '.join(WORKER_FIELDS)}")
    if state.get("consumed_samples") is not None:
        raise ParameterError(f"the state's consumed_samples is {state.get('consumed_samples')!r} beside a worker's "
                             "count, expected None (a worker's state counts its own batches only)")
    num_workers = _whole("worker.num_workers", worker.get("num_workers"), 1)
    worker_id = _whole("worker.id", worker.get("id"), 0, num_workers - 1, f" (of {num_workers} workers)")
    start = _whole("worker.iteration_start", worker.get("iteration_start"), 0, total_samples, within)
    unit = _whole("worker.unit_samples", worker.get("unit_samples", world_size * micro_batch_size), 1)
    if unit not in (world_size * micro_batch_size, micro_batch_size):
        raise ParameterError(
            f"the state's worker.unit_samples is {unit}, but its world_size {world_size} x micro_batch_size "
            f"{micro_batch_size} = {world_size * micro_batch_size}: a worker hands out one micro-batch of every rank "
            f"per batch ({micro_batch_size} rows of one rank where accelerate dispatches a global stream), never "
            f"{unit} samples")
    units = len(range(worker_id, (total_samples - start) // unit, num_workers))
    done = _whole("worker.micro_batches", worker.get("micro_batches"), 0, units,
                  f" (worker {worker_id} of {num_workers} has {units} batches of {unit} samples from sample "
                  f"{start} of the dataset's {total_samples})")
    return {"consumed_samples": None, "world_size": world_size, "micro_batch_size": micro_batch_size,
            "worker": {"id": worker_id, "num_workers": num_workers, "iteration_start": start,
                       "micro_batches": done, "unit_samples": unit}}


def dealt_counts(batches: int, num_workers: int) -> list[int]:
    """Each worker's batches after a DataLoader handed out ``batches`` of them: it asks worker
    0, 1, ..., K - 1, 0, ... in turn (``in_order``), so worker w made batches w, w + K, ..."""
    return [len(range(worker, batches, num_workers)) for worker in range(num_workers)]


def one_state(states: list[Mapping]) -> list[Mapping]:
    """The (checked) states found in a container, refused unless they are one global state or
    one state of each worker of one loader: two of them would each say where to resume."""
    globals_ = [s for s in states if s["worker"] is None]
    if len(globals_) > 1:
        counts = ", ".join(str(s["consumed_samples"]) for s in globals_)
        raise ParameterError(f"{len(globals_)} global states in one container (consumed_samples {counts}): expected "
                             "one, or one state per DataLoader worker; load the state of one stream")
    if globals_ and len(states) > 1:
        raise ParameterError(f"a global state (consumed_samples {globals_[0]['consumed_samples']}) beside "
                             f"{len(states) - 1} worker states in one container: expected one or the other; load the "
                             "state of one stream")
    ids = [s["worker"]["id"] for s in states if s["worker"] is not None]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise ParameterError(f"worker {twice[0]}'s state appears {ids.count(twice[0])} times in one container: "
                             "expected one state per DataLoader worker")
    return states


def combine_workers(states: list[Mapping]) -> int:
    """The global count from every worker's (checked) state: after the loader handed out b
    units, worker w has made the units w, w + K, ... below b (:func:`dealt_counts`), so b is
    the sum of their counts; counts no loader leaves behind are refused."""
    workers = {(s["worker"]["iteration_start"], s["worker"]["num_workers"], s["worker"]["unit_samples"])
               for s in one_state(states)}
    if len(workers) != 1:
        raise ParameterError(f"worker states from different iterations, worker counts or batch sizes: "
                             f"{sorted(workers)}")
    start, num_workers, unit = workers.pop()
    found = {s["worker"]["id"]: s for s in states}
    if sorted(found) != list(range(num_workers)):
        raise ParameterError(f"need the states of all {num_workers} workers, found workers {sorted(found)}")
    counts = [found[w]["worker"]["micro_batches"] for w in range(num_workers)]
    batches = sum(counts)
    if counts != dealt_counts(batches, num_workers):
        raise ParameterError(
            f"the workers' counts of batches {counts} are not what a DataLoader leaves: it asks its {num_workers} "
            f"workers in turn, so after {batches} batches they have made {dealt_counts(batches, num_workers)} "
            "(each at most one more than the next); the states are of different moments or edited")
    return start + batches * unit


def compare_fingerprints(theirs, ours: Mapping) -> None:
    """A state's fingerprint must be a mapping holding every field of this dataset's, equal."""
    if not isinstance(theirs, Mapping):
        raise ParameterError(f"the state's fingerprint is {theirs!r}, expected a mapping with this dataset's fields "
                             f"({', '.join(sorted(ours))}): without it the state could be of any dataset")
    missing = sorted(set(ours) - set(theirs))
    if missing:
        raise ParameterError(f"the state's fingerprint lacks {', '.join(missing)} (this dataset's: "
                             f"{', '.join(f'{name}={ours[name]!r}' for name in missing)}): it cannot be told to "
                             "be of this dataset")
    differing = [name for name in sorted(ours) if theirs[name] != ours[name]]
    if differing:
        details = "; ".join(f"{name}: the state's {theirs[name]!r}, this dataset's {ours[name]!r}"
                            for name in differing)
        raise ParameterError(f"the state was taken on a dataset with another sample order ({details}); "
                             "load it into a dataset made with the same files and settings")


__all__ = ["STATE_FORMAT", "STATE_VERSION", "checked_state", "combine_workers", "compare_fingerprints",
           "dealt_counts", "find_states", "one_state"]
