"""MosaicML shards as datasets, against MosaicML's own writers and readers (tests/mosaic_oracle.py):
every MDS encoding, compression and hash that mosaicml-streaming 0.13 writes, Composer 0.9's
legacy format (its int8 trap included), LLM Foundry's token shards, prepared and streaming,
rows equal to what LocalDataset / StreamingDataset / Composer's reader return; token columns
as input_ids and as Megatron samples equal to megatron-core's over the same documents."""

from __future__ import annotations

import decimal
import io
import json
import os
import pickle

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from datasets import load_dataset

SEQ = 32


def rows(folder, streaming: bool, cache, **settings) -> list[dict]:
    """Every row of the train split, prepared (an Arrow cache in ``cache``) or streaming."""
    ds = load_dataset(str(folder), split="train", streaming=streaming, cache_dir=str(cache), **settings)
    return list(ds)


def both(folder, cache, **settings) -> list[dict]:
    """The rows streaming and prepared, which must agree; returns them."""
    streamed = rows(folder, True, cache, **settings)
    prepared = rows(folder, False, cache, **settings)
    assert len(streamed) == len(prepared)
    for a, b in zip(streamed, prepared):
        assert a.keys() == b.keys()
        for key in a:
            assert same(a[key], b[key]), key
    return prepared


def pixels(image) -> np.ndarray:
    return np.asarray(image.convert("RGB") if image.mode == "P" else image)


def same(ours, theirs) -> bool:
    """Our row's value (after datasets' decoding) against the oracle's decoded value."""
    if hasattr(theirs, "mode") and hasattr(theirs, "size"):  # a PIL image
        return ours.size == theirs.size and np.array_equal(pixels(ours), pixels(theirs))
    if isinstance(theirs, np.ndarray):
        return np.array_equal(np.asarray(ours), theirs) and (theirs.ndim == 0 or np.asarray(ours).shape == theirs.shape)
    if isinstance(theirs, (list, tuple)):
        return len(ours) == len(theirs) and all(same(a, b) for a, b in zip(ours, theirs))
    if isinstance(theirs, float) and np.isnan(theirs):
        return np.isnan(ours)
    if isinstance(theirs, decimal.Decimal):
        return ours == str(theirs)
    if isinstance(theirs, np.generic):
        return ours == theirs.item() or (np.isnan(theirs) and np.isnan(ours))
    return ours == theirs


# --- every encoding ---------------------------------------------------------------------------------

def _image(rng, size=(5, 4), mode="RGB"):
    from PIL import Image

    channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
    array = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    return Image.fromarray(array[..., 0] if channels == 1 else array, mode)


def _jpeg(image):
    from PIL import Image

    out = io.BytesIO()
    image.save(out, format="JPEG")
    return Image.open(io.BytesIO(out.getvalue()))


SCALARS = {"u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "i8": "int8", "i16": "int16",
           "i32": "int32", "i64": "int64", "f16": "float16", "f32": "float32", "f64": "float64", "int": "int"}
TEXTS = {"raw": "bytes", "text": "str", "sint": "str_int", "sfloat": "str_float", "sdec": "str_decimal",
         "meta": "json"}
ARRAYS = {"any": "ndarray", "i32s": "ndarray:int32", "grid": "ndarray:float32:2,3", "fixed": "ndarray:uint16:4",
          "cube": "ndarray:int8"}
IMAGES = {"jpg": "jpeg", "png": "png", "pil": "pil", "jpgs": "list[jpeg]", "pngs": "list[png]", "pils": "list[pil]",
          "jarr": "jpeg_array"}


def _value(rng, name, encoding, i):
    if encoding in SCALARS.values():
        if encoding == "int":
            return int(rng.integers(-2**62, 2**62))
        dtype = np.dtype(encoding)
        if dtype.kind == "f":
            return dtype.type(rng.normal() * 10 ** int(rng.integers(-3, 4)))
        info = np.iinfo(dtype)
        return dtype.type([info.min, info.max, 0, rng.integers(info.min // 2, info.max // 2)][i % 4])
    if encoding == "bytes":
        return rng.bytes(int(rng.integers(0, 40)))
    if encoding == "str":
        return "".join(rng.choice(list("aé漢 \n\"🙂"), int(rng.integers(0, 12))))
    if encoding == "str_int":
        return int(rng.integers(-10**15, 10**15))
    if encoding == "str_float":
        return [float("nan"), float("inf"), -0.0, 1e-300, float(rng.normal())][i % 5]
    if encoding == "str_decimal":
        return decimal.Decimal(f"{rng.integers(-10**9, 10**9)}.{rng.integers(0, 10**12):012d}")
    if encoding == "json":
        return {"i": i, "tags": ["a", "b"][: i % 3], "nested": {"x": float(i) / 4, "ok": i % 2 == 0}}
    if encoding == "ndarray":  # dtype and shape in each value
        return rng.integers(0, 1000, (int(rng.integers(1, 4)), int(rng.integers(1, 300)))).astype(np.int16)
    if encoding == "ndarray:int32":
        return rng.integers(-2**31, 2**31 - 1, int(rng.integers(1, 600)), dtype=np.int32)
    if encoding == "ndarray:float32:2,3":
        return rng.normal(size=(2, 3)).astype(np.float32)
    if encoding == "ndarray:uint16:4":
        return rng.integers(0, 65536, 4).astype(np.uint16)
    if encoding == "ndarray:int8":
        return rng.integers(-128, 128, (2, int(rng.integers(1, 4)), 2)).astype(np.int8)
    if encoding in ("jpeg", "png", "pil"):
        image = _image(rng, (int(rng.integers(1, 9)), int(rng.integers(1, 9))), ["RGB", "L"][i % 2])
        return _jpeg(image) if encoding == "jpeg" else image
    if encoding in ("list[jpeg]", "list[png]", "list[pil]"):
        images = [_image(rng, (3, 2)) for _ in range(int(rng.integers(0, 3)))]
        return [_jpeg(im) for im in images] if encoding == "list[jpeg]" else images
    if encoding == "jpeg_array":
        out = []
        for _ in range(int(rng.integers(1, 3))):
            buffer = io.BytesIO()
            _image(rng, (4, 4)).save(buffer, format="JPEG")
            out.append(buffer.getvalue())
        return out
    raise AssertionError(encoding)


def _samples(columns, count, seed):
    rng = np.random.default_rng(seed)
    return [{name: _value(rng, name, encoding, i) for name, encoding in columns.items()} for i in range(count)]


@pytest.mark.parametrize("columns", [SCALARS, TEXTS, ARRAYS, IMAGES], ids=["scalars", "texts", "arrays", "images"])
def test_every_encoding_loads_typed_from_the_index_as_localdataset_decodes_it(mosaic, tmp_path, columns):
    samples = _samples(columns, 117, seed=len(columns))
    mosaic.write_mds(tmp_path / "mds", columns, samples, size_limit=1 << 12)
    theirs = mosaic.read_mds_local(tmp_path / "mds")
    ours = both(tmp_path / "mds", tmp_path / "cache")
    assert len(ours) == len(theirs) == 117
    for i, (our, their) in enumerate(zip(ours, theirs)):
        assert our.keys() == their.keys()
        for name in columns:
            assert same(our[name], their[name]), (i, name, our[name], their[name])
    features = load_dataset(str(tmp_path / "mds"), split="train", streaming=True).features
    expected = {"scalars": {"u64": "Value('uint64')", "f16": "Value('float16')", "int": "Value('int64')"},
                "texts": {"raw": "Value('binary')", "sint": "Value('int64')", "sfloat": "Value('float64')",
                          "sdec": "Value('string')"},
                "arrays": {"i32s": "List(Value('int32'))", "fixed": "List(Value('uint16'), length=4)",
                           "grid": "List(List(Value('float32'), length=3), length=2)",
                           "any": "List(List(Value('int16')))", "cube": "List(List(List(Value('int8'))))"},
                "images": {"jpg": "Image(", "pils": "List(Image("}}
    for name, text in expected[{len(SCALARS): "scalars", len(TEXTS): "texts", len(ARRAYS): "arrays",
                                len(IMAGES): "images"}[len(columns)]].items():
        assert repr(features[name]).startswith(text), (name, features[name])


@pytest.mark.parametrize("compression", ["zstd", "zstd:7", "gz", "bz2", "br:5", "snappy"])
def test_compressed_shards_load_as_streamingdataset_reads_them(mosaic, tmp_path, compression):
    columns = {"tokens": "ndarray:int32", "text": "str"}
    samples = _samples(columns, 80, seed=3)
    index = mosaic.write_mds(tmp_path / "mds", columns, samples, compression=compression, size_limit=1 << 13,
                             hashes=["md5", "sha1", "xxh3_64", "xxh64"])
    assert all(s["zip_data"] for s in index["shards"])
    theirs = mosaic.read_mds_streaming(tmp_path / "mds", tmp_path)
    before = sorted(os.listdir(tmp_path / "mds"))
    ours = both(tmp_path / "mds", tmp_path / "cache", verification_mode="all_checks")
    assert all(same(o["tokens"], t["tokens"]) and o["text"] == t["text"] for o, t in zip(ours, theirs))
    assert len(ours) == len(theirs) == 80
    assert sorted(os.listdir(tmp_path / "mds")) == before  # decompressed into our cache, not beside the shards


def test_a_streamingdataset_local_cache_holding_both_files_reads_the_raw_ones(mosaic, tmp_path):
    columns = {"tokens": "ndarray:int32"}
    samples = _samples(columns, 50, seed=4)
    mosaic.write_mds(tmp_path / "mds", columns, samples, compression="zstd", size_limit=1 << 12)
    mosaic.read_mds_streaming(tmp_path / "mds", tmp_path)  # decompresses into its copy
    copy = next(p for p in tmp_path.iterdir() if p.name.startswith("mds-streaming-"))
    assert any(name.endswith(".mds") for name in os.listdir(copy))
    ours = both(copy, tmp_path / "cache")
    assert all(same(o["tokens"], s["tokens"]) for o, s in zip(ours, samples))


def test_pickles_are_refused_unless_allowed_by_name(mosaic, tmp_path):
    from mmidx_builder.errors import UnsafeEncodingError

    samples = [{"obj": {"i": i, "xs": list(range(i % 4))}, "n": i} for i in range(30)]
    mosaic.write_mds(tmp_path / "mds", {"obj": "pkl", "n": "int"}, samples)
    for streaming in (True, False):
        with pytest.raises(UnsafeEncodingError, match="pkl.*allow_unsafe_types=True"):
            rows(tmp_path / "mds", streaming, tmp_path / "cache")
    ours = both(tmp_path / "mds", tmp_path / "cache", allow_unsafe_types=True)
    theirs = mosaic.read_mds_streaming(tmp_path / "mds", tmp_path, allow_unsafe_types=True)
    assert [o["obj"] for o in ours] == [t["obj"] for t in theirs] == [s["obj"] for s in samples]


# --- Composer's legacy format ----------------------------------------------------------------------

@pytest.mark.parametrize("compression", [None, "gz"])
def test_legacy_folders_load_every_sample_even_those_its_own_loader_misreads(mosaic, tmp_path, compression):
    """Sizes of 128-255 bytes are stored as negative int8s (shared/MOSAIC.md); read unsigned,
    every sample is the bytes the writer was given."""
    rng = np.random.default_rng(5)
    sizes = [20, 180, 100, 234, 108, 107, 0, 3]  # + 20 bytes of header and uid: 20-255 in all
    samples = [{"uid": f"{i:04}".encode(), "data": rng.bytes(sizes[i % len(sizes)] + i % 2)} for i in range(61)]
    mosaic.write_legacy(tmp_path / "legacy", ["uid", "data"], samples, shard_size_limit=1 << 10,
                        compression=compression)
    index = mosaic.read_legacy_index(tmp_path / "legacy")
    assert (np.asarray(index.bytes_per_sample) < 0).any()  # the trap is there
    ours = both(tmp_path / "legacy", tmp_path / "cache")
    assert [o["uid"] for o in ours] == [s["uid"] for s in samples]
    assert [o["data"] for o in ours] == [s["data"] for s in samples]


def test_legacy_samples_without_the_trap_equal_composers_own_reader(mosaic, tmp_path):
    rng = np.random.default_rng(6)
    samples = [{"a": rng.bytes(300 + i), "b": rng.bytes(i % 7)} for i in range(40)]  # sizes >= 256: int16
    mosaic.write_legacy(tmp_path / "legacy", ["b", "a"], samples, shard_size_limit=1 << 12, compression="gz")
    theirs = mosaic.read_legacy_samples(tmp_path / "legacy")
    ours = both(tmp_path / "legacy", tmp_path / "cache")
    assert ours == theirs
    assert list(ours[0]) == ["b", "a"]  # the fields in the index's order


def test_a_legacy_token_field_gives_input_ids_with_its_dtype(mosaic, tmp_path):
    docs = [np.arange(n, dtype=np.int64) * 3 for n in (5, 0, 17, 1, 300)]
    mosaic.write_legacy(tmp_path / "legacy", ["tokens"], [{"tokens": d.tobytes()} for d in docs],
                        shard_size_limit=1 << 11)
    ours = both(tmp_path / "legacy", tmp_path / "cache", token_column="tokens", dtype="int64")
    assert [list(o["input_ids"]) for o in ours] == [d.tolist() for d in docs]


# --- LLM Foundry's token shards ----------------------------------------------------------------

def _documents(count, seed=7, vocab=50_000):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, int(n)).tolist() for n in rng.integers(1, 400, count)]


@pytest.mark.parametrize("tokens", ["ndarray:int32", "bytes"])
def test_llm_foundry_token_shards_give_their_samples_as_input_ids(mosaic, tmp_path, tokens):
    written = mosaic.write_llm_foundry_concat(tmp_path / "out", {"train": _documents(300), "val": _documents(40, 8)},
                                              128, eos=[0], tokens=tokens, size_limit=1 << 14)
    settings = {"token_column": "tokens"} if tokens == "ndarray:int32" else {"token_column": "tokens", "dtype": "int64"}
    dd = load_dataset(str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), **settings)
    assert set(dd) == {"train", "validation"}  # val/ is datasets' validation split
    for split, name in (("train", "train"), ("validation", "val")):
        ours = dd[split].with_format("numpy")["input_ids"]
        np.testing.assert_array_equal(np.asarray(ours), np.stack(written[name]))
    expected = "int32" if tokens == "ndarray:int32" else "int64"
    assert repr(dd["train"].features["input_ids"]) == f"List(Value('{expected}'), length=128)"
    stream = load_dataset(str(tmp_path / "out"), split="validation", streaming=True, **settings)
    assert np.array_equal(next(iter(stream))["input_ids"], written["val"][0])


def test_token_samples_of_mds_equal_megatron_cores_gptdataset_over_the_same_documents(mosaic, megatron, tmp_path):
    """Each MDS sample is a document: the Megatron samples of the folder equal megatron-core's
    GPTDataset over a .bin/.idx pair that its own IndexedDatasetBuilder wrote from the
    documents LocalDataset reads back."""
    from conftest import MegatronTokenizer
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder
    from megatron.core.datasets.utils import Split

    rng = np.random.default_rng(9)
    docs = [rng.integers(0, 60_000, int(n)).astype(np.int32) for n in rng.integers(1, 200, 150)]
    mosaic.write_mds(tmp_path / "mds", {"tokens": "ndarray:int32", "id": "int"},
                     [{"tokens": d, "id": i} for i, d in enumerate(docs)], compression="zstd", size_limit=1 << 12)
    theirs = [row["tokens"] for row in mosaic.read_mds_streaming(tmp_path / "mds", tmp_path)]
    builder = IndexedDatasetBuilder(str(tmp_path / "pair.bin"), dtype=np.int32)
    for doc in theirs:
        builder.add_document(doc, [len(doc)])
    builder.finalize(str(tmp_path / "pair.idx"))
    config = GPTDatasetConfig(random_seed=11, sequence_length=SEQ, tokenizer=MegatronTokenizer(), split="1,0,0",
                              blend=([str(tmp_path / "pair")], None),
                              path_to_cache=str(tmp_path / "mcache"), reset_position_ids=False,
                              reset_attention_mask=False, eod_mask_loss=False)
    reference = GPTDataset(IndexedDataset(str(tmp_path / "pair")), str(tmp_path / "pair"),
                           np.arange(len(theirs), dtype=np.int32), None, Split.train, config)
    for streaming in (False, True):
        ours = load_dataset(str(tmp_path / "mds"), split="train", streaming=streaming, seq_length=SEQ, seed=11,
                            cache_dir=str(tmp_path / "cache"))
        ours = np.array([row["input_ids"] for row in ours])
        assert len(ours) == len(reference)
        expected = np.array([reference._query_document_sample_shuffle_indices(i)[0] for i in range(len(ours))])
        np.testing.assert_array_equal(ours, expected)


def test_a_megatron_blend_over_mds_folders_equals_megatron_core_over_the_same_documents(mosaic, megatron, tmp_path):
    from test_megatron_builder import megatron_splits, their_rows

    from mmidx_builder.sources.indexed import write_documents

    rng = np.random.default_rng(10)
    prefixes = []
    for name, count in (("a", 400), ("b", 250)):
        docs = [rng.integers(1, 60_000, int(n)).astype(np.int32) for n in rng.integers(1, 90, count)]
        mosaic.write_mds(tmp_path / name, {"tokens": "ndarray:int32"}, [{"tokens": d} for d in docs],
                         size_limit=1 << 13)
        # megatron-core reads pairs only: the same documents as LocalDataset returns them, in a pair
        read = [row["tokens"] for row in mosaic.read_mds_local(tmp_path / name)]
        prefixes.append(write_documents(tmp_path / f"{name}_pair", read, dtype=np.int32))
    sizes = {"train": 300, "validation": 40, "test": 10}
    dd = load_dataset("mmidx", data_path=["0.6", str(tmp_path / "a"), "0.4", str(tmp_path / "b" / "index.json")],
                      split_ratios="90,7,3", num_samples=sizes, seq_length=SEQ, seed=5, cache_dir=str(tmp_path / "hf"))
    theirs = megatron_splits((prefixes, [0.6, 0.4]), "90,7,3", list(sizes.values()), SEQ, 5, tmp_path / "megatron")
    for index, name in enumerate(("train", "validation", "test")):
        ours = dd[name].with_format("numpy")
        expected, ids = their_rows(theirs[index], len(ours))
        np.testing.assert_array_equal(np.asarray(ours["input_ids"]), expected)
        assert np.asarray(ours["dataset_id"]).tolist() == ids


# --- how a split's files are given ------------------------------------------------------------------

def test_several_streams_in_one_split_are_read_one_after_another_in_the_given_order(mosaic, tmp_path):
    columns = {"tokens": "ndarray:int32", "n": "int"}
    for name, seed in (("a", 1), ("b", 2)):
        mosaic.write_mds(tmp_path / name, columns, [{**s, "n": i} for i, s in enumerate(_samples(columns, 30 + seed,
                                                                                                   seed))],
                         size_limit=1 << 12)
    files = [str(tmp_path / "b" / "index.json"), str(tmp_path / "a" / "index.json")]
    ds = load_dataset("mmidx", data_files={"train": files}, split="train", cache_dir=str(tmp_path / "cache"))
    expected = mosaic.read_mds_local(tmp_path / "b") + mosaic.read_mds_local(tmp_path / "a")
    assert len(ds) == len(expected) == 63
    assert all(same(o["tokens"], e["tokens"]) and o["n"] == e["n"] for o, e in zip(ds, expected))
    by_dir = load_dataset("mmidx", data_dir=str(tmp_path / "a"), split="train", cache_dir=str(tmp_path / "cache"))
    assert len(by_dir) == 31


def test_a_merged_index_over_subfolders_reads_each_shard_once(mosaic, tmp_path):
    mosaic.streaming_or_skip()
    from streaming.base.util import merge_index  # the oracle imported streaming

    columns = {"tokens": "ndarray:int32"}
    parts = []
    for name, seed in (("part0", 1), ("part1", 2)):
        parts.append(_samples(columns, 20, seed))
        mosaic.write_mds(tmp_path / "root" / name, columns, parts[-1], size_limit=1 << 12)
    merge_index([str(tmp_path / "root" / p / "index.json") for p in ("part0", "part1")], str(tmp_path / "root"))
    ours = both(tmp_path / "root", tmp_path / "cache")
    assert len(ours) == 40
    assert all(same(o["tokens"], s["tokens"]) for o, s in zip(ours, parts[0] + parts[1]))


# --- remote -----------------------------------------------------------------------------------------

def test_mds_over_http_streams_the_same_rows_fetching_little_more_than_it_needs(mosaic, tmp_path):
    from range_server import RangeServer, require_remote_extra

    require_remote_extra()
    columns = {"tokens": "ndarray:int32", "text": "str"}
    samples = _samples(columns, 120, seed=12)
    mosaic.write_mds(tmp_path / "plain", columns, samples, size_limit=1 << 14)
    mosaic.write_mds(tmp_path / "zstd", columns, samples, compression="zstd", size_limit=1 << 14)
    local = rows(tmp_path / "plain", True, tmp_path / "cache")
    for name in ("plain", "zstd"):
        with RangeServer(tmp_path / name, latency=0.005) as server:
            url = server.url + "/index.json"
            stream = load_dataset("mmidx", data_files={"train": url}, split="train", streaming=True,
                                  cache_dir=str(tmp_path / "cache"))
            got = list(stream)
            shard_bytes = sum(n for f, n in server.sent.items() if ".mds" in f)
        assert len(got) == len(local)
        assert all(same(g["tokens"], l["tokens"]) and g["text"] == l["text"] for g, l in zip(got, local))
        on_disk = sum(os.path.getsize(tmp_path / name / f) for f in os.listdir(tmp_path / name) if ".mds" in f)
        assert shard_bytes <= 1.2 * on_disk, (name, shard_bytes, on_disk)
        local_tokens = load_dataset(str(tmp_path / "plain"), split="train", streaming=True, seq_length=SEQ,
                                    cache_dir=str(tmp_path / "cache"))
        with RangeServer(tmp_path / name) as server:
            tokens = load_dataset("mmidx", data_files={"train": server.url + "/index.json"}, split="train",
                                  streaming=True, seq_length=SEQ, cache_dir=str(tmp_path / "cache"))
            np.testing.assert_array_equal(np.array([r["input_ids"] for r in tokens]),
                                          np.array([r["input_ids"] for r in local_tokens]))


# --- training on MDS tokens ------------------------------------------------------------------------

def test_the_rank_stream_and_collator_take_mds_samples_as_they_take_a_pairs(mosaic, tmp_path):
    torch = pytest.importorskip("torch")
    from mmidx_builder import MegatronCollator, megatron_rank_stream
    from mmidx_builder.sources.indexed import write_documents

    docs = [np.append(np.arange(1, n), 0).astype(np.int32) for n in np.random.default_rng(2).integers(2, 60, 200)]
    mosaic.write_mds(tmp_path / "mds", {"tokens": "ndarray:int32"}, [{"tokens": d} for d in docs], size_limit=1 << 12)
    write_documents(tmp_path / "pair" / "train", docs, dtype=np.int32)
    batches = {}
    for name, folder in (("mds", tmp_path / "mds"), ("pair", tmp_path / "pair")):
        stream = load_dataset(str(folder), split="train", streaming=True, seq_length=SEQ, num_epochs=2,
                              document_structure=True, cache_dir=str(tmp_path / "cache"))
        ranked = megatron_rank_stream(stream.with_format("arrow"), rank=1, world_size=2, micro_batch_size=4)
        collate = MegatronCollator(eod_id=0, reset_position_ids=True, eod_mask_loss=True,
                                   inter_document_masking=True)
        batches[name] = [collate(list(b)) for b in torch.utils.data.DataLoader(ranked, batch_size=4, collate_fn=list)]
    assert len(batches["mds"]) == len(batches["pair"]) > 3
    for a, b in zip(batches["mds"], batches["pair"]):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key


def test_mds_in_an_s3_bucket_loads_prepared_and_streaming_as_the_local_folder(mosaic, tmp_path, monkeypatch):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from hub_server import loopback_only
    from s3_server import LocalS3

    written = mosaic.write_llm_foundry_concat(tmp_path / "out", _documents(200), 64, eos=[0], size_limit=1 << 13)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", False)
    with LocalS3() as server:
        loopback_only(monkeypatch)
        server.put_folder("bucket", tmp_path / "out", "llm")
        url = "s3://bucket/llm/train/index.json"
        for streaming in (True, False):
            ds = load_dataset("mmidx", data_files={"train": url}, split="train", streaming=streaming,
                              token_column="tokens", storage_options=server.storage_options,
                              cache_dir=str(tmp_path / "cache"))
            np.testing.assert_array_equal(np.array([r["input_ids"] for r in ds]), np.stack(written["train"]))
        samples = load_dataset("mmidx", data_files={"train": url}, split="train", streaming=True, seq_length=SEQ,
                               storage_options=server.storage_options, cache_dir=str(tmp_path / "cache"))
        local = load_dataset(str(tmp_path / "out"), split="train", streaming=True, seq_length=SEQ,
                             cache_dir=str(tmp_path / "cache"))
        np.testing.assert_array_equal(np.array([r["input_ids"] for r in samples]),
                                      np.array([r["input_ids"] for r in local]))
