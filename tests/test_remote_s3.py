"""S3 for real: ``s3://bucket/prefix`` in ``data_files``, in a Megatron ``data_path`` blend (one
prefix on the Hub, one in a bucket, one ``load_dataset`` call) and in ``megatron_args``, with
``storage_options`` passed as datasets takes them. The bucket is moto's S3 API served on
127.0.0.1 (tests/s3_server.py) and read through s3fs; every other connection is refused.

The reference is the same files loaded from the local folder.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from datasets import load_dataset  # noqa: E402

import mmidx_builder  # noqa: F401,E402  (registers the builders)
from mmidx_builder.errors import RemoteChangedError  # noqa: E402
from mmidx_builder.sources.indexed import IndexedFile, write_documents  # noqa: E402
from mmidx_builder.storage.remote import RemoteAccess  # noqa: E402
from hub_server import LocalHub, isolate_hf_home, loopback_only, point_clients_at  # noqa: E402
from s3_server import LocalS3  # noqa: E402

SEQ = 32


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("s3data")
    rng = np.random.default_rng(21)
    for name, count in (("web_text_document", 250), ("books_text_document", 150)):  # ~1,500 samples: a GET each
        write_documents(root / "data" / name, [rng.integers(0, 50_000, n) for n in rng.integers(0, 400, count)],
                        dtype=np.uint16)
    return root


@pytest.fixture(scope="module")
def s3(folder):
    with pytest.MonkeyPatch.context() as mp, LocalS3() as server:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
            mp.delenv(name, raising=False)
        import datasets.config

        mp.setattr(datasets.config, "HF_UPDATE_DOWNLOAD_COUNTS", False)  # datasets' ping to S3 at each load
        server.refused = loopback_only(mp)
        server.put_folder("corpus", folder / "data", "tokens")
        yield server
        assert set(server.refused) <= {"datasets-server.127.0.0.1"}, server.refused  # datasets' viewer lookup


def rows(dataset, *columns) -> list:
    return [tuple(np.asarray(r[c]).tolist() for c in columns) for r in dataset]


def test_data_files_in_a_bucket_stream_the_local_rows(s3, folder, tmp_path):
    options = dict(seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"))
    local = load_dataset("mmidx", data_files={"train": str(folder / "data" / "web_text_document.bin")},
                         streaming=True, **options)
    remote = load_dataset("mmidx", data_files={"train": "s3://corpus/tokens/web_text_document.bin"},
                          streaming=True, storage_options=s3.storage_options, **options)
    assert rows(remote, "input_ids") == rows(local, "input_ids")
    assert 0 < s3.sent["tokens/web_text_document.bin"]


def test_megatron_args_with_an_s3_prefix(s3, folder, tmp_path):
    args = f"--data-path 0.7 s3://corpus/tokens/web_text_document 0.3 {{}}/books_text_document " \
           f"--split 90,10,0 --seq-length {SEQ} --train-iters 10 --global-batch-size 16 --eval-iters 2 " \
           "--eval-interval 5"
    local = load_dataset("mmidx", megatron_args=args.format(folder / "data").replace(
        "s3://corpus/tokens", str(folder / "data")), streaming=True, cache_dir=str(tmp_path / "hf"))
    remote = load_dataset("mmidx", megatron_args=args.format("s3://corpus/tokens"), streaming=True,
                          storage_options=s3.storage_options, cache_dir=str(tmp_path / "hf"))
    for split in ("train", "validation"):
        assert rows(remote[split], "dataset_id", "input_ids") == rows(local[split], "dataset_id", "input_ids")


def test_a_blend_of_a_hub_prefix_and_an_s3_prefix_in_one_call(s3, folder, tmp_path):
    from huggingface_hub import HfApi

    with pytest.MonkeyPatch.context() as mp, LocalHub(token="hf_blendTOKEN") as hub:
        mp.setenv("HF_TOKEN", "hf_blendTOKEN")
        isolate_hf_home(mp, tmp_path / "hf_home")
        point_clients_at(mp, hub.url)
        api = HfApi()
        api.create_repo("me/books", repo_type="dataset")
        api.upload_folder(repo_id="me/books", repo_type="dataset", folder_path=str(folder / "data"),
                          allow_patterns=["books_text_document.*"])
        blend = ["0.6", "s3://corpus/tokens/web_text_document", "0.4", "hf://datasets/me/books/books_text_document"]
        remote = load_dataset("mmidx", data_path=blend, split_ratios="80,20,0", seq_length=SEQ, num_samples={"train": 150, "validation": 30},
                              streaming=True, storage_options=s3.storage_options, cache_dir=str(tmp_path / "hf"))
        got = {split: rows(remote[split], "dataset_id", "input_ids") for split in ("train", "validation")}
        assert hub.downloads_of("books_text_document.bin")
    local = load_dataset("mmidx", data_path=["0.6", str(folder / "data" / "web_text_document"), "0.4",
                                             str(folder / "data" / "books_text_document")],
                         split_ratios="80,20,0", seq_length=SEQ, num_samples={"train": 150, "validation": 30}, streaming=True,
                         cache_dir=str(tmp_path / "hf"))
    for split in ("train", "validation"):
        assert got[split] == rows(local[split], "dataset_id", "input_ids")
        assert {d for d, _ in got[split]} == {0, 1}


def test_an_object_rewritten_mid_run_is_refused(s3, folder):
    data = (folder / "data" / "books_text_document.bin").read_bytes()
    s3.put("changing", "x.idx", (folder / "data" / "books_text_document.idx").read_bytes())
    s3.put("changing", "x.bin", data)
    access = RemoteAccess(s3.storage_options, retries=1)
    remote = IndexedFile.open("s3://changing/x", opener=access)
    first = remote.read_pieces([4], [0], [3])
    s3.put("changing", "x.bin", data[::-1])  # same size, other bytes: another ETag
    with pytest.raises(RemoteChangedError, match=r"s3://changing/x\.bin: bytes \[\d+, \d+\)"):
        remote.read_pieces([4], [0], [3])
    np.testing.assert_array_equal(first, IndexedFile.open(folder / "data" / "books_text_document").read_pieces(
        [4], [0], [3]))


def test_a_request_waiting_for_one_of_few_connections_does_not_time_out(s3, folder):
    """A request's timeout runs from when it is sent, not while it waits for a connection: with
    storage options of 2 pooled connections (botocore's own default is 10, fewer than the
    requests in flight) and 0.3 s per request, 28 ranges take ~4 s, each 0.3 s once sent. A
    timeout of 1.5 s without retries failed the read when it counted the wait."""
    local = IndexedFile.open(str(folder / "data" / "web_text_document"))
    ids = np.arange(3, 250, 9)  # 28 far apart: a request each
    offsets, lengths = np.zeros(len(ids), np.int64), local.sequence_lengths[ids].astype(np.int64)
    options = {"s3": {**s3.storage_options["s3"], "config_kwargs": {"max_pool_connections": 2}}}
    remote = IndexedFile.open("s3://corpus/tokens/web_text_document",
                              opener=RemoteAccess(options, timeout=1.5, retries=0))
    gets = s3.gets.get("tokens/web_text_document.bin", 0)
    s3.latency = 0.3
    try:
        np.testing.assert_array_equal(remote.read_pieces(ids, offsets, lengths), local.read_pieces(ids, offsets, lengths))
    finally:
        s3.latency = 0.0
    assert s3.gets["tokens/web_text_document.bin"] - gets >= 20  # as many requests, queued for 2 connections


def test_sixteen_files_or_more_in_a_bucket_download_with_options_per_protocol(s3, tmp_path):
    """datasets downloads 16 files and more in a batch that hands the whole per-protocol options
    dict to s3fs (TypeError: unexpected keyword argument 'hf'): 17 .bin files (and then 17 .idx)."""
    rng = np.random.default_rng(4)
    folder = tmp_path / "many"
    for i in range(17):
        write_documents(folder / f"part{i}", [rng.integers(0, 50_000, n) for n in rng.integers(1, 60, 20)],
                        dtype=np.uint16)
    s3.put_folder("many", folder, "parts")
    files = [f"s3://many/parts/part{i}.bin" for i in range(17)]
    remote = load_dataset("mmidx", data_files={"train": files}, seq_length=SEQ, split="train",
                          storage_options=s3.storage_options, cache_dir=str(tmp_path / "hf"))
    local = load_dataset("mmidx", data_files={"train": [str(folder / f"part{i}.bin") for i in range(17)]},
                         seq_length=SEQ, split="train", cache_dir=str(tmp_path / "hf"))
    assert rows(remote, "input_ids") == rows(local, "input_ids")
