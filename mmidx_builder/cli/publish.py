"""``mmidx card`` and ``mmidx upload`` (also the top-level hub_upload.py)."""

from __future__ import annotations

from pathlib import Path

from ..megatron.sampling import DEFAULT_SEQ_LENGTH
from .keywords import in_flags


def _add_card_settings(parser) -> None:
    """The card options; each left out keeps what the existing card says."""
    parser.add_argument("--seq-length", type=int, help=f"default seq_length written into configs (default {DEFAULT_SEQ_LENGTH})")
    parser.add_argument("--tokenizer", help="which tokenizer made the ids, e.g. 'gpt2 (tiktoken)'")
    parser.add_argument("--made-with", help="how the data was made, one line")
    parser.add_argument("--license", help="license id for the metadata (default 'other')")
    parser.add_argument("--pretty-name", help="title of the card (default: the folder's name)")
    parser.add_argument("--token-column", help="MosaicML shards: the column of token ids; the card's rows are then "
                        "its ids (input_ids) instead of the samples as stored")
    parser.add_argument("--dtype", help="MosaicML shards: how a bytes token column's ids are read, e.g. int64")


def _card_settings(args):
    from ..publishing.card import CardSettings

    return CardSettings(seq_length=args.seq_length, tokenizer=args.tokenizer, made_with=args.made_with,
                        license=args.license, pretty_name=args.pretty_name, repo_id=getattr(args, "repo_id", None),
                        token_column=args.token_column, dtype=args.dtype)


def add_commands(commands) -> None:
    p = commands.add_parser("card", help="write DIR/README.md, a dataset card computed from the files")
    p.add_argument("directory", metavar="DIR", help="folder of .bin/.idx pairs or of MosaicML shards")
    p.add_argument("--repo-id", help="Hub repo id to show in the loading code (default USER/REPO)")
    _add_card_settings(p)
    p.set_defaults(run=_run_card, explain=in_flags(p))

    p = commands.add_parser("upload", help="publish DIR as a Hub dataset repo (writes its card first)")
    p.add_argument("directory", metavar="DIR", help="folder of .bin/.idx pairs or of MosaicML shards")
    p.add_argument("--repo-id", required=True, help="dataset repo, NAMESPACE/NAME")
    p.add_argument("--private", action="store_true",
                   help="create the repo private (an existing repo keeps its visibility)")
    p.add_argument("--revision", help="branch to commit to (created if missing; default main)")
    p.add_argument("--commit-message", help="default: 'Upload .bin/.idx token files with mmidx' (or 'Upload "
                   "MosaicML shards with mmidx')")
    p.add_argument("--dry-run", action="store_true",
                   help="print every file, its size and what would happen; no network")
    _add_card_settings(p)
    p.set_defaults(run=_run_upload, explain=in_flags(p))


def _run_card(args) -> None:
    from ..publishing.card import HISTOGRAM_NAME, README_NAME, write_card

    rendered = write_card(args.directory, _card_settings(args))
    rows = sum(s.num_examples for s in rendered.splits)
    seq_length = rendered.settings.seq_length
    print(f"wrote {Path(args.directory) / README_NAME} and {HISTOGRAM_NAME}: {len(rendered.splits)} split(s), "
          f"{rows:,} rows" + (f" of seq_length {seq_length}" if seq_length is not None else ""))


def _run_upload(args) -> None:
    from ..publishing.hub import upload

    upload(args.directory, args.repo_id, private=args.private, revision=args.revision,
           commit_message=args.commit_message, dry_run=args.dry_run, settings=_card_settings(args))
