"""The samples seam (hf/base_builder.py, hf/gpt_samples.py): every kind is planned, opened, verified and read the same way.

- ``verification_mode="all_checks"`` checks every file each kind reads against the dataset
  card's sha256, with the folder given relative to the working directory (how a user at the
  folder's parent types it);
- files read over the network (``source.remote``) are read ahead in background threads, within
  ``read_ahead_bytes``, and the rows are the very rows of a local read;
- ``megatron_rank_stream`` reads through hf/streams.py, not through ``datasets``' privates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from datasets import load_dataset

from mmidx_builder import FormatError, write_documents
from mmidx_builder.publishing.card import CardSettings, write_card

SEQ = 8


def _flip_first_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


def _files_card(folder: Path, settings: dict | None = None) -> None:
    """A card whose "## Files" table lists every file of the folder with its sha256, as
    ``mmidx card`` writes it (card.py describes .bin/.idx pairs only; raw files and fairseq
    folders are published with such a table written for them), and a ``configs:`` entry
    carrying ``settings`` (how a folder of raw files says its ``n_bytes``)."""
    rows = "".join(f"| `{p.relative_to(folder).as_posix()}` | `{hashlib.sha256(p.read_bytes()).hexdigest()}` |\n"
                   for p in sorted(folder.rglob("*")) if p.is_file())
    header = ""
    if settings:
        header = ("---\nconfigs:\n- config_name: default\n  data_files: \"*.bin\"\n"
                  + "".join(f"  {name}: {value}\n" for name, value in settings.items()) + "---\n")
    (folder / "README.md").write_text(f"{header}# Some tokens\n\n## Files\n\n| file | sha256 |\n|---|---|\n{rows}")


@pytest.fixture
def pairs(tmp_path, random_documents):
    """``tmp_path/tokens``: two .bin/.idx pairs and the card ``mmidx card`` writes for them."""
    rng = np.random.default_rng(21)
    root = tmp_path / "tokens"
    root.mkdir()
    for name, count in (("train-00000-of-00002", 9), ("train-00001-of-00002", 5)):
        write_documents(root / name, random_documents(rng, rng.integers(0, 40, size=count), vocab=500),
                        dtype=np.uint16)
    write_card(root, CardSettings(seq_length=SEQ))
    return root


def _raw_folder(tmp_path, settings: dict) -> Path:
    rng = np.random.default_rng(22)
    root = tmp_path / "tokens"
    root.mkdir()
    for name, size in (("a.bin", 37), ("b.bin", 5), ("c.bin", 90)):  # raw bytes, named .bin as they often are
        (root / name).write_bytes(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
    _files_card(root, settings)
    return root


@pytest.fixture
def raw_folder(tmp_path):
    return _raw_folder(tmp_path, {"n_bytes": 1, "seq_length": SEQ})


@pytest.fixture
def raw_chunks_folder(tmp_path):
    return _raw_folder(tmp_path, {"n_bytes": 1, "style": "diff", "seq_length": SEQ})


@pytest.fixture
def fairseq_folder(tmp_path):
    from mmidx_builder import IndexedFileWriter

    rng = np.random.default_rng(23)
    root = tmp_path / "tokens"
    root.mkdir()
    for lang in ("de", "en"):
        (root / f"dict.{lang}.txt").write_text("".join(f"w{i} {100 - i}\n" for i in range(5)))
        with IndexedFileWriter(root / f"train.de-en.{lang}", dtype=np.uint16, flavour="fairseq") as writer:
            for _ in range(11):
                writer.add_document(np.append(rng.integers(4, 9, size=rng.integers(0, 6)), 2))
    _files_card(root)
    return root


KINDS = {
    "mmidx_indexed": ("pairs", "train-00001-of-00002.bin", lambda root: {}),
    "mmidx_megatron": ("pairs", "train-00000-of-00002.bin",
                       lambda root: {"data_path": [str(root / "train-00000-of-00002"), str(root / "train-00001-of-00002")],
                                     "split_ratios": "1,0,0", "seq_length": SEQ}),
    "mmidx_raw": ("raw_folder", "b.bin", lambda root: {}),
    "mmidx_raw_chunks": ("raw_chunks_folder", "c.bin", lambda root: {}),
    "mmidx_fairseq": ("fairseq_folder", "train.de-en.en.bin", lambda root: {}),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_all_checks_refuses_a_tampered_file_under_every_kind_from_a_relative_folder(kind, request, tmp_path,
                                                                                      monkeypatch):
    fixture, tampered, settings = KINDS[kind]
    root = request.getfixturevalue(fixture)
    monkeypatch.chdir(root.parent)
    given = settings(root)
    if kind == "mmidx_indexed":
        given["seq_length"] = SEQ
    load_dataset("tokens", cache_dir=str(tmp_path / "before"), verification_mode="all_checks", **given)  # matches
    _flip_first_byte(root / tampered)
    with pytest.raises(FormatError, match=rf"{tampered.replace('.', '[.]')}: sha256: expected [0-9a-f]{{64}} "
                                          rf"\(recorded for {tampered.replace('.', '[.]')}"):
        load_dataset("tokens", cache_dir=str(tmp_path / "after"), verification_mode="all_checks", **given)


# --- read-ahead for remote sources -------------------------------------------------------------

class SlowRemote:
    """A token source that answers like a remote one: ``remote`` is True, every read_pieces call
    waits ``delay`` seconds (a round trip) and is recorded with its time span and byte count."""

    remote = True

    def __init__(self, source, delay: float):
        self.source = source
        self.sequence_lengths = source.sequence_lengths
        self.dtype = source.dtype
        self.identity = source.identity
        self.delay = delay
        self.calls = []  # (start, end, bytes)
        self.lock = threading.Lock()

    def read_pieces(self, sequence_ids, offsets, lengths, out=None):
        start = time.perf_counter()
        nbytes = int(np.sum(lengths)) * self.dtype.itemsize
        with self.lock:
            self.calls.append([start, None, nbytes])
            call = self.calls[-1]
        time.sleep(self.delay)
        result = self.source.read_pieces(sequence_ids, offsets, lengths, out)
        call[1] = time.perf_counter()
        return result


def read_through_slow_remote(monkeypatch, delay: float = 0.02) -> list:
    """From now on, every .bin/.idx pair the one-prefix kind opens is read through a SlowRemote
    (the list returned fills with them)."""
    from mmidx_builder.hf import gpt_samples
    from mmidx_builder.hf.mmidx_indexed import MMIdxIndexed

    sources = []
    open_plan = MMIdxIndexed.open_plan

    def slow_open_plan(plan, opener):
        slow = SlowRemote(open_plan(plan, opener).source, delay)
        sources.append(slow)
        return gpt_samples.opened_samples(slow, plan)

    monkeypatch.setattr(MMIdxIndexed, "open_plan", staticmethod(slow_open_plan))
    return sources


@pytest.fixture
def corpus(tmp_path, random_documents):
    rng = np.random.default_rng(24)
    root = tmp_path / "corpus"
    root.mkdir()
    write_documents(root / "a_text_document", random_documents(rng, rng.integers(0, 60, size=200), vocab=5000),
                    dtype=np.uint16)
    return root


def _rows(stream):
    return [row["input_ids"] for row in stream]


def test_remote_sources_are_read_ahead_in_order_overlapping_and_within_the_bound(corpus, tmp_path, monkeypatch):
    settings = dict(seq_length=SEQ, num_epochs=3, num_shards=40, cache_dir=str(tmp_path / "c"))
    expected = _rows(load_dataset(str(corpus), streaming=True, split="train", **settings))  # local files
    row_bytes = (SEQ + 1) * 2
    shard_bytes = (len(expected) // 40 + 1) * row_bytes
    bound = 4 * shard_bytes
    slow = read_through_slow_remote(monkeypatch)
    stream = load_dataset(str(corpus), streaming=True, split="train", read_ahead_bytes=bound, **settings)
    consumed, held, got = 0, [], []
    for row in stream:
        (source,) = slow
        with source.lock:
            read = sum(nbytes for _, _, nbytes in source.calls)
        held.append(read - consumed)  # read and not yet handed out
        got.append(row["input_ids"])
        consumed += row_bytes
    assert got == expected
    spans = sorted((start, end) for start, end, _ in slow[0].calls)
    # Nothing read twice: every row's bytes once, in at most one gather per shard (shards ahead
    # may share one).
    assert sum(nbytes for _, _, nbytes in slow[0].calls) == len(expected) * row_bytes
    assert len(spans) <= 40
    overlapping = sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)
    assert overlapping >= len(spans) // 2, f"only {overlapping} of {len(spans)} reads were in flight with another"
    # The read-ahead's tables plus the one being handed out, row by row.
    assert max(held) <= bound + shard_bytes
    assert max(held) > 2 * shard_bytes  # it did read ahead


def test_local_sources_get_no_threads(corpus, tmp_path):
    before = set(threading.enumerate())
    stream = load_dataset(str(corpus), streaming=True, split="train", seq_length=SEQ, num_shards=7,
                          cache_dir=str(tmp_path / "c"))
    assert _rows(stream)
    assert not [t.name for t in set(threading.enumerate()) - before if t.name.startswith("mmidx-read-ahead")]


def test_a_rank_stream_over_remote_files_reads_its_rows_ahead(corpus, tmp_path, monkeypatch):
    """megatron_rank_stream tells the builder every row it will read: with remote files the
    following micro-batches are fetched while the current ones are handed out, same rows."""
    pytest.importorskip("torch")
    from mmidx_builder import megatron_rank_stream

    settings = dict(seq_length=SEQ, num_epochs=2, cache_dir=str(tmp_path / "c"))
    local = load_dataset(str(corpus), streaming=True, split="train", **settings)
    expected = [row["input_ids"] for row in megatron_rank_stream(local, 1, 3, 1, consumed_samples=7)]
    slow = read_through_slow_remote(monkeypatch, delay=0.01)
    remote = load_dataset(str(corpus), streaming=True, split="train", **settings)
    ranked = megatron_rank_stream(remote, 1, 3, 1, consumed_samples=7)  # 64-row micro-batches, several per gather
    assert [row["input_ids"] for row in ranked] == expected
    spans = sorted((start, end) for start, end, _ in slow[0].calls)
    assert len(spans) >= 2 and any(start < end for (_, end), (start, _) in zip(spans, spans[1:]))


# --- the seam's shape --------------------------------------------------------------------------

def test_megatron_config_is_a_gpt_config_restating_no_field():
    from mmidx_builder.hf.gpt_samples import GPTConfig
    from mmidx_builder.hf.mmidx_megatron import MegatronConfig

    assert issubclass(MegatronConfig, GPTConfig)
    own = set(MegatronConfig.__dict__.get("__annotations__", {}))
    assert not own & {f.name for f in dataclasses.fields(GPTConfig)}


def test_rank_stream_touches_no_private_of_datasets():
    """What must touch datasets' internals lives in hf/registry.py (its module docstring says why)."""
    import importlib.util

    # Read, not imported: the training package imports torch, an optional extra.
    text = Path(importlib.util.find_spec("mmidx_builder.training.rank_stream").origin).read_text()
    for private in ("_distributed", "_formatting", "_ex_iterable", "_generate_tables", "_table_maker"):
        assert private not in text, private
