"""A shard is never silently left out (issue 34, item 1).

A folder of ``a_text_document`` and ``b_text_document`` whose ``b`` ``.bin`` is gone (deleted,
a dangling link, a directory or a FIFO in its place) while its ``.idx`` is still there is the
shape of an interrupted copy or a broken snapshot link. Every way of listing pairs (a folder,
a ``data_files`` pattern, a Hub repo, Megatron prefixes, ``mmidx card``, ``mmidx upload``,
``mmidx inspect``) must name ``b`` in a MissingPartnerError, never load ``a`` alone. A raw input
that is not a regular file is refused naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import MissingPartnerError, MMIdxError
from mmidx_builder.sources.indexed import write_documents

SEQ = 16
BROKEN = ("deleted", "dangling link", "directory", "fifo")


def _folder(root: Path, broken: str, names=("a_text_document", "b_text_document")) -> Path:
    """Two pairs of 50 documents each; the .bin of the last one replaced by ``broken``."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names:
        write_documents(root / name, [rng.integers(0, 100, size=30) for _ in range(50)], dtype=np.uint16)
    _break(root / f"{names[-1]}.bin", broken)
    return root


def _break(path: Path, broken: str) -> None:
    os.remove(path)
    if broken == "dangling link":
        os.symlink(path.parent / "gone" / path.name, path)
    elif broken == "directory":
        os.mkdir(path)
    elif broken == "fifo":
        os.mkfifo(path)


def _count(**kwargs) -> int:
    loaded = load_dataset(**kwargs) if "path" in kwargs else load_dataset("mmidx", **kwargs)
    return sum(1 for _ in loaded["train"])


def _refused_naming_b(error) -> None:
    assert "b_text_document.bin" in str(error.value), str(error.value)
    assert "\n" not in str(error.value).strip()


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("streaming", [False, True], ids=["prepared", "streaming"])
def test_a_folder_whose_bin_is_gone_is_refused_naming_it(tmp_path, broken, streaming):
    folder = _folder(tmp_path / "data", broken)
    with pytest.raises(MissingPartnerError) as error:
        _count(path=str(folder), seq_length=SEQ, streaming=streaming, cache_dir=str(tmp_path / "cache"))
    _refused_naming_b(error)


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("pattern", ["*.bin", "*", "**/*_document.bin"])
def test_a_data_files_pattern_whose_bin_is_gone_is_refused_naming_it(tmp_path, broken, pattern):
    folder = _folder(tmp_path / "data", broken)
    with pytest.raises(MissingPartnerError) as error:
        _count(data_files=str(folder / pattern), seq_length=SEQ, streaming=True)
    _refused_naming_b(error)
    with pytest.raises(MissingPartnerError):  # relative to the folder too
        _count(path=str(folder), data_files=pattern, seq_length=SEQ, streaming=True)


def test_a_pattern_that_names_one_pair_only_still_loads_it(tmp_path):
    """The check is about what a listing sees: naming ``a`` alone is not a missing ``b``."""
    folder = _folder(tmp_path / "data", "deleted")
    assert _count(data_files=str(folder / "a_text_document.bin"), seq_length=SEQ, streaming=True) > 0
    assert _count(data_files=[str(folder / "a_text_document.bin")], seq_length=SEQ, streaming=True) > 0


def test_the_broken_folder_loads_every_row_once_b_is_back(tmp_path):
    """The same folder complete: the rows of both pairs (so the refusals above are about b)."""
    folder = _folder(tmp_path / "data", "deleted")
    os.remove(folder / "b_text_document.idx")
    one = _count(path=str(folder), seq_length=SEQ, streaming=True)
    rng = np.random.default_rng(1)
    write_documents(folder / "b_text_document", [rng.integers(0, 100, size=30) for _ in range(50)], dtype=np.uint16)
    assert _count(path=str(folder), seq_length=SEQ, streaming=True) > one


@pytest.mark.parametrize("broken", BROKEN)
def test_megatron_prefixes_whose_bin_is_gone_are_refused(tmp_path, broken):
    folder = _folder(tmp_path / "data", broken)
    with pytest.raises(MissingPartnerError) as error:
        _count(data_path=[str(folder / "a_text_document"), str(folder / "b_text_document")], seq_length=SEQ,
               streaming=True)
    _refused_naming_b(error)


def _cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "mmidx_builder.cli", *args], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.parametrize("broken", BROKEN)
@pytest.mark.parametrize("command", ["card", "upload --dry-run", "inspect"])
def test_the_cli_refuses_a_folder_whose_bin_is_gone(tmp_path, broken, command):
    folder = _folder(tmp_path / "data", broken)
    if command == "inspect":
        result = _cli("inspect", str(folder / "b_text_document"))
    elif command == "card":
        result = _cli("card", str(folder), "--seq-length", str(SEQ))
    else:
        result = _cli("upload", str(folder), "--repo-id", "me/tokens", "--dry-run", "--seq-length", str(SEQ))
    assert result.returncode != 0, result.stdout
    assert "b_text_document.bin" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not (folder / "README.md").exists(), "a card was written for the smaller corpus"


@pytest.mark.parametrize("broken", ["dangling link", "directory", "fifo"])
def test_a_raw_input_that_is_not_a_regular_file_is_refused_naming_it(tmp_path, broken):
    folder = tmp_path / "raw"
    folder.mkdir()
    for name in ("a.dat", "b.dat"):
        (folder / name).write_bytes(np.arange(400, dtype=np.uint16).tobytes())
    _break(folder / "b.dat", broken)
    with pytest.raises(MMIdxError) as error:
        _count(data_files=str(folder / "*.dat"), n_bytes=2, seq_length=SEQ, streaming=True)
    assert "b.dat" in str(error.value), str(error.value)


def test_a_hub_repo_whose_bin_is_gone_is_refused_naming_it(tmp_path, monkeypatch):
    from hub_server import LocalHub, isolate_hf_home, loopback_only, point_clients_at

    folder = _folder(tmp_path / "data", "deleted")
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert set(files) == {"a_text_document.bin", "a_text_document.idx", "b_text_document.idx"}
    with LocalHub() as server:
        isolate_hf_home(monkeypatch, tmp_path / "hf_home")
        point_clients_at(monkeypatch, server.url)
        loopback_only(monkeypatch)
        server.create_repo("me/broken")
        server.commit("me/broken", files)
        for streaming in (True, False):
            with pytest.raises(MissingPartnerError) as error:
                _count(path="me/broken", seq_length=SEQ, streaming=streaming, cache_dir=str(tmp_path / "cache"))
            _refused_naming_b(error)


# --- the one wording of a prefix whose pair is not there (issue 40 item 3) --------------------

def _without_pair(root: Path, how: str) -> str:
    """A prefix ``b_text_document`` beside a good ``a``: neither file there, or its .idx a loop
    of links (a link to itself: os.path.exists says nothing is there)."""
    _folder(root, "deleted")
    os.remove(root / "b_text_document.idx")
    if how == "link loop":
        rng = np.random.default_rng(1)
        write_documents(root / "b_text_document", [rng.integers(0, 100, size=30) for _ in range(9)], dtype=np.uint16)
        os.remove(root / "b_text_document.idx")
        os.symlink("b_text_document.idx", root / "b_text_document.idx")
    return str(root / "b_text_document")


@pytest.mark.parametrize("how, said", [("neither file", "found neither file"),
                                       ("link loop", "found a loop of symbolic links")])
def test_a_prefix_without_its_pair_is_said_the_same_way_by_the_library_and_the_cli(tmp_path, how, said):
    """Before: a prefix of which neither file exists was "expected the partner of .../b.bin,
    found no such file" in load_dataset ("found neither exists" in mmidx inspect), and a loop
    of links "no such file" everywhere."""
    prefix = _without_pair(tmp_path / "data", how)
    messages = []
    for streaming in (False, True):
        with pytest.raises(MissingPartnerError) as error:
            _count(data_path=[prefix], split_ratios="1,0,0", num_samples={"train": 4}, seq_length=SEQ,
                   streaming=streaming, cache_dir=str(tmp_path / "cache"))
        messages.append(str(error.value))
    megatron_args = f"--data-path {prefix} --split 1 --seq-length {SEQ} --train-iters 2 --global-batch-size 1 " \
                    "--eval-iters 0 --eval-interval 1"
    for command in (("inspect", prefix), ("samples", "--megatron-args", megatron_args)):
        result = _cli(*command)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        messages.append(result.stderr.strip().split(": error: ", 1)[1])
    assert len(set(messages)) == 1, messages
    assert said in messages[0] and "b_text_document" in messages[0], messages[0]
    if how == "neither file":
        assert f"expected {prefix}.bin and {prefix}.idx" in messages[0] and "partner" not in messages[0]
