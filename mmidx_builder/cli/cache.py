"""``mmidx cache``: the index caches in a folder, their size and age and whether any current
file still uses them; ``--prune`` removes the unused ones (megatron/cache_folder.py)."""

from __future__ import annotations

import json

from .files import _human_bytes as _size
from .keywords import in_flags

DAY = 24 * 3600


def add_commands(commands) -> None:
    p = commands.add_parser("cache", help="list the index caches (sampling indices, pair records) and prune unused ones")
    p.add_argument("--index-cache-dir", metavar="DIR",
                   help="the folder load_dataset's index_cache_dir names (default: <datasets cache>/mmidx_indices)")
    p.add_argument("--prune", action="store_true", help="remove the caches no current file uses")
    p.add_argument("--older-than", type=float, metavar="DAYS",
                   help="with --prune: also remove caches of unknown use written more than DAYS days ago")
    p.add_argument("--dry-run", action="store_true", help="with --prune: say what would be removed, remove nothing")
    p.add_argument("--json", action="store_true", help="one JSON object per cache")
    p.set_defaults(run=_cache, explain=in_flags(p))


def _age(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h" if seconds < 2 * DAY else f"{seconds / DAY:.0f} days"


def _cache(args) -> None:
    from ..megatron import cache_folder

    folder = args.index_cache_dir or cache_folder.default_folder()
    entries = cache_folder.scan(folder)
    chosen = cache_folder.prunable(entries, None if args.older_than is None else args.older_than * DAY)
    if args.json:
        for e in entries:
            print(json.dumps({"kind": e.kind, "key": e.key, "status": e.status, "why": e.why, "bytes": e.bytes,
                              "age_seconds": round(e.age_seconds), "files": e.files, "paths": e.paths,
                              "pruned": args.prune and not args.dry_run and e in chosen}))
    else:
        for e in entries:
            what = ", ".join(e.files) or e.why
            mark = "  (pruned)" if args.prune and e in chosen else ""
            print(f"{e.status:8} {e.kind:17} {_size(e.bytes):>10} {_age(e.age_seconds):>9}  {what}{mark}")
    totals = {status: sum(e.bytes for e in entries if e.status == status)
              for status in (cache_folder.IN_USE, cache_folder.UNUSED, cache_folder.UNKNOWN)}
    summary = (f"{folder}: {len(entries)} caches, " + ", ".join(f"{_size(b)} {s}" for s, b in totals.items()))
    if args.prune:
        freed = sum(e.bytes for e in chosen) if args.dry_run else cache_folder.prune(chosen)
        summary += f"; {'would free' if args.dry_run else 'freed'} {_size(freed)} ({len(chosen)} caches)"
    if not args.json:
        print(summary)
