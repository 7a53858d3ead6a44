"""A blend of remote prefixes is opened once per process, every prefix at once.

Before, each split of a blend opened each of its prefixes again, one after another: a HEAD
and a GET of the ``.idx``, a HEAD of the ``.bin`` and a HEAD and a GET of the sidecar per
prefix and split, in series. A 50-prefix blend at 100 ms waited 67 s for its first sample
(local: 16 s). Here the test server counts the requests of each prefix and sees whether the
prefixes' opening requests overlap; no clock is asserted on.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from mmidx_builder.sources.indexed import write_documents
from range_server import RangeServer, require_remote_extra

PREFIXES = 12
SEQ = 32
SIZES = {"train": 300, "validation": 40, "test": 10}


@pytest.fixture(scope="module")
def blend_folder(tmp_path_factory):
    """Twelve prefixes of 41-129 documents (one empty document each), weights 1..12."""
    folder = tmp_path_factory.mktemp("blend")
    rng = np.random.default_rng(32)
    for i in range(PREFIXES):
        lengths = rng.integers(0, 200, size=41 + 8 * i)
        lengths[i % len(lengths)] = 0
        write_documents(folder / f"part{i:02d}_text_document", [rng.integers(0, 65535, n) for n in lengths],
                        dtype=np.uint16)
    return folder


@pytest.fixture(autouse=True, params=["libcurl", "aiohttp"])
def http_client(request, monkeypatch):
    """Both HTTP clients open the blend the same way (the .idx GETs go through the one chosen)."""
    from mmidx_builder.storage.remote import fetching

    require_remote_extra()
    if request.param == "libcurl":
        pytest.importorskip("pycurl", reason="the remote extra's pycurl")
    monkeypatch.setattr(fetching, "HTTP_CLIENT", "auto" if request.param == "libcurl" else "aiohttp")
    return request.param


def blend(base: str) -> list[str]:
    return [token for i in range(PREFIXES) for token in (str(i + 1), f"{base}/part{i:02d}_text_document")]


def load(data_path, cache_dir):
    from datasets import load_dataset

    return load_dataset("mmidx", data_path=data_path, split_ratios="80,15,5", num_samples=SIZES, seq_length=SEQ,
                        streaming=True, cache_dir=str(cache_dir))


def first_rows(stream, count: int) -> list[tuple]:
    rows = []
    for row in stream:
        rows.append((row["dataset_id"], tuple(row["input_ids"])))
        if len(rows) == count:
            break
    return rows


def opening_requests(answered) -> dict[str, collections.Counter]:
    """Per prefix, its requests by (method, file kind), leaving out the .bin's ranged GETs (samples)."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for method, name, _, _ in answered:
        prefix, _, kind = name.partition("_text_document")
        if method == "GET" and kind == ".bin":
            continue
        counts[prefix][(method, kind)] += 1
    return counts


def most_prefixes_at_once(answered, suffixes=(".idx", ".bin", ".mmidx-info")) -> int:
    """The most prefixes whose opening requests (of files ending in ``suffixes``) the server
    was answering at one moment."""
    spans = [(received, done, name.partition("_text_document")[0]) for method, name, received, done in answered
             if name.endswith(suffixes) and not (method == "GET" and name.endswith(".bin"))]
    return max(len({prefix for begin, end, prefix in spans if begin <= at < end}) for at, _, _ in spans)


def test_a_remote_blend_opens_each_prefix_once_all_at_once_and_gives_the_local_samples(blend_folder, tmp_path):
    local = load(blend(str(blend_folder)), tmp_path / "local")
    with RangeServer(blend_folder, latency=0.05) as server:
        remote = load(blend(server.url), tmp_path / "remote")
        got = {split: first_rows(remote[split], 60) for split in SIZES}
        answered = list(server.answered)
    for split in SIZES:
        assert got[split] == first_rows(local[split], 60), split
    counts = opening_requests(answered)
    assert sorted(counts) == [f"part{i:02d}" for i in range(PREFIXES)]
    for prefix, kinds in counts.items():
        # One HEAD and one GET of the .idx, one HEAD of the .bin, at most a HEAD and a GET of
        # the sidecar (fsspec asks with GET when the HEAD is refused), for three splits.
        assert kinds[("HEAD", ".idx")] <= 1 and kinds[("GET", ".idx")] <= 1, (prefix, kinds)
        assert kinds[("HEAD", ".bin")] <= 1, (prefix, kinds)
        assert kinds[("HEAD", ".mmidx-info")] + kinds[("GET", ".mmidx-info")] <= 2, (prefix, kinds)
    # The prefixes are opened together: the server answers the opening requests of most of
    # them at once (one after another, it would see one prefix at a time); sidecars too.
    assert most_prefixes_at_once(answered, (".idx", ".bin")) >= PREFIXES // 2, answered
    assert most_prefixes_at_once(answered, (".mmidx-info",)) >= PREFIXES // 2, answered


def test_remote_pairs_listed_in_data_files_open_all_at_once(blend_folder, tmp_path):
    """The same for the pairs of data_files (streaming opens the splits in load_dataset; the
    samples read through the files opened here are the blend test's)."""
    from datasets import load_dataset

    files = [f"part{i:02d}_text_document.bin" for i in range(PREFIXES)]
    with RangeServer(blend_folder, latency=0.05) as server:
        streams = load_dataset("mmidx", data_files={"train": [f"{server.url}/{f}" for f in files],
                                                    "validation": [f"{server.url}/{f}" for f in files[::-1]]},
                               seq_length=SEQ, streaming=True, cache_dir=str(tmp_path / "hf"))
        answered = list(server.answered)
    assert set(streams) == {"train", "validation"}
    # (datasets' listing of the data files asks for each file too, one pattern at a time: the
    # indices fetched together are what shows the pairs opened at once.)
    indices = [request for request in answered if request[0] == "GET" and request[1].endswith(".idx")]
    assert most_prefixes_at_once(indices, (".idx",)) >= PREFIXES // 2, answered


def test_the_prefixes_of_one_table_are_read_at_once(blend_folder, tmp_path):
    """One call for the tokens of rows drawn from every prefix reads the prefixes together:
    one after another, each prefix's read waited its own round trips (a 50-prefix blend's
    table waited 50 in series)."""
    from mmidx_builder.megatron import plan as mplan
    from mmidx_builder.megatron.splits import build_split, split_samples
    from mmidx_builder.sources.indexed import IndexedFile

    plans = mplan.megatron_plan(data_path=blend(str(blend_folder)), split_ratios="1", num_samples={"train": 300})
    local = {p: IndexedFile.open(p) for p in mplan.all_prefixes(plans)}
    expected, expected_ids, _ = split_samples(build_split(plans["train"], local, seq_length=SEQ, seed=3), np.arange(300))
    with RangeServer(blend_folder, latency=0.05) as server:
        remote_plans = mplan.megatron_plan(data_path=blend(server.url), split_ratios="1", num_samples={"train": 300})
        remote = {p: IndexedFile.open(p) for p in mplan.all_prefixes(remote_plans)}
        built = build_split(remote_plans["train"], remote, seq_length=SEQ, seed=3)
        server.answered.clear()
        tokens, dataset_ids, _ = split_samples(built, np.arange(300))
        reads = [request for request in server.answered if request[0] == "GET" and request[1].endswith(".bin")]
    np.testing.assert_array_equal(tokens, expected)
    np.testing.assert_array_equal(dataset_ids, expected_ids)
    assert len(set(dataset_ids.tolist())) == PREFIXES
    spans = [(received, done, name.partition("_text_document")[0]) for _, name, received, done in reads]
    most = max(len({prefix for begin, end, prefix in spans if begin <= at < end}) for at, _, _ in spans)
    assert most >= 3, (most, reads)  # one after another: 1
