"""Listing and opening a remote dataset asks for sizes, never for whole files (issue 41 items 5
and 7), through both HTTP clients.

fsspec's HTTP glob of a URL asks whether it exists with a GET without ``Range`` (hung up after
the headers: on a real server, a whole-file answer started for nothing per file and process),
and calls any status of 400 or more "not there": a rate-limited ``.bin`` was reported as a
missing partner. The loopback server counts every byte of every body it writes.
"""

from __future__ import annotations

import numpy as np
import pytest

from mmidx_builder.errors import MissingPartnerError, RemoteRateLimitError
from range_server import RangeServer
from test_remote import http_client, quick_backoff, served  # noqa: F401 (fixtures)


def _stream(url: str, cache: str):
    from datasets import load_dataset

    return load_dataset("mmidx", data_files={"train": url}, streaming=True, seq_length=64, split="train",
                        cache_dir=cache)


def test_listing_and_opening_a_remote_dataset_writes_no_body_but_the_idx_s(served, tmp_path):
    folder, prefix = served
    with RangeServer(folder) as server:
        stream = _stream(server.url + "/corpus.bin", str(tmp_path / "hf"))  # lists the pair and opens it
        listed = [(method, name) for method, name, *_ in server.answered]
        # Bodies written: the .idx, once, and ranged; nothing of the .bin (a HEAD gave its size).
        assert server.unranged == {} and server.sent == {"corpus.idx": (folder / "corpus.idx").stat().st_size}
        assert {method for method, name in listed if name.endswith(".bin")} == {"HEAD"}, listed
        row = next(iter(stream))
        assert server.unranged == {}  # every GET since was ranged
    assert len(row["input_ids"]) == 65  # seq_length + 1


def test_a_rate_limited_bin_is_a_rate_limit_not_a_missing_partner(served, tmp_path):
    folder, prefix = served
    with RangeServer(folder) as server:
        server.limit_headers = {"Retry-After": "86400"}
        server.limit["corpus.bin"] = 10 ** 6
        host = server.url.split("://")[1]
        with pytest.raises(RemoteRateLimitError, match=rf"corpus\.bin.*rate limited: {host} asks to wait 86400 s"):
            next(iter(_stream(server.url + "/corpus.bin", str(tmp_path / "hf"))))


def test_a_missing_remote_bin_is_still_a_missing_partner(served, tmp_path):
    folder, prefix = served
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "corpus.idx").write_bytes((folder / "corpus.idx").read_bytes())
    with RangeServer(tmp_path / "served") as server:
        with pytest.raises(MissingPartnerError, match=r"corpus\.bin.*no such file"):
            next(iter(_stream(server.url + "/corpus.bin", str(tmp_path / "hf"))))
        assert server.unranged == {}


def test_a_server_refusing_heads_is_asked_for_one_byte(served, tmp_path):
    """A server answering HEAD with 405 is asked for byte 0 (a 206 whose Content-Range total is
    the size), not for the whole file."""
    from mmidx_builder.storage.remote import RemoteAccess

    folder, prefix = served
    with RangeServer(folder) as server:
        server.no_head = True
        obj = RemoteAccess().stat(server.url + "/corpus.bin")
        assert obj.size == (folder / "corpus.bin").stat().st_size and obj.version
        assert server.sent == {"corpus.bin": 1} and server.unranged == {}
    np.testing.assert_equal(obj.url, server.url + "/corpus.bin")
