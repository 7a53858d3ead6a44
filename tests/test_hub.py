"""hub.py: uploads go through huggingface_hub's real client code to a fake Hub on 127.0.0.1.

No Hub is reachable here. The fake Hub (tests/hub_server.py, shared with the download
tests) answers the HTTP calls huggingface_hub makes (create repo, create branch, validate
README YAML, preupload, commit) and records them, so the tests see what huggingface_hub
actually sent: the token header, the files and their bytes. It always answers "regular" upload mode, so files travel inline in the commit; the
LFS / Xet transfer of large files is huggingface_hub's own and is not exercised here.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading

import numpy as np
import pytest

from mmidx_builder import HubError, write_documents
from mmidx_builder.publishing import hub
from mmidx_builder.cli import main

from hub_server import LocalHub as FakeHub

TOKEN = "hf_testTOKENthatMustNeverBePrinted0123"
SMALL = hub.CardSettings(seq_length=16)  # the corpora here hold a few hundred tokens


@pytest.fixture
def fake_hub(monkeypatch, tmp_path):
    server = FakeHub()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", server.url)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_DISABLE_PROGRESS_BARS", True, raising=False)
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def corpus(tmp_path, random_documents, write_corpus):
    """Two splits at awkward sizes: empty documents, one longer than seq_length, and litter."""
    folder = tmp_path / "corpus"
    docs = random_documents(np.random.default_rng(7), (0, 3, 257, 1, 0, 33, 70))
    write_corpus(folder, {"train": docs, "validation": docs[2:5]})
    (folder / "train.bin.tmp-123-abcd").write_bytes(b"half written")
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "x.pyc").write_bytes(b"\0")
    return folder


def _upload(folder, **kwargs):
    lines = []
    url = hub.upload(folder, "me/tokens", settings=SMALL, echo=lines.append, **kwargs)
    return url, lines


def _no_sockets(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("network used")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_upload_sends_every_pair_and_the_card_and_nothing_else(fake_hub, corpus):
    url, lines = _upload(corpus, private=True, commit_message="first tokens")

    assert url == f"{fake_hub.url}/datasets/me/tokens"
    assert lines[-1] == url
    create = next(r for r in fake_hub.requests if r["path"] == "/api/repos/create")
    assert json.loads(create["body"])["visibility"] == "private"
    assert json.loads(create["body"])["type"] == "dataset"
    # huggingface_hub's own user-agent registry fetch (/api/agent-harnesses) goes without a token.
    upload_requests = [r for r in fake_hub.requests if r["path"] != "/api/agent-harnesses"]
    assert {r["authorization"] for r in upload_requests} == {f"Bearer {TOKEN}"}
    assert any(r["path"] == "/api/validate-yaml" for r in fake_hub.requests)  # the card's YAML went to the Hub check

    expected = {p.name for p in corpus.iterdir() if p.is_file() and ".tmp-" not in p.name}
    assert expected == {"train.bin", "train.idx", "validation.bin", "validation.idx", "README.md",
                        "document_lengths.png"}
    assert set(fake_hub.committed) == expected
    for name in expected:
        assert fake_hub.committed[name] == (corpus / name).read_bytes()
    commit = next(r for r in fake_hub.requests if "/commit/" in r["path"])
    assert commit["path"].startswith("/api/datasets/me/tokens/commit/main")
    assert json.loads(commit["body"].decode().splitlines()[0])["value"]["summary"] == "first tokens"


def test_upload_to_a_branch_creates_it_and_commits_there(fake_hub, corpus):
    url, _ = _upload(corpus, revision="v1")
    assert url.endswith("/datasets/me/tokens/tree/v1")
    paths = [r["path"] for r in fake_hub.requests]
    assert any(p.startswith("/api/datasets/me/tokens/branch/v1") for p in paths)
    assert any(p.startswith("/api/datasets/me/tokens/commit/v1") for p in paths)


@pytest.mark.parametrize("repo_id", ["datasets/me/tokens", "me/to--kens", "me/tokens.git", "../x", ""])
def test_bad_repo_id_is_refused_before_any_request(fake_hub, corpus, repo_id):
    with pytest.raises(HubError, match="bad repo id"):
        hub.upload(corpus, repo_id, settings=SMALL, echo=lambda line: None)
    assert fake_hub.requests == []
    assert not (corpus / "README.md").exists()


def test_a_bad_pair_uploads_nothing_and_names_the_file(fake_hub, corpus):
    idx = corpus / "validation.idx"
    raw = bytearray(idx.read_bytes())
    struct.pack_into("<9s", raw, 0, b"NOTANIDX\0")
    idx.write_bytes(bytes(raw))
    (corpus / "orphan.bin").write_bytes(b"\0\0")
    with pytest.raises(HubError) as caught:
        hub.upload(corpus, "me/tokens", settings=SMALL, echo=lambda line: None)
    message = str(caught.value)
    assert "2 of 3 pair(s) are bad, nothing was uploaded" in message
    assert "validation.idx" in message and "orphan.idx" in message
    assert fake_hub.requests == []


def test_not_logged_in(fake_hub, corpus, monkeypatch, tmp_path):
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no_token"))
    monkeypatch.setattr("huggingface_hub.constants.HF_STORED_TOKENS_PATH", str(tmp_path / "no_tokens"))
    with pytest.raises(HubError, match="not logged in: run `hf auth login` or set HF_TOKEN"):
        hub.upload(corpus, "me/tokens", settings=SMALL, echo=lambda line: None)
    assert fake_hub.requests == []


@pytest.mark.parametrize("status, expected", [(401, "rejected the token"), (403, "no write access to me/tokens")])
def test_hub_refusals_become_hub_errors(fake_hub, corpus, status, expected):
    fake_hub.fail["/api/repos/create"] = (status, "You are not allowed to create this repo")
    fake_hub.fail["/api/datasets/me/tokens"] = (status, "You are not allowed to see this repo")
    with pytest.raises(HubError, match=expected) as caught:
        hub.upload(corpus, "me/tokens", settings=SMALL, echo=lambda line: None)
    assert TOKEN not in str(caught.value)
    assert fake_hub.committed == {}


def test_an_existing_repo_is_reused(fake_hub, corpus):
    fake_hub.create_repo("me/tokens")  # the shared server commits only to repos it holds
    fake_hub.fail["/api/repos/create"] = (409, "You already created this dataset repo")
    url, _ = _upload(corpus)
    assert url == f"{fake_hub.url}/datasets/me/tokens"
    assert "train.bin" in fake_hub.committed


def test_a_cut_connection_says_how_to_resume(fake_hub, corpus, monkeypatch):
    monkeypatch.setattr("huggingface_hub.utils._http.time.sleep", lambda seconds: None)  # skip backoff waits
    fake_hub.drop.add("/commit/")
    with pytest.raises(HubError, match="Run the same command again to resume"):
        hub.upload(corpus, "me/tokens", settings=SMALL, echo=lambda line: None)


def test_an_interrupt_says_how_to_resume(fake_hub, corpus, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("huggingface_hub.HfApi.upload_folder", interrupted)
    with pytest.raises(HubError, match="interrupted. Run the same command again to resume"):
        hub.upload(corpus, "me/tokens", settings=SMALL, echo=lambda line: None)


def test_dry_run_lists_every_file_and_touches_no_network(corpus, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    _no_sockets(monkeypatch)
    assert main(["upload", str(corpus), "--repo-id", "me/tokens", "--dry-run", "--seq-length", "16"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.split() and "/" not in line.split()[0]
            or line.startswith("__pycache__")}
    assert rows["train.bin"].split()[1] == f"{(corpus / 'train.bin').stat().st_size:,}"
    assert rows["train.bin"].endswith("upload")
    assert "skip" in rows["train.bin.tmp-123-abcd"]
    assert "skip" in rows["__pycache__/x.pyc"]
    assert "write (generated card)" in rows["README.md"]
    assert "token found" in out and TOKEN not in out
    assert not (corpus / "README.md").exists()  # a dry run writes nothing


def test_the_token_is_never_printed_or_logged(fake_hub, corpus, capsys, caplog):
    caplog.set_level("DEBUG")
    assert main(["upload", str(corpus), "--repo-id", "me/tokens", "--seq-length", "16"]) == 0
    fake_hub.fail["/api/repos/create"] = (403, "forbidden")
    fake_hub.fail["/api/datasets/me/tokens"] = (403, "forbidden")
    assert main(["upload", str(corpus), "--repo-id", "me/tokens", "--seq-length", "16"]) == 1
    captured = capsys.readouterr()
    assert f"{fake_hub.url}/datasets/me/tokens" in captured.out
    assert "no write access" in captured.err
    for text in (captured.out, captured.err, caplog.text):
        assert TOKEN not in text


def test_hub_upload_script_is_the_upload_command(corpus, monkeypatch, capsys):
    import runpy
    import sys

    _no_sockets(monkeypatch)
    monkeypatch.setattr(sys, "argv", ["hub_upload.py", str(corpus), "--repo-id", "me/tokens", "--dry-run",
                                      "--seq-length", "16"])
    with pytest.raises(SystemExit) as exited, contextlib.chdir(corpus.parent):
        runpy.run_path(str(__import__("pathlib").Path(__file__).parents[1] / "hub_upload.py"), run_name="__main__")
    assert exited.value.code == 0
    assert "2 pair(s) checked" in capsys.readouterr().out
