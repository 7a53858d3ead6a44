"""MDS token shards both ways (issue 39, item 4): our MDS writer against mosaicml-streaming's own
MDSWriter byte for byte (encodings, every codec, hashes, size limits), our token samples against
LLM Foundry's concat layout, what we write read back by LocalDataset, StreamingDataset and our
own load_dataset; MDS (and Composer's legacy shards) to .bin/.idx against megatron-core's
IndexedDatasetBuilder; round trips; bad input. The oracles are tests/mosaic_oracle.py and
conftest's ``megatron``."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from mmidx_builder.cli import main
from mmidx_builder.convert import mds_to_pairs, pairs_to_mds
from mmidx_builder.errors import ConvertError, MMIdxError, ParameterError
from mmidx_builder.mosaic.encodings import parse_encoding
from mmidx_builder.mosaic.writer import ShardWriter, size_limit_bytes, token_samples
from mmidx_builder.sources import provenance
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

CODECS = [None, "zstd", "zstd:7", "br", "bz2", "snappy", "gz"]
EOD = 0


def folder_bytes(folder) -> dict[str, bytes]:
    """Every file of a folder (hidden ones too: nothing may be left behind)."""
    return {name: (folder / name).read_bytes() for name in sorted(os.listdir(folder))}


def pair_bytes(prefix) -> tuple[bytes, bytes]:
    return open(f"{prefix}.bin", "rb").read(), open(f"{prefix}.idx", "rb").read()


def needs_codec(compression) -> None:
    """zstd, brotli and snappy are the mosaic extra's packages (skipped without it, failed in CI)."""
    module = {"zstd": "zstd", "br": "brotli", "snappy": "snappy"}.get(str(compression).partition(":")[0])
    if module:
        pytest.importorskip(module, reason="the mosaic extra (pip install 'mmidx-builder[mosaic]')")


@pytest.fixture
def frozen_time(monkeypatch):
    """gzip.compress writes time.time() into its header: both writers see one clock."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)


def documents(seed: int, count: int = 117, high: int = 1000, longest: int = 300) -> list[np.ndarray]:
    """Awkward on purpose: one-token documents, one far longer than the rest, EOD closing each."""
    rng = np.random.default_rng(seed)
    docs = [np.append(rng.integers(1, high, int(rng.integers(0, 60))), EOD) for _ in range(count)]
    docs[5] = np.array([EOD])
    docs[9] = np.append(rng.integers(1, high, longest), EOD)
    return docs


def write_pair(prefix, docs, dtype=np.uint16, empty_at=(), split_at=()) -> str:
    """A pair of ``docs``; an empty document before each index in ``empty_at``, the documents
    at ``split_at`` stored as two sequences (as --split-sentences writes them)."""
    with IndexedFileWriter(prefix, dtype=dtype) as writer:
        for k, doc in enumerate(docs):
            if k in empty_at:
                writer.add_document([])
            half = len(doc) // 2
            writer.add_document(doc, [half, len(doc) - half] if k in split_at and half else None)
    return str(prefix)


# --- the writer against MDSWriter --------------------------------------------------------------

COLUMNS = {"tokens": "ndarray:int32", "ids": "ndarray", "id": "int", "text": "str", "raw": "bytes", "u16": "uint16",
           "i8": "int8", "f32": "float32", "f64": "float64", "grid": "ndarray:uint8", "fixed": "ndarray:int16:3"}


def mixed_samples(count: int = 117) -> list[dict]:
    rng = np.random.default_rng(7)
    return [{"tokens": rng.integers(-5, 70000, int(rng.integers(1, 150))).astype(np.int32),
             "ids": rng.integers(0, 9, int(rng.integers(1, 5))).astype([np.uint16, np.int64, np.float32][i % 3]),
             "id": i * 1_000_003 - 50, "text": "é" * (i % 11), "raw": bytes(range(i % 40)), "u16": i * 500,
             "i8": i % 100 - 50, "f32": i / 3, "f64": -i / 7,
             "grid": rng.integers(0, 255, (2, int(rng.integers(1, 4)))).astype(np.uint8),
             "fixed": np.arange(3, dtype=np.int16) * i} for i in range(count)]


@pytest.mark.parametrize("compression, hashes, size_limit", [
    (None, None, 1 << 26),
    (None, ["md5", "sha1", "xxh3_64", "xxh64"], 2000),
    ("zstd", ["sha1"], "4kb"),
    ("zstd:7", ["xxh128", "xxh32"], 600),             # one sample a shard, and the empty first one
    ("br", ["blake2b", "sha256"], None),              # one shard
    ("bz2", None, "1.5kb"),
    ("snappy", ["xxh64"], "0kb"),                     # a false limit: one shard, 0 recorded
    ("gz", ["md5"], 3000),
    ("gz:1", None, 1 << 26),
])
def test_writer_writes_mdswriters_bytes(mosaic, frozen_time, tmp_path, compression, hashes, size_limit):
    samples = mixed_samples()
    mosaic.write_mds(tmp_path / "theirs", COLUMNS, samples, compression=compression, hashes=hashes,
                     size_limit=size_limit)
    with ShardWriter(tmp_path / "ours", COLUMNS, compression=compression, hashes=hashes,
                     size_limit=size_limit) as writer:
        for sample in samples:
            writer.write(sample)
    theirs, ours = folder_bytes(tmp_path / "theirs"), folder_bytes(tmp_path / "ours")
    assert list(ours) == list(theirs) and ours == theirs
    shards = json.loads(ours["index.json"])["shards"]
    if size_limit == 600:  # every sample is larger than 600 bytes with the header
        assert [s["samples"] for s in shards] == [0] + [1] * len(samples)
    if not size_limit_bytes(size_limit):
        assert len(shards) == 1
    assert not list(tmp_path.glob(".*"))  # the lock beside the folder is gone


def test_gz_shards_differ_only_in_their_timestamp_unfrozen(mosaic, tmp_path):
    """Without a frozen clock gz shards hold the second they were written in: the decompressed
    shards and every uncompressed hash are the same."""
    import gzip

    samples = mixed_samples(30)
    mosaic.write_mds(tmp_path / "theirs", COLUMNS, samples, compression="gz", size_limit=3000)
    with ShardWriter(tmp_path / "ours", COLUMNS, compression="gz", size_limit=3000) as writer:
        for sample in samples:
            writer.write(sample)
    theirs, ours = folder_bytes(tmp_path / "theirs"), folder_bytes(tmp_path / "ours")
    assert list(ours) == list(theirs)
    for name in ours:
        if name.endswith(".gz"):
            assert gzip.decompress(ours[name]) == gzip.decompress(theirs[name])
    for a, b in zip(json.loads(ours["index.json"])["shards"], json.loads(theirs["index.json"])["shards"]):
        assert a["raw_data"] == b["raw_data"] and a["zip_data"]["bytes"] == b["zip_data"]["bytes"]


@pytest.mark.parametrize("text", ["64mb", "1.5kb", "512b", "100", " 2KB ", "1gb", 1234, 99.9])
def test_size_limits_read_as_streaming_reads_them(mosaic, text):
    from streaming.base.util import bytes_to_int

    assert size_limit_bytes(text) == bytes_to_int(text)


@pytest.mark.parametrize("kwargs, error, said", [
    (dict(columns={"x": "pkl"}), ParameterError, "column 'x' is encoded 'pkl'"),
    (dict(columns={"x": "jpeg"}), ParameterError, "column 'x' is encoded 'jpeg'"),
    (dict(columns={"x": "ndarray:bool"}), ParameterError, "not an MDS encoding"),
    (dict(compression="zstd:99"), ParameterError, "compression='zstd:99'"),
    (dict(compression="snappy:3"), ParameterError, "compression='snappy:3'"),
    (dict(compression="lz4"), ParameterError, "compression='lz4'"),
    (dict(hashes=["sha1", "crc9"]), ParameterError, "hashes= ['crc9']"),
    (dict(size_limit="12 parsecs"), ParameterError, "size_limit= '12 parsecs' is not a size"),
    (dict(size_limit=-5), ParameterError, "size_limit= must be from 0"),
    (dict(size_limit="4gb"), ParameterError, "shard offsets are uint32"),
])
def test_writer_refuses_what_it_cannot_write(tmp_path, kwargs, error, said):
    options = {"columns": {"tokens": "ndarray:int32"}, **kwargs}
    with pytest.raises(error, match=None) as raised:
        ShardWriter(tmp_path / "out", options.pop("columns"), **options)
    assert said in str(raised.value)
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


@pytest.mark.parametrize("value, said", [
    (np.zeros(0, np.int32), "an array of 0 elements cannot be stored"),
    (np.arange(3, dtype=np.int64), "expected int32 values, got int64"),
    ([1, 2, 3], "expected a numpy array, got list"),
    (np.zeros(3, bool), "arrays of bool cannot be stored"),
])
def test_writer_refuses_bad_values_and_leaves_nothing(tmp_path, value, said):
    with pytest.raises(ParameterError, match=None) as raised:
        with ShardWriter(tmp_path / "out", {"tokens": "ndarray:int32"}, size_limit=100) as writer:
            for k in range(20):  # some shards written already: they go too
                writer.write({"tokens": np.arange(1, 5 + k, dtype=np.int32)})
            writer.write({"tokens": value})
    assert "column 'tokens'" in str(raised.value) and said in str(raised.value)
    assert os.listdir(tmp_path) == []  # the folder it made goes too


def test_a_folder_with_files_is_refused_unless_overwrite_which_replaces_the_stream(mosaic, tmp_path):
    out = tmp_path / "out"
    with ShardWriter(out, {"tokens": "ndarray:int32"}, size_limit=200) as writer:
        for k in range(30):
            writer.write({"tokens": np.arange(1, 20, dtype=np.int32)})
    old_shards = len(json.loads((out / "index.json").read_text())["shards"])
    (out / "README.md").write_text("notes")
    with pytest.raises(ConvertError, match="is not empty .* pass overwrite=True"):
        ShardWriter(out, {"tokens": "ndarray:int32"})
    samples = [{"tokens": np.arange(1, 4, dtype=np.int32)}] * 3
    with ShardWriter(out, {"tokens": "ndarray:int32"}, compression="zstd", overwrite=True) as writer:
        for sample in samples:
            writer.write(sample)
    assert old_shards > 2
    assert sorted(os.listdir(out)) == ["README.md", "index.json", "shard.00000.mds.zstd"]
    got = mosaic.read_mds_streaming(out, tmp_path)
    assert [g["tokens"].tolist() for g in got] == [[1, 2, 3]] * 3


@pytest.mark.parametrize("encoding, dtype", [("ndarray:int32", np.int32), ("ndarray", np.uint16), ("bytes", np.int64),
                                             ("ndarray:int64:7", np.int64), ("ndarray", np.int32)])
def test_token_samples_are_mdswriters_samples(mosaic, tmp_path, encoding, dtype):
    """The batch encoder against MDSWriter sample by sample: one-id samples, shapes of one and
    two bytes (70,000 ids), equal lengths (one 2-D copy) and ragged ones."""
    rng = np.random.default_rng(3)
    for case, lengths in enumerate([rng.integers(1, 700, 117), rng.integers(1, 9, 50), np.full(13, 7),
                                    np.array([70_000, 1, 300])]):
        if encoding.endswith(":7"):
            lengths = np.full(len(lengths), 7)
        tokens = rng.integers(0, 30_000, int(lengths.sum())).astype(dtype)
        samples = np.split(tokens, np.cumsum(lengths)[:-1])
        theirs, ours = tmp_path / f"theirs{case}", tmp_path / f"ours{case}"
        mosaic.write_mds(theirs, {"tokens": encoding}, [{"tokens": s.tobytes() if encoding == "bytes" else s}
                                                         for s in samples], size_limit=5000)
        with ShardWriter(ours, {"tokens": encoding}, size_limit=5000) as writer:
            for begin in range(0, len(lengths), 10):
                piece = lengths[begin:begin + 10]
                start = int(lengths[:begin].sum())
                writer.write_encoded(*token_samples(parse_encoding(encoding, "t", "tokens"),
                                                    tokens[start:start + int(piece.sum())], piece))
        assert folder_bytes(ours) == folder_bytes(theirs)


# --- .bin/.idx -> MDS ---------------------------------------------------------------------------

@pytest.mark.parametrize("encoding, dtype, values", [
    ("ndarray:int32", None, np.int32),        # LLM Foundry's
    ("ndarray", None, np.uint16),             # the pair's own dtype in each value
    ("ndarray:int64", None, np.int64),
    ("bytes", None, np.int64),                # older LLM Foundry
    ("bytes", "uint16", np.uint16),
])
def test_one_sample_a_document_is_what_mdswriter_writes(mosaic, tmp_path, encoding, dtype, values):
    """Documents of several sequences are one sample; empty documents make none (MDSWriter
    refuses 0 ids) and are counted."""
    docs = documents(1)
    prefix = write_pair(tmp_path / "corpus_text_document", docs, empty_at=(0, 40, 40 + 1), split_at=(9, 20))
    summary = pairs_to_mds(prefix, tmp_path / "ours", encoding=encoding, dtype=dtype, compression="zstd",
                           hashes=["sha1", "xxh64"], size_limit="2kb")
    samples = [d.astype(values) for d in docs]
    mosaic.write_mds(tmp_path / "theirs", {"tokens": encoding}, [{"tokens": s.tobytes() if encoding == "bytes" else s}
                                                                  for s in samples], compression="zstd",
                     hashes=["sha1", "xxh64"], size_limit="2kb")
    assert folder_bytes(tmp_path / "ours") == folder_bytes(tmp_path / "theirs")
    assert (summary.documents, summary.samples, summary.empty_documents) == (len(docs) + 3, len(docs), 3)
    assert summary.tokens_out == sum(map(len, docs)) and summary.shards >= 3


@pytest.mark.parametrize("tokens, compression", [("ndarray:int32", "zstd"), ("bytes", None)])
def test_concat_tokens_is_llm_foundrys_layout(mosaic, tmp_path, tokens, compression):
    """--concat-tokens N against convert_dataset_hf.py's loop and writer: samples of exactly N
    ids across document ends, a document longer than N split over several, the rest dropped."""
    docs = documents(2, longest=700)
    prefix = write_pair(tmp_path / "corpus_text_document", docs, empty_at=(3,))
    summary = pairs_to_mds(prefix, tmp_path / "ours", concat_tokens=64, encoding=tokens, compression=compression)
    written = mosaic.write_llm_foundry_concat(tmp_path / "llmfoundry", docs, 64, tokens=tokens, compression=compression)
    assert folder_bytes(tmp_path / "ours") == folder_bytes(tmp_path / "llmfoundry" / "train")
    total = sum(map(len, docs))
    assert summary.samples == len(written["train"]) == total // 64
    assert summary.dropped_tokens == total % 64 and summary.tokens_out == total - total % 64


@pytest.mark.parametrize("bos, eos, no_wrap", [([], [EOD], False), ([50_000], [], True), ([7, 8], [9], False),
                                               ([], [], True)])
def test_concat_with_bos_eos_and_no_wrap(mosaic, tmp_path, bos, eos, no_wrap):
    docs = [d[:-1] for d in documents(3)]  # documents without their EOD, as text tokenizes
    prefix = write_pair(tmp_path / "p", docs, dtype=np.int32, empty_at=(2,))
    pairs_to_mds(prefix, tmp_path / "ours", concat_tokens=50, bos_ids=bos, eos_ids=eos, no_wrap=no_wrap,
                 size_limit="1kb")
    with_empty = docs[:2] + [np.zeros(0, np.int32)] + docs[2:]
    samples = mosaic.llm_foundry_concat(with_empty, 50, bos=bos, eos=eos, no_wrap=no_wrap)
    mosaic.write_mds(tmp_path / "theirs", {"tokens": "ndarray:int32"},
                     [{"tokens": np.array(s, np.int32)} for s in samples], size_limit="1kb")
    assert folder_bytes(tmp_path / "ours") == folder_bytes(tmp_path / "theirs")


def test_our_shards_read_back_by_localdataset_streamingdataset_and_load_dataset(mosaic, tmp_path):
    import mmidx_builder  # noqa: F401  (registers the builders)
    from datasets import load_dataset

    docs = documents(4)
    prefix = write_pair(tmp_path / "p", docs)
    pairs_to_mds(prefix, tmp_path / "plain", size_limit="1kb")
    pairs_to_mds(prefix, tmp_path / "zstd", compression="zstd", size_limit="1kb", hashes=["sha1"])
    want = [d.tolist() for d in docs]
    assert [s["tokens"].tolist() for s in mosaic.read_mds_local(tmp_path / "plain")] == want
    assert [s["tokens"].tolist() for s in mosaic.read_mds_streaming(tmp_path / "zstd", tmp_path)] == want
    for name in ("plain", "zstd"):
        rows = load_dataset(str(tmp_path / name), token_column="tokens", split="train",
                            cache_dir=str(tmp_path / "cache"))
        assert rows["input_ids"] == want


def test_a_zero_length_document_and_a_sample_over_the_size_limit(mosaic, tmp_path):
    """A first document larger than size_limit: MDSWriter's empty first shard, then the
    document alone; empty documents counted, never written."""
    docs = [np.arange(1, 400), np.arange(1, 3), np.arange(1, 500)]
    prefix = write_pair(tmp_path / "p", docs, dtype=np.int32, empty_at=(1, 2))
    summary = pairs_to_mds(prefix, tmp_path / "ours", size_limit=1000)
    mosaic.write_mds(tmp_path / "theirs", {"tokens": "ndarray:int32"}, [{"tokens": d.astype(np.int32)} for d in docs],
                     size_limit=1000)
    assert folder_bytes(tmp_path / "ours") == folder_bytes(tmp_path / "theirs")
    shards = json.loads((tmp_path / "ours" / "index.json").read_text())["shards"]
    assert [s["samples"] for s in shards] == [0, 1, 1, 1]
    assert summary.empty_documents == 2 and "2 skipped" in summary.table()


@pytest.mark.parametrize("kwargs, error, said", [
    (dict(encoding="str"), ParameterError, "encoding='str' cannot hold token ids"),
    (dict(encoding="ndarray:float32"), ParameterError, "holds float32 values"),
    (dict(encoding="ndarray:int32:64"), ParameterError, "give concat_tokens=64"),
    (dict(encoding="ndarray:int32", dtype="int64"), ParameterError, "dtype=int64 differs"),
    (dict(encoding="ndarray:int8"), ParameterError, "which int8 does not hold (the column's values, ndarray:int8); "
                                                    "give a wider encoding="),
    (dict(no_wrap=True), ParameterError, "no_wrap=True"),
    (dict(concat_tokens=0), ParameterError, "concat_tokens= must be at least 1"),
    (dict(bos_ids=[70_000], encoding="ndarray:uint16"), ParameterError, "bos_ids=[70000] do not fit"),
])
def test_pairs_to_mds_refuses_with_the_keyword(tmp_path, kwargs, error, said):
    prefix = write_pair(tmp_path / "p", documents(5))
    with pytest.raises(error) as raised:
        pairs_to_mds(prefix, tmp_path / "out", **kwargs)
    assert said in str(raised.value)
    assert not (tmp_path / "out").exists()


# --- MDS -> .bin/.idx ---------------------------------------------------------------------------

def megatron_pair(megatron, prefix, docs, dtype) -> str:
    """megatron-core 0.19.2's IndexedDatasetBuilder fed one document at a time."""
    builder = megatron.indexed_dataset.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        builder.add_document(np.asarray(doc, np.int64), [len(doc)])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def split_after(samples, eos) -> list[list[int]]:
    """The samples' ids joined and cut after every ``eos``, the tail without one last."""
    docs, current = [], []
    for sample in samples:
        for token in list(sample):
            current.append(int(token))
            if token == eos:
                docs.append(current)
                current = []
    return docs + ([current] if current else [])


@pytest.mark.parametrize("tokens, compression, dtype", [("ndarray:int32", None, None), ("ndarray:int32", "zstd", None),
                                                        ("bytes", None, "int64"), ("bytes", "zstd:3", "int64")])
@pytest.mark.parametrize("split", [False, True])
def test_llm_foundry_shards_to_pairs_are_megatrons_bytes(mosaic, megatron, tmp_path, tokens, compression, dtype, split):
    docs = documents(6, longest=500)
    written = mosaic.write_llm_foundry_concat(tmp_path / "mds", docs, 64, tokens=tokens, compression=compression,
                                              size_limit=3000)["train"]
    summary = mds_to_pairs(tmp_path / "mds" / "train", tmp_path / "ours" / "corpus", dtype=dtype,
                           split_at_eos=EOD if split else None)
    out_dtype = np.int32 if tokens == "ndarray:int32" else np.int64
    want = split_after(written, EOD) if split else written
    theirs = megatron_pair(megatron, tmp_path / "theirs", want, out_dtype)
    ours = tmp_path / "ours" / "corpus_tokens_document"
    assert pair_bytes(ours) == pair_bytes(theirs)
    assert summary.documents == len(want) and summary.samples == len(written)
    sidecar = provenance.read_sidecar(ours)
    assert sidecar["tokenizer"] is None and sidecar["eod_id"] == (EOD if split else None)
    assert sidecar["append_eod"] is (split and want[-1][-1] == EOD)
    assert not [p for p in os.listdir(tmp_path / "ours") if p.startswith(".")]  # no unpacked shards left


@pytest.mark.parametrize("compression", [None, "gz"])
def test_composer_legacy_shards_to_pairs(mosaic, megatron, tmp_path, compression):
    """Composer 0.9's StreamingDatasetWriter, int64 ids as bytes, with samples of 128-255 bytes
    (its index stores those sizes as int8)."""
    rng = np.random.default_rng(8)
    samples = [rng.integers(0, 50_000, int(n)).astype(np.int64) for n in rng.integers(1, 40, 117)]
    mosaic.write_legacy(tmp_path / "legacy", ["tokens"], [{"tokens": s.tobytes()} for s in samples],
                        shard_size_limit=2000, compression=compression)
    mds_to_pairs(tmp_path / "legacy", tmp_path / "ours", dtype="int64", vocab_size=50_000)
    theirs = megatron_pair(megatron, tmp_path / "theirs", samples, np.uint16)
    assert pair_bytes(tmp_path / "ours_tokens_document") == pair_bytes(theirs)


def test_vocab_size_picks_megatrons_dtype_and_ids_are_checked(mosaic, megatron, tmp_path):
    docs = documents(9)
    mosaic.write_mds(tmp_path / "mds", {"tokens": "ndarray:int32", "text": "str"},
                     [{"tokens": d.astype(np.int32), "text": "x"} for d in docs])
    mds_to_pairs(tmp_path / "mds", tmp_path / "small", vocab_size=1000)
    theirs = megatron_pair(megatron, tmp_path / "theirs", docs, megatron.indexed_dataset.DType.optimal_dtype(1000))
    assert pair_bytes(tmp_path / "small_tokens_document") == pair_bytes(theirs)
    assert IndexedFile.open(tmp_path / "small_tokens_document").dtype == np.uint16
    mds_to_pairs(tmp_path / "mds", tmp_path / "cast", dtype="int64")
    assert IndexedFile.open(tmp_path / "cast_tokens_document").dtype == np.int64
    with pytest.raises(ParameterError, match=r"holds ids 0..\d+, which uint8 does not hold"):
        mds_to_pairs(tmp_path / "mds", tmp_path / "tiny", dtype="uint8")
    assert not list(tmp_path.glob("tiny*"))


def test_mds_to_pairs_refuses_with_the_thing_named(mosaic, tmp_path):
    mosaic.write_mds(tmp_path / "mds", {"tokens": "bytes", "text": "str", "floats": "ndarray:float32"},
                     [{"tokens": np.arange(1, 5).tobytes(), "text": "t", "floats": np.ones(2, np.float32)}])
    with pytest.raises(ParameterError, match="token_column='text' of .*index.json: it is encoded 'str'"):
        mds_to_pairs(tmp_path / "mds", tmp_path / "out", token_column="text")
    with pytest.raises(ParameterError, match="token_column='floats' .* holds float32 values"):
        mds_to_pairs(tmp_path / "mds", tmp_path / "out", token_column="floats")
    with pytest.raises(ParameterError, match="token_column='nope': .* has no such column; its columns are"):
        mds_to_pairs(tmp_path / "mds", tmp_path / "out", token_column="nope")
    with pytest.raises(ParameterError, match="its values are bytes: say how to read them with dtype="):
        mds_to_pairs(tmp_path / "mds", tmp_path / "out")
    mds_to_pairs(tmp_path / "mds", tmp_path / "out", dtype="int64")
    with pytest.raises(ConvertError, match="out_tokens_document.bin exists; pass overwrite=True"):
        mds_to_pairs(tmp_path / "mds", tmp_path / "out", dtype="int64")
    mds_to_pairs(tmp_path / "mds", tmp_path / "out", dtype="int64", overwrite=True)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConvertError, match="notes.txt is not an MDS folder or index while other inputs are"):
        mds_to_pairs([tmp_path / "mds", tmp_path / "notes.txt"], tmp_path / "mixed")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_dir()) == [
        "notes.txt", "out_tokens_document.bin", "out_tokens_document.idx", "out_tokens_document.mmidx-info"]


# --- round trips ---------------------------------------------------------------------------------

@pytest.mark.parametrize("encoding, compression", [("ndarray:int32", None), ("ndarray", "zstd"), ("bytes", "br")])
def test_pairs_to_mds_to_pairs_is_the_same_pair(tmp_path, encoding, compression):
    needs_codec(compression)
    docs = documents(10)
    prefix = write_pair(tmp_path / "corpus", docs)
    pairs_to_mds(prefix, tmp_path / "mds", encoding=encoding, compression=compression, size_limit="1kb")
    mds_to_pairs(tmp_path / "mds", tmp_path / "back", vocab_size=1000,
                 dtype="int64" if encoding == "bytes" else None)
    assert pair_bytes(tmp_path / "back_tokens_document") == pair_bytes(prefix)


def test_concatenated_samples_split_at_eos_give_the_documents_back(tmp_path):
    """Documents closed by their EOD, packed into samples of 64 and split at the EOD again: the
    documents, but for the tail LLM Foundry drops (a last document cut short)."""
    needs_codec("zstd")
    docs = documents(11)
    prefix = write_pair(tmp_path / "corpus", docs, split_at=(4,))
    pairs_to_mds([prefix, prefix], tmp_path / "mds", concat_tokens=64, compression="zstd")
    mds_to_pairs(tmp_path / "mds", tmp_path / "back", split_at_eos=EOD, vocab_size=1000)
    back = IndexedFile.open(tmp_path / "back_tokens_document")
    kept = (2 * sum(map(len, docs))) // 64 * 64
    want = split_after([np.concatenate(docs + docs)[:kept]], EOD)
    assert [back.document(i).tolist() for i in range(back.num_documents)] == want
    assert [back.document(i).tolist() for i in range(len(docs))] == [d.tolist() for d in docs]


# --- the command -----------------------------------------------------------------------------------

def run(argv: list[str]) -> int:
    """``mmidx`` as the shell runs it: argparse's own errors exit with 2."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code

def test_cli_both_ways(tmp_path, capsys):
    needs_codec("zstd")
    docs = documents(12)
    prefix = write_pair(tmp_path / "data" / "corpus_text_document", docs)
    assert main(["convert", prefix, "--to", "mds", "--output", str(tmp_path / "mds"), "--concat-tokens", "32",
                 "--compression", "zstd", "--size-limit", "1kb", "--hashes", "xxh64", "sha1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "samples" in out and "32 ids each" in out
    library = pairs_to_mds(prefix, tmp_path / "lib", concat_tokens=32, compression="zstd", size_limit="1kb",
                           hashes=["sha1", "xxh64"])
    assert folder_bytes(tmp_path / "mds") == folder_bytes(tmp_path / "lib") and library.samples > 10
    assert main(["convert", str(tmp_path / "mds" / "index.json"), "--output-prefix", str(tmp_path / "back"),
                 "--split-at-eos", "0", "--vocab-size", "1000", "--no-progress"]) == 0
    assert "split after every id 0" in capsys.readouterr().out
    assert IndexedFile.open(tmp_path / "back_tokens_document").dtype == np.uint16


@pytest.mark.parametrize("argv, said", [
    (["--to", "mds", "--output", "{t}/o", "--tokenizer", "bytes"], "--tokenizer: not for --to mds"),
    (["--to", "mds"], "required with --to mds: --output"),
    (["--to", "mds", "--output", "{t}/o", "--concat-tokens", "0"], "--concat-tokens must be at least 1, got 0"),
    (["--to", "mds", "--output", "{t}/o", "--no-wrap"], "--no-wrap drops what is left"),
    (["--to", "mds", "--output", "{t}/o", "--size-limit", "9 parsecs"], "--size-limit '9 parsecs' is not a size"),
    (["--to", "mds", "--output", "{t}/o", "--encoding", "json"], "--encoding json cannot hold token ids"),
    (["--to", "mds", "--output", "{t}/full"], "full is not empty"),
    (["--output-prefix", "{t}/x", "--tokenizer", "bytes", "--concat-tokens", "4"], "--concat-tokens: not for text"),
])
def test_cli_errors_name_flags(tmp_path, capsys, argv, said):
    prefix = write_pair(tmp_path / "p", documents(13, count=12))
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    source = prefix if "--to" in argv else str(tmp_path / "a.jsonl")
    code = run(["convert", source, "--no-progress", *[a.format(t=tmp_path) for a in argv]])
    err = capsys.readouterr().err
    assert code in (1, 2) and said in err, err


def test_cli_mds_input_errors_name_flags(mosaic, tmp_path, capsys):
    mosaic.write_mds(tmp_path / "mds", {"tokens": "bytes"}, [{"tokens": np.arange(1, 5).tobytes()}])
    for argv, said in [([], "say how to read them with --dtype"), (["--column", "nope"], "--column nope: "),
                       (["--tokenizer", "bytes"], "--tokenizer: not for MDS inputs"),
                       (["--encoding", "bytes"], "--encoding: not for MDS inputs")]:
        code = run(["convert", str(tmp_path / "mds"), "--output-prefix", str(tmp_path / "x"), "--no-progress", *argv])
        err = capsys.readouterr().err
        assert code in (1, 2) and said in err, err
    assert not list(tmp_path.glob("x*"))


def test_text_conversion_still_needs_its_tokenizer_and_prefix(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text('{"text": "a b"}\n')
    with pytest.raises(SystemExit):
        main(["convert", str(tmp_path / "a.jsonl"), "--output-prefix", str(tmp_path / "x")])
    assert "required: --tokenizer" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "a.jsonl"), "--output-prefix", str(tmp_path / "x"), "--tokenizer", "bytes",
                 "--no-progress"]) == 0
    assert IndexedFile.open(tmp_path / "x_text_document").num_tokens == 3


def test_library_errors_are_mmidx_errors(tmp_path):
    with pytest.raises(MMIdxError, match="nothing is not an MDS folder or index file"):
        mds_to_pairs(tmp_path / "nothing", tmp_path / "x")
