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

The rule, for each name: relative, no ``..`` component, not a URL. "Not a URL" as datasets and
fsspec will open the name (:func:`is_url`): no ``://``, no ``::`` chain, no ``scheme:`` prefix in
any case, registered or not (``file:/x`` and ``local:/x`` are ``/x`` to fsspec; ``FILE:/x`` and
``a:b`` are taken from the working directory), no drive (``C:``). A name datasets has already
resolved may be a path or URL spelled below the folder or repo, a ``file:``/``local:`` one judged
by the local path fsspec opens for it, a chain never. A Megatron prefix must not be the folder
itself (``.``): its pair would be ``<folder>.bin`` beside it. The rule is applied to the names
as written, not to resolved link targets: a Hub snapshot (``snapshot_download``) is symbolic
links into ``blobs/``, clusters link data folders, and links that the user's own file system
holds are followed. ``..`` is refused even where it stays inside (``a/../b``): the system resolves
``link/..`` through the link, not lexically. A card's ``index_cache_dir`` is dropped
(hf/mmidx.py): a card never chooses where we write. A caller's own arguments may name anything.
"""

from __future__ import annotations

import os
import posixpath
import re
from urllib.parse import urlsplit

from fsspec.implementations.local import LocalFileSystem

from ..storage.files import is_remote, open_regular
from ..errors import ParameterError
from ..megatron.args import BLEND_SETTINGS, inline_argument_files, named_paths

# What fsspec's local file system strips off a name, in its order (LocalFileSystem._strip_protocol):
# "file://", "file:", "local://", "local:", case-sensitively ("FILE:/x" is a relative name to it).
_LOCAL_PREFIXES = tuple(protocol + sep for protocol in LocalFileSystem.protocol for sep in ("://", ":"))


def escapes(name: str) -> bool:
    """Whether ``name``, relative to a folder, may reach outside it: absolute, a ``..``
    component, or not a plain relative path to datasets and fsspec (:func:`is_url`)."""
    if is_url(name) or os.path.isabs(name) or name.startswith(("/", "\\")):
        return True
    return ".." in re.split(r"[\\/]", name)


def is_url(name: str) -> bool:
    """Whether datasets or fsspec open ``name`` as something other than a path joined to the
    folder: ``://`` or ``hf:`` (is_remote); ``::`` anywhere (datasets' xjoin and
    _prepare_path_and_storage_options and fsspec's url_to_fs split a name there into hops); or a
    scheme before the first ``:`` as urllib finds it (a letter, then letters, digits or ``+-.``;
    any case; leading blanks dropped). That is datasets' own test: resolve_pattern joins a
    pattern to the folder only when ``urlparse(name).scheme == ""`` (is_relative_path), and
    otherwise hands it to fsspec, which reads ``file:/x`` and ``local:/x`` as ``/x`` and
    ``FILE:/x``, ``memory:x``, ``C:x`` or ``a:b_text_document`` from the working directory.

    A colon after a ``/`` (``data/a:b_text_document``) or after a character no scheme holds
    (``a_b:c``) makes no scheme: datasets joins the name to the folder and fsspec opens it as
    written, so it passes. The top-level file ``a:b_text_document`` is ``./a:b_text_document``."""
    if is_remote(name) or "::" in name:
        return True
    try:
        return urlsplit(name).scheme != ""
    except ValueError:  # urllib refuses it (an unbalanced "[" after "//"): datasets cannot open it either
        return True


def _local_path(name: str) -> str:
    """``name`` without the local file system's own protocol (``file:///x`` and ``local:/x``
    are ``/x`` to fsspec); any other name as it is."""
    prefix = next((p for p in _LOCAL_PREFIXES if name.startswith(p)), "")
    return name[len(prefix):]


def _under(path: str, roots: list[str]) -> bool:
    """Whether ``path`` is spelled as a path below one of ``roots``, with no ``..`` below it;
    ``file:``/``local:`` judged by the local path they name, a chain (``a::b``) never below."""
    if "::" in path:  # its outer hops change what is read (an archive's member) and copy it (caches)
        return False
    path = _local_path(path)
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


def check_card_name(name, setting: str, roots: list[str] = (), prefix: bool = False) -> None:
    """Raises ParameterError when a name from the card's ``setting`` may reach outside the
    dataset. A name already resolved by datasets (a path or URL) passes when it is spelled
    below one of ``roots``. A Megatron ``prefix`` names PREFIX.bin and PREFIX.idx: one that is
    the folder itself (``.``, ``./``, an empty token) names the pair beside the folder."""
    if not isinstance(name, str):
        raise ParameterError(f"the dataset card's {setting} must name files by strings, got {type(name).__name__}")
    if (escapes(name) and not _under(name, roots)) or (prefix and posixpath.normpath(name.replace("\\", "/")) == "."):
        raise ParameterError(f"the dataset card's configs name {setting}={name!r}, outside the dataset folder or "
                             "repository; a card may only name files inside it, by relative paths without '..' or a "
                             "protocol (file:, simplecache::, ...) "
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
                check_card_name(name, setting, prefix=True)
    if card.get("megatron_args") is not None and "megatron_args" not in call:
        for argument, names in named_paths(card["megatron_args"]).items():
            for name in names:
                if not _is_number(name):
                    check_card_name(name, f"megatron_args --{argument.replace('_', '-')}",
                                    prefix=argument in BLEND_SETTINGS)
        inlined = inline_argument_files(card["megatron_args"], _opener(base_path, download_config))
        for argument, names in named_paths(inlined).items():  # the argument files' tokens
            for name in names:
                if not _is_number(name):
                    check_card_name(name, f"megatron_args --{argument.replace('_', '-')} (from an argument file)",
                                    prefix=argument in BLEND_SETTINGS)
        card = {**card, "megatron_args": inlined}
    return card


def _opener(base_path: str | None, download_config):
    """``open`` for names relative to the dataset: its folder's regular files, or its repo's."""
    root = base_path or "."
    if is_remote(root):
        from datasets.utils.file_utils import xopen

        return lambda name, mode="rb": xopen(posixpath.join(root, name), mode, download_config=download_config)
    return lambda name, mode="rb": open_regular(os.path.join(root, name), mode)


__all__ = ["check_card_name", "escapes", "is_url", "scoped_card"]
