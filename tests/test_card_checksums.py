"""card_checksums.py: the card's recorded sha256 are read back exactly, and a load with
``verification_mode="all_checks"`` refuses a file that differs from its card (a local folder
here; tests/test_hub_download.py does the same through the local Hub)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from datasets import load_dataset

from mmidx_builder import FormatError, write_documents
from mmidx_builder.publishing.card import HAND_WRITTEN_MARKER, CardSettings, write_card
from mmidx_builder.hf.card_checksums import card_sha256

SEQ = 8


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(9)
    root = tmp_path / "tokens"
    root.mkdir()
    write_documents(root / "train-00000-of-00002", [rng.integers(0, 500, n) for n in (0, 40, 7, 130)], dtype=np.uint16)
    write_documents(root / "train-00001-of-00002", [rng.integers(0, 500, n) for n in (3, 61)], dtype=np.uint16)
    write_documents(root / "test", [rng.integers(0, 500, n) for n in (50, 1)], dtype=np.uint16)
    write_card(root, CardSettings(seq_length=SEQ))
    return root


def test_the_card_records_the_sha256_of_every_file(folder):
    recorded = card_sha256((folder / "README.md").read_text())
    files = sorted(p for p in folder.iterdir() if p.suffix in (".bin", ".idx"))
    assert recorded == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_only_the_files_table_counts(folder):
    text = (folder / "README.md").read_text()
    notes = f"\n## My notes\n\n| `train-00000-of-00002.bin` | `{'0' * 64}` |\n"
    assert card_sha256(text.replace(HAND_WRITTEN_MARKER, HAND_WRITTEN_MARKER + notes)) == card_sha256(text)
    assert card_sha256("# A card someone wrote\n\n| `data.bin` | no digest |\n") == {}


def test_all_checks_refuses_a_file_that_differs_from_its_card(folder, tmp_path):
    cache = str(tmp_path / "cache")
    load_dataset(str(folder), cache_dir=cache + "-before", verification_mode="all_checks")  # the card matches
    path = folder / "test.bin"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"test\.bin: sha256: expected [0-9a-f]{64} \(recorded for test\.bin") as caught:
        load_dataset(str(folder), cache_dir=cache, verification_mode="all_checks")
    assert hashlib.sha256(bytes(data)).hexdigest() in str(caught.value)
    load_dataset(str(folder), cache_dir=cache)  # basic_checks, datasets' default, compares no checksum
