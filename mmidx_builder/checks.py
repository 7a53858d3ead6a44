"""The argument rules every layer shares, each written once.

    rule                                   function         message (names the keyword as ``name=``)
    a whole number, at least ``minimum``   check_int        "workers=0: expected a whole number >= 1"
    True or False                          check_bool       "eod_mask_loss='yes': expected True or False"
    a seed numpy's RandomState takes       check_seed       "seed=-1: expected a whole number in [0, 2**32)"

Library messages name keyword arguments (``workers=``), never command-line flags: the CLI
says ``--workers`` when it reports them (cli/__init__.py maps the names). Whole numbers are
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
    """``value`` as a Python int, or a ParameterError naming ``name=``: not a whole number (bools
    refused), or below ``minimum``. With ``allow_none``, None (a setting not given) passes as None.
    ``hint`` says what to do instead."""
    if value is None and allow_none:
        return None
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or (minimum is not None and number < minimum):
        expected = "a whole number" + (f" >= {minimum}" if minimum is not None else "")
        raise ParameterError(f"{name}={value!r}: expected {expected}" + (f"; {hint}" if hint else ""))
    return number


def check_bool(name: str, value) -> bool:
    """``value`` as a bool (numpy's included), or a ParameterError naming ``name=``. A dataset
    card's YAML gives any type: ``"no"`` is a true string there, so strings are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(f"{name}={value!r}: expected True or False")
    return bool(value)


def check_seed(seed, name: str = "seed") -> int:
    """A shuffle seed: a whole number in [0, 2**32), what numpy's RandomState takes."""
    seed = check_int(name, seed, 0, "use a seed in [0, 2**32)")
    if seed >= SEED_LIMIT:
        raise ParameterError(f"{name}={seed}: expected a whole number in [0, 2**32) (numpy.random.RandomState's "
                             "seeds, which megatron-core's GPTDataset uses)")
    return seed


__all__ = ["SEED_LIMIT", "check_bool", "check_int", "check_seed"]
