"""What decides MosaicML's sample order: the settings of a ``StreamingDataset``, each stream's
weight, and the world that reads it.

Follows mosaicml-streaming 0.13.0: ``StreamingDataset.__init__``'s checks of its global
arguments (dataset.py), ``Stream.__init__``'s checks of ``proportion``/``repeat``/``choose``
(stream.py), and ``World`` (world.py). Defaults are StreamingDataset's.

A value StreamingDataset refuses is refused here, when the dataclass is made, with a
:class:`~mmidx_builder.errors.MosaicOrderError` naming the setting, what was expected and what
was found. Two checks come earlier than StreamingDataset's, which makes them only when the
epoch is built (at ``iter``): an unknown ``partition_algo``, and an unknown ``shuffle_algo``
when ``shuffle`` is on (it fails there with a KeyError). A negative ``num_canonical_nodes``,
which StreamingDataset takes and deals into nonsense, is refused.
"""

from __future__ import annotations

import dataclasses
import numbers

from ...errors import MosaicOrderError

# The registries of streaming/base/{shuffle,partition,batching}/__init__.py in 0.13.0.
SHUFFLE_ALGOS = ("naive", "py1br", "py1e", "py1s", "py2s")
PARTITION_ALGOS = ("orig", "relaxed")
BATCHING_METHODS = ("random", "stratified", "per_stream", "device_per_stream")
SAMPLING_METHODS = ("balanced", "fixed")


def refuse(setting: str, expected: str, found) -> MosaicOrderError:
    return MosaicOrderError(f"{setting}: expected {expected}, found {found!r}")


def is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# number_abbrev_to_int's suffixes (streaming/base/util.py), tried in this order.
_ABBREVIATIONS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def epoch_size_value(value) -> int | None:
    """StreamingDataset's ``epoch_size`` as it reads it: falsy (None, 0, "") is the streams'
    own size, an int or float is truncated, a string is digits or a number with a suffix k, m,
    b or t, computed as ``number_abbrev_to_int`` computes it (``int(float(x) * 10**n)``, so
    "4.35k" is 4349, as there); negative values are refused, and so is a bool (StreamingDataset
    reads True as 1: a mistake, not a size)."""
    if not value:
        return None
    expected = "None, a non-negative number, or digits with an optional suffix k, m, b or t ('10k', '1.5m')"
    if isinstance(value, (numbers.Integral, float)) and not isinstance(value, bool):
        count = int(value)
    elif isinstance(value, str):
        text = value.lower().strip()
        suffix = next((s for s in _ABBREVIATIONS if text.endswith(s)), None)
        try:
            count = int(float(text[:-1]) * _ABBREVIATIONS[suffix]) if suffix else int(text) if text.isdigit() else None
        except ValueError:
            count = None
        if count is None:
            raise refuse("epoch_size", expected, value)
    else:
        raise refuse("epoch_size", expected, value)
    if count < 0:
        raise refuse("epoch_size", expected, value)
    return count or None


@dataclasses.dataclass(frozen=True)
class StreamWeights:
    """One stream's weight, as ``streaming.Stream(proportion=, repeat=, choose=)`` takes it: at
    most one of the three, none negative; all None takes the stream once per epoch.

    proportion (float | None): relative weight; then every stream must have one.
    repeat (float | None): how many times its samples are taken per epoch (absolute).
    choose (int | None): how many of its samples are taken per epoch (absolute).
    """

    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self):
        given = [name for name in ("proportion", "repeat", "choose") if getattr(self, name) is not None]
        if len(given) > 1:
            raise refuse("StreamWeights", "at most one of proportion, repeat and choose", given)
        for name in given:
            if getattr(self, name) < 0:
                raise refuse(f"StreamWeights.{name}", "a non-negative number", getattr(self, name))


@dataclasses.dataclass(frozen=True)
class OrderSettings:
    """StreamingDataset's arguments that decide its sample order, with its defaults.

    shuffle (bool, False), shuffle_algo (str, "py1e": one of naive, py1br, py1e, py1s, py2s),
    shuffle_seed (int, 9176), shuffle_block_size (int | None, None: max(4_000_000 //
    num_canonical_nodes, 1 << 18) once the canonical nodes are known), num_canonical_nodes
    (int | None, None: 64 x physical nodes for py1s and py2s, else the physical nodes; 0 reads
    as None, as in StreamingDataset), batch_size (int | None, None: needed to build an epoch,
    samples per batch of each rank), partition_algo (str, "relaxed": or "orig"),
    sampling_method (str, "balanced": or "fixed"), sampling_granularity (int, 1),
    batching_method (str, "random": or stratified, per_stream, device_per_stream), epoch_size
    (int | None, None: the weighted streams' total; 0 reads as None, as in StreamingDataset;
    its strings such as "10k" are not taken here).
    """

    shuffle: bool = False
    shuffle_algo: str = "py1e"
    shuffle_seed: int = 9176
    shuffle_block_size: int | None = None
    num_canonical_nodes: int | None = None
    batch_size: int | None = None
    partition_algo: str = "relaxed"
    sampling_method: str = "balanced"
    sampling_granularity: int = 1
    batching_method: str = "random"
    epoch_size: int | str | None = None

    def __post_init__(self):
        if self.sampling_method not in SAMPLING_METHODS:
            raise refuse("sampling_method", f"one of {', '.join(SAMPLING_METHODS)}", self.sampling_method)
        if not is_int(self.sampling_granularity) or self.sampling_granularity <= 0:
            raise refuse("sampling_granularity", "a positive integer", self.sampling_granularity)
        if self.batching_method not in BATCHING_METHODS:
            raise refuse("batching_method", f"one of {', '.join(BATCHING_METHODS)}", self.batching_method)
        if not is_int(self.shuffle_seed) or self.shuffle_seed < 0:
            raise refuse("shuffle_seed", "a non-negative integer", self.shuffle_seed)
        object.__setattr__(self, "epoch_size", epoch_size_value(self.epoch_size))
        if self.partition_algo not in PARTITION_ALGOS:
            raise refuse("partition_algo", f"one of {', '.join(PARTITION_ALGOS)}", self.partition_algo)
        if self.shuffle and self.shuffle_algo not in SHUFFLE_ALGOS:
            raise refuse("shuffle_algo", f"one of {', '.join(SHUFFLE_ALGOS)} (those 0.13.0 registers)",
                         self.shuffle_algo)
        if self.num_canonical_nodes is not None and (not is_int(self.num_canonical_nodes)
                                                     or self.num_canonical_nodes < 0):
            raise refuse("num_canonical_nodes", "None or a positive integer", self.num_canonical_nodes)
        if self.shuffle_block_size is not None and not is_int(self.shuffle_block_size):
            # StreamingDataset raises TypeError when it shuffles with a block size that is no int.
            raise refuse("shuffle_block_size", "None or an integer", self.shuffle_block_size)
        if self.batch_size is not None and not is_int(self.batch_size):
            raise refuse("batch_size", "None or an integer (samples per batch of each rank)", self.batch_size)

    @property
    def epoch_seed_change(self) -> bool:
        """Whether the shard sampling's seed moves with the epoch (StreamingDataset's
        ``epoch_seed_change``): only when shuffling with balanced sampling."""
        return self.shuffle and self.sampling_method == "balanced"


@dataclasses.dataclass(frozen=True)
class OrderWorld:
    """The physical world: nodes, ranks (devices) per node, DataLoader workers per rank
    (``World`` of streaming/base/world.py, whose counts are global; these are not). A rank
    without DataLoader workers reads as one worker."""

    num_nodes: int
    ranks_per_node: int
    workers_per_rank: int = 1

    def __post_init__(self):
        for name in ("num_nodes", "ranks_per_node", "workers_per_rank"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise refuse(f"OrderWorld.{name}", "a positive integer", value)

    @property
    def num_ranks(self) -> int:
        return self.num_nodes * self.ranks_per_node
