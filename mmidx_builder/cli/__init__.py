"""The ``mmidx`` command. Thin: each subcommand parses, calls the library, prints.

argparse lives here and only here; the library takes plain arguments. Every subcommand
catches only the package's own :class:`MMIdxError` (and OS errors such as a missing file)
and prints it as one line with exit code 1, never a traceback. The library's messages name
its keyword arguments (``workers=0``); :func:`as_flags` says them as the command's flags
(``--workers 0``), the one place the CLI maps the two. Command modules import the
library inside their handlers, so ``mmidx inspect`` starts without importing ``datasets``.
"""

from __future__ import annotations

import argparse
import re
import sys

from ..errors import MMIdxError
from . import convert, fairseq, files, publish

# One line per command module; a new one adds itself here.
COMMAND_MODULES = (files, convert, fairseq, publish)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmidx", description="Indexed token files (.bin/.idx) for training.")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def as_flags(message: str, command: argparse.ArgumentParser) -> str:
    """``message`` with each keyword a flag of ``command`` sets (``workers=0``, the option whose
    dest is ``workers``) said as that flag (``--workers 0``; ``srcdict=`` alone, ``--srcdict``;
    a switch's ``joined_dictionary=True``, ``--joined-dictionary``). A command's options are
    named as the library's keywords, so the parser itself is the mapping."""
    options = {action.dest: action for action in command._actions
               if action.option_strings and action.dest != argparse.SUPPRESS}
    if not options:
        return message

    def say(match) -> str:
        action, value = options[match.group(1)], match.group(2)
        flag = max(action.option_strings, key=len)
        if action.nargs == 0 and value in ("", "True"):  # a switch: the flag says it
            return flag
        return f"{flag} {value}" if value else flag

    names = "|".join(re.escape(name) for name in sorted(options, key=len, reverse=True))
    return re.sub(rf"(?<![\w.\-/])({names})=([^\s,;)]*)", say, message)


def _command_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices[name]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except BrokenPipeError:  # `mmidx show ... | head` closed the pipe: not an error
        return 0
    except (MMIdxError, OSError) as error:
        message = as_flags(str(error), _command_parser(parser, args.command))
        print(f"mmidx {args.command}: error: {message}", file=sys.stderr)
        return 1
    return 0

