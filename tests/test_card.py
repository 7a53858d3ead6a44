"""card.py: the card's YAML is what huggingface_hub and datasets read back, its numbers are
the reader's, and hand-written text survives a re-run."""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from huggingface_hub import DatasetCard

from mmidx_builder import IndexedFile, write_documents
from mmidx_builder.publishing.card import (CARD_TEMPLATE, HAND_WRITTEN_MARKER, HISTOGRAM_NAME, CardSettings, length_bins,
                                write_card)
from mmidx_builder.cli import main

REPO = Path(__file__).resolve().parents[1]
# Awkward on purpose: empty documents, one far longer than seq_length, a one-token one.
LENGTHS = (0, 3, 257, 1, 0, 33, 70, 16)
SEQ_LENGTH = 16


@pytest.fixture
def corpus(tmp_path, random_documents, write_corpus):
    folder = tmp_path / "tokens"
    rng = np.random.default_rng(3)
    write_corpus(folder, {"train-00000-of-00002": random_documents(rng, LENGTHS),
                          "train-00001-of-00002": random_documents(rng, LENGTHS[:5]),
                          "test": random_documents(rng, (5, 40, 0))})
    return folder


def _metadata(folder):
    card = DatasetCard.load(folder / "README.md", ignore_metadata_errors=False)
    return card, card.data.to_dict()


def _examples_megatron_would_make(tokens: int, seq_length: int) -> int:
    # SAMPLING.md: one epoch of `tokens` tokens gives (tokens - 1) // seq_length samples of seq_length + 1.
    return (tokens - 1) // seq_length


def test_card_yaml_is_what_huggingface_hub_and_datasets_read(corpus):
    from datasets.info import DatasetInfosDict
    from datasets.utils.metadata import MetadataConfigs

    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH, license="apache-2.0"))
    card, data = _metadata(corpus)
    assert data["license"] == "apache-2.0"
    assert data["task_categories"] == ["text-generation"]
    assert "mmidx" in data["tags"]
    assert data["size_categories"] == ["n<1K"]

    configs = MetadataConfigs.from_dataset_card_data(card.data)
    assert configs.get_default_config_name() == "default"
    default = configs["default"]
    assert default["seq_length"] == SEQ_LENGTH
    assert {f["split"]: f["path"] for f in default["data_files"]} == {
        "train": ["train-00000-of-00002.bin", "train-00001-of-00002.bin"], "test": ["test.bin"]}

    info = DatasetInfosDict.from_dataset_card_data(card.data)["default"]
    feature = info.features["input_ids"]
    assert feature.length == SEQ_LENGTH + 1 and feature.feature.dtype == "uint16"
    for split, prefixes in (("train", ["train-00000-of-00002", "train-00001-of-00002"]), ("test", ["test"])):
        tokens = sum(IndexedFile.open(corpus / p).num_tokens for p in prefixes)
        assert info.splits[split].num_examples == _examples_megatron_would_make(tokens, SEQ_LENGTH)
        assert info.splits[split].num_bytes == info.splits[split].num_examples * (SEQ_LENGTH + 1) * 2
    assert info.download_size == sum(p.stat().st_size for p in corpus.iterdir() if p.suffix in (".bin", ".idx"))


def test_card_body_numbers_are_the_readers(corpus):
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH))
    card, _ = _metadata(corpus)
    rows = {line.split("|")[2].strip(" `"): [c.strip(" `") for c in line.split("|")[1:-1]]
            for line in card.text.splitlines() if line.startswith("| ") and "`" in line}
    for prefix in ("train-00000-of-00002", "train-00001-of-00002", "test"):
        indexed = IndexedFile.open(corpus / prefix)
        split, name, flavour, dtype, documents, tokens, size, sha = rows[prefix + ".bin"]
        assert (flavour, dtype) == ("megatron", "uint16")
        assert int(documents.replace(",", "")) == len(indexed.document_lengths())
        assert int(tokens.replace(",", "")) == int(indexed.sequence_lengths.sum())
        for suffix, (row_size, row_sha) in ((".bin", (size, sha)), (".idx", tuple(rows[prefix + ".idx"][6:8]))):
            raw = (corpus / (prefix + suffix)).read_bytes()
            assert int(row_size.replace(",", "")) == len(raw)
            assert row_sha == hashlib.sha256(raw).hexdigest()
    assert 'import mmidx_builder' in card.text and "streaming=True" in card.text
    assert f"]({HISTOGRAM_NAME})" in card.text


def _decode_png(data: bytes) -> np.ndarray:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        assert struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0] == zlib.crc32(kind + body)
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height = size
    rows = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all()  # filter type "none" on every row
    return rows[:, 1:].reshape(height, width, 3)


def test_histogram_counts_every_document_once_and_the_png_decodes(corpus):
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH))
    lengths = np.concatenate([IndexedFile.open(p.with_suffix("")).document_lengths() for p in corpus.glob("*.bin")])
    labels, counts = length_bins(lengths)
    assert counts.sum() == len(lengths)
    for label, count in zip(labels, counts):
        low, _, high = label.partition("-")
        assert count == ((lengths >= int(low)) & (lengths <= int(high or low))).sum()
    pixels = _decode_png((corpus / HISTOGRAM_NAME).read_bytes())
    bar_columns = (pixels != 255).any(axis=2).any(axis=0)
    assert bar_columns.sum() > 10  # something was drawn


def test_rerun_updates_numbers_and_keeps_hand_written_text_and_metadata(corpus, random_documents):
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH, tokenizer="gpt2 BPE", made_with="mmidx convert"))
    readme = corpus / "README.md"
    text = readme.read_text()
    text = text.replace("license: other", "license: cc-by-4.0")
    text += "\n## Notes by a person\n\nThese tokens were filtered by hand.\n"
    readme.write_text(text)
    write_documents(corpus / "train-00001-of-00002", random_documents(np.random.default_rng(9), (500, 2)),
                    dtype=np.uint16)  # the data changed

    write_card(corpus)  # no settings: the card's own are kept
    card, data = _metadata(corpus)
    assert data["license"] == "cc-by-4.0"
    assert card.text.count("These tokens were filtered by hand.") == 1
    assert card.text.index(HAND_WRITTEN_MARKER) < card.text.index("## Notes by a person")
    assert "gpt2 BPE" in card.text and "mmidx convert" in card.text
    assert data["configs"][0]["seq_length"] == SEQ_LENGTH
    info = {s["name"]: s for s in data["dataset_info"]["splits"]}
    tokens = sum(IndexedFile.open(corpus / p).num_tokens for p in ("train-00000-of-00002", "train-00001-of-00002"))
    assert info["train"]["num_examples"] == _examples_megatron_would_make(tokens, SEQ_LENGTH)

    before = readme.read_text()
    write_card(corpus)  # a third run changes nothing
    assert readme.read_text() == before


def test_a_readme_without_the_marker_is_kept_below_it(corpus):
    (corpus / "README.md").write_text("# My tokens\n\nWritten before mmidx.\n")
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH))
    text = (corpus / "README.md").read_text()
    assert text.index(HAND_WRITTEN_MARKER) < text.index("Written before mmidx.")


def test_mmidx_card_command(corpus, capsys):
    assert main(["card", str(corpus), "--seq-length", "8", "--repo-id", "me/tokens"]) == 0
    assert "wrote" in capsys.readouterr().out
    card, data = _metadata(corpus)
    assert data["configs"][0]["seq_length"] == 8
    assert 'load_dataset("me/tokens"' in card.text
    assert main(["card", str(corpus / "nothing_here")]) == 1


def test_template_file_is_the_one_the_code_uses():
    assert (REPO / "dataset_cards" / "TEMPLATE.md").read_text() == CARD_TEMPLATE


def test_load_dataset_honours_the_cards_configs(corpus, tmp_path):
    import datasets
    import mmidx_builder  # noqa: F401  (registers the builder)
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH))
    _, data = _metadata(corpus)
    loaded = datasets.load_dataset(str(corpus), cache_dir=str(tmp_path / "cache"))
    for split in data["dataset_info"]["splits"]:
        ds = loaded[split["name"]]
        assert ds.num_rows == split["num_examples"]
        assert ds.info.splits[split["name"]].num_bytes == split["num_bytes"]
        assert len(ds[0]["input_ids"]) == SEQ_LENGTH + 1


def test_a_calls_own_settings_win_over_the_cards(corpus, tmp_path):
    import datasets
    import mmidx_builder  # noqa: F401  (registers the builder)
    write_card(corpus, CardSettings(seq_length=SEQ_LENGTH))
    other = datasets.load_dataset(str(corpus), split="test", seq_length=4, cache_dir=str(tmp_path / "cache"))
    assert len(other[0]["input_ids"]) == 5
    assert other.num_rows == _examples_megatron_would_make(IndexedFile.open(corpus / "test").num_tokens, 4)
