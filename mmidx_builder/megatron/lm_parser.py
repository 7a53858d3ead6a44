"""Megatron-LM's command-line parser, rebuilt from its option table (lm_options.py), to refuse
what Megatron-LM's ``parse_args`` refuses: an option it does not have (an abbreviation among
them: its parser is made with ``allow_abbrev=False``), a value its type or choices reject, an
option without its value, a token that is neither an option nor the value of one.

Only the parse is rebuilt, never what Megatron-LM does with the values (args.py reads the ones
that bear on the data). Options whose type is a function of Megatron-LM's own (``any`` in the
table) take any string here.
"""

from __future__ import annotations

import argparse
import difflib
import functools

from ..errors import ParameterError
from .lm_options import OPTIONS

# argparse's own types for the table's names; "any" is not checked (see the module docstring).
_TYPES = {"int": int, "float": float, "str": str, "any": None}
# A flag this close to one of Megatron-LM's (difflib's ratio) is named as what was meant.
NEAR_MISS = 0.85


class _Refused(Exception):
    """argparse's error() calls, which would otherwise print usage and exit."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)


def _nargs(text: str):
    if text == "-":
        return None
    return int(text) if text.isdigit() else text


@functools.lru_cache(maxsize=None)
def megatron_lm_parser(version: str) -> argparse.ArgumentParser:
    """An argparse parser with Megatron-LM ``version``'s options, types, nargs and choices."""
    parser = _Parser(prog="megatron_args", add_help=False, allow_abbrev=False, exit_on_error=False)
    for line in OPTIONS[version].splitlines():
        names, kind, nargs, typed, choices = line.split(" ")
        flags = names.split(",")
        dest = f"o{parser._actions.__len__()}"  # values are not read here: no two options share one
        if kind == "true":
            parser.add_argument(*flags, dest=dest, action="store_true")
        elif kind == "false":
            parser.add_argument(*flags, dest=dest, action="store_false")
        elif kind == "bool":
            parser.add_argument(*flags, dest=dest, action=argparse.BooleanOptionalAction)
        elif kind == "const":
            parser.add_argument(*flags, dest=dest, action="store_const", const=True)
        else:
            convert = _TYPES[typed]
            allowed = None if choices == "-" else [(convert or str)(c) for c in choices.split("|")]
            parser.add_argument(*flags, dest=dest, type=convert, nargs=_nargs(nargs), choices=allowed)
    return parser


@functools.lru_cache(maxsize=None)
def megatron_lm_options(version: str) -> tuple[str, ...]:
    """Every option string of Megatron-LM ``version``'s parser."""
    return tuple(sorted(o for a in megatron_lm_parser(version)._actions for o in a.option_strings))


def check_parses(tokens: list[str], version: str) -> None:
    """Refuses, naming the token, a command line Megatron-LM ``version``'s parser would not take."""
    why = f"Megatron-LM {version}'s parser refuses it"
    try:
        _, rest = megatron_lm_parser(version).parse_known_args(tokens)
    except (argparse.ArgumentError, _Refused) as error:
        raise ParameterError(f"megatron_args: {error} ({why})") from None
    if not rest:
        return
    token = rest[0]
    if not token.startswith("-"):
        raise ParameterError(f"megatron_args: {token!r} is neither an argument nor the value of one ({why}: "
                             "unrecognized arguments)")
    flag = token.split("=", 1)[0]
    options = megatron_lm_options(version)
    longer = [o for o in options if o.startswith(flag)]
    if longer:
        hint = f"; Megatron-LM takes no abbreviations: write {longer[0]}" + (
            f" (or {', '.join(longer[1:3])})" if len(longer) > 1 else "")
    else:
        near = difflib.get_close_matches(flag, options, n=1, cutoff=NEAR_MISS)
        hint = f"; did you mean {near[0]}?" if near else ""
    raise ParameterError(f"megatron_args: {flag} is not an argument of Megatron-LM {version}: its parser refuses "
                         f"it (unrecognized arguments){hint}")


__all__ = ["check_parses", "megatron_lm_options", "megatron_lm_parser"]
