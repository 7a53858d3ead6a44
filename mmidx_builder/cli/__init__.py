"""The ``mmidx`` command. Thin: each subcommand parses, calls the library, prints.

argparse lives here and only here; the library takes plain arguments. Every subcommand
catches only the package's own :class:`MMIdxError` (and OS errors such as a missing file)
and prints it as one line with exit code 1, never a traceback. Command modules import the
library inside their handlers, so ``mmidx inspect`` starts without importing ``datasets``.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import MMIdxError
from . import cache, convert, fairseq, files, preprocess_data, publish

# One line per command module; a new one adds itself here.
COMMAND_MODULES = (files, convert, preprocess_data, fairseq, publish, cache)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmidx", description="Indexed token files (.bin/.idx) for training.")
    parser.add_argument("--version", action="version", version=_version_line())
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.add_commands(commands)
    return parser


def _version_line() -> str:
    """``mmidx 0.3.8 (datasets 5.2.0, Python 3.11.7)``: what a bug report needs; read from the
    installed packages' metadata, so that nothing is imported for it."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    def installed(distribution: str, otherwise: str) -> str:
        try:
            return version(distribution)
        except PackageNotFoundError:
            return otherwise

    # "0+unknown" as mmidx_builder.__version__ says for a source tree that was never installed
    return (f"mmidx {installed('mmidx-builder', '0+unknown')} (datasets {installed('datasets', 'not installed')}, "
            f"Python {platform.python_version()})")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except BrokenPipeError:  # `mmidx show ... | head` closed the pipe: not an error
        return 0
    except (MMIdxError, OSError) as error:
        # A command may say it in its own flags (cli/keywords.py).
        print(f"mmidx {args.command}: error: {getattr(args, 'explain', str)(error)}", file=sys.stderr)
        return 1
    return 0

