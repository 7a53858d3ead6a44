"""Publishing a folder of ``.bin``/``.idx`` pairs, or of MosaicML shards, as a Hugging Face Hub
dataset repo.

The order matters and is the point of this module:

    1. check the repo id (huggingface_hub's own validator) and every pair (the format
       layer), or every MosaicML stream (each shard its index names there, at the size it
       records; a shard no index names refused, as the loader refuses it): one bad file
       and nothing is uploaded
    2. find the token where huggingface_hub looks (``HF_TOKEN``, ``hf auth login``); it is
       handed to huggingface_hub and never printed or logged here
    3. write or refresh the dataset card (card.py), so the repo loads in one line
    4. create the dataset repo (and branch) if needed, then ``HfApi.upload_folder``, which
       in the installed huggingface_hub chunks large files, commits big folders in parts
       and resumes an interrupted upload when the same call is run again

Every refusal is a :class:`HubError` saying what to do next. ``dry_run`` stops after
step 1 and prints what steps 3-4 would do, without touching the network; when the upload
would stop over the folder or the card, it raises the same error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Callable

from .card import HISTOGRAM_NAME, README_NAME, CardSettings, render_card, write_card
from .. import progress
from ..errors import FormatError, HubError, ParameterError
from ..sources.indexed import IndexedFile, split_prefix
from .mosaic_facts import check_shards, find_mosaic_splits, holds_mosaic_streams, split_streams

# Never uploaded: writers' temporary files (format.IndexedFileWriter writes
# "PREFIX.bin.tmp-PID-xxxx"), sampling index caches, editor and OS litter. huggingface_hub
# adds its own defaults (.git, .cache/huggingface) to these.
IGNORE_PATTERNS = [
    "*.tmp", "*.tmp-*", "*.tmp.*", "*.part", "*.partial", "*.incomplete", "*.lock", "*~",
    "*.pyc", "__pycache__/*", "*/__pycache__/*",
    ".cache/*", "*/.cache/*", "mmidx_indices/*", "*/mmidx_indices/*",
    ".DS_Store", "*/.DS_Store", ".ipynb_checkpoints/*", "*/.ipynb_checkpoints/*",
]
DEFAULT_COMMIT_MESSAGE = "Upload .bin/.idx token files with mmidx"
MOSAIC_COMMIT_MESSAGE = "Upload MosaicML shards with mmidx"


@dataclasses.dataclass
class PlannedFile:
    path: str  # relative to the folder, "/"-separated, as it will be named in the repo
    size: int
    action: str


@dataclasses.dataclass
class UploadPlan:
    directory: str
    repo_id: str
    files: list[PlannedFile]
    pairs: list[str]  # prefixes of the checked pairs (or index files of the checked streams), relative
    card: object = None  # the card.RenderedCard the upload writes (rendered once: it hashes every file)
    card_problem: str | None = None  # why no card can be made with these settings (then card is None)
    mosaic: bool = False  # the folder holds MosaicML shards: ``pairs`` are its streams' index files

    def describe(self) -> str:
        width = max([len(f.path) for f in self.files] + [4])
        lines = [f"{'file':<{width}}  {'bytes':>14}  action"]
        lines += [f"{f.path:<{width}}  {f.size:>14,}  {f.action}" for f in self.files]
        uploads = [f for f in self.files if not f.action.startswith("skip")]
        lines.append(f"{len(uploads)} file(s), {sum(f.size for f in uploads):,} bytes, to the dataset repo "
                     f"{self.repo_id}; {len(self.pairs)} {'MosaicML stream(s)' if self.mosaic else 'pair(s)'} checked")
        if self.card_problem:
            lines.append(f"the card cannot be made with these settings, so an upload would stop: {self.card_problem}")
        return "\n".join(lines)


def _hub():
    import huggingface_hub  # imported late: the format layer and the builder never need it
    return huggingface_hub


def check_repo_id(repo_id: str) -> str:
    """``namespace/name`` or ``name``, as huggingface_hub's validator accepts it."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise HubError(f"bad repo id {repo_id!r}: {error} Use NAMESPACE/NAME, e.g. my-user/my-tokens") from None
    if not repo_id:
        raise HubError("bad repo id '': use NAMESPACE/NAME, e.g. my-user/my-tokens")
    return repo_id


def _ignored_by(relative: str) -> str | None:
    """The ignore pattern ``relative`` matches (huggingface_hub's matcher and defaults), if any."""
    from huggingface_hub.utils import DEFAULT_IGNORE_PATTERNS, filter_repo_objects

    for pattern in IGNORE_PATTERNS + DEFAULT_IGNORE_PATTERNS:
        if not list(filter_repo_objects([relative], ignore_patterns=[pattern])):
            return pattern
    return None


def _local_files(directory: Path) -> list[tuple[str, int, str | None]]:
    """(relative path, size, ignore pattern or None) for every file under ``directory``."""
    files = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            relative = path.relative_to(directory).as_posix()
            files.append((relative, path.stat().st_size, _ignored_by(relative)))
    return files


def check_pairs(directory: str | os.PathLike) -> list[str]:
    """Opens every ``.bin``/``.idx`` pair that would be uploaded; raises one :class:`HubError`
    naming every bad file (nothing is uploaded), else returns the relative prefixes."""
    directory = Path(directory)
    if not directory.is_dir():
        raise HubError(f"{directory}: not a folder; give the folder that holds the .bin/.idx pairs")
    prefixes = sorted({split_prefix(rel) for rel, _, ignored in _local_files(directory)
                       if ignored is None and rel.endswith((".bin", ".idx"))})
    if not prefixes:
        raise HubError(f"{directory}: no .bin/.idx pairs to upload")
    problems: list[FormatError] = []
    for prefix in prefixes:
        try:
            IndexedFile.open(directory / prefix)
        except FormatError as error:
            problems.append(error)
    if problems:
        listed = "; ".join(str(p) for p in problems)
        raise HubError(f"{len(problems)} of {len(prefixes)} pair(s) are bad, nothing was uploaded: {listed}") \
            from problems[0]
    return prefixes


def check_streams(directory: str | os.PathLike) -> list[str]:
    """Checks every MosaicML stream of the folder as the loader finds them (each split's
    indexes; every shard an index names there at the size it records; a ``.mds`` file no index
    names, or one in no split, refused); raises one :class:`HubError` naming the problem
    (nothing is uploaded), else returns the index files, relative. Shards are read whole, their
    recorded hashes checked, when the card is made."""
    directory = Path(directory)
    base = directory.resolve()
    indexes = []
    try:
        for split, names in find_mosaic_splits(directory).items():
            for index in split_streams(directory, split, names):
                check_shards(index)
                indexes.append(Path(index.path).resolve().relative_to(base).as_posix())
    except (FormatError, ParameterError) as error:
        raise HubError(f"{directory}: its MosaicML shards are not what the loader reads, nothing was uploaded: "
                       f"{error}") from error
    return indexes


def plan_upload(directory: str | os.PathLike, repo_id: str, settings: CardSettings | None = None) -> UploadPlan:
    """Checks everything that can be checked offline and says what an upload would do.
    Renders the card in memory (for its size) but writes nothing and opens no connection."""
    check_repo_id(repo_id)
    directory = Path(directory)
    if not directory.is_dir():
        raise HubError(f"{directory}: not a folder; give the folder that holds the .bin/.idx pairs or MosaicML shards")
    mosaic = holds_mosaic_streams(directory)
    pairs = check_streams(directory) if mosaic else check_pairs(directory)
    rendered, problem = None, None
    try:
        rendered = render_card(directory, dataclasses.replace(settings or CardSettings(), repo_id=repo_id))
        generated = {README_NAME: len(rendered.text.encode("utf-8")), HISTOGRAM_NAME: len(rendered.histogram_png)}
    except ParameterError as error:  # e.g. a split too small for the default seq_length
        problem = f"{error}" + (" (pass --seq-length)" if "seq_length" in str(error) else "")
        generated = {README_NAME: 0, HISTOGRAM_NAME: 0}
    except FormatError as error:  # a shard whose bytes are not what its index records (read for the card)
        raise HubError(f"{directory}: a file is bad, nothing was uploaded: {error}") from error
    problem = problem or _unwritable(directory)
    files = []
    for relative, size, ignored in _local_files(directory):
        if relative in generated:
            continue
        files.append(PlannedFile(relative, size, f"skip: temporary or cache file ({ignored})" if ignored else "upload"))
    for name, size in generated.items():
        existed = (directory / name).is_file()
        files.append(PlannedFile(name, size, ("rewrite" if existed else "write") + " (generated card), then upload"))
    files.sort(key=lambda f: f.path)
    return UploadPlan(directory=str(directory), repo_id=repo_id, files=files, pairs=pairs, card=rendered,
                      card_problem=problem, mosaic=mosaic)


def _unwritable(directory: Path) -> str | None:
    """Why the card cannot be written into ``directory`` (a read-only folder or card), or None:
    the upload writes it first, and a dry run must say so rather than the upload fail there."""
    for path in (directory, *(directory / name for name in (README_NAME, HISTOGRAM_NAME))):
        if (path == directory or path.exists()) and not os.access(path, os.W_OK):
            return (f"{path} is not writable, and the upload writes the generated card ({README_NAME}, "
                    f"{HISTOGRAM_NAME}) into the folder first; make it writable or upload a writable copy")
    return None


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection failures of whichever HTTP library this huggingface_hub uses."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"),
                         ("requests", "ConnectionError"), ("requests", "Timeout")):
        with contextlib.suppress(ImportError, AttributeError):
            errors.append(getattr(__import__(module), name))
    return tuple(errors)


@contextlib.contextmanager
def _translated(repo_id: str, step: str, resume_hint: str | None = None):
    """huggingface_hub's errors as HubErrors that say what to do; nothing here sees the token."""
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled

    try:
        yield
    except HFValidationError as error:
        raise HubError(f"{step}: bad repo id or revision for {repo_id!r}: {error}") from None
    except OfflineModeIsEnabled:
        raise HubError(f"{step}: HF_HUB_OFFLINE is set; unset it to upload (or pass dry_run=True)") from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else None
        server = (getattr(error, "server_message", None) or str(error)).strip().splitlines()[0]
        if status == 401:
            raise HubError(f"{step}: the Hub rejected the token (401: not logged in or token expired); "
                           "run `hf auth login` or set HF_TOKEN to a token with write access") from None
        if status == 403:
            raise HubError(f"{step}: no write access to {repo_id} (403): the token needs the write role "
                           f"for that namespace, or choose a repo id under your own name. Hub said: {server}") from None
        if status == 404:
            raise HubError(f"{step}: {repo_id} not found or not visible to this token (404). Hub said: {server}") \
                from None
        message = f"{step}: the Hub answered {status}: {server}"
        if resume_hint and status is not None and status >= 500:
            message += f" ({resume_hint})"
        raise HubError(message) from None
    except ValueError as error:  # e.g. huggingface_hub's "Invalid metadata in README.md"
        raise HubError(f"{step}: {error}") from error
    except (KeyboardInterrupt, *_transport_errors()) as error:
        what = "interrupted" if isinstance(error, KeyboardInterrupt) else f"cut off ({type(error).__name__}: {error})"
        raise HubError(f"{step}: {what}. " + (resume_hint or "Nothing was changed; run the same command again.")) \
            from None


def upload(directory: str | os.PathLike, repo_id: str, *, private: bool = False, revision: str | None = None,
           commit_message: str | None = None, dry_run: bool = False, settings: CardSettings | None = None,
           api=None, echo: Callable[[str], None] = print) -> str | None:
    """Uploads ``directory`` to the dataset repo ``repo_id`` and returns its URL (None for
    a dry run). ``api`` is an ``HfApi`` (for another endpoint); by default one is made
    with the token huggingface_hub finds. ``echo`` receives every line meant for the user.
    A dry run prints the plan, then raises the :class:`HubError` the upload would stop with
    when the card cannot be made or written (a missing token is only reported)."""
    settings = dataclasses.replace(settings or CardSettings(), repo_id=repo_id)
    plan = plan_upload(directory, repo_id, settings)
    hub = _hub()
    # An HfApi made with a token uploads with that token, as its own methods do.
    token = getattr(api, "token", None) or hub.get_token()
    if dry_run:
        echo(plan.describe())
        echo("dry run: nothing written, nothing sent; token " + (
            "found" if token else "NOT found (a real upload would stop: run `hf auth login` or set HF_TOKEN)"))
    # A dry run stops where the upload would over the folder and its settings, with the same
    # error (a non-zero exit from the CLI): a script that runs the dry run first must not go
    # on to an upload that cannot work. A missing token is only reported: the documented way
    # is a dry run first, then `hf auth login` and the upload.
    if plan.card_problem:
        raise HubError(f"the dataset card cannot be made, nothing was uploaded: {plan.card_problem}")
    if dry_run:
        return None
    if token is None:
        raise HubError("not logged in: run `hf auth login` or set HF_TOKEN to a token with write access "
                       "(nothing was uploaded)")

    write_card(directory, rendered=plan.card)
    echo(f"card: wrote {Path(directory) / README_NAME} and {HISTOGRAM_NAME}")
    api = api or hub.HfApi()
    with _translated(repo_id, "creating the dataset repo"):
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True, token=token)
    if revision and revision != "main":
        with _translated(repo_id, f"creating branch {revision!r}"):
            api.create_branch(repo_id, branch=revision, repo_type="dataset", exist_ok=True, token=token)
    resume = (f"Run the same command again to resume: files already committed to {repo_id} are skipped "
              "and data already sent is not sent again")
    message = commit_message or (MOSAIC_COMMIT_MESSAGE if plan.mosaic else DEFAULT_COMMIT_MESSAGE)
    with _translated(repo_id, "uploading", resume_hint=resume), progress.hub_bars_follow_the_switch():
        api.upload_folder(repo_id=repo_id, folder_path=str(directory), repo_type="dataset", revision=revision,
                          commit_message=message, ignore_patterns=list(IGNORE_PATTERNS),
                          token=token)
    url = str(url).rstrip("/") + (f"/tree/{revision}" if revision and revision != "main" else "")
    echo(url)
    return url



__all__ = ["IGNORE_PATTERNS", "PlannedFile", "UploadPlan", "check_pairs", "check_repo_id", "check_streams",
           "plan_upload", "upload"]
