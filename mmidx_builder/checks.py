"""The argument rules every layer shares, each written once.

    rule                                   function         message (names the keyword as ``name=``)
    a whole number, at least ``minimum``   check_int        "workers= must be at least 1, got 0"
    True or False                          check_bool       "eod_mask_loss= must be True or False, got 'yes'"
    a seed numpy's RandomState takes       check_seed       "seed= must be below 2**32 (...), got 4294967296"

Library messages name keyword arguments (``workers=``), never command-line flags: the CLI
says ``--workers`` when it reports them (cli/keywords.py). Whole numbers are
anything ``operator.index`` takes (Python and numpy integers), never a bool, a float or a
string: a float that happens to be integral is refused too, as the settings count tokens,
samples or workers. This module imports numpy and the errors only.
"""

from __future__ import annotations

import operator

import numpy as np

from .errors import ParameterError

# megatron-core seeds numpy.random.RandomState(random_seed) (gpt_dataset.py), which takes
# seeds in [0, 2**32); so do the shuffles here (sampling.py).
SEED_LIMIT = 2**32


def check_int(name: str, value, minimum: int | None = None, hint: str = "", *, allow_none: bool = False):
    """``value`` as a Python int, or a ParameterError naming the keyword ``name`` (given with or
    without its ``=``): not a whole number (bools refused), or below ``minimum``. With
    ``allow_none``, None (a setting not given) passes as None. ``hint`` says what to do instead."""
    if value is None and allow_none:
        return None
    keyword, hint = name.removesuffix("="), f"; {hint}" if hint else ""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise ParameterError(f"{keyword}= must be a whole number, got {value!r}{hint}") from None
    if minimum is not None and number < minimum:
        raise ParameterError(f"{keyword}= must be at least {minimum}, got {number}{hint}")
    return number


def check_bool(name: str, value) -> bool:
    """``value`` as a bool (numpy's included), or a ParameterError naming ``name=``. A dataset
    card's YAML gives any type: ``"no"`` is a true string there, so strings are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name}= must be True or False, got {value!r}")
    return bool(value)


def check_seed(seed, name: str = "seed") -> int:
    """A shuffle seed: a whole number in [0, 2**32), what numpy's RandomState takes."""
    seed = check_int(name, seed, 0, "use a seed in [0, 2**32)")
    if seed >= SEED_LIMIT:
        raise ParameterError(f"{name}= must be below 2**32 (numpy.random.RandomState's seeds, which "
                             f"megatron-core's GPTDataset uses), got {seed}")
    return seed


__all__ = ["SEED_LIMIT", "check_bool", "check_int", "check_seed"]
