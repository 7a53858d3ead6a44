"""A dataset card is text from an untrusted repository: every path it names must stay inside
the dataset's folder, judged on the names as written (hf/card_scope.py). One test per
path-bearing setting escaping through a card; the same settings given by the caller still
reach anywhere; a folder reached through symbolic links (a Hub snapshot's, a cluster's) loads.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import MMIdxError, ParameterError
from mmidx_builder.hf.card_scope import check_card_name
from mmidx_builder.sources.indexed import write_documents

SECRET = "root:x:0:0:SECRET-LINE-THAT-MUST-NOT-BE-PRINTED 0.5 b"
RUN = "--split 1 --seq-length 8 --train-iters 3 --global-batch-size 2 --eval-interval 5 --eval-iters 1"
ESCAPE = "outside the dataset folder or repository"


@pytest.fixture
def world(tmp_path):
    """``ds/`` (the dataset: a pair, a blend file) beside ``outside/`` (a pair, a secret file,
    argument files that name the outside pair)."""
    rng = np.random.default_rng(7)
    docs = [rng.integers(1, 60_000, n) for n in rng.integers(1, 40, 60)]
    outside = tmp_path / "outside"
    write_documents(outside / "secret_text_document", docs, dtype=np.uint16)
    (outside / "passwd").write_text(SECRET + "\n")
    (outside / "blend.txt").write_text(f"{outside / 'secret_text_document'}\n")
    (outside / "per_split.json").write_text(json.dumps({"train": [str(outside / "secret_text_document")],
                                                        "valid": None, "test": None}))
    ds = tmp_path / "ds"
    write_documents(ds / "a_text_document", docs[::-1], dtype=np.uint16)
    (ds / "x").mkdir()
    return tmp_path


def _card(folder, body: str) -> None:
    (folder / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n{body}---\n")


def _load_card(world, body: str, **kwargs):
    _card(world / "ds", body)
    return load_dataset(str(world / "ds"), cache_dir=str(world / "cache"), **kwargs)


def _escaping_cards(root):
    outside = root / "outside"
    secret = outside / "secret_text_document"
    return {
        "data_files absolute": f"  data_files:\n  - split: train\n    path: {outside}/*.bin\n  seq_length: 8\n",
        "data_files ../": "  data_files:\n  - split: train\n    path: ../outside/*.bin\n  seq_length: 8\n",
        "data_files a/../..": "  data_files:\n  - split: train\n    path: x/../../outside/*.bin\n  seq_length: 8\n",
        # A second config: datasets itself lists the first config's files before any builder runs.
        "data_files URL": "  seq_length: 8\n- config_name: remote\n  data_files:\n  - split: train\n"
                          "    path: hf://datasets/other/repo/a.bin\n",
        "data_dir ../": "  data_dir: ../outside\n  seq_length: 8\n",
        "data_path absolute": f"  data_path: ['{secret}']\n  split_ratios: '1'\n  seq_length: 8\n",
        "data_path ../ with weights": "  data_path: '0.5 a_text_document 0.5 ../outside/secret_text_document'\n"
                                      "  split_ratios: '1'\n  seq_length: 8\n",
        "train_data_path": f"  train_data_path: ['{secret}']\n  valid_data_path: [a_text_document]\n"
                           "  test_data_path: [a_text_document]\n  seq_length: 8\n",
        "valid_data_path": "  train_data_path: [a_text_document]\n"
                           "  valid_data_path: [../outside/secret_text_document]\n"
                           "  test_data_path: [a_text_document]\n  seq_length: 8\n",
        "test_data_path": f"  train_data_path: [a_text_document]\n  valid_data_path: [a_text_document]\n"
                          f"  test_data_path: ['{secret}']\n  seq_length: 8\n",
        "--data-path absolute": f"  megatron_args: '--data-path {secret} {RUN}'\n",
        "--data-path ../": f"  megatron_args: '--data-path 1 ../outside/secret_text_document {RUN}'\n",
        "--data-path=": f"  megatron_args: '--data-path=../outside/secret_text_document {RUN}'\n",
        "--train-data-path": f"  megatron_args: '--train-data-path {secret} --valid-data-path a_text_document "
                             f"--test-data-path a_text_document {RUN}'\n",
        "--valid-data-path": f"  megatron_args: '--train-data-path a_text_document --valid-data-path {secret} "
                             f"--test-data-path a_text_document {RUN}'\n",
        "--test-data-path": f"  megatron_args: '--train-data-path a_text_document --valid-data-path a_text_document "
                            f"--test-data-path ../outside/secret_text_document {RUN}'\n",
        "--data-args-path absolute": f"  megatron_args: '--data-args-path {outside}/passwd {RUN}'\n",
        "--data-args-path ../": f"  megatron_args: '--data-args-path ../outside/blend.txt {RUN}'\n",
        "--per-split-data-args-path": f"  megatron_args: '--per-split-data-args-path {outside}/per_split.json {RUN}'\n",
        "--per-split-data-args-path ../": f"  megatron_args: '--per-split-data-args-path ../outside/per_split.json "
                                          f"{RUN}'\n",
    }


CASES = sorted(_escaping_cards(__import__("pathlib").Path("/")))


@pytest.mark.parametrize("case", CASES)
def test_a_card_cannot_name_a_path_outside_its_folder(world, case):
    with pytest.raises(ParameterError, match=ESCAPE) as raised:
        _load_card(world, _escaping_cards(world)[case], **({"name": "remote"} if "URL" in case else {}))
    assert SECRET not in str(raised.value)


@pytest.mark.parametrize("where", ["blend.list", "per_split.jsonc"])
def test_the_files_an_argument_file_in_the_folder_names_must_be_inside_too(world, where):
    ds, outside = world / "ds", world / "outside"
    # Not .txt / .json: a folder of one pair and such files is inferred as datasets' text or
    # JSON folder (issue 20 item 2), which is not what this test is about.
    (ds / "blend.list").write_text("1 a_text_document\n1 ../outside/secret_text_document\n")
    (ds / "per_split.jsonc").write_text(json.dumps({"train": [str(outside / "secret_text_document")],
                                                   "valid": ["a_text_document"], "test": ["a_text_document"]}))
    option = "--data-args-path" if where == "blend.list" else "--per-split-data-args-path"
    with pytest.raises(ParameterError, match=f"from an argument file.*{ESCAPE}"):
        _load_card(world, f"  megatron_args: '{option} {where} {RUN}'\n")


def _rows(dataset_dict):
    return {split: np.array(dataset_dict[split]["input_ids"]) for split in dataset_dict}


def test_argument_files_inside_the_folder_are_read_from_the_folder(world, tmp_path, monkeypatch):
    ds = world / "ds"
    write_documents(ds / "b_text_document", [np.arange(1, 30)] * 40, dtype=np.uint16)
    (ds / "blend.list").write_text("0.3 a_text_document\n0.7 b_text_document\n")
    (ds / "per_split.jsonc").write_text(json.dumps({"train": "1 a_text_document 2 b_text_document",
                                                   "valid": ["b_text_document"], "test": ["a_text_document"]}))
    monkeypatch.chdir(tmp_path)  # not the folder: the card's names are relative to the folder
    explicit = load_dataset("mmidx", data_path=["0.3", str(ds / "a_text_document"), "0.7", str(ds / "b_text_document")],
                            split_ratios="1", num_samples={"train": 6, "validation": 2, "test": 2}, seq_length=8,
                            cache_dir=str(world / "c1"))
    from_card = _load_card(world, f"  megatron_args: '--data-args-path blend.list {RUN}'\n")
    assert {k: v.tolist() for k, v in _rows(from_card).items()} == {k: v.tolist() for k, v in _rows(explicit).items()}
    per_split = _load_card(world, f"  megatron_args: '--per-split-data-args-path per_split.jsonc {RUN}'\n",
                           split="validation")
    assert len(per_split) == 2 and int(per_split["dataset_id"][0]) == 0


def test_the_callers_own_settings_may_name_files_anywhere(world, monkeypatch):
    ds, outside = world / "ds", world / "outside"
    secret = str(outside / "secret_text_document")
    _card(ds, "  seq_length: 8\n")
    cache = str(world / "cache")
    expected = load_dataset("mmidx", data_path=[secret], split_ratios="1", num_samples={"train": 6},
                            seq_length=8, cache_dir=cache, split="train")["input_ids"]
    monkeypatch.chdir(ds)
    calls = {
        "data_path": dict(data_path=["../outside/secret_text_document"], split_ratios="1", num_samples={"train": 6}),
        "megatron_args --data-path": dict(megatron_args=f"--data-path {secret} {RUN}"),
        "megatron_args --data-args-path": dict(megatron_args=f"--data-args-path {outside / 'blend.txt'} {RUN}"),
        "megatron_args --per-split-data-args-path": dict(
            megatron_args=f"--per-split-data-args-path ../outside/per_split.json {RUN}".replace("--split 1 ", "")),
    }
    for name, call in calls.items():
        loaded = load_dataset(str(ds), cache_dir=cache, split="train", **call)
        assert loaded["input_ids"] == expected, name
    files = load_dataset(str(ds), data_files={"train": "../outside/*.bin"}, cache_dir=cache, split="train")
    assert len(files) > 0


def test_an_error_about_an_argument_file_never_quotes_it(world, tmp_path):
    # The caller's own file, but not a blend: the message names the file, not what it holds.
    passwd = world / "outside" / "passwd"
    for option in ("--data-args-path", "--per-split-data-args-path"):
        with pytest.raises(MMIdxError) as raised:
            load_dataset("mmidx", megatron_args=f"{option} {passwd} {RUN}", cache_dir=str(tmp_path / "c"))
        assert str(passwd) in str(raised.value) and "SECRET" not in str(raised.value)
    (tmp_path / "bad.json").write_text(json.dumps({"train": ["1", SECRET, "x", "y"]}))
    with pytest.raises(ParameterError) as raised:
        load_dataset("mmidx", megatron_args=f"--per-split-data-args-path {tmp_path / 'bad.json'} {RUN}",
                     cache_dir=str(tmp_path / "c"))
    assert "SECRET" not in str(raised.value)


@pytest.mark.parametrize("kind", ["fifo", "directory", "binary"])
def test_an_argument_file_that_is_no_text_file_is_a_clear_error(tmp_path, kind):
    path = tmp_path / "blend.txt"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"\xff\xfe" + os.urandom(64))
    with pytest.raises(ParameterError, match={"fifo": "FIFO", "directory": "directory", "binary": "not UTF-8"}[kind]):
        load_dataset("mmidx", megatron_args=f"--data-args-path {path} {RUN}", cache_dir=str(tmp_path / "c"))


def test_a_card_in_a_symlinked_folder_of_symlinked_files_loads(world, tmp_path):
    """A cluster's linked data folder whose files are links elsewhere (as a Hub snapshot's are
    links into blobs/): containment is judged on the names as written, links are followed."""
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    real = tmp_path / "real"
    real.mkdir()
    for ext in (".bin", ".idx"):
        os.replace(world / "ds" / f"a_text_document{ext}", blobs / f"sha{ext}")
        os.symlink(blobs / f"sha{ext}", real / f"a_text_document{ext}")
        os.symlink(blobs / f"sha{ext}", real / f"train{ext}")
    linked = tmp_path / "linked"
    os.symlink(real, linked)
    (real / "README.md").write_text(f"---\nconfigs:\n- config_name: default\n"
                                    f"  megatron_args: '--data-path a_text_document {RUN}'\n---\n")
    megatron = load_dataset(str(linked), cache_dir=str(tmp_path / "c"), split="train")
    (real / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n"
                                    "    path: train.bin\n  seq_length: 8\n---\n")
    pairs = load_dataset(str(linked), cache_dir=str(tmp_path / "c"), split="train")
    assert len(megatron) == 6 and len(pairs) > 0


# --- Hub repos: a snapshot_download folder, and a card read from the repo itself ---------------

@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    from hub_server import hub_for_clients

    with hub_for_clients(tmp_path_factory.mktemp("hf_home")) as server:
        yield server


def _repo_files(tmp_path, card: str, **extra: bytes) -> dict[str, bytes]:
    rng = np.random.default_rng(11)
    write_documents(tmp_path / "a_text_document", [rng.integers(1, 60_000, n) for n in rng.integers(1, 40, 60)],
                    dtype=np.uint16)
    files = {f"data/a_text_document{ext}": (tmp_path / f"a_text_document{ext}").read_bytes()
             for ext in (".bin", ".idx")}
    return {**files, "README.md": f"---\nconfigs:\n- config_name: default\n{card}---\n".encode(), **extra}


def test_a_snapshot_download_of_a_hub_repo_loads_with_its_card(local_hub, tmp_path, monkeypatch):
    from huggingface_hub import snapshot_download

    card = f"  megatron_args: '--data-args-path data/blend.list {RUN}'\n"
    local_hub.commit("me/snap", _repo_files(tmp_path, card, **{"data/blend.list": b"1 data/a_text_document\n"}))
    folder = snapshot_download("me/snap", repo_type="dataset", cache_dir=str(tmp_path / "hub"))
    assert os.path.islink(os.path.join(folder, "data", "a_text_document.bin"))  # links into blobs/
    from_snapshot = load_dataset(folder, cache_dir=str(tmp_path / "c"), split="train")
    explicit = load_dataset("mmidx", data_path=[os.path.join(folder, "data", "a_text_document")], split_ratios="1",
                            num_samples={"train": 6}, seq_length=8, cache_dir=str(tmp_path / "c"), split="train")
    assert from_snapshot["input_ids"] == explicit["input_ids"]
    # The same, given relative from the snapshot's parent.
    monkeypatch.chdir(os.path.dirname(folder))
    relative = load_dataset(os.path.basename(folder), cache_dir=str(tmp_path / "c2"), split="train")
    assert relative["input_ids"] == explicit["input_ids"]
    # A card as `mmidx card` writes it (data_files): the files it lists are links too.
    local_hub.commit("me/pairs", _repo_files(tmp_path, "  data_files:\n  - split: train\n    path: data/*.bin\n"
                                                       "  seq_length: 8\n"))
    pairs = snapshot_download("me/pairs", repo_type="dataset", cache_dir=str(tmp_path / "hub"))
    from_pairs = load_dataset(pairs, cache_dir=str(tmp_path / "c"), split="train")
    direct = load_dataset("mmidx", data_files={"train": os.path.join(pairs, "data", "a_text_document.bin")},
                          seq_length=8, cache_dir=str(tmp_path / "c"), split="train")
    assert len(from_pairs) > 0 and from_pairs["input_ids"] == direct["input_ids"]


def test_a_hub_card_reads_its_argument_file_from_the_repo_and_cannot_leave_it(local_hub, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "blend.list").write_text("1 elsewhere_text_document\n")  # a same-named local file is not read
    local_hub.commit("me/args", _repo_files(tmp_path, f"  megatron_args: '--data-args-path blend.list {RUN}'\n",
                                            **{"blend.list": b"1 data/a_text_document\n"}))
    from_hub = load_dataset("me/args", cache_dir=str(tmp_path / "c"), split="train")
    assert len(from_hub) == 6
    for card in (f"  megatron_args: '--data-args-path ../../other/blend.list {RUN}'\n",
                 f"  megatron_args: '--data-args-path {tmp_path / 'blend.list'} {RUN}'\n",
                 "  data_path: [hf://datasets/other/repo/x_text_document]\n  split_ratios: '1'\n",
                 f"  data_files: 'file:{tmp_path}/a_text_document.bin'\n  seq_length: 8\n",  # issue 40
                 f"  data_path: ['local:{tmp_path}/a_text_document']\n  split_ratios: '1'\n"):
        local_hub.commit("me/evil", _repo_files(tmp_path, card))
        with pytest.raises(ParameterError, match=ESCAPE):
            load_dataset("me/evil", cache_dir=str(tmp_path / "c"), split="train")


def test_a_hub_card_datasets_cannot_read_is_a_parameter_error_naming_the_repo(local_hub, tmp_path):
    """``features: 5`` in a Hub repo's card: datasets reads the card before any builder runs."""
    local_hub.commit("me/features", _repo_files(tmp_path, "  data_files: data/*.bin\n  seq_length: 8\n  features: 5\n"))
    with pytest.raises(ParameterError) as error:
        load_dataset("me/features", cache_dir=str(tmp_path / "c"), split="train", streaming=True)
    assert str(error.value) == ("README.md of the Hub dataset me/features: the dataset card's front matter: configs[0] "
                                "(config_name 'default') features: expected datasets' YAML features (a list of "
                                "mappings with a name and a dtype), found int 5")


@pytest.mark.parametrize("with_card", [True, False])
def test_a_relative_folder_with_relative_prefixes_is_joined_once(tmp_path, monkeypatch, with_card):
    """Issue 20 item 4: ``load_dataset("card", data_path=[...])`` run from the folder's parent."""
    rng = np.random.default_rng(5)
    folder = tmp_path / "card"
    for name in "ab":
        write_documents(folder / f"{name}_text_document", [rng.integers(1, 60_000, n) for n in rng.integers(1, 30, 50)],
                        dtype=np.uint16)
    if with_card:
        _card(folder, "  data_path: ['0.5', a_text_document, '0.5', b_text_document]\n  split_ratios: '1'\n"
                      "  num_samples: {train: 10}\n  seq_length: 8\n")
    blend = dict(split_ratios="1", num_samples={"train": 10}, seq_length=8, split="train")
    absolute = ["0.5", str(folder / "a_text_document"), "0.5", str(folder / "b_text_document")]
    expected = load_dataset("mmidx", data_path=absolute, cache_dir=str(tmp_path / "c1"), **blend)
    monkeypatch.chdir(tmp_path)
    loaded = load_dataset("card", data_path=["0.5", "a_text_document", "0.5", "b_text_document"],
                          cache_dir=str(tmp_path / "c2"), **blend)
    assert loaded["input_ids"] == expected["input_ids"]


@pytest.mark.parametrize("content, said", [
    ("[[[[" * 50_000, "nested too deeply"), ("[1, 2]", "found (a )?list"),
    ('{"train": {"a": 1}, "valid": null, "test": null}', "found a dict"),
    ('{"train": [0.3, "a_text_document", "x", "b_text_document"], "valid": null, "test": null}',
     "does not hold Megatron's --data-path tokens"),  # "x" where a weight should be
])
def test_a_bad_per_split_file_is_one_parameter_error(tmp_path, content, said):
    (tmp_path / "per_split.json").write_text(content)
    with pytest.raises(ParameterError, match=said):
        load_dataset("mmidx", megatron_args=f"--per-split-data-args-path {tmp_path / 'per_split.json'} {RUN}",
                     cache_dir=str(tmp_path / "c"))


# --- issue 40: every path-bearing setting x every way datasets or fsspec read a name as a URL ---

# Each spelling names an outside target: {p} its absolute path, {rel} its path from the world
# (ds/x/../.. is the world), {name} its base name, {world} the world.
SPELLINGS = {
    "file:/abs": "file:{p}",
    "FILE:/abs": "FILE:{p}",  # a scheme to datasets (urlparse is case-blind); fsspec: cwd/'FILE:/abs'
    "file:///abs": "file://{p}",
    "local:/abs": "local:{p}",
    "LOCAL://abs": "LOCAL:/{p}",
    "File:x/../..": "File:x/../../{rel}",
    "simplecache::file:///abs": "simplecache::file://{p}",
    "simplecache::/abs": "simplecache::{p}",
    "filecache::/abs": "filecache::{p}",
    "blockcache::/abs": "blockcache::{p}",
    "zip://member::file:/abs.zip": "zip://{rel}::file:{world}/archive.zip",
    "memory://abs": "memory://{p}",
    "memory:abs": "memory:{p}",
    "C:relative (a drive)": "C:{name}",
    "an unregistered scheme": "no-such+scheme.1:{p}",
    "leading blank, file:/abs": " file:{p}",
}


# The spellings that served an outside pair on main (issue 40 item 1): these load prepared too.
PREPARED_TOO = {"file:/abs", "local:/abs"}


def _per_split(split: str, spelled: str, yaml: bool) -> str:
    """The three per-split paths, ``split``'s spelled, the others the folder's own prefix."""
    names = {s: spelled if s == split else "a_text_document" for s in ("train", "valid", "test")}
    if yaml:
        return "".join(f"  {s}_data_path: [{name}]\n" for s, name in names.items())
    return " ".join(f"--{s}-data-path {name}" for s, name in names.items())


# setting (as the error names it), the outside target it names, the card (``{v}``: the spelled name;
# quoted in a command line, which is split as a shell splits it).
V = '"{v}"'
PAIR, BIN = "outside/secret_text_document", "outside/secret_text_document.bin"
PATH_SETTINGS = {
    "data_files": ("data_files", BIN, "  data_files: '{v}'\n  seq_length: 8\n"),
    "data_files list": ("data_files", BIN, "  data_files: ['{v}']\n  seq_length: 8\n"),
    "data_files split": ("data_files", BIN, "  data_files:\n  - split: train\n    path: '{v}'\n  seq_length: 8\n"),
    "data_files split list": ("data_files", BIN, "  data_files:\n  - split: train\n"
                                                 "    path: [a_text_document.bin, '{v}']\n  seq_length: 8\n"),
    "data_dir": ("data_dir", "outside", "  data_dir: '{v}'\n  seq_length: 8\n"),
    "data_path": ("data_path", PAIR, "  data_path: ['0.5', a_text_document, '0.5', '{v}']\n  split_ratios: '1'\n"
                                     "  seq_length: 8\n"),
    **{f"{split}_data_path": (f"{split}_data_path", PAIR, _per_split(split, "'{v}'", yaml=True) + "  seq_length: 8\n")
       for split in ("train", "valid", "test")},
    "--data-path": ("megatron_args --data-path", PAIR,
                    f"  megatron_args: '--data-path 0.5 a_text_document 0.5 {V} {RUN}'\n"),
    "--data-path=": ("megatron_args --data-path", PAIR, f"  megatron_args: '--data-path={V} {RUN}'\n"),
    **{f"--{split}-data-path": (f"megatron_args --{split}-data-path", PAIR,
                                f"  megatron_args: '{_per_split(split, V, yaml=False)} {RUN}'\n")
       for split in ("train", "valid", "test")},
    "--data-args-path": ("megatron_args --data-args-path", "outside/blend.txt",
                         f"  megatron_args: '--data-args-path {V} {RUN}'\n"),
    "--per-split-data-args-path": ("megatron_args --per-split-data-args-path", "outside/per_split.json",
                                   f"  megatron_args: '--per-split-data-args-path {V} {RUN}'\n"),
}


def _spelled(world, spelling: str, target: str) -> str:
    path = world / target
    return SPELLINGS[spelling].format(p=path, rel=target, name=path.name, world=world)


def _plant(world, setting: str, spelled: str, monkeypatch) -> None:
    """Puts the outside pair wherever datasets looks for a card's ``data_files`` or ``data_dir``
    before any builder runs, so that the load reaches the card check instead of stopping at
    "no data files". The Megatron settings need none: nothing opens them before the check."""
    if not setting.startswith(("data_files", "data_dir")):
        return
    import zipfile

    from fsspec.implementations.memory import MemoryFileSystem

    outside = world / "outside"
    with zipfile.ZipFile(world / "archive.zip", "w") as archive:
        for f in outside.iterdir():
            archive.write(f, f"outside/{f.name}")
    monkeypatch.setattr(MemoryFileSystem, "store", {})  # this test's memory:// files only
    monkeypatch.setattr(MemoryFileSystem, "pseudo_dirs", [""])
    memory = MemoryFileSystem()
    for f in outside.iterdir():
        memory.pipe(str(f), f.read_bytes())
    if setting == "data_dir":
        # datasets joins data_dir to the folder as text (os.path.join), then cuts a pattern's
        # path at its first '::'.
        where = [world / "ds" / spelled.split("::")[0]]
    else:
        # A pattern with a scheme is not joined to the folder: fsspec takes it from the working
        # directory unless it is file:/local: (the outside pair itself) or a registered protocol
        # (the archive, the memory files, the chains' last hop).
        where = [world / "cwd" / spelled.removesuffix(".bin")] if "::" not in spelled else []
    for place in where:
        if "://" in str(place):
            continue  # datasets takes the text before '://' for a protocol and stops there
        prefix = place / "secret_text_document" if setting == "data_dir" else place
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        if not os.path.exists(f"{prefix}.bin"):
            write_documents(prefix, [np.arange(1, 30)] * 20, dtype=np.uint16)


def _datasets_stops_first(setting: str, spelled: str) -> bool:
    """What datasets cannot resolve itself, before any builder runs (nothing is read): a data_dir
    with '://' (joined to the folder as text, what precedes '://' is a protocol fsspec does not
    know), 'LOCAL://' (fsspec's protocols are case-sensitive) and, in data_files,
    'simplecache::file://' (datasets' glob of that chain gives a name that matches nothing)."""
    return ((setting == "data_dir" and "://" in spelled)
            or (setting.startswith("data_files") and spelled.startswith(("LOCAL://", "simplecache::file://"))))


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("setting", sorted(PATH_SETTINGS))
def test_a_card_cannot_name_a_file_outside_by_any_protocol_spelling(world, monkeypatch, setting, spelling):
    """Issue 40 item 1: ``file:/abs`` (also ``FILE:``, ``local:``, ``simplecache::``, chains, any
    ``scheme:``) read a pair from anywhere through a card: each is judged by the path datasets or
    fsspec open for it, and refused, prepared and streaming."""
    named, target, card = PATH_SETTINGS[setting]
    spelled = _spelled(world, spelling, target)
    (world / "cwd").mkdir()
    monkeypatch.chdir(world / "cwd")
    _plant(world, setting, spelled, monkeypatch)
    if _datasets_stops_first(setting, spelled):
        with pytest.raises((ValueError, FileNotFoundError)):
            _load_card(world, card.format(v=spelled))
        with pytest.raises(ParameterError, match=ESCAPE):  # should a datasets release ever hand it over
            check_card_name(spelled, named, [str(world / "ds")])
        return
    # The card is judged when the builder is made (hf/mmidx.py), before streaming or preparing
    # takes its own path: every case streams, and the two spellings found loading on main are
    # prepared too.
    for streaming in (True, False) if spelling in PREPARED_TOO else (True,):
        with pytest.raises(ParameterError, match=ESCAPE) as raised:
            _load_card(world, card.format(v=spelled), streaming=streaming)
        assert f"{named}={spelled!r}" in str(raised.value), str(raised.value)
        assert SECRET not in str(raised.value)


@pytest.mark.parametrize("spelling", ["file:{ds}/a_text_document.bin", "file://{ds}/a_text_document.bin",
                                      "local:{ds}/a_text_document.bin"])
def test_a_local_protocol_naming_a_file_inside_the_folder_loads(world, spelling):
    """Judged by the path it opens, not refused for its spelling: file:/local: inside the folder."""
    ds = world / "ds"
    plain = _load_card(world, "  data_files: a_text_document.bin\n  seq_length: 8\n", split="train")
    for streaming in (False, True):
        loaded = _load_card(world, f"  data_files: '{spelling.format(ds=ds)}'\n  seq_length: 8\n", split="train",
                            streaming=streaming)
        assert [row["input_ids"] for row in loaded] == plain["input_ids"]


def test_a_colon_in_a_name_is_a_scheme_only_where_datasets_reads_one(world, monkeypatch):
    """``data/a:b_text_document`` is joined to the folder and opened as written (a '/' comes before
    the ':'): it loads. ``a:b_text_document`` has a scheme to datasets, which reads it from the
    working directory, not the folder: refused. ``./a:b_text_document`` names that file."""
    ds, outside = world / "ds", world / "outside"
    docs = [np.arange(1, 30)] * 20
    for prefix in (ds / "data" / "a:b_text_document", ds / "a:b_text_document", outside / "a:b_text_document"):
        write_documents(prefix, docs, dtype=np.uint16)
    monkeypatch.chdir(outside)  # where datasets would read 'a:b_text_document.bin' from
    for name in ("data/a:b_text_document", "./a:b_text_document"):
        for streaming in (False, True):
            files = _load_card(world, f"  data_files: '{name}.bin'\n  seq_length: 8\n", split="train",
                               streaming=streaming)
            blend = _load_card(world, f"  data_path: ['{name}']\n  split_ratios: '1'\n  seq_length: 8\n",
                               split="train", streaming=streaming)
            assert len(list(files)) > 0 and len(list(blend)) > 0, name
    for setting, card in (("data_files", "  data_files: 'a:b_text_document.bin'\n  seq_length: 8\n"),
                          ("data_path", "  data_path: ['a:b_text_document']\n  split_ratios: '1'\n  seq_length: 8\n")):
        with pytest.raises(ParameterError, match=f"{setting}='a:b_text_document.*{ESCAPE}"):
            _load_card(world, card)


@pytest.mark.parametrize("card", [
    "  data_path: ['.']\n  split_ratios: '1'\n  seq_length: 8\n",
    "  data_path: ['0.5', a_text_document, '0.5', './']\n  split_ratios: '1'\n  seq_length: 8\n",
    "  train_data_path: ['']\n  valid_data_path: [a_text_document]\n  test_data_path: [a_text_document]\n"
    "  seq_length: 8\n",
    f"  megatron_args: '--data-path . {RUN}'\n",
    f"  megatron_args: '--data-args-path blend.list {RUN}'\n",
])
def test_a_prefix_naming_the_folder_itself_is_refused(world, card):
    """A Megatron prefix names PREFIX.bin/.idx: the folder itself (``.``, ``./``, ``''``) names
    ``ds.bin`` and ``ds.idx``, beside the folder."""
    write_documents(world / "ds", [np.arange(1, 30)] * 20, dtype=np.uint16)  # world/ds.bin, outside ds/
    (world / "ds" / "blend.list").write_text("1 .\n")
    with pytest.raises(ParameterError, match=ESCAPE):
        _load_card(world, card)
    with pytest.raises(ParameterError, match=ESCAPE):
        _load_card(world, card, streaming=True)
