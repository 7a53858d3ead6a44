"""The MosaicML oracle itself (tests/mosaic_oracle.py): its real writers and readers run here
and do what shared/MOSAIC.md says, so that the reader tests can trust what it writes."""

from __future__ import annotations

import gzip
import json
import os
import struct
import sys

import numpy as np
import pytest

COLUMNS = {"tokens": "ndarray:int32", "text": "str", "blob": "bytes", "n": "int64", "big": "int",
           "score": "float32", "grid": "ndarray", "fixed": "ndarray:uint16:3", "meta": "json", "id": "str_int"}


def _sample(i: int) -> dict:
    return {"tokens": np.arange(i % 7 + 1, dtype=np.int32) * i, "text": "é" * (i % 5),
            "blob": bytes([i % 256]) * (i % 4), "n": np.int64(-i), "big": 1 << 40 + i % 3, "score": np.float32(i / 8),
            "grid": np.ones((2, i % 3 + 1), np.uint8), "fixed": np.array([i, i + 1, 65535], np.uint16),
            "meta": {"i": i, "odd": i % 2 == 1}, "id": i * 1000}  # str_int: an int, stored as its decimal text


def _same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        np.array_equal(got[k], want[k]) if isinstance(want[k], np.ndarray) else got[k] == want[k] for k in want)


def test_mds_round_trip_through_mdswriter_and_localdataset(mosaic, tmp_path):
    samples = [_sample(i) for i in range(117)]
    index = mosaic.write_mds(tmp_path / "mds", COLUMNS, samples, size_limit=1 << 11, hashes=["sha1", "xxh64"])
    shards = index["shards"]
    assert index["version"] == 2 and len(shards) > 2 and sum(s["samples"] for s in shards) == 117
    first = shards[0]
    assert first["column_names"] == sorted(COLUMNS) and first["compression"] is None and first["zip_data"] is None
    assert first["hashes"] == ["sha1", "xxh64"]  # MDSWriter takes them sorted only
    sizes = dict(zip(first["column_names"], first["column_sizes"]))
    assert sizes["fixed"] == 6 and sizes["n"] == 8 and sizes["score"] == 4 and sizes["text"] is None

    got = mosaic.read_mds_local(tmp_path / "mds")
    assert len(got) == 117 and all(_same(g, s) for g, s in zip(got, samples))
    assert isinstance(got[5]["big"], int) and isinstance(got[5]["id"], int) and got[5]["meta"] == {"i": 5, "odd": True}

    # The shard's bytes as shared/MOSAIC.md has them: uint32 count, count + 1 uint32 offsets
    # (from the file's start, past the writer's JSON config), then per sample a uint32 size of
    # each variable-size column in column order, then the columns' bytes.
    data = (tmp_path / "mds" / first["raw_data"]["basename"]).read_bytes()
    count, = struct.unpack_from("<I", data)
    offsets = np.frombuffer(data, np.uint32, count + 1, 4)
    assert count == first["samples"] and offsets[-1] == len(data) == first["raw_data"]["bytes"]
    assert json.loads(data[4 * (count + 2):offsets[0]])["column_names"] == sorted(COLUMNS)
    sample = data[offsets[3]:offsets[4]]
    variable = [n for n, size in sizes.items() if size is None]
    lengths = np.frombuffer(sample, np.uint32, len(variable))
    assert dict(zip(variable, lengths.tolist()))["text"] == len(samples[3]["text"].encode())
    assert len(sample) == 4 * len(variable) + lengths.sum() + sum(s for s in sizes.values() if s)
    assert "torchvision" not in sys.modules  # the stand-in was there only while streaming imported


def test_a_zstd_dataset_reads_back_through_streamingdataset_in_order(mosaic, tmp_path):
    samples = [{"tokens": np.arange(i + 1, dtype=np.int32), "text": f"doc {i}"} for i in range(117)]
    index = mosaic.write_mds(tmp_path / "mds", {"tokens": "ndarray:int32", "text": "str"}, samples,
                             compression="zstd", size_limit=1 << 12)
    assert {s["compression"] for s in index["shards"]} == {"zstd"} and len(index["shards"]) > 3
    before = sorted(os.listdir(tmp_path / "mds"))
    assert all(name.endswith(".mds.zstd") for name in before if name != "index.json")
    with pytest.raises(FileNotFoundError):  # LocalDataset looks for the raw shard only
        mosaic.read_mds_local(tmp_path / "mds")

    for _ in range(2):  # a second StreamingDataset in one process takes a fresh prefix
        got = mosaic.read_mds_streaming(tmp_path / "mds", tmp_path)
        assert [g["text"] for g in got] == [s["text"] for s in samples]
        assert all(np.array_equal(g["tokens"], s["tokens"]) for g, s in zip(got, samples))
    assert sorted(os.listdir(tmp_path / "mds")) == before  # it decompressed into its copies


def test_legacy_writer_and_index_loader_agree_plain_and_gzipped(mosaic, tmp_path):
    fields = ["uid", "data"]
    samples = [{"uid": f"{i:06}".encode(), "data": bytes(range(i % 256)) * (i // 256 + 1), "unused": b"x"}
               for i in range(0, 700, 7)]
    for compression in (None, "gz"):
        folder = tmp_path / str(compression)
        files = mosaic.write_legacy(folder, fields, samples, shard_size_limit=5000, compression=compression)
        suffix = ".gz" if compression else ""
        assert f"index.mds{suffix}" in files and f"000000.mds{suffix}" in files
        assert ("compression.txt" in files) == bool(compression)
        index = mosaic.read_legacy_index(folder)
        assert index.fields == fields and index.total_samples == len(samples) and index.num_shards > 3
        want = np.array([8 * len(fields) + len(s["uid"]) + len(s["data"]) for s in samples])
        assert index.bytes_per_sample.tolist() == want.tolist()
        assert index.samples_per_shard.sum() == len(samples) and index.bytes_per_shard.sum() == want.sum()
        assert mosaic.read_legacy_samples(folder) == [{k: s[k] for k in fields} for s in samples]
    shard = (tmp_path / "None" / "000001.mds").read_bytes()
    assert gzip.decompress((tmp_path / "gz" / "000001.mds.gz").read_bytes()) == shard
    first = int(index.shard_begins[1])  # a sample: int64 sizes of its fields, then their bytes
    head = np.frombuffer(shard, np.int64, 2)
    assert head.tolist() == [6, len(samples[first]["data"])] and shard[16:22] == samples[first]["uid"]
    legacy = mosaic.composer_streaming_or_skip()  # the wheel's own files, imported without composer/__init__.py
    assert legacy.writer.__file__ == os.path.join(legacy.root, "datasets", "streaming", "writer.py")
    assert not any(name == "composer" or name.startswith("composer.") for name in sys.modules)


def test_legacy_index_keeps_its_int8_trap(mosaic, tmp_path):
    """Every sample under 256 bytes and not all alike: the index stores sizes as int8, so a
    200-byte sample comes back as -56 from its own loader, and its own reader fails."""
    sizes = [40, 200, 100, 255, 128, 127]
    samples = [{"x": bytes([n]) * (n - 8)} for n in sizes]  # 8 bytes of field size + the field
    mosaic.write_legacy(tmp_path, ["x"], samples)
    index = mosaic.read_legacy_index(tmp_path)
    assert index.bytes_per_sample.tolist() == [40, -56, 100, -1, -128, 127]
    assert index.sample_shard_offsets.tolist()[:3] == [0, 40, -16]
    with pytest.raises(OSError):  # its __getitem__ seeks to the third sample's offset, -16
        mosaic.read_legacy_samples(tmp_path)

    raw = (tmp_path / "index.mds").read_bytes()  # the header: 3 uint32, 2 int64, 2 int64, int32
    assert struct.unpack_from("<i", raw, 12 + 16 + 16) == (1,)  # bps format 1, int8
    assert np.frombuffer(raw, np.uint8, len(sizes), 12 + 16 + 16 + 4).tolist() == sizes
    shard = (tmp_path / "000000.mds").read_bytes()
    assert len(shard) == sum(sizes) and shard[40 + 8:240] == samples[1]["x"]


def test_llm_foundry_concat_packs_as_its_loop_does(mosaic, tmp_path):
    docs = [[1, 2, 3, 4, 5], [6, 7], [8, 9, 10, 11, 12, 13, 14, 15, 16]]
    assert mosaic.llm_foundry_concat(docs, 4, eos=[0]) == [[1, 2, 3, 4], [5, 0, 6, 7], [0, 8, 9, 10], [11, 12, 13, 14]]
    # --no_wrap drops the rest of the buffer when a sample is cut, not a short document
    assert mosaic.llm_foundry_concat(docs, 4, eos=[0], no_wrap=True) == [[1, 2, 3, 4], [6, 7, 0, 8]]
    assert mosaic.llm_foundry_concat(docs, 4, bos=[50], eos=[0])[0] == [50, 1, 2, 3]

    written = mosaic.write_llm_foundry_concat(tmp_path / "out", {"train": docs, "val": docs[:1]}, 4, eos=[0])
    assert sorted(os.listdir(tmp_path / "out")) == ["train", "val"] and len(written["val"]) == 1
    index = json.loads((tmp_path / "out" / "train" / "index.json").read_text())
    assert index["shards"][0]["column_encodings"] == ["ndarray:int32"] and index["shards"][0]["compression"] == "zstd"
    got = mosaic.read_mds_streaming(tmp_path / "out", tmp_path, split="train")
    assert [g["tokens"].tolist() for g in got] == mosaic.llm_foundry_concat(docs, 4, eos=[0])
    assert {g["tokens"].dtype for g in got} == {np.dtype(np.int32)}

    mosaic.write_llm_foundry_concat(tmp_path / "old", docs, 4, eos=[0], tokens="bytes", compression=None)
    got = mosaic.read_mds_local(tmp_path / "old" / "train")
    assert [np.frombuffer(g["tokens"], np.int64).tolist() for g in got] == mosaic.llm_foundry_concat(docs, 4, eos=[0])
