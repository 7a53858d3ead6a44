"""``mmidx inspect``, ``mmidx show`` and ``mmidx samples``: what a pair holds and what training sees.

Imports are inside the commands: ``mmidx inspect`` must start fast, and neither it nor
``show`` needs more than numpy and the format layer.
"""

from __future__ import annotations

import json

from ..errors import ParameterError
from ..megatron.sampling import DEFAULT_SEED
from .keywords import in_flags


def add_commands(commands) -> None:
    p = commands.add_parser("inspect", help="flavour, dtype and sizes of a .bin/.idx pair (or a MosaicML folder)")
    p.add_argument("path", help="PREFIX, PREFIX.bin or PREFIX.idx; or a folder of MosaicML shards (or its index.json "
                                "/ index.mds)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--verify", action="store_true",
                   help="MosaicML shards: read every shard whole and check its header and the hashes its index records")
    p.set_defaults(run=_inspect, explain=in_flags(p))

    p = commands.add_parser("show", help="the token ids of some sequences")
    p.add_argument("path", help="PREFIX, PREFIX.bin or PREFIX.idx")
    p.add_argument("--sequences", default="0:10", metavar="START:STOP", help="default 0:10")
    p.add_argument("--json", action="store_true", help="one JSON list per line")
    p.set_defaults(run=_show, explain=in_flags(p))

    p = commands.add_parser("samples", help="what training sees: Megatron GPTDataset samples, in order")
    p.add_argument("path", nargs="?", help="PREFIX, PREFIX.bin or PREFIX.idx (or give --megatron-args)")
    p.add_argument("--megatron-args", metavar="ARGS",
                   help="a Megatron command line (--data-path, --split, sizes...): its train/validation/test splits")
    p.add_argument("--split-name", choices=("train", "validation", "test"),
                   help="with --megatron-args: only this split (default: every split)")
    p.add_argument("--show", metavar="START:STOP", help="with --megatron-args: the positions to print (default 0:3)")
    p.add_argument("--seq-length", type=int, help="tokens per sample (Megatron's --seq-length); required with PATH")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--num-epochs", type=int, help="whole epochs (default: 1)")
    amount.add_argument("--num-samples", type=int, help="samples, Megatron's way (may end inside an epoch)")
    p.add_argument("--seed", type=int, help=f"Megatron's --seed (default {DEFAULT_SEED})")
    p.add_argument("--no-extra-token", action="store_true",
                   help="samples of seq_length tokens without overlap (add_extra_token_to_sequence=False)")
    p.add_argument("--first", type=int, metavar="K", help="with PATH: print the first K samples (default 3)")
    p.add_argument("--json", action="store_true", help="one JSON object with the whole index arrays")
    p.add_argument("--save-indices", metavar="DIR", help="write the index arrays to DIR as .npy")
    p.set_defaults(run=_samples, explain=in_flags(p))


def _human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _inspect_mosaic(args, index_path: str) -> None:
    from ..mosaic.stats import describe_stream, open_local_stream, verify_stream

    info = describe_stream(open_local_stream(index_path).index)  # every shard's file and size checked
    if args.verify:
        info["verified_shards"] = verify_stream(index_path)
    if args.json:
        print(json.dumps(info))
        return
    compression = ", ".join(info["compression"]) if info["compression"] else "none"
    rows = [("index", info["index"]), ("layout", info["layout"]),
            ("columns", ", ".join(f"{c} ({e})" for c, e in info["columns"].items())),
            ("shards", f"{info['shards']:,}"), ("samples", f"{info['samples']:,}"),
            ("bytes", f"{info['raw_bytes']:,} ({_human_bytes(info['raw_bytes'])})"
                      + (f", {info['compressed_bytes']:,} compressed" if info["compressed_bytes"] is not None else "")),
            ("compression", compression), ("hashes", ", ".join(info["hashes"]) or "none recorded")]
    if args.verify:
        rows.append(("verified", f"{info['verified_shards']:,} shards read whole: headers, sizes and recorded hashes "
                                 "match"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def _inspect(args) -> None:
    from ..mosaic.stats import local_index_path
    from ..sources.indexed import IndexedFile
    from ..sources.stats import describe

    index_path = local_index_path(args.path)
    if index_path is not None:
        return _inspect_mosaic(args, index_path)
    if args.verify:
        raise ParameterError("--verify applies to MosaicML shards; a .bin/.idx pair is checked whole when opened")
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
        raise ParameterError(f"expected START:STOP (e.g. 0:10), got {text!r}") from None


def _show(args) -> None:
    from ..sources.indexed import IndexedFile

    indexed = IndexedFile.open(args.path)
    for i in _parse_range(args.sequences, indexed.num_sequences):
        tokens = indexed.sequence(i).tolist()
        print(json.dumps(tokens) if args.json else f"{i}\t{' '.join(map(str, tokens))}")


def _megatron_samples(args) -> None:
    """The splits a Megatron command line builds: per split, the summary and some samples."""
    from ..sources.indexed import IndexedFile
    from ..megatron import resolve
    from ..megatron.plan import all_prefixes
    from ..megatron.splits import build_split, split_samples

    # Given beside the command line, these override it, as load_dataset's keywords do.
    resolution = resolve(args.megatron_args, seq_length=args.seq_length, seed=args.seed)
    settings, plans = resolution.settings, resolution.plans
    sources = {prefix: IndexedFile.open(prefix) for prefix in all_prefixes(plans)}
    report = {}
    for name, plan in plans.items():
        if args.split_name and name != args.split_name:
            continue
        built = build_split(plan, sources, seq_length=settings["seq_length"], seed=settings["seed"],
                            add_extra_token=not args.no_extra_token)
        shown = _parse_range(args.show or "0:3", built.rows)
        tokens, dataset_ids, _ = split_samples(built, list(shown))
        report[name] = {"rows": built.rows, "blend": plan.blend, "size": plan.size,
                        "datasets": [{"prefix": part.prefix, "num_samples": part.num_samples,
                                      "built_samples": indices.total_samples}
                                     for part, indices in zip(plan.parts, built.indices)],
                        "samples": [{"position": i, "dataset_id": int(d), "input_ids": t}
                                    for i, d, t in zip(shown, dataset_ids.tolist(), tokens.tolist())]}
    if args.json:
        print(json.dumps(report))
        return
    for name, split in report.items():
        blend = split["blend"] or "one dataset, no blend"
        print(f"{name}: {split['rows']:,} samples (asked {split['size'] if split['size'] is not None else 'one pass'}), "
              f"{blend}")
        for i, part in enumerate(split["datasets"]):
            print(f"  dataset {i}  {part['prefix']}  built for {part['num_samples'] or 'one pass'}, "
                  f"holds {part['built_samples']:,}")
        for sample in split["samples"]:
            print(f"  {sample['position']}\t[{sample['dataset_id']}]\t{' '.join(map(str, sample['input_ids']))}")


def _refuse(args, alternatives: dict, where: str) -> None:
    """An option that would be ignored is refused, naming what to use instead."""
    for name, instead in alternatives.items():
        if getattr(args, name) is not None:
            raise ParameterError(f"--{name.replace('_', '-')} does not apply {where}; use {instead}")


def _samples(args) -> None:
    import numpy as np

    from ..megatron import sampling
    from ..sources.indexed import IndexedFile

    if args.megatron_args:
        if args.path:
            raise ParameterError("give PATH or --megatron-args, not both")
        _refuse(args, {"num_epochs": "--train-samples or --train-iters inside --megatron-args",
                       "num_samples": "--train-samples or --train-iters inside --megatron-args",
                       "first": "--show START:STOP", "save_indices": "PATH (one prefix) instead of --megatron-args"},
                "with --megatron-args")
        return _megatron_samples(args)
    _refuse(args, {"split_name": "--megatron-args", "show": "--first K"}, "with PATH")
    if not args.path or args.seq_length is None:
        raise ParameterError("give PATH and --seq-length, or --megatron-args")
    indexed = IndexedFile.open(args.path)
    args.seed = DEFAULT_SEED if args.seed is None else args.seed
    args.first = 3 if args.first is None else args.first
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


