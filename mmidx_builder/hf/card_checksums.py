"""The dataset card's sha256 of every file, checked against the files a load downloaded.

``mmidx card`` (card.py) writes a "## Files" table with one row per file: the name in
backticks and its sha256 in backticks. With ``verification_mode="all_checks"``, ``datasets``
computes the sha256 of every file the builder downloads, but it has nothing to compare them
with: a card's ``dataset_info`` YAML carries no checksums. :func:`verify_against_card` makes
that comparison, so a file changed on the Hub after its card was written, or a download
that went wrong, stops the load before any row is written, naming the file.

Called by the builder from ``_split_generators`` (after the downloads, before generation,
where ``datasets`` runs its own checksum check); does nothing unless checksums are recorded.
"""

from __future__ import annotations

import logging
import os
import re

from ..storage.files import is_remote
from ..errors import FormatError

logger = logging.getLogger(__name__)

CARD_NAME = "README.md"
_FILES_HEADING = "## Files"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BACKTICKED = re.compile(r"`([^`]+)`")


def card_sha256(text: str) -> dict[str, str]:
    """``{file name relative to the card's folder: sha256}`` from the card's "## Files" table.

    Rows are table lines holding exactly two backticked cells, a name and a 64-digit hex
    digest, which is how card.py writes them; anything else in the section is ignored. A
    card without the section (not written by ``mmidx card``) records nothing."""
    recorded: dict[str, str] = {}
    in_files = False
    for line in text.splitlines():
        if line.startswith("## "):
            in_files = line.strip() == _FILES_HEADING
            continue
        if not in_files or not line.lstrip().startswith("|"):
            continue
        cells = _BACKTICKED.findall(line)
        if len(cells) == 2 and _SHA256.fullmatch(cells[1]):
            recorded[cells[0]] = cells[1]
    return recorded


def _relative(url: str, base_path: str) -> str | None:
    """``url``'s name relative to the dataset's folder or repo, or None outside it. Local paths
    are compared as absolute paths (a relative folder, ``load_dataset("data")``, gets absolute
    data files), not resolved: symlinked files (a Hub snapshot's) keep the names the card lists."""
    if is_remote(base_path):
        base = base_path.rstrip("/") + "/"
        return url[len(base):] if url.startswith(base) else None
    if is_remote(url):
        return None
    relative = os.path.relpath(os.path.abspath(url), os.path.abspath(base_path))
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return None
    return relative.replace(os.sep, "/")


def _card_path(dl_manager, base_path: str) -> str | None:
    """The card's local path (downloaded from a repo), or None when there is none. A local
    folder's card is read in place: the download manager joins a relative path to its base
    path a second time."""
    if not is_remote(base_path):
        path = os.path.join(os.path.abspath(base_path), CARD_NAME)
        return path if os.path.isfile(path) else None
    try:
        return dl_manager.download(base_path.rstrip("/") + "/" + CARD_NAME)
    except FileNotFoundError:
        return None


def verify_against_card(dl_manager, base_path: str | None) -> None:
    """Compares the sha256 ``dl_manager`` recorded for each downloaded file with the one the
    card at ``base_path/README.md`` records; raises :class:`FormatError` naming every file
    that differs. Files the card does not list are not checked (logged)."""
    recorded = dl_manager.get_recorded_sizes_checksums() if getattr(dl_manager, "record_checksums", False) else {}
    downloaded = {url: entry["checksum"] for url, entry in recorded.items() if entry.get("checksum")}
    if not downloaded or not base_path:
        return
    card_url = base_path.rstrip("/") + "/" + CARD_NAME
    card_path = _card_path(dl_manager, base_path)
    if card_path is None:
        logger.info(f"no {card_url}: the downloaded files' sha256 are recorded but not checked")
        return
    with open(card_path, encoding="utf-8") as f:
        expected = card_sha256(f.read())
    bad, unlisted = [], []
    for url, found in downloaded.items():
        name = _relative(url, base_path)
        if name is None or name == CARD_NAME:
            continue
        if name not in expected:
            unlisted.append(name)
        elif expected[name] != found:
            bad.append((url, name, expected[name], found))
    if unlisted:
        logger.warning(f"{card_url} records no sha256 for {sorted(unlisted)}: not checked")
    if bad:
        url, name, want, got = bad[0]
        others = f"; {len(bad) - 1} more file(s) differ too: {[b[1] for b in bad[1:]]}" if len(bad) > 1 else ""
        raise FormatError(url, "sha256", f"{want} (recorded for {name} in {card_url})", got,
                          hint="the file is not the one the dataset card describes: it changed after the card "
                               "was written, or the download is corrupt. Re-run `mmidx card` after changing "
                               "files (hub_upload.py does), or pass verification_mode='basic_checks' to load "
                               "it anyway" + others)
    logger.info(f"sha256 of {len(downloaded) - len(unlisted)} downloaded file(s) match {card_url}")


__all__ = ["card_sha256", "verify_against_card"]
