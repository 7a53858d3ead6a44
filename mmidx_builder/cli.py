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


def _samples(args) -> None:
    from . import sampling

    indexed = IndexedFile.open(args.path)
    if args.first < 0:
        raise ParameterError(f"--first takes a count of samples to print, 0 or more, got {args.first}")
    indices = sampling.build_indices(indexed.sequence_lengths, seq_length=args.seq_length, seed=args.seed,
                                     num_epochs=args.num_epochs, num_samples=args.num_samples,
                                     add_extra_token=not args.no_extra_token)
    if args.save_indices:
        sampling.save_indices(indices, args.save_indices)
    samples = sampling.assemble_samples(indexed, indices, np.arange(min(args.first, indices.num_samples)))
    if args.json:
        print(json.dumps({
            "num_epochs": indices.num_epochs, "num_samples": indices.num_samples,
            "separate_final_epoch": indices.separate_final_epoch,
            "document_index": indices.document_index.tolist(), "sample_index": indices.sample_index.tolist(),
            "shuffle_index": indices.shuffle_index.tolist(), "samples": samples.tolist()}))
        return
    extra = int(indices.add_extra_token)
    print(f"epochs                {indices.num_epochs}")
    print(f"samples               {indices.num_samples:,} (the epochs hold {indices.total_samples:,})")
    print(f"sample length         {indices.sample_length} tokens (seq_length {indices.seq_length} + {extra} extra)")
    print(f"separate final epoch  {'yes' if indices.separate_final_epoch else 'no'}")
    for i, tokens in enumerate(samples.tolist()):
        print(f"{i}\t{' '.join(map(str, tokens))}")


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
    from . import convert  # mmidx convert INPUT... / mmidx merge PREFIX...
    convert.add_commands(commands)
    p = commands.add_parser("samples", help="what training sees: Megatron GPTDataset samples, in order")
    p.add_argument("path", help="PREFIX, PREFIX.bin or PREFIX.idx")
    p.add_argument("--seq-length", type=int, required=True, help="tokens per sample (Megatron's --seq-length)")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--num-epochs", type=int, help="whole epochs (default: 1)")
    amount.add_argument("--num-samples", type=int, help="samples, Megatron's way (may end inside an epoch)")
    p.add_argument("--seed", type=int, default=1234, help="Megatron's --seed (default 1234)")
    p.add_argument("--no-extra-token", action="store_true",
                   help="samples of seq_length tokens without overlap (add_extra_token_to_sequence=False)")
    p.add_argument("--first", type=int, default=3, metavar="K", help="print the first K samples (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON object with the whole index arrays")
    p.add_argument("--save-indices", metavar="DIR", help="write the index arrays to DIR as .npy")
    p.set_defaults(run=_samples)
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
