"""Hub-hosted datasets end to end: a folder goes up with hub_upload.py, then comes back with
``load_dataset("user/repo")`` (Arrow cache) and ``streaming=True``, through huggingface_hub's
and datasets' real client code, against the local Hub of tests/hub_server.py.

The reference is the same folder loaded locally, ``load_dataset(folder)``: a Hub load must
give exactly its rows. Every connection that is not to 127.0.0.1 is refused at once (the
dataset viewer lookup ``datasets`` makes for a Hub id is the one expected refusal).
"""

from __future__ import annotations

import hashlib
import runpy
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import datasets
from datasets import load_dataset
from datasets.exceptions import DatasetNotFoundError

import mmidx_builder  # noqa: F401  (registers the builder)
from mmidx_builder import FormatError, MMIdxError, write_documents
from mmidx_builder.publishing import hub
from mmidx_builder.publishing.card import CardSettings, write_card
from mmidx_builder.hf.card_checksums import card_sha256

from hub_server import hub_for_clients
from range_server import require_remote_extra

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "hf_downloadTOKENthatMustNeverBePrinted42"
CARD = dict(seq_length=16, seed=77)  # the card's configs; neither is the builder's default
OVERRIDE = dict(seq_length=8, seed=5)
DEADLINE = 60  # seconds any one load may take before the test calls it hung


def _documents(rng, lengths):
    return [rng.integers(0, 60_000, n) for n in lengths]


def make_corpus(folder: Path, seed: int = 0) -> Path:
    """Two splits at awkward sizes: empty documents, documents longer than a sample."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 120, size=30)
    lengths[[3, 17]] = 0
    lengths[[5, 20]] = (5 * CARD["seq_length"] + 3, 301)
    write_documents(folder / "train", _documents(rng, lengths), dtype=np.uint16)
    write_documents(folder / "validation", _documents(rng, (0, 50, 1, 97, 33)), dtype=np.uint16)
    return folder


def within(seconds: float, work):
    """``work()``'s result, or a test failure if it is still running after ``seconds``."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = work()
        except BaseException as error:  # handed to the test thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"still running after {seconds} s: hung")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def rows(dataset) -> np.ndarray:
    return np.array([example["input_ids"] for example in dataset])


def split_rows(loaded) -> dict[str, np.ndarray]:
    return {split: rows(loaded[split]) for split in loaded}


def upload_with_script(folder: Path, repo_id: str, *args: str) -> None:
    """``python hub_upload.py FOLDER --repo-id REPO ...``, run in this process."""
    argv = sys.argv
    sys.argv = ["hub_upload.py", str(folder), "--repo-id", repo_id, *args]
    try:
        with pytest.raises(SystemExit) as exited:
            runpy.run_path(str(REPO_ROOT / "hub_upload.py"), run_name="__main__")
    finally:
        sys.argv = argv
    assert exited.value.code == 0


@pytest.fixture(scope="module")
def local_hub(tmp_path_factory):
    """The local Hub, with huggingface_hub and datasets pointed at it for this module."""
    with hub_for_clients(tmp_path_factory.mktemp("hf_home"), token=TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def published(local_hub, tmp_path_factory):
    """A folder with its card (``mmidx card`` settings CARD), uploaded to me/tokens by hub_upload.py."""
    folder = make_corpus(tmp_path_factory.mktemp("published") / "tokens")
    write_card(folder, CardSettings(**CARD, repo_id="me/tokens"))
    upload_with_script(folder, "me/tokens")
    return folder


@pytest.fixture
def cache(tmp_path):
    return str(tmp_path / "datasets_cache")


# --- the round trip -------------------------------------------------------------------------

def test_upload_put_the_folder_and_its_card_on_the_hub(local_hub, published):
    served = local_hub.files("me/tokens")
    local = {p.name: p.read_bytes() for p in published.iterdir() if p.is_file()}
    assert served == local
    assert set(card_sha256(served["README.md"].decode())) == {"train.bin", "train.idx", "validation.bin",
                                                             "validation.idx"}


def test_hub_load_gives_the_folders_rows_with_the_cards_configs(local_hub, published, cache):
    from_hub = split_rows(within(DEADLINE, lambda: load_dataset("me/tokens", cache_dir=cache)))
    from_folder = split_rows(load_dataset(str(published), cache_dir=cache))
    # The card's settings, spelled out: the folder load with them explicitly is the reference.
    explicit = split_rows(load_dataset(str(published), cache_dir=cache, **CARD))
    assert set(from_hub) == {"train", "validation"}
    for split in from_hub:
        np.testing.assert_array_equal(from_hub[split], explicit[split])
        np.testing.assert_array_equal(from_hub[split], from_folder[split])
        assert from_hub[split].shape[1] == CARD["seq_length"] + 1
    # The card's seed is in effect: without the card (named builder, no README read) the
    # builder's default seed orders the samples otherwise.
    default_seed = rows(load_dataset("mmidx", data_files={"train": str(published / "train.bin")}, split="train",
                                     cache_dir=cache, seq_length=CARD["seq_length"]))
    assert not np.array_equal(default_seed, from_hub["train"])


def test_call_kwargs_override_the_cards_configs(local_hub, published, cache):
    from_hub = split_rows(within(DEADLINE, lambda: load_dataset("me/tokens", cache_dir=cache, **OVERRIDE)))
    from_folder = split_rows(load_dataset(str(published), cache_dir=cache, **OVERRIDE))
    for split in ("train", "validation"):
        assert from_hub[split].shape[1] == OVERRIDE["seq_length"] + 1
        np.testing.assert_array_equal(from_hub[split], from_folder[split])


def test_streaming_from_the_hub_gives_the_folders_rows(local_hub, published, cache):
    require_remote_extra()
    for split, kwargs in (("train", {}), ("validation", {}), ("validation", OVERRIDE)):
        stream = load_dataset("me/tokens", split=split, streaming=True, cache_dir=cache, **kwargs)
        from_hub = within(DEADLINE, lambda: rows(stream))
        from_folder = rows(load_dataset(str(published), split=split, cache_dir=cache, **kwargs))
        np.testing.assert_array_equal(from_hub, from_folder)
        assert from_hub.shape[1] == kwargs.get("seq_length", CARD["seq_length"]) + 1


# --- what streaming reads -------------------------------------------------------------------

def test_streaming_reads_the_idx_once_then_only_sample_ranges(local_hub, tmp_path, cache):
    """A .bin far larger than what the samples taken hold: the stream must fetch ranges of
    it, never the whole file, and the .idx exactly once."""
    require_remote_extra()
    rng = np.random.default_rng(11)
    folder = tmp_path / "big"
    folder.mkdir()
    lengths = rng.integers(1, 1_000, size=3_000)  # about 1.5M tokens, a 3 MB .bin
    write_documents(folder / "train", _documents(rng, lengths), dtype=np.uint16)
    local_hub.commit("me/big", {p.name: p.read_bytes() for p in folder.iterdir()})
    bin_size = (folder / "train.bin").stat().st_size
    seq_length, taken = 128, 250
    first = len(local_hub.downloads)

    # The read-ahead fetches coming samples in the background (up to read_ahead_bytes, 256 MiB
    # by default: this whole file); bounded here so that what it adds stays well below the file.
    stream = load_dataset("me/big", split="train", streaming=True, cache_dir=cache, seq_length=seq_length,
                          read_ahead_bytes=256 * 1024)
    got = within(DEADLINE, lambda: rows(stream.take(taken)))

    local = load_dataset(str(folder), split="train", streaming=True, cache_dir=cache, seq_length=seq_length)
    expected = rows(local.take(taken))
    np.testing.assert_array_equal(got, expected)
    served = local_hub.downloads[first:]
    idx = [d for d in served if d.name == "train.idx"]
    bins = [d for d in served if d.name == "train.bin"]
    assert [d.whole_file for d in idx] == [True], "the .idx is read whole, once"
    assert not any(d.whole_file for d in bins), "the .bin was downloaded whole"
    assert all(d.ranged for d in bins)
    bin_bytes = sum(d.sent for d in bins)
    sample_bytes = taken * (seq_length + 1) * 2
    print(f"\nstreaming {taken} samples of {seq_length + 1} uint16 tokens from a {bin_size:,}-byte .bin: "
          f"{bin_bytes / taken:,.0f} bytes of .bin per sample ({bin_bytes / sample_bytes:.2f}x the sample), "
          f"{len(bins) * 1000 / taken:,.0f} ranged requests per 1,000 samples "
          "(benchmarks/bench_hub_streaming.py measures more)")
    assert bin_bytes < bin_size / 2
    assert bin_bytes >= sample_bytes - taken * 2  # neighbouring samples share one token


# --- private repos, revisions -----------------------------------------------------------

def upload_with_api(folder, repo_id, **kwargs) -> str:
    """mmidx_builder.publishing.hub.upload, the function behind hub_upload.py, in this process."""
    return hub.upload(folder, repo_id, settings=CardSettings(**CARD), echo=lambda line: None, **kwargs)


@pytest.fixture(scope="module")
def private(local_hub, tmp_path_factory):
    folder = make_corpus(tmp_path_factory.mktemp("private") / "secret", seed=1)
    assert upload_with_api(folder, "me/secret", private=True).endswith("/datasets/me/secret")
    assert local_hub.repos["me/secret"].private
    return folder


def test_private_repo_loads_with_the_token_which_is_sent_and_never_shown(local_hub, private, cache, capsys, caplog):
    require_remote_extra()
    caplog.set_level("DEBUG")
    first = len(local_hub.requests)
    loaded = within(DEADLINE, lambda: load_dataset("me/secret", split="validation", cache_dir=cache))
    stream = load_dataset("me/secret", split="validation", streaming=True, cache_dir=cache)
    streamed = within(DEADLINE, lambda: rows(stream))
    expected = rows(load_dataset(str(private), split="validation", cache_dir=cache))
    np.testing.assert_array_equal(rows(loaded), expected)
    np.testing.assert_array_equal(streamed, expected)
    sent = [r for r in local_hub.requests[first:] if "/me/secret" in r["path"]]
    assert sent and {r["authorization"] for r in sent} == {f"Bearer {TOKEN}"}
    assert any(r["range"] for r in sent), "the ranged reads carry the token too"
    captured = capsys.readouterr()
    for text in (captured.out, captured.err, caplog.text):
        assert TOKEN not in text


@pytest.mark.parametrize("token", [None, "hf_wrongTOKEN0000000000000000000000000"])
def test_private_repo_without_the_right_token_is_not_found(local_hub, private, cache, monkeypatch, tmp_path, token):
    monkeypatch.delenv("HF_TOKEN")
    # Someone else's machine: nothing of the repo in the huggingface_hub cache.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "fresh_hub_cache"))
    with pytest.raises(DatasetNotFoundError, match="'me/secret' doesn't exist on the Hub or cannot be accessed") as caught:
        within(DEADLINE, lambda: load_dataset("me/secret", split="validation", cache_dir=cache, token=token))
    assert TOKEN not in str(caught.value)


def test_private_repo_without_the_token_but_with_a_cached_card(local_hub, private, cache, monkeypatch, tmp_path):
    """huggingface_hub answers a 401 with the card cached by an earlier load, so ``datasets``
    gets one step further and reports huggingface_hub's error, which says what to do."""
    from huggingface_hub.errors import RepositoryNotFoundError

    # An earlier load with the token, with another datasets cache: the card stays in huggingface_hub's.
    within(DEADLINE, lambda: load_dataset("me/secret", split="validation", cache_dir=str(tmp_path / "earlier")))
    monkeypatch.delenv("HF_TOKEN")
    with pytest.raises(RepositoryNotFoundError, match="make sure you are authenticated") as caught:
        within(DEADLINE, lambda: load_dataset("me/secret", split="validation", cache_dir=cache))
    assert TOKEN not in str(caught.value)


def test_offline_a_prepared_hub_dataset_loads_from_its_cache(local_hub, published, cache, monkeypatch):
    online = rows(within(DEADLINE, lambda: load_dataset("me/tokens", split="train", cache_dir=cache)))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    offline = rows(within(DEADLINE, lambda: load_dataset("me/tokens", split="train", cache_dir=cache)))
    np.testing.assert_array_equal(offline, online)


@pytest.fixture(scope="module")
def branch_v1(local_hub, published, tmp_path_factory):
    """Other documents, uploaded to branch v1 of me/tokens."""
    folder = make_corpus(tmp_path_factory.mktemp("v1") / "tokens", seed=2)
    upload_with_script(folder, "me/tokens", "--revision", "v1", "--seq-length", str(CARD["seq_length"]))
    return folder


def test_a_branch_loads_its_own_files(local_hub, published, branch_v1, cache):
    require_remote_extra()
    assert local_hub.repos["me/tokens"].branches["v1"] != local_hub.repos["me/tokens"].branches["main"]
    v1 = rows(within(DEADLINE, lambda: load_dataset("me/tokens", revision="v1", split="train", cache_dir=cache)))
    main = rows(load_dataset("me/tokens", split="train", cache_dir=cache))
    stream = load_dataset("me/tokens", revision="v1", split="train", streaming=True, cache_dir=cache)
    np.testing.assert_array_equal(v1, rows(load_dataset(str(branch_v1), split="train", cache_dir=cache)))
    np.testing.assert_array_equal(main, rows(load_dataset(str(published), split="train", cache_dir=cache)))
    np.testing.assert_array_equal(within(DEADLINE, lambda: rows(stream)), v1)
    assert not np.array_equal(v1[:len(main)], main[:len(v1)])


def test_a_missing_revision_is_named(local_hub, published, cache):
    with pytest.raises(DatasetNotFoundError, match="Revision 'no-such-branch' doesn't exist for dataset 'me/tokens'"):
        within(DEADLINE, lambda: load_dataset("me/tokens", revision="no-such-branch", cache_dir=cache))


# --- repos that are not what they should be ------------------------------------------------

def refused_both_ways(repo: str, error, match: str, cache) -> None:
    """Loading ``repo`` prepared and streamed both raise ``error`` matching ``match``, in time."""
    for streaming in (False, True):
        with pytest.raises(error, match=match) as caught:
            within(DEADLINE, lambda: list(load_dataset(repo, split="train", streaming=streaming, cache_dir=cache)))
        print(f"\nstreaming={streaming}: {type(caught.value).__name__}: {caught.value}")


def test_a_missing_idx_on_the_hub_is_named(local_hub, published, cache):
    files = {name: data for name, data in local_hub.files("me/tokens").items() if name != "train.idx"}
    local_hub.commit("me/no-idx", files)
    refused_both_ways("me/no-idx", MMIdxError, "train.idx", cache)


def test_a_bin_that_is_not_a_token_file_is_named(local_hub, cache):
    local_hub.commit("me/model", {"README.md": b"# weights, not tokens\n",
                                  "pytorch_model.bin": np.random.default_rng(0).bytes(5000)})
    refused_both_ways("me/model", MMIdxError, "pytorch_model.idx", cache)
    assert not local_hub.downloads_of("pytorch_model.bin"), "the .idx is looked for before any .bin is fetched"


def test_an_idx_that_is_not_an_index_is_named(local_hub, published, cache):
    require_remote_extra()
    files = dict(local_hub.files("me/tokens"))
    files["train.idx"] = b"NOT AN INDEX" + files["train.idx"][12:]
    local_hub.commit("me/bad-idx", files)
    refused_both_ways("me/bad-idx", FormatError, "train.idx", cache)


# --- a server that drops or stalls ------------------------------------------------------------

@pytest.fixture
def fast_retries(monkeypatch):
    """Retries without their waits (huggingface_hub backs off 1-8 s, datasets 5 s per retry),
    and client timeouts of half a second instead of 10 s."""
    import types

    import huggingface_hub.utils._http as hf_http
    import huggingface_hub.file_download as hf_download

    no_waits = types.SimpleNamespace(sleep=lambda seconds: None)  # the only time function they call
    monkeypatch.setattr(hf_http, "time", no_waits)
    monkeypatch.setattr(hf_download, "time", no_waits)
    monkeypatch.setattr(datasets.config, "STREAMING_READ_RETRY_INTERVAL", 0)
    monkeypatch.setattr(datasets.config, "STREAMING_OPEN_RETRY_INTERVAL", 0)
    monkeypatch.setattr(datasets.config, "STREAMING_READ_MAX_RETRIES", 3)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_DOWNLOAD_TIMEOUT", 0.5)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_ETAG_TIMEOUT", 0.5)


def _copy_of_published(local_hub, repo_id):
    local_hub.commit(repo_id, dict(local_hub.files("me/tokens")))


def test_a_connection_dropped_mid_response_is_retried(local_hub, published, cache, fast_retries):
    require_remote_extra()
    expected = rows(load_dataset(str(published), split="validation", cache_dir=cache))
    for streaming, repo_id in ((True, "me/cut-stream"), (False, "me/cut-arrow")):
        _copy_of_published(local_hub, repo_id)
        local_hub.cut[rf"/{repo_id}/resolve/.*/validation\.bin"] = 2
        first = len(local_hub.downloads)
        got = within(DEADLINE, lambda: rows(load_dataset(repo_id, split="validation", streaming=streaming,
                                                         cache_dir=cache)))
        np.testing.assert_array_equal(got, expected)
        assert not any(local_hub.cut.values())
        # Counted on the server: a client that gives up on a slow response itself (its timeout
        # is half a second here) also leaves short responses, and those are not the faults.
        cut_short = [d for d in local_hub.downloads[first:] if d.cut and d.sent < d.stop - d.start]
        assert len(cut_short) == 2, "both broken responses reached the client"


def test_a_server_that_keeps_dropping_gives_an_error_not_a_hang(local_hub, published, cache, fast_retries):
    require_remote_extra()
    _copy_of_published(local_hub, "me/always-cut")
    local_hub.cut[r"/me/always-cut/resolve/.*/validation\.bin"] = 10**6
    for streaming in (True, False):
        with pytest.raises(Exception) as caught:
            within(DEADLINE, lambda: rows(load_dataset("me/always-cut", split="validation", streaming=streaming,
                                                       cache_dir=cache)))
        print(f"\nstreaming={streaming}: {type(caught.value).__module__}.{type(caught.value).__name__}: "
              f"{caught.value}")
        # The cut body, in the words of the client that read it: httpx (downloads), aiohttp or
        # libcurl (streams).
        assert any(words in str(caught.value) for words in ("peer closed connection", "Server Disconnected",
                                                             "payload is not completed", "bytes missing")), \
            caught.value


def test_a_stalled_response_times_out_and_is_retried(local_hub, published, cache, fast_retries):
    require_remote_extra()
    expected = rows(load_dataset(str(published), split="validation", cache_dir=cache))
    for streaming, repo_id in ((True, "me/stall-stream"), (False, "me/stall-arrow")):
        _copy_of_published(local_hub, repo_id)
        local_hub.stall[rf"/{repo_id}/resolve/.*/validation\.bin"] = 1
        got = within(DEADLINE, lambda: rows(load_dataset(repo_id, split="validation", streaming=streaming,
                                                         cache_dir=cache)))
        np.testing.assert_array_equal(got, expected)
        assert not any(local_hub.stall.values())


# --- checksums ----------------------------------------------------------------------------------

def test_all_checks_compares_the_cards_sha256_with_the_downloads(local_hub, published, cache, caplog):
    _copy_of_published(local_hub, "me/checked")
    caplog.set_level("INFO", logger="mmidx_builder.hf.card_checksums")
    loaded = within(DEADLINE, lambda: load_dataset("me/checked", split="train", cache_dir=cache,
                                                   verification_mode="all_checks"))
    np.testing.assert_array_equal(rows(loaded), rows(load_dataset(str(published), split="train", cache_dir=cache)))
    assert "sha256 of 4 downloaded file(s) match" in caplog.text


def test_all_checks_names_a_file_that_differs_from_the_card(local_hub, published, cache):
    files = dict(local_hub.files("me/tokens"))
    tampered = bytearray(files["train.bin"])
    tampered[100] ^= 0xFF  # one token changed; same size, still a valid pair
    files["train.bin"] = bytes(tampered)
    local_hub.commit("me/tampered", files)
    with pytest.raises(FormatError) as caught:
        within(DEADLINE, lambda: load_dataset("me/tampered", cache_dir=cache, verification_mode="all_checks"))
    message = str(caught.value)
    assert "train.bin: sha256" in message
    assert hashlib.sha256((published / "train.bin").read_bytes()).hexdigest() in message  # the card's
    assert hashlib.sha256(bytes(tampered)).hexdigest() in message  # what was downloaded
    assert "train.idx" not in message
    # Without all_checks nothing is compared (datasets' default, basic_checks), as for any dataset.
    within(DEADLINE, lambda: load_dataset("me/tampered", split="train", cache_dir=cache + "-basic"))


BLEND_CARD = """---
configs:
- config_name: default
  data_path: ["0.4", data/a_text_document, "0.6", data/b_text_document]
  split_ratios: "90,10,0"
  num_samples: {train: 120, validation: 12}
  seq_length: 16
  seed: 5
---
A Megatron blend: two prefixes, weights 0.4 / 0.6, split 90,10,0.
"""


def test_a_megatron_blend_in_the_cards_configs_loads_the_same_from_the_hub(local_hub, tmp_path, cache):
    """The card of a Hub repo can carry a Megatron blend with relative prefixes: loading the
    repo (Arrow cache and streaming) gives the folder's rows, dataset_id included."""
    require_remote_extra()
    from huggingface_hub import HfApi

    folder = tmp_path / "blend"
    rng = np.random.default_rng(8)
    for name in ("a", "b"):
        write_documents(folder / "data" / f"{name}_text_document", _documents(rng, rng.integers(0, 90, 400)),
                        dtype=np.uint16)
    (folder / "README.md").write_text(BLEND_CARD)
    api = HfApi()
    api.create_repo("me/blend", repo_type="dataset", exist_ok=True)
    api.upload_folder(repo_id="me/blend", repo_type="dataset", folder_path=str(folder))
    local = load_dataset(str(folder), cache_dir=str(tmp_path / "local"))
    hosted = within(DEADLINE, lambda: load_dataset("me/blend", cache_dir=cache))
    streamed = within(DEADLINE, lambda: load_dataset("me/blend", streaming=True, cache_dir=cache))
    assert sorted(local) == sorted(hosted) == ["train", "validation"]
    for split in local:
        assert local[split].num_rows == {"train": 120, "validation": 12}[split]
        expected = [(r["dataset_id"], r["input_ids"]) for r in local[split]]
        assert [(r["dataset_id"], r["input_ids"]) for r in hosted[split]] == expected
        assert [(r["dataset_id"], r["input_ids"]) for r in streamed[split]] == expected
    assert {r["dataset_id"] for r in local["train"]} == {0, 1}
