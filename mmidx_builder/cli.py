"""The ``mmidx`` command. Thin: each subcommand parses, calls the library, prints.

Every subcommand catches only the package's own :class:`MMIdxError` (and OS errors such
as a missing file) and prints it as one line with exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from .errors import MMIdxError, ParameterError
from .format import IndexedFile


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def describe(indexed: IndexedFile) -> dict:
    """The numbers ``mmidx inspect`` prints, as a dict (also used by dataset cards)."""
    lengths = indexed.document_lengths()
    return {
        "prefix": indexed.prefix,
        "flavour": indexed.flavour.value,
        "dtype": indexed.dtype.name,
        "num_sequences": indexed.num_sequences,
        "num_documents": indexed.num_documents,
        "num_tokens": indexed.num_tokens,
        "empty_documents": int((lengths == 0).sum()),
        "shortest_document": int(lengths.min()) if len(lengths) else None,
        "median_document": float(np.median(lengths)) if len(lengths) else None,
        "longest_document": int(lengths.max()) if len(lengths) else None,
        "idx_bytes": indexed.idx_size,
        "bin_bytes": indexed.bin_size,
    }


def _inspect(args) -> None:
    info = describe(IndexedFile.open(args.path))
    if args.json:
        print(json.dumps(info))
        return
    rows = [
        ("prefix", info["prefix"]),
        ("flavour", info["flavour"]),
        ("dtype", info["dtype"]),
        ("sequences", f"{info['num_sequences']:,}"),
        ("documents", f"{info['num_documents']:,} ({info['empty_documents']:,} empty)"),
        ("tokens", f"{info['num_tokens']:,}"),
        ("document length", "- (no documents)" if info["num_documents"] == 0 else
                            f"shortest {info['shortest_document']}, median {info['median_document']}, "
                            f"longest {info['longest_document']}"),
        (".idx size", f"{info['idx_bytes']:,} bytes ({_human_bytes(info['idx_bytes'])})"),
        (".bin size", f"{info['bin_bytes']:,} bytes ({_human_bytes(info['bin_bytes'])})"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def _parse_range(text: str, count: int) -> range:
    try:
        start, _, stop = text.partition(":")
        return range(count)[slice(int(start) if start else None, int(stop) if stop else None)]
    except ValueError:
        raise ParameterError(f"--sequences takes START:STOP (e.g. 0:10), got {text!r}") from None


def _show(args) -> None:
    indexed = IndexedFile.open(args.path)
    for i in _parse_range(args.sequences, indexed.num_sequences):
        tokens = indexed.sequence(i).tolist()
        print(json.dumps(tokens) if args.json else f"{i}\t{' '.join(map(str, tokens))}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mmidx", description="Indexed token files (.bin/.idx) for training.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("inspect", help="flavour, dtype and sizes of a .bin/.idx pair")
    p.add_argument("path", help="PREFIX, PREFIX.bin or PREFIX.idx")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.set_defaults(run=_inspect)

    p = commands.add_parser("show", help="the token ids of some sequences")
    p.add_argument("path", help="PREFIX, PREFIX.bin or PREFIX.idx")
    p.add_argument("--sequences", default="0:10", metavar="START:STOP", help="default 0:10")
    p.add_argument("--json", action="store_true", help="one JSON list per line")
    p.set_defaults(run=_show)

    from . import card, hub  # here, not at the top: card uses describe() from this module
    card.add_command(commands)  # mmidx card DIR
    hub.add_command(commands)  # mmidx upload DIR --repo-id NAMESPACE/NAME
    # Subcommands of later layers add themselves here, one line each.
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except BrokenPipeError:  # `mmidx show ... | head` closed the pipe: not an error
        return 0
    except (MMIdxError, OSError) as error:
        print(f"mmidx {args.command}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
