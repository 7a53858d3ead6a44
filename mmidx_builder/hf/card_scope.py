"""What a dataset card may name: files inside its own folder or Hub repository, judged on the
names as written.

A card (README.md's ``configs:``) is text from whoever published the dataset, and
``load_dataset(folder)`` / ``load_dataset("user/repo")`` hand its settings to the builder. So
before any file is opened, everything in it that names a file is checked:

    data_files, data_dir                   datasets' own card fields (patterns, unresolved)
    data_path, train/valid/test_data_path  Megatron prefixes (the weights among them skipped)
    megatron_args                          --data-path, --train/valid/test-data-path, and the files
                                           --data-args-path / --per-split-data-args-path name; those
                                           files are read from the folder or repo and their tokens
                                           put into the command line, checked like the rest

The rule, for each name: relative, no ``..`` component, not a URL. It is applied to the names
as written, not to resolved link targets: a Hub snapshot (``snapshot_download``) is symbolic
links into ``blobs/``, clusters link data folders, and links that the user's own file system
holds are followed. ``..`` is refused even where it stays inside (``a/../b``): the system
resolves ``link/..`` through the link, not lexically. A card's ``index_cache_dir`` is dropped
(hf/mmidx.py): a card never chooses where we write. A caller's own arguments may name anything.
"""

from __future__ import annotations

import os
import posixpath
import re

from ..storage.files import is_remote, open_regular
from ..errors import ParameterError
from ..megatron.args import BLEND_SETTINGS, inline_argument_files, named_paths


def escapes(name: str) -> bool:
    """Whether ``name``, relative to a folder, may reach outside it (read lexically)."""
    if is_remote(name) or os.path.isabs(name) or name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[\\/]", name):
        return True
    return ".." in re.split(r"[\\/]", name)


def _under(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is spelled as a path below one of ``roots``, with no ``..`` below it."""
    for root in roots:
        root = root.rstrip("/")
        if path.startswith(root + "/"):
            return ".." not in path[len(root) + 1:].split("/")
    return False


def _roots(base_path: str | None, data_dir: str | None) -> list[str]:
    """The dataset's folder as the builder was given it and as datasets resolved it (it
    resolves the folder's own path before resolving the card's patterns in it), or its repo."""
    root = base_path or "."
    if is_remote(root):
        return [posixpath.join(root, data_dir) if data_dir else root]
    root = os.path.join(root, data_dir) if data_dir else root
    return [os.path.normpath(os.path.abspath(root)), os.path.realpath(root)]


def check_card_name(name, setting: str, roots: list[str] = ()) -> None:
    """Raises ParameterError when a name from the card's ``setting`` may reach outside the
    dataset. A name already resolved by datasets (a path or URL) passes when it is spelled
    below one of ``roots``."""
    if not isinstance(name, str):
        raise ParameterError(f"the dataset card's {setting} must name files by strings, got {type(name).__name__}")
    if escapes(name) and not _under(name, roots):
        raise ParameterError(f"the dataset card's configs name {setting}={name!r}, outside the dataset folder or "
                             "repository; a card may only name files inside it, by relative paths without '..' "
                             f"(pass {setting.split()[0]}= yourself to read files from elsewhere)")


def _prefixes(value, setting: str) -> list:
    """The names among Megatron --data-path tokens: every token but the numbers (weights)."""
    tokens = value.split() if isinstance(value, str) else value
    if not isinstance(tokens, (list, tuple)):
        raise ParameterError(f"the dataset card's {setting} must be Megatron's --data-path tokens (a list or one "
                             f"string), got {type(value).__name__}")
    return [t for t in tokens if not isinstance(t, (int, float)) and not _is_number(t)]


def _is_number(token) -> bool:
    try:
        float(token)
    except (TypeError, ValueError):
        return False
    return True


def scoped_card(card: dict, data_files, data_dir, call: dict, base_path: str | None, download_config=None) -> dict:
    """``card`` (a card config's settings) after checking every name in it, and in its
    ``data_files`` and ``data_dir``, with ``megatron_args``' argument files read from the
    dataset (``base_path``, a folder or Hub repo) and inlined. Settings the caller gives in
    ``call`` replace the card's and are not checked."""
    if data_dir is not None and "data_dir" not in call:
        check_card_name(data_dir, "data_dir")
    if data_files and "data_files" not in call:
        # Patterns as the card wrote them, or (once datasets has resolved the config) the
        # paths they matched, spelled below the folder: links in it are not followed here.
        roots = _roots(base_path, data_dir)
        for patterns in data_files.values():
            for pattern in patterns:
                check_card_name(str(pattern), "data_files", roots)
    for setting in BLEND_SETTINGS:
        if card.get(setting) is not None and setting not in call:
            for name in _prefixes(card[setting], setting):
                check_card_name(name, setting)
    if card.get("megatron_args") is not None and "megatron_args" not in call:
        for argument, names in named_paths(card["megatron_args"]).items():
            for name in names:
                if not _is_number(name):
                    check_card_name(name, f"megatron_args --{argument.replace('_', '-')}")
        inlined = inline_argument_files(card["megatron_args"], _opener(base_path, download_config))
        for argument, names in named_paths(inlined).items():  # the argument files' tokens
            for name in names:
                if not _is_number(name):
                    check_card_name(name, f"megatron_args --{argument.replace('_', '-')} (from an argument file)")
        card = {**card, "megatron_args": inlined}
    return card


def _opener(base_path: str | None, download_config):
    """``open`` for names relative to the dataset: its folder's regular files, or its repo's."""
    root = base_path or "."
    if is_remote(root):
        from datasets.utils.file_utils import xopen

        return lambda name, mode="rb": xopen(posixpath.join(root, name), mode, download_config=download_config)
    return lambda name, mode="rb": open_regular(os.path.join(root, name), mode)


__all__ = ["check_card_name", "escapes", "scoped_card"]
