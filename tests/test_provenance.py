"""The EOD id and tokenizer travel from `mmidx convert` to the dataset: sidecar, info, card."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import load_dataset

import mmidx_builder  # noqa: F401  (registers the builder)
from mmidx_builder.sources import provenance
from mmidx_builder.publishing.card import CardSettings, render_card
from mmidx_builder.convert import convert, merge
from mmidx_builder.errors import FormatError
from mmidx_builder.sources.indexed import write_documents

from range_server import RangeServer, require_remote_extra


def _jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


@pytest.fixture
def converted(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    texts = [f"document number {i} " * (i % 5 + 1) for i in range(40)]
    summary = convert([_jsonl(tmp_path / "in.jsonl", texts)], str(data / "train"), "bytes", append_eod=True)
    return data, summary.outputs["text"]


def test_convert_writes_the_sidecar_after_the_pair(converted):
    data, prefix = converted
    assert sorted(p.name for p in data.iterdir()) == [
        "train_text_document.bin", "train_text_document.idx", "train_text_document" + provenance.SIDECAR_SUFFIX]
    assert provenance.read_sidecar(prefix) == {"tokenizer": "bytes", "vocab_size": 257, "eod_id": 256,
                                               "append_eod": True}


def test_folder_with_sidecars_still_loads_with_our_builder_and_records_the_eod(converted, tmp_path):
    data, _ = converted
    cache = str(tmp_path / "cache")
    for _ in range(2):  # building the Arrow cache, then reading it back
        dataset = load_dataset(str(data), seq_length=32, split="train", cache_dir=cache)
        record = provenance.dataset_record(dataset)
        assert record["eod_id"] == 256 and record["tokenizer"] == "bytes" and record["append_eod"] is True
        assert record["order"]["rows"] == len(dataset) and record["order"]["seq_length"] == 32
    stream = load_dataset(str(data), seq_length=32, split="train", streaming=True, cache_dir=cache)
    for view in (stream, stream.with_format("numpy"), dataset.select(range(3))):
        assert provenance.dataset_record(view)["eod_id"] == 256
    pytest.importorskip("torch", reason="the torch extra (with_format('torch'))")
    assert provenance.dataset_record(dataset.with_format("torch"))["eod_id"] == 256


def test_merge_keeps_a_sidecar_only_when_the_inputs_agree(tmp_path):
    texts = [_jsonl(tmp_path / f"{i}.jsonl", [f"text {i} {j}" for j in range(5)]) for i in range(2)]
    a = convert([texts[0]], str(tmp_path / "a"), "bytes", append_eod=True).outputs["text"]
    b = convert([texts[1]], str(tmp_path / "b"), "bytes", append_eod=True).outputs["text"]
    c = convert([texts[1]], str(tmp_path / "c"), "bytes", append_eod=False).outputs["text"]
    merged = merge([a, b], str(tmp_path / "ab"))
    assert provenance.read_sidecar(merged)["eod_id"] == 256
    mixed = merge([a, c], str(tmp_path / "ac"))
    assert provenance.read_sidecar(mixed) is None


def test_files_without_or_with_different_sidecars_record_no_eod(tmp_path):
    first = write_documents(str(tmp_path / "a_text_document"), [[1, 2, 0]] * 20, vocab_size=10)
    second = write_documents(str(tmp_path / "b_text_document"), [[3, 4, 0]] * 20, vocab_size=10)
    files = {"train": [first + ".bin", second + ".bin"]}
    provenance.write_sidecar(first, tokenizer="t", vocab_size=10, eod_id=0, append_eod=True)
    for other in (None, 9):  # second has no sidecar, then another EOD
        if other is not None:
            provenance.write_sidecar(second, tokenizer="t", vocab_size=10, eod_id=other, append_eod=True)
        stream = load_dataset("mmidx", data_files=files, seq_length=4, split="train", streaming=True)
        assert provenance.dataset_record(stream)["eod_id"] is None


def test_a_damaged_sidecar_is_named(converted, tmp_path):
    data, prefix = converted
    path = provenance.sidecar_path(prefix)
    with open(path, "w") as f:
        f.write("{not json")
    with pytest.raises(FormatError, match="mmidx-info: sidecar"):
        provenance.read_sidecar(prefix)
    with open(path, "w") as f:
        json.dump({"mmidx_info": 1, "tokenizer": "x", "vocab_size": 5, "eod_id": "0", "append_eod": True}, f)
    with pytest.raises(FormatError, match="eod_id: expected int or NoneType, found '0'"):
        load_dataset(str(data), seq_length=8, split="train", streaming=True)


def test_remote_streaming_reads_the_sidecar_over_http(converted, tmp_path):
    require_remote_extra()
    data, _ = converted
    with RangeServer(data) as server:
        stream = load_dataset("mmidx", data_files={"train": server.url + "/train_text_document.bin"},
                              seq_length=16, split="train", streaming=True, cache_dir=str(tmp_path / "c"))
        assert provenance.dataset_record(stream)["eod_id"] == 256
        (data / ("train_text_document" + provenance.SIDECAR_SUFFIX)).unlink()
        stream = load_dataset("mmidx", data_files={"train": server.url + "/train_text_document.bin"},
                              seq_length=16, split="train", streaming=True, cache_dir=str(tmp_path / "c"))
        assert provenance.dataset_record(stream)["eod_id"] is None  # a missing sidecar is no error


def test_raw_files_record_their_end_of_file_token(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.dat").write_bytes(bytes(range(50)))
    stream = load_dataset("mmidx", data_files={"train": str(tmp_path / "raw" / "a.dat")}, n_bytes=1,
                          seq_length=8, split="train", streaming=True)
    assert provenance.dataset_record(stream)["eod_id"] == 256


def test_card_names_the_eod_id(converted):
    data, _ = converted
    text = render_card(data, CardSettings(seq_length=32)).text
    assert "End-of-document (EOD) id: 256" in text and "`bytes`" in text


def test_user_description_is_kept(tmp_path):
    import datasets

    info = datasets.DatasetInfo(description="my words")
    provenance.record_split(info, "train", kind="mmidx_indexed", files=[], settings={"seq_length": 4}, rows=3,
                            source=type("S", (), {"sequence_lengths": np.array([5, 6])})())
    assert provenance.read_info(info)["text"] == "my words"
    assert provenance.read_info(info)["splits"]["train"]["order"]["rows"] == 3


def test_a_sidecar_added_later_is_seen_by_the_arrow_cache(tmp_path):
    import datasets

    import mmidx_builder  # noqa: F401
    from mmidx_builder.sources.indexed import write_documents

    folder = tmp_path / "data"
    prefix = write_documents(folder / "train", [list(range(40))] * 5, dtype=np.uint16)
    load = lambda: datasets.load_dataset(str(folder), seq_length=8, cache_dir=str(tmp_path / "c"), split="train")  # noqa: E731
    assert provenance.dataset_record(load())["eod_id"] is None
    provenance.write_sidecar(prefix, tokenizer="t", vocab_size=100, eod_id=7, append_eod=True)
    assert provenance.dataset_record(load())["eod_id"] == 7


def test_a_split_ranges_fingerprint_recorded_with_its_indices_is_the_one_computed(tmp_path, monkeypatch):
    """A split's range of a pair has no fingerprint of its own in the pair's record: it is kept
    with the range's sampling indices (a warm open of a 1,000-prefix blend made each by a pass
    over the range's lengths: 1.2 s). Cold, warm and computed as before are one fingerprint, so
    a training state saved by either resumes under the other."""
    import time

    from mmidx_builder.sources.token_source import SequenceRange

    rng = np.random.default_rng(8)
    prefixes = []
    for name in "ab":
        prefixes.append(str(tmp_path / f"{name}_text_document"))
        write_documents(prefixes[-1], [rng.integers(1, 500, n) for n in rng.integers(1, 90, 400)], dtype=np.uint16)
    time.sleep(2.2)  # settled: the pairs' records are written and used
    call = dict(data_path=prefixes, split_ratios="90,8,2", seq_length=16, seed=3, streaming=True,
                index_cache_dir=str(tmp_path / "indices"), cache_dir=str(tmp_path / "hf"))

    def order(split):
        return provenance.dataset_record(load_dataset("mmidx", split=split, **call))["order"]

    cold = {split: order(split) for split in ("train", "validation")}
    warm = {split: order(split) for split in ("train", "validation")}
    monkeypatch.setattr(SequenceRange, "lengths_fingerprint", property(lambda self: None))
    computed = {split: order(split) for split in ("train", "validation")}
    assert cold == warm == computed
    assert all(len(cold[split]["sources"]) == 2 for split in cold)
