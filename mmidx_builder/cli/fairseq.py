"""``mmidx fairseq-preprocess``: fairseq's ``fairseq-preprocess``, with its flag names."""

from __future__ import annotations

from .keywords import in_flags


def add_commands(commands) -> None:
    p = commands.add_parser(
        "fairseq-preprocess", help="parallel text -> dict.{lang}.txt and a fairseq data-bin (fairseq-preprocess)",
        description="fairseq-preprocess (fairseq 0.12, --dataset-impl mmap): builds or loads the dictionaries and "
                    "writes {split}.{src}-{tgt}.{lang}.bin/.idx, byte-identical to fairseq's.")
    p.add_argument("-s", "--source-lang", required=True, metavar="SRC", help="source language")
    p.add_argument("-t", "--target-lang", required=True, metavar="TARGET", help="target language")
    p.add_argument("--trainpref", metavar="FP",
                   help="train file prefix (PREFIX.SRC, PREFIX.TARGET; also builds the dictionaries); "
                        "comma-separated prefixes become the shards train, train1, ...")
    p.add_argument("--validpref", metavar="FP", help="comma-separated valid file prefixes (valid, valid1, ...)")
    p.add_argument("--testpref", metavar="FP", help="comma-separated test file prefixes (test, test1, ...)")
    p.add_argument("--destdir", metavar="DIR", default="data-bin", help="destination dir (default data-bin)")
    p.add_argument("--thresholdsrc", metavar="N", type=int, default=0,
                   help="drop source words counted fewer than N times (default 0)")
    p.add_argument("--thresholdtgt", metavar="N", type=int, default=0,
                   help="drop target words counted fewer than N times (default 0)")
    p.add_argument("--nwordssrc", metavar="N", type=int, default=-1,
                   help="source dictionary size, special symbols included (default -1: all)")
    p.add_argument("--nwordstgt", metavar="N", type=int, default=-1,
                   help="target dictionary size, special symbols included (default -1: all)")
    p.add_argument("--srcdict", metavar="FP", help="reuse this source dictionary")
    p.add_argument("--tgtdict", metavar="FP", help="reuse this target dictionary")
    p.add_argument("--joined-dictionary", action="store_true", help="one dictionary for both languages")
    p.add_argument("--padding-factor", metavar="N", type=int, default=8,
                   help="pad the dictionary size to a multiple of N (default 8)")
    p.add_argument("--workers", metavar="N", type=int, default=1, help="number of parallel workers (default 1)")
    p.add_argument("--dict-only", action="store_true", help="only build the dictionaries")
    p.add_argument("--dataset-impl", choices=("mmap",), default="mmap",
                   help="output format: mmap, fairseq's default (the only one written here)")
    p.set_defaults(run=_run, explain=in_flags(p))  # library keywords said as these flags


def _run(args) -> None:
    from ..fairseq.preprocess import preprocess

    summary = preprocess(source_lang=args.source_lang, target_lang=args.target_lang, trainpref=args.trainpref,
                         validpref=args.validpref, testpref=args.testpref, destdir=args.destdir,
                         thresholdsrc=args.thresholdsrc, thresholdtgt=args.thresholdtgt, nwordssrc=args.nwordssrc,
                         nwordstgt=args.nwordstgt, joined_dictionary=args.joined_dictionary,
                         padding_factor=args.padding_factor, srcdict=args.srcdict, tgtdict=args.tgtdict,
                         workers=args.workers, dict_only=args.dict_only)
    print(summary.table())
