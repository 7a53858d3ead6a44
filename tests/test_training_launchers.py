"""docs/training.md's recipe for each launcher, run as people run it: 2 CPU processes (gloo),
0 and 2 DataLoader workers, every rank's samples compared with Megatron-LM's
MegatronPretrainingSampler (the oracle of test_training_rank_stream.py: the class's own code,
from the installed megatron-core wheel's copy of Megatron-LM's data_samplers.py).

- torchrun, a plain loop over megatron_rank_stream per rank; the same over MDS shards with
  mosaic_rank_stream, compared with StreamingDataset's own deal (test_mosaic_order.Theirs);
- ``accelerate launch``, ``accelerator.prepare(DataLoader(megatron_global_stream(...)))``,
  dispatched (accelerate's default) and sharded (``dispatch_batches=False``);
- ``accelerate launch`` of the Hugging Face Trainer over megatron_global_stream, resumed from
  its checkpoint, and given a rank stream (refused: accelerate would split it again).

tests/launched_training.py is the per-process side: one launch per launcher runs all of its
recipes (about 40 and 70 s here).
The in-process tests below check accelerate's IterableDatasetShard and the refusals without
launching anything.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_training_rank_stream import megatron_order, sampler_class, write_unique_corpus  # noqa: F401  a fixture

from mmidx_builder.errors import ParameterError

HERE = Path(__file__).resolve().parent
WORLD_SIZE = 2
MICRO_BATCH = 2  # launched_training.py's
CONSUMED = 6
STEPS = 4
LAUNCH_TIMEOUT = 400


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from datasets import load_dataset

    root = tmp_path_factory.mktemp("launchers")
    (root / "corpus").mkdir()
    write_unique_corpus(str(root / "corpus" / "unique_text_document"), np.random.RandomState(0))
    env = {**os.environ, "HF_HOME": str(root / "hf")}  # the launched processes' cache
    dataset = load_dataset(str(root / "corpus"), seq_length=3, seed=11, split="train", cache_dir=str(root / "ours"))
    positions = {tuple(row["input_ids"]): i for i, row in enumerate(dataset)}
    assert len(positions) == len(dataset)
    return {"root": root, "env": env, "positions": positions, "total": len(dataset), "dataset": dataset}


@pytest.fixture(scope="module")
def mds_corpus(corpus):
    """The same documents as MosaicML shards (one MDS sample a document, as `mmidx convert --to
    mds` writes them): what a Composer or LLM Foundry user has."""
    from datasets import load_dataset

    from mmidx_builder.convert import pairs_to_mds

    root = corpus["root"]
    pairs_to_mds(str(root / "corpus" / "unique_text_document"), str(root / "mds"), size_limit=1 << 12)
    dataset = load_dataset(str(root / "mds"), seq_length=3, seed=11, split="train", cache_dir=str(root / "ours"))
    positions = {tuple(row["input_ids"]): i for i, row in enumerate(dataset)}
    assert len(positions) == len(dataset)
    return {**corpus, "folder": "mds", "positions": positions, "total": len(dataset), "dataset": dataset}


def launch(corpus, launcher: str) -> list[dict]:
    """Each rank's output of ``launched_training.py LAUNCHER`` started by its launcher."""
    root = corpus["root"]
    script = [str(HERE / "launched_training.py"), launcher, str(root), str(root)]
    bin_dir = Path(sys.executable).parent
    if launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD_SIZE),
                   "--master_addr", "127.0.0.1", "--master_port", str(_free_port()), *script]
    else:
        command = [str(bin_dir / "accelerate"), "launch", "--multi_gpu", "--num_processes", str(WORLD_SIZE),
                   "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                   "--main_process_port", str(_free_port()), *script]
    env = {**corpus["env"], "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, env=env, cwd=root, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads((root / f"{launcher}.rank{r}.json").read_text()) for r in range(WORLD_SIZE)]


@pytest.fixture(scope="module")
def launched(mds_corpus):
    """``launched("torchrun")`` / ``launched("accelerate")``: each rank's output of every recipe
    of that launcher, launched once for the tests that read it (a launch's start is most of
    its time)."""
    done = {}

    def run(launcher: str) -> list[dict]:
        if launcher not in done:
            done[launcher] = launch(mds_corpus, launcher)
        return done[launcher]

    return run


def positions(rows, corpus):
    return [corpus["positions"][tuple(row)] for row in rows]


def expected(sampler_class, corpus, rank, steps=None):
    order = megatron_order(sampler_class, corpus["total"], CONSUMED, MICRO_BATCH, rank, WORLD_SIZE)
    return order if steps is None else order[:steps * MICRO_BATCH]


def test_torchrun_plain_loop_over_rank_streams_is_megatrons_order(corpus, launched, sampler_class, torch):
    for rank, out in enumerate(r["loop"] for r in launched("torchrun")):
        for case in ("workers0", "workers2"):
            assert positions(out[case], corpus) == expected(sampler_class, corpus, rank, STEPS), (rank, case)


def test_torchrun_loop_over_rank_streams_of_mosaicml_shards_is_megatrons_order(mds_corpus, launched, sampler_class,
                                                                               torch):
    for rank, out in enumerate(r["loop-mds"] for r in launched("torchrun")):
        for case in ("workers0", "workers2"):
            assert positions(out[case], mds_corpus) == expected(sampler_class, mds_corpus, rank, STEPS), (rank, case)


def test_torchrun_loop_over_mosaic_rank_streams_is_streaming_datasets_order(mds_corpus, launched, torch):
    """Each of torchrun's 2 ranks (one node) reads, through 0 and 2 loader workers, two epochs of
    what StreamingDataset 0.13.0 (its own _resume and generate_work) deals that rank; and the
    rest of epoch 0 from a state taken after 3 steps, as StreamingDataset resumes it."""
    from launched_training import MOSAIC, RESUME_STEPS
    from test_mosaic_order import Layout, Theirs, their_dataset
    from test_training_mosaic_stream import expected_ids

    import mosaic_oracle
    from mmidx_builder.mosaic.order import OrderSettings, OrderWorld, StreamWeights

    streaming = mosaic_oracle.streaming_or_skip()
    root = mds_corpus["root"]
    index = json.loads((root / "mds" / "index.json").read_text())
    from datasets import load_dataset

    rows = load_dataset(str(root / "mds"), token_column="tokens", split="train", cache_dir=str(root / "ours"))
    sample_of = {row["input_ids"][0]: i for i, row in enumerate(rows)}
    assert len(sample_of) == len(rows)
    settings = OrderSettings(**MOSAIC)
    theirs = Theirs(their_dataset(streaming, Layout([str(root / "mds")], [[s["samples"] for s in index["shards"]]]),
                                  [StreamWeights()], settings))
    try:
        for rank, out in enumerate(r["mosaic"] for r in launched("torchrun")):
            for workers in (0, 2):
                world = OrderWorld(1, WORLD_SIZE, max(workers, 1))
                for epoch in (0, 1):
                    got = [sample_of[token] for token in out[f"workers{workers}"][epoch]]
                    want = expected_ids(theirs, world, None, epoch, rank, settings.batch_size)
                    assert len(want) > 4 and got == want, (rank, workers, epoch)
            world = OrderWorld(1, WORLD_SIZE, 2)
            state = theirs.state_dict(world, None, 0, RESUME_STEPS * settings.batch_size * WORLD_SIZE, False)
            got = [sample_of[token] for token in out["resumed-workers2"]]
            assert got == expected_ids(theirs, world, state, 0, rank, settings.batch_size), rank
    finally:
        theirs.release()


def test_accelerate_and_the_trainer_over_a_mosaic_global_stream_give_each_process_streaming_datasets_order(
        mds_corpus, launched, torch):
    """``accelerate launch`` on 2 processes: accelerator.prepare of a loader over
    mosaic_global_stream, dispatched and sharded, with 0 and 2 workers, two epochs; the HF
    Trainer over it into epoch 1, and resumed from its checkpoint at step 2. Process p trains
    on what StreamingDataset 0.13.0 deals rank p of 2 with as many workers, up to the first
    step where a rank's batch is short; and the rest of epoch 0 from a state taken after 3 steps."""
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    from launched_training import MOSAIC, RESUME_STEPS
    from test_mosaic_order import Layout, Theirs, their_dataset
    from test_training_mosaic_stream import expected_steps

    import mosaic_oracle
    from mmidx_builder.mosaic.order import OrderSettings, OrderWorld, StreamWeights

    streaming = mosaic_oracle.streaming_or_skip()
    root = mds_corpus["root"]
    index = json.loads((root / "mds" / "index.json").read_text())
    from datasets import load_dataset

    rows = load_dataset(str(root / "mds"), token_column="tokens", split="train", cache_dir=str(root / "ours"))
    sample_of = {row["input_ids"][0]: i for i, row in enumerate(rows)}
    settings = OrderSettings(**MOSAIC)
    batch = settings.batch_size
    theirs = Theirs(their_dataset(streaming, Layout([str(root / "mds")], [[s["samples"] for s in index["shards"]]]),
                                  [StreamWeights()], settings))
    try:
        want = {(workers, epoch): expected_steps(theirs, OrderWorld(1, WORLD_SIZE, max(workers, 1)), None, epoch, batch)
                for workers in (0, 2) for epoch in (0, 1)}
        world = OrderWorld(1, WORLD_SIZE, 2)
        state = theirs.state_dict(world, None, 0, RESUME_STEPS * batch * WORLD_SIZE, False)
        resumed = expected_steps(theirs, world, state, 0, batch)
        for rank, out in enumerate(r["mosaic-accelerate"] for r in launched("accelerate")):
            def ids(case):
                return [sample_of[token] for token in case]

            for workers in (0, 2):
                for kind in ("dispatch", "shard"):
                    for epoch in (0, 1):
                        got = ids(out[f"{kind}-workers{workers}"][epoch])
                        assert len(got) > 4 * batch and got == want[workers, epoch][rank], (rank, kind, workers, epoch)
                per_epoch = out[f"trainer-steps-workers{workers}"]
                assert per_epoch * batch == len(want[workers, 0][rank])
                trained = want[workers, 0][rank] + want[workers, 1][rank][:2 * batch]
                assert ids(out[f"trainer-workers{workers}"]) == trained, (rank, workers)
            assert ids(out["trainer-resumed-workers2"]) == trained[2 * batch:], rank
            for kind in ("dispatch", "shard"):
                assert ids(out[f"{kind}-resumed-workers2"]) == resumed[rank], (rank, kind)
    finally:
        theirs.release()


def test_accelerate_prepare_of_a_global_stream_gives_each_process_megatrons_order(corpus, launched, sampler_class,
                                                                                  torch):
    pytest.importorskip("accelerate")
    for rank, out in enumerate(r["accelerate"] for r in launched("accelerate")):
        want = expected(sampler_class, corpus, rank)
        assert len(want) > 20 * MICRO_BATCH
        for case in ("dispatch-workers0", "dispatch-workers2", "shard-workers0", "shard-workers2"):
            assert positions(out[case], corpus) == want, (rank, case)


def test_hf_trainer_on_a_global_stream_trains_each_rank_on_megatrons_order_and_resumes(corpus, launched, sampler_class,
                                                                                       torch):
    pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    for rank, out in enumerate(r["trainer"] for r in launched("accelerate")):
        want = expected(sampler_class, corpus, rank, STEPS)
        assert positions(out["workers0"], corpus) == want, rank
        assert positions(out["workers2"], corpus) == want, rank
        assert positions(out["resumed-workers2"], corpus) == want[2 * MICRO_BATCH:], rank  # from checkpoint-2
        assert "error" in out["rank-stream"], f"rank {rank} trained on a rank stream accelerate split again"
        assert "megatron_global_stream(dataset, world_size=2, micro_batch_size=2)" in out["rank-stream"]["error"]


# --- in process: accelerate's IterableDatasetShard, the refusals ----------------------------------

def shard_rows(dataset, process, workers, torch, batch_size=MICRO_BATCH, split_batches=False,
               num_processes=WORLD_SIZE):
    """What accelerate's non-dispatching loader gives ``process`` (prepare_data_loader's wrapping,
    without a process group: IterableDatasetShard, then a DataLoader of the process's batch)."""
    from accelerate.data_loader import IterableDatasetShard

    shard = IterableDatasetShard(dataset, batch_size=batch_size, num_processes=num_processes, process_index=process,
                                 split_batches=split_batches)
    shard.set_epoch(0)
    per_process = batch_size // num_processes if split_batches else batch_size
    loader = torch.utils.data.DataLoader(shard, batch_size=per_process, num_workers=workers, collate_fn=list)
    return [row for batch in loader for row in batch]


@pytest.mark.parametrize("workers", [0, 2])
def test_global_stream_through_iterable_dataset_shard_is_megatrons_order(workers, corpus, sampler_class, torch):
    pytest.importorskip("accelerate")
    from mmidx_builder import megatron_global_stream

    for process in range(WORLD_SIZE):
        stream = megatron_global_stream(corpus["dataset"], WORLD_SIZE, MICRO_BATCH, consumed_samples=CONSUMED)
        rows = shard_rows(stream, process, workers, torch)
        assert positions([row["input_ids"] for row in rows], corpus) == expected(sampler_class, corpus, process)


def test_a_rank_stream_handed_to_accelerates_shard_is_refused(corpus, torch):
    pytest.importorskip("accelerate")
    from accelerate.data_loader import IterableDatasetShard

    from mmidx_builder import megatron_rank_stream

    ranked = megatron_rank_stream(corpus["dataset"], 0, WORLD_SIZE, MICRO_BATCH)
    with pytest.raises(ParameterError, match=r"splits it again over its 2 processes.*megatron_global_stream"):
        shard_rows(ranked, 0, 0, torch)
    # without set_epoch (a wrapper of its own around the shard): refused at the first row
    shard = IterableDatasetShard(ranked, batch_size=MICRO_BATCH, num_processes=WORLD_SIZE, process_index=1)
    with pytest.raises(ParameterError, match="megatron_global_stream"):
        next(iter(shard))
    # one process: nothing is split again
    alone = IterableDatasetShard(megatron_rank_stream(corpus["dataset"], 1, WORLD_SIZE, MICRO_BATCH),
                                 batch_size=MICRO_BATCH, num_processes=1, process_index=0)
    alone.set_epoch(0)
    assert len(list(itertools.islice(iter(alone), 4))) == 4


def test_a_mosaic_rank_stream_handed_to_accelerate_is_refused_with_the_fix(mds_corpus, torch):
    pytest.importorskip("accelerate")
    from accelerate.data_loader import IterableDatasetShard
    from datasets import load_dataset

    from mmidx_builder import mosaic_rank_stream

    root = mds_corpus["root"]
    rows = load_dataset(str(root / "mds"), token_column="tokens", split="train", cache_dir=str(root / "ours"))
    ranked = mosaic_rank_stream(rows, 0, WORLD_SIZE, MICRO_BATCH, local_world_size=WORLD_SIZE)
    with pytest.raises(ParameterError, match=r"splits it again over its 2 processes.*mosaic_global_stream\(dataset, world_size=2, batch_size=2"):
        shard_rows(ranked, 0, 0, torch)
    shard = IterableDatasetShard(ranked, batch_size=MICRO_BATCH, num_processes=WORLD_SIZE, process_index=1)
    with pytest.raises(ParameterError, match="mosaic_global_stream"):
        next(iter(shard))
    alone = IterableDatasetShard(mosaic_rank_stream(rows, 1, WORLD_SIZE, MICRO_BATCH, local_world_size=WORLD_SIZE),
                                 batch_size=MICRO_BATCH, num_processes=1, process_index=0)
    alone.set_epoch(0)
    assert len(list(itertools.islice(iter(alone), 4))) == 4
    # Megatron's samples packed from the MDS documents are not MDS samples: no StreamingDataset order.
    with pytest.raises(ParameterError, match="was loaded as 'mmidx_mosaic_samples'.*not seq_length="):
        mosaic_rank_stream(mds_corpus["dataset"], 0, WORLD_SIZE, MICRO_BATCH)


def test_global_stream_misuse_is_refused_by_name(corpus, torch):
    pytest.importorskip("accelerate")
    from mmidx_builder import megatron_global_stream

    stream = megatron_global_stream(corpus["dataset"], WORLD_SIZE, MICRO_BATCH)
    with pytest.raises(ParameterError, match="megatron_rank_stream"):  # a plain loop: every rank would get all
        next(iter(stream))
    with pytest.raises(ParameterError, match="make it with world_size=2"):
        shard_rows(megatron_global_stream(corpus["dataset"], 4, MICRO_BATCH), 0, 0, torch)
    with pytest.raises(ParameterError, match="per_device_train_batch_size=2"):
        shard_rows(stream, 0, 0, torch, batch_size=4)
    alone = megatron_global_stream(corpus["dataset"], 1, MICRO_BATCH, consumed_samples=CONSUMED)
    assert [row["input_ids"] for row in alone] == [corpus["dataset"][i]["input_ids"]
                                                   for i in range(CONSUMED, corpus["total"] // 2 * 2)]


def test_with_split_batches_the_refusal_gives_the_batch_size_that_works(corpus, sampler_class, torch):
    """split_batches=True cuts each loader batch (the Trainer's per_device_train_batch_size) in
    the process count: 3 processes of micro-batch 3 need 9, and the hint said 3, what was set."""
    pytest.importorskip("accelerate")
    from mmidx_builder import megatron_global_stream

    stream = megatron_global_stream(corpus["dataset"], 3, 3)
    with pytest.raises(ParameterError, match=r"use batch_size=9 \(with the HF Trainer, per_device_train_batch_size=9, "
                                             r"which split_batches cuts in 3\)"):
        shard_rows(stream, 0, 0, torch, batch_size=3, split_batches=True, num_processes=3)
    for process in range(3):  # and 9 is what works
        rows = shard_rows(megatron_global_stream(corpus["dataset"], 3, 3), process, 0, torch, batch_size=9,
                          split_batches=True, num_processes=3)
        want = megatron_order(sampler_class, corpus["total"], 0, 3, process, 3)
        assert positions([row["input_ids"] for row in rows], corpus) == want


@pytest.mark.parametrize("accumulation", [1, 4])
def test_gradient_accumulation_ends_at_whole_global_batches_as_megatron_lm(accumulation, corpus, sampler_class,
                                                                           torch):
    """accelerate's last optimizer step takes the micro-batches left (fewer than the accumulation
    steps) where Megatron-LM stops at whole global batches; gradient_accumulation_steps= ends the
    stream there: each process's rows are the sampler's first whole global batches."""
    pytest.importorskip("accelerate")
    from mmidx_builder import megatron_global_stream, megatron_rank_stream

    global_batch = WORLD_SIZE * MICRO_BATCH * accumulation
    steps = (corpus["total"] - CONSUMED) // global_batch
    assert (corpus["total"] - CONSUMED) % global_batch >= WORLD_SIZE * MICRO_BATCH or accumulation == 1  # a tail
    for process in range(WORLD_SIZE):
        stream = megatron_global_stream(corpus["dataset"], WORLD_SIZE, MICRO_BATCH, consumed_samples=CONSUMED,
                                        gradient_accumulation_steps=accumulation)
        rows = shard_rows(stream, process, 2, torch)
        want = expected(sampler_class, corpus, process)[:steps * accumulation * MICRO_BATCH]
        assert positions([row["input_ids"] for row in rows], corpus) == want
        ranked = megatron_rank_stream(corpus["dataset"], process, WORLD_SIZE, MICRO_BATCH, consumed_samples=CONSUMED,
                                      gradient_accumulation_steps=accumulation)
        assert positions([row["input_ids"] for row in ranked], corpus) == want
        assert len(ranked) == len(want) and len(stream) == len(want) * WORLD_SIZE
