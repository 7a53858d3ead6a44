"""What the read-ahead of a remote stream costs (hf/readahead.py, storage/remote/planning.py),
counted at a loopback server (range_server.py): the bytes a pass fetches, whether it stops
after 400 samples or reads the whole split, and the requests DataLoader workers send for the
samples 0 workers read. Samples are compared with the same files read locally.

A 4M-token .bin of lognormal documents (mean 500 tokens, as benchmarks/bench_remote.py's),
read at seq_length 2048: 1,953 samples of 4,098 bytes, about 5 pieces each.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from mmidx_builder.sources.indexed import write_documents
from range_server import RangeServer, require_remote_extra

SEQ = 2048
SAMPLE_BYTES = (SEQ + 1) * 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    require_remote_extra()
    folder = tmp_path_factory.mktemp("readahead")
    rng = np.random.default_rng(5)
    lengths = np.maximum(1, rng.lognormal(np.log(500) - 0.5, 1.0, size=24_000)).astype(np.int64)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), 4_000_000)) + 1]
    prefix = write_documents(folder / "corpus", (rng.integers(0, 50_000, n) for n in lengths), dtype=np.uint16)
    return folder, prefix


def load(data_file: str, tmp_path):
    from datasets import load_dataset

    return load_dataset("mmidx", data_files={"train": data_file}, seq_length=SEQ, split="train", streaming=True,
                        cache_dir=str(tmp_path / "hf"))


def first_rows(stream, count: int) -> np.ndarray:
    rows = []
    for row in stream:
        rows.append(row["input_ids"])
        if len(rows) == count:
            break
    return np.array(rows)


def settled(server, name: str = "corpus.bin") -> int:
    """The bytes of ``name`` sent once the requests a stopped stream had under way are answered
    (a stream that is left drops what it queued; what was sent is answered)."""
    sent, quiet_since = server.sent.get(name, 0), time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        time.sleep(0.1)
        now = server.sent.get(name, 0)
        if now != sent:
            sent, quiet_since = now, time.monotonic()
    return sent


def test_passes_of_400_samples_fetch_at_most_one_and_a_half_times_their_bytes(corpus, tmp_path):
    """Three passes that each stop after 400 samples. The read-ahead starts small and grows with
    what the pass has read, and a new pass starts small again: each pass fetches at most 1.5x
    the bytes of its 400 samples (before: 3.2x, and more in the later passes, which started
    with the read-ahead the earlier ones had grown)."""
    folder, prefix = corpus
    local = first_rows(load(prefix + ".bin", tmp_path), 400)
    with RangeServer(folder) as server:
        stream = load(server.url + "/corpus.bin", tmp_path)
        for _ in range(3):
            before = settled(server)
            rows = first_rows(stream, 400)
            fetched = settled(server) - before
            np.testing.assert_array_equal(rows, local)
            assert fetched <= 1.5 * 400 * SAMPLE_BYTES, fetched / (400 * SAMPLE_BYTES)


def test_a_whole_pass_fetches_at_most_the_merge_budget_over_its_bytes(corpus, tmp_path):
    """Nothing is left unread at the end of a whole pass: the bytes over the samples' are the
    gaps plan_runs bridges, within 1.15x (before: 1.4x)."""
    folder, prefix = corpus
    local = np.array([row["input_ids"] for row in load(prefix + ".bin", tmp_path)])
    with RangeServer(folder) as server:
        rows = np.array([row["input_ids"] for row in load(server.url + "/corpus.bin", tmp_path)])
        fetched = settled(server)
    np.testing.assert_array_equal(rows, local)
    assert fetched <= 1.2 * len(local) * SAMPLE_BYTES, fetched / (len(local) * SAMPLE_BYTES)


def test_four_dataloader_workers_send_about_the_requests_of_none_for_the_same_samples(corpus, tmp_path):
    """Each worker reads every 4th shard and plans gathers of its own rows only: a quarter as
    dense in the file as one reader's, so fewer gaps are small enough to bridge. Its gathers hold
    all it may read ahead (one reader's hold half), and the requests stay within 1.1x of 0
    workers' (before: 1.4x)."""
    torch = pytest.importorskip("torch", reason="the torch extra: DataLoader workers")
    folder, prefix = corpus
    local = sorted(np.asarray(row["input_ids"]).tobytes() for row in load(prefix + ".bin", tmp_path))
    requests = {}
    with RangeServer(folder) as server:
        for workers in (0, 4):
            server.requests.clear()
            loader = torch.utils.data.DataLoader(load(server.url + "/corpus.bin", tmp_path / str(workers)),
                                                 batch_size=None, num_workers=workers,
                                                 timeout=120 if workers else 0)  # a hang fails
            got = sorted(np.asarray(row["input_ids"]).tobytes() for row in loader)
            assert got == local
            requests[workers] = server.requests["corpus.bin"]
    assert requests[4] <= 1.1 * requests[0], requests
