"""benchmarks/bench_scale.py's own arithmetic, which no benchmark run checks: the bytes an
index cache folder holds, the sampled memory peaks, when megatron-core's side is left out (its
estimated need against the machine's MemAvailable), and the verdicts of issue 43's goals.
Nothing here runs a measurement (those take minutes and both sides' imports).
"""

import importlib.util
import os
import time
import types
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux /proc needed")

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_scale.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_folder_bytes_counts_allocated_blocks_apart_from_sparse_holes_and_a_hard_link_once(bench, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "dense.npy").write_bytes(b"\x01" * 10_000)
    with open(tmp_path / "sparse.bin", "wb") as f:
        f.truncate(64 * 2**20)  # 64 MiB apparent, no block allocated
    os.link(tmp_path / "sub" / "dense.npy", tmp_path / "linked.npy")
    found = bench.folder_bytes(str(tmp_path))
    assert found["files"] == 2
    assert found["apparent"] == 10_000 + 64 * 2**20
    assert 10_000 <= found["allocated"] < 2**20


def test_memory_sampler_sees_an_allocation_held_across_samples(bench):
    sampler = bench.MemorySampler(interval=0.01).start()
    held = np.ones(200 * 2**20 // 8)  # 200 MiB, every page touched
    time.sleep(0.2)
    found = sampler.stop()
    del held
    assert found["anon_peak"] - found["anon_imports"] >= 150 * 2**20, found
    assert found["file_peak"] > 0 and 0 < found["mem_available_min"]


def _args(**kwargs):
    return types.SimpleNamespace(**{"ours_only": False, "seq_length": 4096, **kwargs})


def test_megatron_side_left_out_with_its_reason(bench, tmp_path, monkeypatch):
    prefix = str(tmp_path / "corpus_text_document")
    bench.write_sparse_prefix(prefix, 1_017, seed=0)
    assert bench.peer_skip_reason(_args(ours_only=True), True, [prefix]) == "--ours-only"
    assert bench.peer_skip_reason(_args(), False, [prefix]) == "megatron-core is not importable"
    assert bench.peer_skip_reason(_args(), True, [prefix]) is None  # a thousand documents fit

    fields = bench._proc_fields
    monkeypatch.setattr(bench, "_proc_fields", lambda path, names: (
        {"MemAvailable": 2**28} if names == ("MemAvailable",) else fields(path, names)))
    reason = bench.peer_skip_reason(_args(), True, [prefix])
    assert reason.startswith("its estimated anonymous peak 0.50 GiB") and "exceeds MemAvailable 0.25 GiB" in reason


def test_one_billion_documents_exceed_a_24_gib_machine_and_200_million_do_not(bench):
    tokens_a_document = 600  # the corpora's lognormal mean (median 500, sigma 0.6)
    for documents, fits in ((10**9, False), (200 * 10**6, True)):
        need = bench.peer_need([documents], documents * tokens_a_document // 4096)
        assert (need <= 24 * 2**30) is fits, need / 2**30
    # A blend: the largest prefix is built with its mgrid, the others only kept.
    assert bench.peer_need([10, 30], 0) == bench.PEER_IMPORTS + 8 * 40 + 20 * 30


def test_goal_verdicts(bench):
    found = {"ours": {"cold": {"seconds": 7.0, "peak": 8.1}, "disk": {"allocated": 3 * 2**30}},
             "megatron": {"cold": {"seconds": 10.0, "peak": 9.0}, "disk": {"allocated": 2 * 2**30}}}
    rows = bench.goal_rows("200M", "200M documents", True, found)
    assert [r[4] for r in rows] == ["met", "not met", "not met"]  # 0.70x <= 0.7x; 0.90x > 0.8x; 1.50x > 1.0x
    assert rows[0][2] == "0.70x (7.00 s / 10.00 s)" and rows[2][2] == "1.50x (3.00 GiB / 2.00 GiB)"

    ours_only = {"ours": found["ours"]}
    assert {r[4] for r in bench.goal_rows("200M", "2M documents", False, ours_only)} == {"not measured"}

    billion = {"ours": {"cold": {"anon_peak": 3 * 2**30}, "warm": {"seconds": 0.31}, "resume": {"seconds": 0.2}}}
    rows = bench.goal_rows("1B", "3M documents", False, billion)
    assert [r[4] for r in rows] == ["met (indicative: not the goal's corpus)",
                                    "not met (indicative: not the goal's corpus)",
                                    "met (indicative: not the goal's corpus)"]
