"""Every ``.idx`` and every ``.bin`` a listing sees is accounted for: a shard is never left out
without a word.

``datasets`` resolves a folder, a ``data_files`` pattern or a Hub repo to the *regular files*
it matches, and drops the rest silently. For ``.bin``/``.idx`` pairs that is missing data: a
folder whose ``b_text_document.bin`` is gone (an interrupted copy), a dangling link (a broken
snapshot), a directory or a FIFO in its place, still holds ``b_text_document.idx``, and the
load served ``a`` alone. So every entry a pattern matches is looked at here, whatever its type:

- a ``.idx`` whose ``.bin`` is not a regular file beside it is a :class:`MissingPartnerError`
  naming the ``.bin`` and what is there instead (nothing, a dangling link, a FIFO...);
- a ``.bin`` or ``.idx`` that is not a regular file is one too;
- any other matched data file that is no regular file (a FIFO among raw ``.dat`` files) is a
  :class:`FormatError` naming it; directories are what ``**`` matches on the way and are no
  data files, so they are left alone unless named like one (:func:`named_like_data`).

A pattern that names ``.bin`` files (``data/*.bin``) is also matched with ``.idx`` in their
place, so that a ``.idx`` whose ``.bin`` is gone is seen. Nothing here imports ``datasets``:
hf/registry.py lists the entries with datasets' own file systems and asks :func:`problems`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..storage.files import is_remote, local_kind
from ..errors import FormatError, MissingPartnerError

PAIR_SUFFIXES = (".bin", ".idx")


def partner_pattern(pattern: str) -> str | None:
    """The pattern that finds the ``.idx`` files of a pattern that names ``.bin`` files."""
    return pattern[:-4] + ".idx" if pattern.endswith(".bin") else None


def named_like_data(path: str, pattern: str) -> bool:
    """Whether a directory ``path`` a pattern matched stands where a data file would: named
    like a pair's file, or ending in the pattern's own extension (``b.dat/`` for ``*.dat``).
    Other directories are what ``**`` matches on the way down."""
    extension = os.path.splitext(pattern)[1]
    return path.endswith(PAIR_SUFFIXES) or bool(extension and not any(c in extension for c in "*?[") and
                                                path.endswith(extension))


def entry_kind(path: str, listed_type: str, is_link: bool = False) -> str | None:
    """What a listed entry is (None: a regular file, or a link to one). Local entries are
    looked at on disk (a listing says "other" for a FIFO and a dangling link alike)."""
    if listed_type == "file" and not is_link:
        return None
    if is_remote(path):
        return None if listed_type == "file" else f"a {listed_type}"
    return local_kind(path)


def problems(entries: Mapping[str, str | None], is_data_file=lambda path: True) -> list[FormatError]:
    """The shards ``entries`` ({path: kind, None for a regular file}, everything one listing
    matched) would silently leave out, one error each, in path order. ``is_data_file(path)``
    says whether a matched non-pair file would have been read as data."""
    regular = {path for path, kind in entries.items() if kind is None}
    found: dict[str, FormatError] = {}
    for path in sorted(entries):
        kind = entries[path]
        if path.endswith(".idx") and kind is None:
            partner = path[:-4] + ".bin"
            if partner in regular:
                continue
            what = entries.get(partner) or ("no such file" if is_remote(partner) else local_kind(partner))
            if what is not None:  # None: a regular file the pattern did not match, there to be read
                found.setdefault(partner, MissingPartnerError(
                    partner, "file", f"the partner of {path}", what,
                    hint="a .bin/.idx pair needs both files; restore it, or remove both to leave the shard out"))
        elif kind is None:
            continue
        elif path.endswith(PAIR_SUFFIXES):
            found.setdefault(path, MissingPartnerError(path, "file", "a regular file (one of a .bin/.idx pair)", kind))
        elif is_data_file(path):
            found.setdefault(path, FormatError(path, "file", "a regular file (a data file the pattern matched)", kind,
                                               hint="replace it by the file, or remove it to leave it out"))
    return list(found.values())


def one_error(errors: Iterable[FormatError]) -> FormatError | None:
    """The first error, saying how many more shards there are like it (one line)."""
    errors = list({e.path: e for e in reversed(list(errors))}.values())[::-1]  # one per file, first seen first
    if not errors:
        return None
    first = errors[0]
    if len(errors) > 1:
        others = ", ".join(e.path for e in errors[1:4]) + (", ..." if len(errors) > 4 else "")
        first.args = (f"{first.args[0]} (and {len(errors) - 1} more file(s) like it: {others})",)
    return first


__all__ = ["entry_kind", "local_kind", "named_like_data", "one_error", "partner_pattern", "problems"]
