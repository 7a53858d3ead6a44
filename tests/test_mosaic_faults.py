"""Bad MosaicML folders are typed errors naming the file, the field or sample, what was expected
and what was found; never a crash without a message nor rows of another dataset. Fixtures are
written by MosaicML's own writers (tests/mosaic_oracle.py), then damaged byte by byte."""

from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from datasets import load_dataset
from mmidx_builder.errors import FormatError, MissingCodecError, MissingPartnerError, ParameterError

COLUMNS = {"tokens": "ndarray:int32", "text": "str", "n": "int"}


def samples(count=60, seed=0):
    rng = np.random.default_rng(seed)
    return [{"tokens": rng.integers(0, 1000, int(rng.integers(1, 50))).astype(np.int32), "text": f"row {i}",
             "n": i} for i in range(count)]


def load(folder, streaming, tmp_path, **settings):
    ds = load_dataset(str(folder), split="train", streaming=streaming, cache_dir=str(tmp_path / "cache"), **settings)
    return list(ds)


def index_of(folder):
    with open(os.path.join(folder, "index.json")) as f:
        return json.load(f)


def rewrite_index(folder, change):
    document = index_of(folder)
    change(document)
    with open(os.path.join(folder, "index.json"), "w") as f:
        json.dump(document, f)


@pytest.fixture
def mds(mosaic, tmp_path):
    folder = tmp_path / "mds"
    mosaic.write_mds(folder, COLUMNS, samples(), size_limit=1 << 11, hashes=["sha1", "xxh64"])
    return folder


BOTH = pytest.mark.parametrize("streaming", [False, True], ids=["prepared", "streaming"])


@BOTH
def test_a_truncated_shard_is_named_with_its_size_and_the_indexs(mds, tmp_path, streaming):
    shard = mds / "shard.00002.mds"
    size = shard.stat().st_size
    os.truncate(shard, size - 7)
    with pytest.raises(FormatError, match=rf"shard\.00002\.mds: file size: expected {size} bytes \(shard 2 in .*"
                                          rf"index\.json\), found {size - 7} bytes"):
        load(mds, streaming, tmp_path)


@BOTH
def test_an_index_whose_sample_count_disagrees_with_its_shard_is_named(mds, tmp_path, streaming):
    def more(document):
        document["shards"][1]["samples"] += 1
    rewrite_index(mds, more)
    with pytest.raises(FormatError, match=r"shard\.00001\.mds: sample count at byte 0: expected \d+ \(shard 1 in"):
        load(mds, streaming, tmp_path)


@BOTH
def test_offsets_that_go_backwards_are_named_with_the_sample(mds, tmp_path, streaming):
    shard = mds / "shard.00001.mds"
    data = bytearray(shard.read_bytes())
    (count,) = struct.unpack_from("<I", data)
    offsets = struct.unpack_from(f"<{count + 1}I", data, 4)
    struct.pack_into("<I", data, 4 + 4 * 2, offsets[1] - 1)  # sample 2 now starts before sample 1
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"shard\.00001\.mds: offset of sample 1 at byte 8: expected offsets rising"):
        load(mds, streaming, tmp_path)


@BOTH
def test_a_sample_whose_column_sizes_do_not_fill_it_is_named(mds, tmp_path, streaming):
    shard = mds / "shard.00000.mds"
    data = bytearray(shard.read_bytes())
    (count,) = struct.unpack_from("<I", data)
    first = struct.unpack_from("<I", data, 4)[0]
    # Sample 0: [size of text u32][size of tokens u32][n int64][text][tokens]: claim a longer text.
    struct.pack_into("<I", data, first, struct.unpack_from("<I", data, first)[0] + 4)
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"shard\.00000\.mds: sample 0: column sizes: expected sizes adding up to"):
        load(mds, streaming, tmp_path)
    assert count >= 1


def test_a_shard_changed_within_its_size_is_caught_by_its_recorded_hashes_under_all_checks(mds, tmp_path):
    shard = mds / "shard.00003.mds"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF  # the last token of the last sample
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"shard\.00003\.mds: sha1 of the shard: expected [0-9a-f]{40} \(recorded in "
                                          r"the index\), found [0-9a-f]{40}"):
        load_dataset(str(mds), split="train", cache_dir=str(tmp_path / "cache"), verification_mode="all_checks")
    # Without all_checks the hashes are not computed (as datasets' basic_checks): the rows load.
    assert len(load(mds, False, tmp_path)) == 60


def test_mmidx_inspect_verify_names_the_changed_shard(mds, capsys):
    from mmidx_builder.cli import main

    assert main(["inspect", str(mds), "--verify"]) == 0
    shard = mds / "shard.00001.mds"
    data = bytearray(shard.read_bytes())
    data[-2] ^= 1
    shard.write_bytes(bytes(data))
    assert main(["inspect", str(mds), "--verify"]) != 0
    assert "shard.00001.mds: sha1 of the shard: expected" in capsys.readouterr().err


@BOTH
def test_a_missing_shard_is_named_with_its_index(mds, tmp_path, streaming):
    os.remove(mds / "shard.00002.mds")
    with pytest.raises(MissingPartnerError, match=r"shard\.00002\.mds: file: expected shard 2 of .*index\.json"):
        load(mds, streaming, tmp_path)


@BOTH
def test_a_shard_no_index_names_is_refused_not_left_out(mds, tmp_path, streaming):
    (mds / "shard.00099.mds").write_bytes((mds / "shard.00001.mds").read_bytes())
    with pytest.raises(MissingPartnerError, match=r"shard\.00099\.mds: file: expected a shard that an index among the "
                                                  r"data files names, found no index of split 'train' names it"):
        load(mds, streaming, tmp_path)


@pytest.mark.parametrize("name", ["../outside.mds", "/etc/passwd", "sub/../../x.mds", "C:/x.mds", "", "a//b.mds"])
def test_an_index_naming_a_shard_outside_its_folder_is_refused(mds, tmp_path, name):
    def escape(document):
        document["shards"][0]["raw_data"]["basename"] = name
    rewrite_index(mds, escape)
    with pytest.raises(FormatError, match=r"index\.json: shards\[0\] raw_data basename: expected a file name inside "
                                          r"the index's folder"):
        load(mds, True, tmp_path)


@pytest.mark.parametrize("change, message", [
    # The columns in their stored (sorted) order: n (int), text (str), tokens (ndarray:int32).
    (lambda d: d["shards"][0].update(column_encodings=["int", "text", "ndarray:int32"]),
     r"column 'text' encoding: expected one of .*found 'text'"),
    (lambda d: d["shards"][0].update(column_encodings=["int", "str", "ndarray:complex64"]),
     r"column 'tokens' encoding: expected ndarray, ndarray:DTYPE"),
    (lambda d: d["shards"][0].update(column_sizes=[4, None, None]), r"column_sizes of 'n': expected 8"),
    (lambda d: d["shards"][1].update(column_names=["text", "n", "tokens"]), r"shards\[1\] columns: expected the columns "
                                                                          r"of shards\[0\]"),
    (lambda d: d["shards"][0].update(format="json"), r"shards\[0\] format: expected \"mds\", found 'json' "
                                                     r"\(mosaicml-streaming's json, csv, tsv and xsv shards"),
    (lambda d: d.update(version=3), r"index: expected \{\"version\": 2"),
    (lambda d: d["shards"][0].update(compression="lz4", zip_data={**d["shards"][0]["raw_data"], "basename": "x.lz4"}),
     r"compression: expected one of br, bz2, gz, snappy, zstd"),
    (lambda d: d["shards"][0]["raw_data"].update(hashes={"crc99": "00"}), r"hashes: expected algorithms of hashlib or "
                                                                         r"xxhash, found 'crc99'"),
])
def test_an_index_mosaicml_streaming_does_not_write_is_named_field_by_field(mds, tmp_path, change, message):
    rewrite_index(mds, change)
    with pytest.raises(FormatError, match=message):
        load(mds, True, tmp_path)


def test_an_index_that_is_not_json_is_named(mds, tmp_path):
    (mds / "index.json").write_text('{"version": 2, "shards": [')
    with pytest.raises(FormatError, match=r"index\.json: JSON: expected an MDS index \(a JSON object\), found "
                                          r"JSONDecodeError"):
        load(mds, True, tmp_path)


@BOTH
def test_a_compressed_shard_whose_codec_is_missing_says_what_to_install(mosaic, tmp_path, monkeypatch, streaming):
    mosaic.write_mds(tmp_path / "mds", COLUMNS, samples(), compression="br", size_limit=1 << 12)
    for name in ("brotli", "brotlicffi"):  # a module set to None in sys.modules does not import
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingCodecError, match=r"shard\.00000\.mds\.br: compressed with br, and no br codec is "
                                                r"installed here; install one with: pip install 'mmidx-builder\[mosaic\]'"):
        load(tmp_path / "mds", streaming, tmp_path)


@BOTH
def test_a_corrupt_compressed_shard_is_named(mosaic, tmp_path, streaming):
    mosaic.write_mds(tmp_path / "mds", COLUMNS, samples(), compression="zstd", size_limit=1 << 12)
    shard = tmp_path / "mds" / "shard.00001.mds.zstd"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2:] = bytes(len(data) - len(data) // 2)
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"shard\.00001\.mds\.zstd: (zstd stream|decompressed size)"):
        load(tmp_path / "mds", streaming, tmp_path)


# --- Composer's legacy index -----------------------------------------------------------------------

@pytest.fixture
def legacy(mosaic, tmp_path):
    folder = tmp_path / "legacy"
    mosaic.write_legacy(folder, ["uid", "data"], [{"uid": b"%04d" % i, "data": bytes(300 + i)} for i in range(30)],
                        shard_size_limit=1 << 11)
    return folder


@pytest.mark.parametrize("offset, value, message", [
    (0, b"\x00\x00\x00\x00", r"index\.mds: magic at byte 0: expected 0xDA7AD06E"),
    (4, b"\x02\x00\x00\x00", r"index\.mds: version at byte 4: expected 1, found 2"),
    (12, b"\x63\x00\x00\x00", r"index\.mds: total_samples at byte 12: expected 30 \(samples_per_shard's sum\)"),
])
def test_a_legacy_index_is_checked_field_by_field(legacy, tmp_path, offset, value, message):
    path = legacy / "index.mds"
    data = bytearray(path.read_bytes())
    data[offset:offset + len(value)] = value
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=message):
        load(legacy, True, tmp_path)


def test_a_cut_legacy_index_names_the_field_it_ends_in(legacy, tmp_path):
    path = legacy / "index.mds"
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(FormatError, match=r"index\.mds: (samples_per_shard|bytes_per_shard) at byte \d+: expected \d+ "
                                          r"more bytes"):
        load(legacy, True, tmp_path)


def test_legacy_sample_sizes_that_do_not_add_up_to_their_shard_are_named(legacy, tmp_path):
    path = legacy / "index.mds"
    data = bytearray(path.read_bytes())
    (num_shards,) = struct.unpack_from("<I", data, 8)
    position = 28 + 16 * num_shards  # bps_format (2: int16 sizes), then the sizes
    assert struct.unpack_from("<i", data, position)[0] == 2
    struct.pack_into("<H", data, position + 4, 17)
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"index\.mds: bytes_per_shard of shard 0: expected \d+ \(its samples' sizes "
                                          r"added up\)"):
        load(legacy, True, tmp_path)


# --- settings that cannot work ---------------------------------------------------------------------

@pytest.mark.parametrize("settings, message", [
    ({"token_column": "nope"}, r"token_column='nope': .*has no such column; its columns are n \(int\), text \(str\), "
                               r"tokens \(ndarray:int32\)"),
    ({"token_column": "text"}, r"token_column='text' of .*: it is encoded 'str'; token ids are an ndarray of integers"),
    ({"token_column": "tokens", "seq_length": 8, "num_epochs": 0}, r"num_epochs"),
])
def test_settings_that_cannot_work_are_refused_by_name(mds, tmp_path, settings, message):
    with pytest.raises(ParameterError, match=message):
        load(mds, True, tmp_path, **settings)


def test_a_bytes_token_column_needs_its_dtype_and_bytes_that_fit_it(mosaic, tmp_path):
    mosaic.write_mds(tmp_path / "mds", {"tokens": "bytes"}, [{"tokens": bytes(range(i % 9))} for i in range(20)])
    with pytest.raises(ParameterError, match=r"its values are bytes: say how to read them with dtype="):
        load(tmp_path / "mds", True, tmp_path, token_column="tokens")
    with pytest.raises(FormatError, match=r"shard\.00000\.mds: sample 1 \(sample 1 of the stream\): column 'tokens': "
                                          r"token bytes: expected a multiple of 4 bytes \(int32\), found 1 bytes"):
        load(tmp_path / "mds", True, tmp_path, token_column="tokens", dtype="int32")


def test_streams_of_one_split_with_different_columns_are_refused(mosaic, tmp_path):
    mosaic.write_mds(tmp_path / "a", COLUMNS, samples(5))
    mosaic.write_mds(tmp_path / "b", {"tokens": "ndarray:int32"}, [{"tokens": np.arange(3, dtype=np.int32)}])
    with pytest.raises(ParameterError, match=r"the streams of one split must share their columns"):
        load_dataset("mmidx", data_files={"train": [str(tmp_path / "a" / "index.json"), str(tmp_path / "b" / "index.json")]},
                     split="train", streaming=True)


@BOTH
def test_text_that_is_not_utf8_names_its_sample(mosaic, tmp_path, streaming):
    mosaic.write_mds(tmp_path / "mds", {"text": "str"}, [{"text": f"row {i:03}"} for i in range(200)], size_limit=1 << 10)
    shard = tmp_path / "mds" / "shard.00002.mds"
    data = bytearray(shard.read_bytes())
    (count,) = struct.unpack_from("<I", data)
    start = struct.unpack_from("<I", data, 4 + 4 * 3)[0]  # sample 3: [size u32]["row NNN"]
    data[start + 4:start + 6] = b"\xff\xfe"
    shard.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"shard\.00002\.mds: sample 3: column 'text' \(str\): expected UTF-8 text, "
                                          r"found b'\\xff\\xfew \d+'"):
        load(tmp_path / "mds", streaming, tmp_path)
    assert count > 3
