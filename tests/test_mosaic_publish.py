"""Folders of MosaicML shards published: ``mmidx card`` (publishing/card.py with mosaic_facts.py),
``mmidx upload`` (publishing/hub.py) and the Hub round trip through the local Hub of
tests/hub_server.py.

The shards are written by MosaicML's own writers (tests/mosaic_oracle.py): LLM Foundry's token
shards (``train/`` and ``val/``, zstd, MDSWriter), a one-stream MDS folder with several column
encodings and recorded hashes, and Composer 0.9's legacy format. The rows every load gives are
compared with what mosaicml-streaming's own StreamingDataset (or Composer's reader) returns,
and with the folder loaded without a card.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading

import numpy as np
import pytest
from datasets import load_dataset

import mmidx_builder  # noqa: F401  (registers the builders)
from mmidx_builder import FormatError, HubError, MMIdxError, ParameterError
from mmidx_builder.cli import main
from mmidx_builder.hf.card_checksums import card_sha256
from mmidx_builder.publishing import hub
from mmidx_builder.publishing.card import CardSettings, render_card, write_card

from hub_server import hub_for_clients

TOKEN = "hf_mosaicTOKENthatMustNeverBePrinted77"
CONCAT = 24  # LLM Foundry's --concat_tokens here
DEADLINE = 60


def _documents(rng, count, high=70):
    return [rng.integers(1, 50_000, int(n)) for n in rng.integers(0, high, count)]


def _llm_foundry(mosaic, folder, seed=0):
    """LLM Foundry's token shards: train/ and val/, zstd, several shards (a partial last one)."""
    rng = np.random.default_rng(seed)
    written = mosaic.write_llm_foundry_concat(folder, {"train": _documents(rng, 60), "val": _documents(rng, 14)},
                                              CONCAT, eos=[0], size_limit=700)
    return folder, written


def _mds_columns(mosaic, folder, seed=1, hashes=("sha1", "xxh64")):
    """One stream at the top of the folder: several encodings, uncompressed, hashes recorded."""
    rng = np.random.default_rng(seed)
    samples = [{"text": "x" * int(n), "n": int(i), "ids": rng.integers(0, 1000, int(n) % 9 + 1).astype(np.uint16)}
               for i, n in enumerate(rng.integers(0, 40, 37))]
    mosaic.write_mds(folder, {"text": "str", "n": "int", "ids": "ndarray:uint16"}, samples, hashes=list(hashes),
                     size_limit=400)
    return folder


def _rows(dataset, column):
    return [np.asarray(row[column]).tolist() for row in dataset]


def _split_rows(loaded, column):
    return {split: _rows(loaded[split], column) for split in loaded}


def _without_card(folder, tmp_path, name):
    copy = tmp_path / name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("README.md", "*.png"))
    return copy


@pytest.fixture(scope="module")
def foundry(mosaic, tmp_path_factory):
    """An LLM Foundry folder with its card, the samples the writer wrote, and StreamingDataset's rows."""
    root = tmp_path_factory.mktemp("foundry")
    folder, written = _llm_foundry(mosaic, root / "tokens")
    bare = _without_card(folder, root, "bare")
    oracle = {split: [np.asarray(s["tokens"]).tolist() for s in mosaic.read_mds_streaming(folder / part, root)]
              for split, part in (("train", "train"), ("validation", "val"))}
    write_card(folder, CardSettings(repo_id="me/mds"))
    return {"folder": folder, "bare": bare, "written": written, "oracle": oracle}


# --- the card -----------------------------------------------------------------------------------

def test_the_card_lists_every_file_with_its_sha256_and_the_configs_name_them_per_split(foundry):
    from huggingface_hub import DatasetCard

    folder = foundry["folder"]
    text = (folder / "README.md").read_text()
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                   and p.name not in ("README.md", "document_lengths.png"))
    assert card_sha256(text) == {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in files}
    data = DatasetCard(text).data
    configs = {entry["split"]: entry["path"] for entry in data["configs"][0]["data_files"]}
    assert configs == {"train": [f for f in files if f.startswith("train/")],
                       "validation": [f for f in files if f.startswith("val/")]}
    assert configs["train"][0] == "train/index.json" and configs["train"][1].endswith(".mds.zstd")
    assert set(data["configs"][0]) == {"config_name", "data_files"}  # rows as stored: no builder setting
    info = data["dataset_info"]
    assert info["features"] == [{"name": "tokens", "list": "int32"}]
    assert {s["name"]: s["num_examples"] for s in info["splits"]} == {
        "train": len(foundry["written"]["train"]), "validation": len(foundry["written"]["val"])}
    assert info["download_size"] == sum((folder / f).stat().st_size for f in files)
    index = json.loads((folder / "train/index.json").read_text())
    assert f"| train | `train/index.json` | MDS | `tokens` ndarray:int32 | {len(index['shards'])} |" in text
    assert "as stored, zstd)" in text
    samples = len(foundry["written"]["train"]) + len(foundry["written"]["val"])
    assert f"| samples | {'0 | ' * CONCAT.bit_length()}{samples} |" in text  # every sample holds CONCAT ids


def test_the_card_loads_back_with_the_rows_mosaicml_streaming_reads(foundry, tmp_path):
    folder, bare, oracle = foundry["folder"], foundry["bare"], foundry["oracle"]
    cache = str(tmp_path / "cache")
    prepared = load_dataset(str(folder), cache_dir=cache, verification_mode="all_checks")
    streamed = load_dataset(str(folder), cache_dir=cache, streaming=True)
    assert oracle == {split: [s.tolist() for s in foundry["written"][part]]
                      for split, part in (("train", "train"), ("validation", "val"))}
    assert _split_rows(prepared, "tokens") == _split_rows(streamed, "tokens") == oracle
    no_card = load_dataset(str(bare), cache_dir=cache)
    assert _split_rows(no_card, "tokens") == oracle
    for facts in render_card(folder).splits:
        assert facts.features == no_card[facts.name].features == prepared[facts.name].features
        assert facts.num_bytes == no_card[facts.name].info.splits[facts.name].num_bytes


@pytest.mark.parametrize("settings", [{"token_column": "tokens"}, {"seq_length": 7, "seed": 3}])
def test_other_readings_of_a_carded_folder_are_the_bare_folders(foundry, tmp_path, settings):
    """The card's dataset_info describes the rows as stored; a call reading the token column
    (or Megatron samples of it) gets its own rows, the same with and without the card."""
    cache = str(tmp_path / "cache")
    bare = _split_rows(load_dataset(str(foundry["bare"]), cache_dir=cache, **settings), "input_ids")
    for streaming in (False, True):
        carded = load_dataset(str(foundry["folder"]), cache_dir=cache, streaming=streaming, **settings)
        assert _split_rows(carded, "input_ids") == bare
    if "token_column" in settings:
        assert bare == foundry["oracle"]
    else:
        assert {len(row) for rows in bare.values() for row in rows} == {settings["seq_length"] + 1}


@pytest.mark.parametrize("settings", [{"token_column": "tokens"}, {"seq_length": 16}])
def test_a_card_can_make_a_token_reading_the_default(foundry, tmp_path, settings):
    folder = tmp_path / "tokens"
    shutil.copytree(foundry["bare"], folder)
    rendered = write_card(folder, CardSettings(**settings))
    cache = str(tmp_path / "cache")
    expected = load_dataset(str(foundry["bare"]), cache_dir=cache, **settings)
    for streaming in (False, True):
        loaded = load_dataset(str(folder), cache_dir=cache, streaming=streaming)
        assert _split_rows(loaded, "input_ids") == _split_rows(expected, "input_ids")
    for facts in rendered.splits:
        assert facts.features == expected[facts.name].features
        assert facts.num_examples == expected[facts.name].num_rows
        assert facts.num_bytes == expected[facts.name].info.splits[facts.name].num_bytes
    text = (folder / "README.md").read_text()
    assert "token_column: tokens" in text if "token_column" in settings else "seq_length: 16" in text
    write_card(folder)  # a re-run keeps the settings the last one recorded
    assert (folder / "README.md").read_text() == text


def test_a_one_stream_folder_of_several_encodings_and_its_recorded_hashes(mosaic, tmp_path):
    folder = _mds_columns(mosaic, tmp_path / "columns")
    rendered = write_card(folder)
    text = (folder / "README.md").read_text()
    assert "| train | `index.json` | MDS | `ids` ndarray:uint16, `n` int, `text` str |" in text
    assert "| sha1, xxh64 |" in text
    assert "Samples per length in tokens of `ids`" in text  # its one column that can hold token ids
    loaded = load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"))
    assert [s.name for s in rendered.splits] == ["train"] and rendered.splits[0].features == loaded.features
    oracle = mosaic.read_mds_local(folder)
    assert [(r["text"], r["n"], r["ids"]) for r in loaded] == [(s["text"], s["n"], s["ids"].tolist()) for s in oracle]


def test_a_legacy_composer_folder(mosaic, tmp_path):
    folder = tmp_path / "legacy"
    rng = np.random.default_rng(5)
    samples = [{"x": rng.bytes(int(n)), "y": str(i).encode()} for i, n in enumerate(rng.integers(0, 300, 40))]
    mosaic.write_legacy(folder, ["x", "y"], samples, shard_size_limit=2000, compression="gz")
    write_card(folder)
    text = (folder / "README.md").read_text()
    assert "Composer legacy" in text and "`index.mds.gz` | index |" in text
    for streaming in (False, True):
        loaded = load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"), streaming=streaming)
        assert [(r["x"], r["y"]) for r in loaded] == [(s["x"], s["y"]) for s in mosaic.read_legacy_samples(folder)]


def test_a_card_never_passes_the_bounds_load_dataset_keeps(foundry, tmp_path, monkeypatch):
    """Too many files for the front matter: the configs name each index and its first shard (the
    index names the others); and a folder whose card cannot be made small enough is refused."""
    from huggingface_hub import DatasetCard

    folder = tmp_path / "tokens"
    shutil.copytree(foundry["bare"], folder)
    full = render_card(folder).text
    front = full.split("\n---\n", 1)[0]
    monkeypatch.setenv("MMIDX_MAX_CARD_BYTES", str(len(front.encode()) - 50))
    write_card(folder)
    data = DatasetCard((folder / "README.md").read_text()).data
    assert {e["split"]: e["path"] for e in data["configs"][0]["data_files"]} == {
        "train": ["train/index.json", "train/shard.00000.mds.zstd"],
        "validation": ["val/index.json", "val/shard.00000.mds.zstd"]}
    assert card_sha256((folder / "README.md").read_text()) == card_sha256(full)
    loaded = load_dataset(str(folder), cache_dir=str(tmp_path / "cache"), verification_mode="all_checks")
    assert _split_rows(loaded, "tokens") == foundry["oracle"]
    monkeypatch.setenv("MMIDX_MAX_CARD_BYTES", "200")
    with pytest.raises(ParameterError, match="MMIDX_MAX_CARD_BYTES"):
        render_card(folder)


def test_mmidx_card_command(foundry, tmp_path, capsys):
    folder = tmp_path / "tokens"
    shutil.copytree(foundry["bare"], folder)
    assert main(["card", str(folder), "--token-column", "tokens"]) == 0
    rows = len(foundry["written"]["train"]) + len(foundry["written"]["val"])
    assert f"2 split(s), {rows:,} rows\n" in capsys.readouterr().out
    assert main(["card", str(folder), "--token-column", "nope"]) == 1
    assert "--token-column nope: " in capsys.readouterr().err


def test_the_mosaic_template_file_is_the_one_the_code_uses():
    from pathlib import Path

    from mmidx_builder.publishing.card import MOSAIC_CARD_TEMPLATE

    path = Path(__file__).resolve().parents[1] / "dataset_cards" / "MOSAIC_TEMPLATE.md"
    assert path.read_text() == MOSAIC_CARD_TEMPLATE


# --- what the upload checks ---------------------------------------------------------------------

def _dry_run(folder):
    lines = []
    hub.upload(folder, "me/mds", dry_run=True, echo=lines.append)
    return "\n".join(lines)


def test_the_dry_run_lists_the_shards_and_checks_the_streams(foundry, tmp_path):
    folder = tmp_path / "tokens"
    shutil.copytree(foundry["bare"], folder)
    said = _dry_run(folder)
    assert "train/shard.00000.mds.zstd" in said and "val/index.json" in said
    assert "2 MosaicML stream(s) checked" in said
    assert not (folder / "README.md").exists()


def _broken(folder, case):
    index = json.loads((folder / "train/index.json").read_text())
    last = index["shards"][-1]["zip_data"]["basename"]
    if case == "missing shard":
        (folder / "train" / last).unlink()
        return last
    if case == "shard of another size":
        with open(folder / "train" / last, "ab") as f:
            f.write(b"\0")
        return last
    if case == "shard no index names":
        shutil.copy(folder / "train" / last, folder / "train" / "shard.00099.mds.zstd")
        return "shard.00099.mds.zstd"
    if case == "shard in no split":
        (folder / "extra").mkdir()
        shutil.copy(folder / "train" / last, folder / "extra" / "shard.00000.mds.zstd")
        return "extra/shard.00000.mds.zstd"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["missing shard", "shard of another size", "shard no index names",
                                  "shard in no split"])
def test_the_upload_refuses_a_folder_the_loader_would_refuse(foundry, tmp_path, case):
    folder = tmp_path / "tokens"
    shutil.copytree(foundry["bare"], folder)
    named = _broken(folder, case)
    with pytest.raises(HubError, match="nothing was uploaded") as caught:
        _dry_run(folder)
    assert named in str(caught.value)
    if case == "shard in no split":
        return  # datasets' split patterns never list it: the card and the upload say so (as for .bin files)
    with pytest.raises(MMIdxError, match=named.replace(".", r"\.")):
        list(load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "cache"), streaming=True))


def test_the_upload_refuses_a_shard_whose_bytes_are_not_the_recorded_ones(mosaic, tmp_path):
    folder = _mds_columns(mosaic, tmp_path / "columns")
    path = folder / "shard.00001.mds"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last sample's last byte: the same size, a valid shard
    path.write_bytes(bytes(data))
    with pytest.raises(HubError, match=r"shard\.00001\.mds: sha1 of the file"):
        _dry_run(folder)


# --- the Hub round trip -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    with hub_for_clients(tmp_path_factory.mktemp("hf_home"), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def published(local_hub, foundry, tmp_path_factory):
    """The LLM Foundry folder, uploaded by ``mmidx upload`` (which writes its card first)."""
    folder = tmp_path_factory.mktemp("published") / "tokens"
    shutil.copytree(foundry["bare"], folder)
    assert main(["upload", str(folder), "--repo-id", "me/mds"]) == 0
    assert local_hub.repos["me/mds"]
    return folder


def within(seconds, work):
    """``work()``'s result, or a failure when it still runs after ``seconds`` (a hung load)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the test's thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: hung")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def test_the_upload_sends_the_folder_and_its_card(local_hub, published):
    served = local_hub.files("me/mds")
    local = {p.relative_to(published).as_posix(): p.read_bytes() for p in published.rglob("*") if p.is_file()}
    assert served == local
    assert set(card_sha256(served["README.md"].decode())) == set(local) - {"README.md", "document_lengths.png"}
    assert "load_dataset(\"me/mds\", split=\"train\")" in served["README.md"].decode()
    commits = [r["body"] for r in local_hub.requests if "/commit/" in r["path"] and "/me/mds/" in r["path"]]
    assert commits and "Upload MosaicML shards with mmidx" in str(commits[-1])


def test_the_hub_repo_loads_as_the_folder_prepared_and_streaming(local_hub, published, foundry, tmp_path, caplog):
    cache = str(tmp_path / "cache")
    caplog.set_level("INFO", logger="mmidx_builder.hf.card_checksums")
    prepared = within(DEADLINE, lambda: load_dataset("me/mds", cache_dir=cache, verification_mode="all_checks"))
    files = len(card_sha256((published / "README.md").read_text()))
    assert f"sha256 of {files} downloaded file(s) match" in caplog.text
    streamed = load_dataset("me/mds", cache_dir=cache, streaming=True)
    assert _split_rows(prepared, "tokens") == within(DEADLINE, lambda: _split_rows(streamed, "tokens")) \
        == foundry["oracle"]
    hf_train = "hf://datasets/me/mds/train/index.json"
    for streaming in (False, True):
        named = load_dataset("mmidx", data_files=hf_train, split="train", cache_dir=cache, streaming=streaming)
        assert within(DEADLINE, lambda: _rows(named, "tokens")) == foundry["oracle"]["train"]


@pytest.mark.parametrize("settings", [{"token_column": "tokens"}, {"seq_length": 16, "seed": 9}])
def test_token_readings_of_the_hub_repo_are_the_folders(local_hub, published, tmp_path, settings):
    cache = str(tmp_path / "cache")
    local = _split_rows(load_dataset(str(published), cache_dir=cache, **settings), "input_ids")
    for streaming in (False, True):
        loaded = load_dataset("me/mds", cache_dir=cache, streaming=streaming, **settings)
        assert within(DEADLINE, lambda: _split_rows(loaded, "input_ids")) == local
    named = load_dataset("mmidx", data_files={"validation": "hf://datasets/me/mds/val/index.json"}, split="validation",
                         cache_dir=cache, **settings)
    assert _rows(named, "input_ids") == local["validation"]


def test_all_checks_names_a_shard_changed_on_the_hub_after_the_card(local_hub, published, tmp_path):
    files = dict(local_hub.files("me/mds"))
    name = "train/shard.00001.mds.zstd"
    tampered = bytearray(files[name])
    tampered[-2] ^= 0xFF  # the same size
    files[name] = bytes(tampered)
    local_hub.commit("me/mds-tampered", files)
    with pytest.raises(FormatError) as caught:
        within(DEADLINE, lambda: load_dataset("me/mds-tampered", cache_dir=str(tmp_path / "cache"),
                                              verification_mode="all_checks"))
    message = str(caught.value)
    assert f"{name}: sha256" in message
    assert hashlib.sha256((published / name).read_bytes()).hexdigest() in message
    assert hashlib.sha256(bytes(tampered)).hexdigest() in message


def test_all_checks_compares_the_hashes_an_mds_index_records(local_hub, mosaic, tmp_path):
    """No card here: the index's own sha1 and xxh64 of each shard are what all_checks compares."""
    folder = _mds_columns(mosaic, tmp_path / "columns")
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    local_hub.commit("me/mds-hashed", files)
    cache = str(tmp_path / "cache")
    expected = _rows(load_dataset(str(folder), split="train", cache_dir=cache), "text")
    good = within(DEADLINE, lambda: load_dataset("me/mds-hashed", split="train", cache_dir=cache,
                                                 verification_mode="all_checks"))
    assert _rows(good, "text") == expected
    tampered = bytearray(files["shard.00002.mds"])
    tampered[-1] ^= 0x01  # the last sample's text: "x" becomes "y", the same size
    local_hub.commit("me/mds-hashed-tampered", {**files, "shard.00002.mds": bytes(tampered)})
    with pytest.raises(FormatError, match=r"shard\.00002\.mds: sha1 of the shard: expected [0-9a-f]{40} \(recorded"):
        within(DEADLINE, lambda: load_dataset("me/mds-hashed-tampered", split="train", cache_dir=cache + "-x",
                                              verification_mode="all_checks"))
    # Without all_checks the hashes are not computed, as for any dataset.
    assert len(_rows(load_dataset("me/mds-hashed-tampered", split="train", cache_dir=cache + "-y"), "text")) == 37

