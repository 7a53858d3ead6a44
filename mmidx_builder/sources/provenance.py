"""What made a pair's token ids, and what fixes a split's sample order, carried to the dataset.

Two records, one per layer:

    PREFIX.mmidx-info   a JSON sidecar beside ``PREFIX.bin``/``PREFIX.idx``, written by
                        ``mmidx convert`` (and ``mmidx merge``) after the pair is complete:
                        ``{"mmidx_info": 1, "tokenizer": ..., "vocab_size": ..., "eod_id": ...,
                        "append_eod": ..., "pair": {"idx_bytes": ..., "idx_xxh3_128": ...}}``
    info.description    the builder copies what it knows per split into ``DatasetInfo``: the
                        sidecars' tokenizer and EOD id (when every file of the split has one and
                        they agree) and the split's *order*: the files (names, sequence count,
                        token count, a hash of the lengths) and the settings that decide which
                        sample comes at which position (seq_length, seed, num_epochs,
                        num_samples, add_extra_token), plus the number of rows.

A sidecar describes one generation of its pair. ``pair`` names the ``.idx`` it was written
for (its size and xxh3-128 digest; the index fixes every sequence's length, so a rewrite with
other tokens changes it): a sidecar whose ``.idx`` has changed since is ignored with a
warning, whoever replaced the pair. Our writers also remove a pair's sidecar before renaming
a new pair into place, so a writer killed before the new sidecar leaves none, never the old
one. (Sidecars of older versions have no ``pair`` and are read as they were.)

Why the sidecar is not ``PREFIX.mmidx.json``: ``datasets`` infers a folder's builder from
the most common data-file extension, counting every suffix of every name, and breaks ties in
favour of ``.json``; a folder of N pairs with N ``.json`` sidecars loads as JSON lines. An
extension ``datasets`` does not know is left out of data files altogether.

Why ``description``: ``DatasetInfo`` keeps only its own fields when it is written to and read
back from the Arrow cache (``dataset_info.json``), and ``description`` is a free string that
survives the cache, ``streaming=True``, ``with_format`` and copies of the dataset. The
builder writes a JSON object ``{"mmidx": {"version": 1, "splits": {...}}}`` there; a
description that was already set (by a card) is kept under ``"text"``.

No ``datasets``, ``torch`` or ``huggingface_hub`` import at module level: ``mmidx convert``
uses this module.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import warnings
from pathlib import Path

import xxhash

from ..errors import FormatError
from .indexed import SIDECAR_SUFFIX, split_prefix
from .token_source import lengths_fingerprint
from ..storage.files import file_identity, is_remote, read_small_file, write_atomically

logger = logging.getLogger(__name__)

SIDECAR_VERSION = 1
INFO_KEY = "mmidx"
INFO_VERSION = 1
# A sidecar is a few hundred bytes; anything larger is not one (and is not read whole).
SIDECAR_LIMIT = 1 << 20
# Fields a sidecar holds, with the types each may take.
_SIDECAR_FIELDS = {"tokenizer": (str, type(None)), "vocab_size": (int, type(None)),
                   "eod_id": (int, type(None)), "append_eod": (bool,)}
# What names the pair's generation in ``pair``.
_PAIR_FIELDS = {"idx_bytes": int, "idx_xxh3_128": str}


def sidecar_path(prefix: str | os.PathLike) -> str:
    """``PREFIX.mmidx-info`` for a pair named by its prefix, ``.bin`` or ``.idx``."""
    return split_prefix(os.fspath(prefix)) + SIDECAR_SUFFIX


def index_fingerprint(idx_path: str, opener=open) -> dict:
    """``{"idx_bytes": size, "idx_xxh3_128": digest}`` of an ``.idx``: what a sidecar records
    of the pair it describes. xxh3 reads at memory speed (the index is read whole on every
    open anyway); a local file's answer is kept per file identity."""
    key = None if is_remote(idx_path) else file_identity(idx_path)
    if key is not None and key in _FINGERPRINTS:
        return dict(_FINGERPRINTS[key])
    digest, size = xxhash.xxh3_128(), 0
    with opener(idx_path, "rb") as f:
        while chunk := f.read(1 << 24):
            digest.update(chunk)
            size += len(chunk)
    fingerprint = {"idx_bytes": size, "idx_xxh3_128": digest.hexdigest()}
    if key is not None:
        if len(_FINGERPRINTS) >= 4096:  # a bounded memo: folders of many pairs are read once anyway
            _FINGERPRINTS.clear()
        _FINGERPRINTS[key] = fingerprint
    return dict(fingerprint)


_FINGERPRINTS: dict[str, dict] = {}


def write_sidecar(prefix: str | os.PathLike, *, tokenizer: str | None, vocab_size: int | None,
                  eod_id: int | None, append_eod: bool) -> str:
    """Writes the pair's sidecar atomically (temporary name, then rename); returns its path.
    It records the pair's ``.idx`` as it is now (write it after the pair is complete)."""
    record = {"mmidx_info": SIDECAR_VERSION, "tokenizer": tokenizer,
              "vocab_size": None if vocab_size is None else int(vocab_size),
              "eod_id": None if eod_id is None else int(eod_id), "append_eod": bool(append_eod),
              "pair": index_fingerprint(split_prefix(os.fspath(prefix)) + ".idx")}
    path = sidecar_path(prefix)
    write_atomically(path, json.dumps(record, indent=1, sort_keys=True).encode() + b"\n")
    return path


def parse_sidecar(text: str | bytes, path: str) -> dict:
    """The sidecar's fields, or :class:`FormatError` naming the field that is wrong."""
    return _parse_sidecar(text, path)[0]


def _parse_sidecar(text: str | bytes, path: str) -> tuple[dict, dict | None]:
    """(fields, the ``pair`` it describes or None for older sidecars)."""
    if len(text) > SIDECAR_LIMIT:
        raise FormatError(path, "size", f"at most {SIDECAR_LIMIT:,} bytes", f"{len(text):,}")
    try:
        record = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise FormatError(path, "sidecar", "a JSON object", f"text that is not JSON ({error})") from None
    except RecursionError:  # a sidecar is flat; json recurses once per nesting level
        raise FormatError(path, "sidecar", "a flat JSON object", "JSON nested too deeply to parse") from None
    if not isinstance(record, dict):
        raise FormatError(path, "sidecar", "a JSON object", type(record).__name__)
    if record.get("mmidx_info") != SIDECAR_VERSION:
        raise FormatError(path, "mmidx_info", SIDECAR_VERSION, record.get("mmidx_info"),
                          hint="written by another version of mmidx_builder")
    for name, types in _SIDECAR_FIELDS.items():
        value = record.get(name)
        if not isinstance(value, types) or (int in types and isinstance(value, bool)):
            raise FormatError(path, name, " or ".join(t.__name__ for t in types), repr(value))
    pair = record.get("pair")
    if pair is not None and not (isinstance(pair, dict) and all(
            isinstance(pair.get(k), t) and not isinstance(pair.get(k), bool) for k, t in _PAIR_FIELDS.items())):
        raise FormatError(path, "pair", "{" + ", ".join(f'"{k}": {t.__name__}' for k, t in _PAIR_FIELDS.items()) + "}",
                          repr(pair)[:200])
    return {name: record[name] for name in _SIDECAR_FIELDS}, pair


def _of_this_pair(fields: dict, pair: dict | None, path: str, idx_path: str, opener=open) -> dict | None:
    """``fields`` if the sidecar at ``path`` describes the ``.idx`` there now, else None with
    a warning (a rewrite or replacement of the pair since the sidecar was written)."""
    if pair is None:
        return fields
    try:
        now = index_fingerprint(idx_path, opener)
    except OSError as error:
        now = {"error": str(error)}
    if now == {k: pair[k] for k in _PAIR_FIELDS}:
        return fields
    warnings.warn(f"{path} describes another generation of its pair: {idx_path} is now {now}, the sidecar was "
                  f"written for {pair}; ignoring the sidecar (its tokenizer and EOD id may not be this data's)",
                  UserWarning, stacklevel=3)
    return None


def read_sidecar(prefix: str | os.PathLike) -> dict | None:
    """A local pair's sidecar fields, or None when it has none or it describes another
    generation of the pair (then with a warning)."""
    path = sidecar_path(prefix)
    try:
        text = read_small_file(path, SIDECAR_LIMIT)  # a FIFO or a directory is refused, not waited on
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:  # a pair named near NAME_MAX: no sidecar name fits beside it
            return None
        raise
    fields, pair = _parse_sidecar(text, path)
    return _of_this_pair(fields, pair, path, split_prefix(os.fspath(prefix)) + ".idx")


def merge_sidecars(prefixes, output_prefix: str | os.PathLike) -> str | None:
    """The sidecar of a merge: written when every input has one and all say the same thing."""
    records = [read_sidecar(p) for p in prefixes]
    if not records or any(r is None for r in records) or any(r != records[0] for r in records[1:]):
        return None
    return write_sidecar(output_prefix, **records[0])


def _common(records: list[dict | None]) -> dict:
    """Tokenizer facts shared by every file, or nothing when one lacks a sidecar or they differ."""
    if not records or any(r is None for r in records) or any(r != records[0] for r in records[1:]):
        return {name: None for name in _SIDECAR_FIELDS}
    return dict(records[0])


def _fetch_sidecar(bin_path: str, dl_manager, opener) -> dict | None:
    """The sidecar beside a data file, local or remote (through the builder's download manager
    and ``open``, which streaming patches). A missing remote sidecar is not an error: most
    pairs (Megatron's own preprocess_data) have none."""
    path = sidecar_path(bin_path)
    if not is_remote(path):
        return read_sidecar(bin_path)
    try:
        local = dl_manager.download(path) if dl_manager is not None else path
        with opener(local, "rb") as f:
            text = f.read(SIDECAR_LIMIT + 1)
    except Exception as error:  # noqa: BLE001  (fsspec/HTTP/Hub errors differ by backend; all mean "none")
        logger.debug("no sidecar at %s: %s", path, error)
        return None
    fields, pair = _parse_sidecar(text, path)
    if pair is None:
        return fields
    idx = split_prefix(bin_path) + ".idx"
    try:
        idx = dl_manager.download(idx) if dl_manager is not None else idx
    except Exception as error:  # noqa: BLE001  (as above: the backends' errors differ)
        logger.debug("cannot fetch %s to check the sidecar: %s", idx, error)
    return _of_this_pair(fields, pair, path, idx, opener)


def tokenizer_facts(files, dl_manager=None, opener=open, fetched: dict | None = None) -> dict:
    """What the sidecars of ``files`` (the .bin files of a split) agree on: tokenizer,
    vocab_size, eod_id, append_eod; all None unless every file has a sidecar and they agree.

    ``fetched`` ({file: its sidecar's fields or None}) keeps what was fetched, for the other
    splits of a blend, which share files. Remote sidecars are fetched all at once when
    streaming (a download manager that downloads is left to do one at a time)."""
    fetched = {} if fetched is None else fetched
    todo = [f for f in dict.fromkeys(map(str, files)) if f not in fetched]
    remote = [f for f in todo if is_remote(f)] if dl_manager is None or getattr(dl_manager, "is_streaming", False) \
        else []
    if len(remote) > 1:
        from ..storage.remote import concurrently

        fetched.update(zip(remote, concurrently([functools.partial(_fetch_sidecar, f, dl_manager, opener)
                                                  for f in remote])))
    for f in todo:
        if f not in fetched:
            fetched[f] = _fetch_sidecar(f, dl_manager, opener)
    return _common([fetched[str(f)] for f in files])


def raw_facts(n_bytes: int) -> dict:
    """Raw files end every file with the end-of-file token (rawfiles.eof_id): it is their EOD."""
    from .raw import eof_id  # the raw layer, only for raw files

    eof = eof_id(n_bytes)
    return {"tokenizer": f"raw bytes, n_bytes={n_bytes}", "vocab_size": eof + 1, "eod_id": eof, "append_eod": True}


def source_fingerprint(source) -> dict:
    """What of a token source decides the samples: its sequence count, token count, a hash of
    its lengths and, for a Megatron split's part, the sequence range it covers. Two files of
    one name (``x/a_text_document``, ``y/a_text_document``) or one file under two split strings
    differ here."""
    # An opened .bin/.idx pair recorded it with its index cache: no pass over its lengths.
    found = dict(getattr(source, "lengths_fingerprint", None) or lengths_fingerprint(source.sequence_lengths))
    if hasattr(source, "begin") and hasattr(source, "end"):
        found["sequence_range"] = [int(source.begin), int(source.end)]
    return found


def order_fingerprint(*, kind: str, files, settings: dict, rows: int, sources=()) -> dict:
    """The one fingerprint of a split's sample order, for every kind (the rank stream compares
    it when a state is loaded): the builder kind, the files' names, the settings that decide
    which sample comes at which position, the row count, and :func:`source_fingerprint` of
    each source (flat for one, a list under ``"sources"`` for a blend's parts)."""
    order = {"mode": kind, "files": [os.path.basename(str(p)) for p in files], **settings, "rows": int(rows)}
    sources = list(sources)
    if len(sources) == 1:
        order.update(source_fingerprint(sources[0]))
    elif sources:
        order["sources"] = [source_fingerprint(s) for s in sources]
    return order


def split_record(*, kind: str, files, settings: dict, rows: int, source=None, sources=(),
                 facts: dict | None = None) -> dict:
    """What a builder records for one split (see the module docstring): ``facts`` about the
    tokens (tokenizer_facts / raw_facts), and the split's order (:func:`order_fingerprint`
    over ``source``, or the several ``sources`` of a blend or of a pair's two sides)."""
    record = dict(facts or _common([]))
    record["order"] = order_fingerprint(kind=kind, files=files, settings=settings, rows=rows,
                                        sources=[source] if source is not None else sources)
    return record


def record_split(info, split: str, **record) -> None:
    """A builder's one call per split: writes :func:`split_record` (same keywords) into
    ``info.description``."""
    recorded = read_info(info)
    recorded["splits"][str(split)] = split_record(**record)
    payload = {INFO_KEY: {"version": INFO_VERSION, "splits": recorded["splits"]}}
    if recorded["text"]:
        payload["text"] = recorded["text"]
    info.description = json.dumps(payload, sort_keys=True)


def read_info(info) -> dict:
    """``{"splits": {split: record}, "text": the description's own text}`` from a DatasetInfo."""
    description = getattr(info, "description", None) or ""
    try:
        payload = json.loads(description)
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or not isinstance(payload.get(INFO_KEY), dict):
        return {"splits": {}, "text": description}
    return {"splits": dict(payload[INFO_KEY].get("splits") or {}), "text": payload.get("text", "")}


def dataset_record(dataset) -> dict | None:
    """The record of the split a ``datasets`` Dataset or IterableDataset holds, if the builder
    wrote one. A split given as ``"train[:10%]"`` finds the record of ``train``."""
    info = getattr(dataset, "info", None)
    if info is None:
        return None
    splits = read_info(info)["splits"]
    name = str(getattr(dataset, "split", None) or "")
    if name in splits:
        return splits[name]
    base = name.split("[", 1)[0].split("+", 1)[0]
    if base in splits:
        return splits[base]
    if len(splits) == 1 and not name:
        return next(iter(splits.values()))
    return None


def card_lines(directory: str | os.PathLike) -> list[str]:
    """Lines for a dataset card: the tokenizer and EOD id the pairs' sidecars record."""
    records = {}
    for path in sorted(Path(directory).rglob("*" + SIDECAR_SUFFIX)):
        if path.with_suffix(".bin").is_file():
            records[path.relative_to(directory).as_posix()] = read_sidecar(path.with_suffix(""))
    if not records:
        return []
    distinct = {json.dumps(r, sort_keys=True) for r in records.values()}
    if len(distinct) > 1:
        return ["- Tokenizers differ between files (see the `" + SIDECAR_SUFFIX + "` files beside them)"]
    record = next(iter(records.values()))
    lines = []
    if record["tokenizer"]:
        lines.append(f"- Tokenizer (recorded by `mmidx convert`): `{record['tokenizer']}`, "
                     f"vocabulary size {record['vocab_size']}")
    if record["eod_id"] is not None:
        ends = "ends every non-empty document" if record["append_eod"] else "was not appended to documents"
        lines.append(f"- End-of-document (EOD) id: {record['eod_id']} (it {ends}); "
                     "`MegatronCollator` uses it by default")
    return lines
