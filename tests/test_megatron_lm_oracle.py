"""load_dataset(megatron_args=...) + megatron_rank_stream + MegatronCollator against Megatron-LM's
own training data path, at two tags: Megatron-LM core_v0.16.1 with megatron-core 0.16.1
(.venv-megatron016, scripts/install_megatron016_oracle.sh) and core_v0.19.0 with megatron-core
0.19.2 (.venv). The Megatron-LM code is the pinned archives of ../shared/oracles/megatron-lm/;
tests/megatron_lm_oracle.py runs it, one process per data-parallel rank (gloo on 127.0.0.1).

For each case, the same command line goes to Megatron-LM (argv) and to ``load_dataset("mmidx",
megatron_args=...)``; every key of each rank's first micro-batches of each split must be equal
(values and dtypes), and so must the sizes Megatron-LM derives (``get_train_valid_test_num_samples``
after ``update_train_iters``). Where Megatron-LM refuses a command line, ours must refuse it
too; where it hangs (a split range without sequences), ours must raise. docs/megatron-lm-oracle.md
lists the cases.

Where ../shared is missing (a user's clone) these tests skip; with it and
MMIDX_REQUIRE_ORACLE=1 (CI) a missing oracle venv fails them.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shlex
import socket
import subprocess
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import ParameterError
from mmidx_builder.sources.indexed import write_documents
from mmidx_builder.megatron import resolve
from megatron_lm_archive import ORACLES, oracle

pytestmark = pytest.mark.megatron

WORLD_SIZE = 2
MICRO_BATCHES = 3  # compared per split and rank
DEADLINE = 60  # seconds for one case once the previous one is done (its own few seconds, on a busy machine)
HANG_DEADLINE = 20  # the case that is expected to hang: it runs last, its ranks are stopped then
STARTUP = 90  # importing torch, megatron-core and Megatron-LM's training package, twice per machine core
VOCAB = 32000  # NullTokenizer --vocab-size: EOD 32000 at core_v0.16, 31999 at core_v0.19
SPLITS = ("train", "validation", "test")
MODEL = "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --max-position-embeddings 64"
TOKENIZER = f"--tokenizer-type NullTokenizer --vocab-size {VOCAB}"


# --- corpora: documents as preprocess_data --append-eod writes them, with both EOD candidates ---

def _documents(rng, count, high, vocab=VOCAB, long_every=97):
    lengths = rng.integers(0, high, count)
    lengths[3] = 0
    lengths[::long_every] = 4 * high + 5
    lengths[-3:] = np.maximum(lengths[-3:], 3)  # the last sequences are a small test split's only ones
    ends = rng.choice([vocab - 1, vocab, vocab - 1, vocab - 2], size=count)  # both versions' EOD, and neither
    return [np.append(rng.integers(0, vocab - 2, max(int(n) - 1, 0)), end)[:n] if n else np.zeros(0, np.int64)
            for n, end in zip(lengths, ends)]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron_lm_corpora")
    rng = np.random.default_rng(22)
    prefixes = {
        "web": write_documents(root / "web_text_document", _documents(rng, 700, 90), dtype=np.uint16),
        "books": write_documents(root / "books_text_document", _documents(rng, 500, 160), dtype=np.uint16),
        # ids past 65535: an int32 file, blended with uint16 ones and per split beside them
        "code": write_documents(root / "code_text_document",
                                [np.append(d, 70_000 + len(d)) for d in _documents(rng, 600, 60)], dtype=np.int32),
        # Mixtral's --split 99990,8,2 needs 25,000 sequences for its test split to get one
        "many": write_documents(root / "many_text_document", _documents(rng, 26_000, 12, long_every=1001),
                                dtype=np.uint16),
        "small": write_documents(root / "small_text_document", _documents(rng, 300, 40), dtype=np.uint16),
    }
    (root / "blend.txt").write_text(f"0.25 {prefixes['web']}\n0.75 {prefixes['books']}\n")
    (root / "per_split.json").write_text(json.dumps(
        {"train": f"0.4 {prefixes['code']} 0.6 {prefixes['web']}", "valid": [prefixes["books"]], "test": None}))
    (root / "per_split_dtypes.json").write_text(json.dumps(
        {"train": [prefixes["code"]], "valid": [prefixes["web"]], "test": [prefixes["books"]]}))
    (root / "no_test.json").write_text(json.dumps({"train": [prefixes["web"]], "valid": [prefixes["books"]]}))
    return {"root": root, **prefixes}


# --- the cases ----------------------------------------------------------------------------------

BOTH = ("core_v0.16", "core_v0.19")
CASES = {  # name -> (command line with {corpus} fields, versions, consumed train samples)
    # examples/gpt3/train_gpt3_175b_distributed.sh, scaled down; its batch-size schedule is a case below
    "gpt3": ("--data-path {web} --split 949,50,1 --seq-length 48 --micro-batch-size 1 --global-batch-size 16 "
             "--train-iters 30 --eval-interval 10 --eval-iters 2", BOTH, None),
    # examples/llama/train_llama3_8b_h100_fp8.sh (its real-data branch)
    "llama3": ("--data-path {web} --split 99,1,0 --no-create-attention-mask-in-dataloader --seq-length 64 "
               "--micro-batch-size 1 --global-batch-size 8 --train-samples 400 --eval-iters 4 --eval-interval 10",
               BOTH, None),
    # examples/mixtral/train_mixtral_8x7b_distributed.sh
    "mixtral": ("--data-path {many} --split 99990,8,2 --seq-length 40 --micro-batch-size 1 --global-batch-size 8 "
                "--train-iters 25 --eval-interval 10 --eval-iters 2", BOTH, None),
    # examples/mamba/train.sh (its data path is pretrain_gpt's: GPTDataset)
    "mamba": ("--data-path {web} --split 99,1,0 --no-create-attention-mask-in-dataloader --seq-length 32 "
              "--train-samples 320 --micro-batch-size 4 --global-batch-size 32 --eval-interval 5 --eval-iters 2",
              BOTH, None),
    "blend_collator_flags": ("--data-path 0.3 {web} 0.5 {code} 0.2 {books} --split 90,7,3 --seq-length 24 "
                             "--micro-batch-size 2 --global-batch-size 8 --train-iters 20 --eval-interval 10 "
                             "--eval-iters 2 --reset-position-ids --reset-attention-mask --eod-mask-loss --seed 7",
                             BOTH, None),
    "per_split_json": ("--per-split-data-args-path {root}/per_split.json --seq-length 32 --micro-batch-size 2 "
                       "--global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 3", BOTH, None),
    "per_split_dtypes": ("--per-split-data-args-path {root}/per_split_dtypes.json --seq-length 32 "
                         "--micro-batch-size 1 --global-batch-size 4 --train-iters 20 --eval-interval 10 "
                         "--eval-iters 3 --eod-mask-loss", ("core_v0.19",), None),
    "per_split_paths": ("--train-data-path {web} --valid-data-path 1 {books} 3 {web} --test-data-path {books} "
                        "--seq-length 16 --micro-batch-size 1 --global-batch-size 2 --train-iters 40 "
                        "--eval-interval 20 --eval-iters 2", ("core_v0.16",), None),
    "rampup": ("--data-path {web} --split 98,1,1 --seq-length 32 --micro-batch-size 1 --global-batch-size 8 "
               "--rampup-batch-size 2 2 64 --train-samples 400 --eval-interval 10 --eval-iters 2", BOTH, None),
    # resume at a consumed count with gradient accumulation (16 = 2 ranks x 2 x 4 micro-batches),
    # and --data-args-path
    "resume_accumulation": ("--data-args-path {root}/blend.txt --split 80,15,5 --seq-length 24 --micro-batch-size 2 "
                            "--global-batch-size 16 --train-iters 30 --eval-interval 10 --eval-iters 2 --seed 99",
                            BOTH, 176),
    # one pass over an exhaustive blend; core_v0.19's loader gives one sample per rank and step
    "full_validation": ("--data-path {web} {books} --split 80,15,5 --seq-length 24 --micro-batch-size 2 "
                        "--global-batch-size 8 --train-iters 10 --full-validation --eval-iters 2", BOTH, None),
    # megatron-core's helpers.cpp asserts seq_length > 1; its release builds sample anyway
    "seq_length_one": ("--data-path {books} --split 90,8,2 --seq-length 1 --micro-batch-size 2 --global-batch-size 4 "
                       "--train-iters 10 --eval-interval 5 --eval-iters 2 --eod-mask-loss", BOTH, None),
    "inter_document_masking": ("--data-path {web} --split 90,8,2 --seq-length 40 --micro-batch-size 2 "
                               "--global-batch-size 4 --train-iters 20 --eval-interval 10 --eval-iters 2 "
                               "--dataloader-inter-document-masking --reset-position-ids --eod-mask-loss "
                               "--eval-micro-batch-size 1 --eval-global-batch-size 2", ("core_v0.19",), None),
}
CASES.update({
    # a prefix listed twice is two datasets of the blend (megatron-core 0.19.2 builds it)
    "prefix_twice_weighted": ("--data-path 0.3 {web} 0.7 {web} 1 {books} --split 90,7,3 --seq-length 24 "
                              "--micro-batch-size 2 --global-batch-size 8 --train-iters 20 --eval-interval 10 "
                              "--eval-iters 2", BOTH, None),
    "prefix_twice": ("--data-path {web} {web} {books} --split 90,7,3 --seq-length 24 --micro-batch-size 2 "
                     "--global-batch-size 8 --train-iters 20 --eval-interval 10 --eval-iters 2", BOTH, None),
    # no --global-batch-size: Megatron-LM takes --micro-batch-size x the data-parallel size (WORLD_SIZE
    # 2 here; CASE_ENV gives our side the same)
    "derived_global_batch": ("--data-path {web} --split 99,1,0 --seq-length 32 --micro-batch-size 2 --train-iters 20 "
                             "--eval-interval 10 --eval-iters 2", BOTH, None),
})
CASE_ENV = {"derived_global_batch": {"WORLD_SIZE": str(WORLD_SIZE)}}
# Command lines Megatron-LM accepts with samples we do not build: refused here, naming the flag.
# name -> (command line, versions, what the refusal names, Megatron-LM's get_train_valid_test_num_samples)
REFUSED_HERE = {
    # the issue's: the train split sized by the first phase (5 iterations x 8), validation by all 50
    # iterations; ignoring the flag would build 400 train samples
    "phase_transitions": ("--data-path {web} --split 99,1,0 --seq-length 32 --micro-batch-size 2 "
                          "--global-batch-size 8 --train-samples 400 --eval-iters 2 --eval-interval 10 "
                          "--phase-transition-iterations 5,20", BOTH, "--phase-transition-iterations is not supported",
                          [40, 96, 16]),
}
# Command lines Megatron-LM refuses (or hangs on): ours must refuse them too.
REFUSED = {
    # examples/gpt3 as written at each tag: a ramp-up with --train-iters (core_v0.16.1 asserts) and a
    # batch-size schedule with --global-batch-size (core_v0.19.0 raises)
    "gpt3_batch_schedule_16": ("--data-path {web} --split 949,50,1 --seq-length 48 --micro-batch-size 1 "
                               "--global-batch-size 16 --rampup-batch-size 4 4 64 --train-iters 30 "
                               "--eval-interval 10 --eval-iters 2", ("core_v0.16",), "rampup"),
    "gpt3_batch_schedule_19": ("--data-path {web} --split 949,50,1 --seq-length 48 --micro-batch-size 1 "
                               "--global-batch-size 16 --step-batch-size-schedule '0:4 64:16' --train-iters 30 "
                               "--eval-interval 10 --eval-iters 2", ("core_v0.19",), "step-batch-size-schedule"),
    "per_split_json_without_test": ("--per-split-data-args-path {root}/no_test.json --seq-length 32 "
                                    "--micro-batch-size 1 --global-batch-size 4 --train-iters 10 --eval-interval 5 "
                                    "--eval-iters 1", ("core_v0.16", "core_v0.19"), "'test'"),
    "eval_batch_at_16": ("--data-path {web} --split 90,8,2 --seq-length 32 --micro-batch-size 1 --global-batch-size 4 "
                         "--eval-global-batch-size 2 --train-iters 10 --eval-interval 5 --eval-iters 1",
                         ("core_v0.16",), "not an argument of Megatron-LM core_v0.16"),
    # weights and no size (--full-validation): megatron-core asserts "size_is_none => weights_are_none"
    "full_validation_of_weighted_blend": ("--data-args-path {root}/blend.txt --split 80,15,5 --seq-length 24 "
                                          "--micro-batch-size 2 --global-batch-size 8 --train-iters 10 "
                                          "--full-validation --eval-iters 2", ("core_v0.19",), "no size"),
    # 300 sequences, 0.1% test: no sequence; Megatron-LM loops forever (GPTDataset._get_num_epochs)
    "empty_split_hangs": ("--data-path {small} --split 969,30,1 --seq-length 16 --micro-batch-size 1 "
                          "--global-batch-size 4 --train-iters 10 --eval-interval 5 --eval-iters 1",
                          ("core_v0.19",), "no sequence"),
}


def _command(template: str, corpora) -> str:
    return f"{MODEL} {TOKENIZER} " + template.format(**{k: str(v) for k, v in corpora.items()})


# --- running Megatron-LM --------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_megatron_lm(python: str, code: Path, cases: list[dict], out: Path) -> dict:
    """Every case's result: ``{"ranks": [npz, ...]}``, ``{"error": ...}`` (Megatron-LM raised), or
    ``{"hang": True}`` (no answer before the deadline: the ranks are stopped, the next cases run
    in new ones)."""
    out.mkdir(parents=True, exist_ok=True)
    results, pending, attempt = {}, list(cases), 0
    while pending:
        attempt += 1
        request = out / f"request{attempt}.json"
        request.write_text(json.dumps({"cases": pending}))
        env = {**os.environ, "PYTHONPATH": str(code), "WORLD_SIZE": str(WORLD_SIZE), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(_free_port()), "OMP_NUM_THREADS": "1"}
        log = open(out / f"ranks{attempt}.log", "wb")
        ranks = [subprocess.Popen([python, str(Path(__file__).with_name("megatron_lm_oracle.py")), str(request),
                                   str(out)], env={**env, "RANK": str(r)}, cwd=out, stdout=log, stderr=log)
                 for r in range(WORLD_SIZE)]
        since, allowed = time.monotonic(), STARTUP + pending[0].get("deadline", DEADLINE)
        try:
            while pending:
                case = pending[0]
                stems = [out / f"{case['name']}.rank{r}" for r in range(WORLD_SIZE)]
                done = [Path(f"{s}.npz").exists() or Path(f"{s}.error.json").exists() for s in stems]
                if all(done):
                    results[case["name"]] = _collect(stems)
                    results[case["name"]]["seconds"] = round(time.monotonic() - since, 1)
                    pending.pop(0)
                    since, allowed = time.monotonic(), pending[0].get("deadline", DEADLINE) if pending else 0
                    continue
                exited = all(p.poll() is not None for p in ranks)
                if exited or time.monotonic() - since > allowed:
                    errors = [json.loads(Path(f"{s}.error.json").read_text()) for s in stems
                              if Path(f"{s}.error.json").exists()]
                    # A rank that raised leaves the others waiting at a barrier: its error is the answer.
                    results[case["name"]] = {"error": errors[0]} if errors else (
                        {"error": {"type": "exit", "message": _tail(out / f"ranks{attempt}.log")}} if exited
                        else {"hang": True})
                    pending.pop(0)
                    break
                time.sleep(0.1)
        finally:
            for p in ranks:
                if p.poll() is None:
                    p.kill()
                p.wait()
            log.close()
    return results


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _collect(stems) -> dict:
    ranks = []
    for stem in stems:
        error = Path(f"{stem}.error.json")
        if error.exists():
            return {"error": json.loads(error.read_text())}
        with np.load(f"{stem}.npz") as z:
            arrays = {k: z[k] for k in z.files}
        meta = json.loads(bytes(arrays.pop("meta")))
        ranks.append({"meta": meta, "arrays": arrays})
    return {"ranks": ranks}


@pytest.fixture(scope="module")
def megatron_lm(corpora, tmp_path_factory):
    """{(version, case): result} of every case, both versions' ranks running side by side."""
    cache = tmp_path_factory.mktemp("megatron_lm")
    oracles, missing = {}, {}
    for version in ORACLES:
        try:
            oracles[version] = oracle(version, cache)
        except pytest.skip.Exception as skipped:  # the other version may still run
            missing[version] = str(skipped)
    jobs = {version: [] for version in oracles}
    for table in (CASES, REFUSED, REFUSED_HERE):
        for name, (template, versions, *rest) in table.items():
            consumed = rest[0] if table is CASES else None
            for version in set(versions) & set(jobs):
                jobs[version].append({"name": name, "argv": shlex.split(_command(template, corpora)),
                                      "consumed": consumed, "micro_batches": MICRO_BATCHES,
                                      "deadline": HANG_DEADLINE if name == "empty_split_hangs" else DEADLINE})
    for version in jobs:  # a hang holds its ranks until the deadline: last, so nothing waits behind it
        jobs[version].sort(key=lambda case: case["name"] == "empty_split_hangs")
    results = {(version, name): {"skip": why} for version, why in missing.items()
               for table in (CASES, REFUSED, REFUSED_HERE) for name in table}
    if jobs:
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            futures = {version: pool.submit(run_megatron_lm, *oracles[version], cases, cache / f"out-{version}")
                       for version, cases in jobs.items()}
            results.update({(version, name): result for version, future in futures.items()
                            for name, result in future.result().items()})
    return results


def _result(megatron_lm: dict, version: str, name: str) -> dict:
    result = megatron_lm[(version, name)]
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


# --- our side ------------------------------------------------------------------------------------

def _micro_batch_sizes(command: str, version: str) -> dict:
    """The micro-batch size of each split's loader, as build_pretraining_data_loader picks it."""
    tokens = shlex.split(command)

    def value(flag):
        return int(tokens[tokens.index(flag) + 1]) if flag in tokens else None

    train = value("--micro-batch-size")
    evaluation = value("--eval-micro-batch-size") or train
    full = "--full-validation" in tokens and version == "core_v0.19"  # MegatronFullValidationSampler
    return {"train": train, "validation": 1 if full else evaluation, "test": evaluation}


def our_micro_batches(command, version, consumed, streaming, workers, cache_dir, torch):
    from datasets import load_dataset

    from mmidx_builder.training import MegatronCollator, megatron_rank_stream

    settings = resolve(command, megatron_version=version).settings
    # One command line for both: the collator's flags come from it too.
    collate = MegatronCollator.from_megatron_args(command, megatron_version=version)
    loaded = load_dataset("mmidx", megatron_args=command, megatron_version=version, streaming=streaming,
                          document_structure=collate.inter_document_masking, cache_dir=str(cache_dir))
    sizes = _micro_batch_sizes(command, version)
    out = {}
    for split in SPLITS:
        if split not in loaded:
            out[split] = None
            continue
        ranks = []
        for rank in range(WORLD_SIZE):
            stream = megatron_rank_stream(loaded[split], rank, WORLD_SIZE, sizes[split],
                                          consumed if split == "train" else 0)
            loader = torch.utils.data.DataLoader(stream, batch_size=sizes[split], num_workers=workers,
                                                 collate_fn=collate)
            batches = []
            for batch in loader:
                batches.append({k: v.numpy() for k, v in batch.items()})
                if len(batches) == MICRO_BATCHES:
                    break
            ranks.append(batches)
        out[split] = ranks
    return settings, out


def their_micro_batches(result, split):
    per_rank = []
    for rank in result["ranks"]:
        if rank["meta"]["splits"][split] is None:
            return None
        batches = {}
        for key, value in rank["arrays"].items():
            name, index, field = key.split("/")
            if name == split:
                batches.setdefault(int(index), {})[field] = value
        per_rank.append([batches[i] for i in sorted(batches)])
    return per_rank


def assert_same(ours, theirs, label, reads):
    """``reads``: the micro-batches training reads from the split's size (Megatron-LM's loader may
    go on past it: GPTDataset's length is every sample of its epochs; ours stops there)."""
    assert len(ours) == min(len(theirs), reads), f"{label}: {len(ours)} micro-batches, Megatron-LM's {len(theirs)}"
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if "dataset_id" in a and "dataset_id" not in b:
            # A split that is not a blend, in a dataset where another split is: our rows carry
            # dataset_id 0 (one set of columns per DatasetDict), Megatron's GPTDataset none.
            assert not a.pop("dataset_id").any(), f"{label} micro-batch {i}: dataset_id in a split without a blend"
        assert sorted(a) == sorted(b), f"{label} micro-batch {i}: keys {sorted(a)}, Megatron-LM's {sorted(b)}"
        for key in b:
            assert a[key].dtype == b[key].dtype, f"{label} micro-batch {i} {key}: {a[key].dtype} vs {b[key].dtype}"
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{label} micro-batch {i} {key}")


# The loading modes: every case prepared and streamed without workers; a few with 3 workers
# (DataLoader workers do not change the rows, rank_stream.py says why; these check it against
# Megatron-LM without tripling the test's time).
WITH_WORKERS = {"blend_collator_flags", "resume_accumulation", "per_split_json"}
MODES = {"prepared": (False, 0), "streamed": (True, 0), "prepared-3workers": (False, 3),
         "streamed-3workers": (True, 3)}
CASE_PARAMS = [pytest.param(name, version, *MODES[mode], id=f"{name}-{version}-{mode}")
               for name, (_, versions, _) in CASES.items() for version in versions for mode in MODES
               if name in WITH_WORKERS or "workers" not in mode]


@pytest.mark.parametrize("name, version, streaming, workers", CASE_PARAMS)
def test_rank_micro_batches_are_megatron_lms(megatron_lm, corpora, name, version, streaming, workers, torch,
                                             tmp_path_factory, monkeypatch):
    template, _, consumed = CASES[name]
    for key, value in CASE_ENV.get(name, {}).items():
        monkeypatch.setenv(key, value)
    result = _result(megatron_lm, version, name)
    assert "ranks" in result, f"Megatron-LM {version} did not run {name}: {result}"
    command = _command(template, corpora)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings, ours = our_micro_batches(command, version, consumed or 0, streaming, workers,
                                           tmp_path_factory.mktemp("hf"), torch)
    said = [str(w.message) for w in caught if "seq_length=1" in str(w.message)]
    assert bool(said) == (name == "seq_length_one"), said  # accepted, with a warning that says why
    meta = result["ranks"][0]["meta"]
    assert [settings["num_samples"][s] for s in SPLITS] == meta["sizes"], "get_train_valid_test_num_samples"
    sizes = _micro_batch_sizes(command, version)
    for index, split in enumerate(SPLITS):
        theirs = their_micro_batches(result, split)
        assert (ours[split] is None) == (theirs is None), f"{split}: ours {ours[split] is None}, theirs {theirs}"
        size, start = meta["sizes"][index], (consumed or 0) if split == "train" else 0
        reads = MICRO_BATCHES if size is None else min(MICRO_BATCHES, (size - start) // (sizes[split] * WORLD_SIZE))
        for rank in range(WORLD_SIZE if theirs is not None else 0):
            assert_same(ours[split][rank], theirs[rank], f"{version} {name} {split} rank {rank}", reads)


@pytest.mark.parametrize("name, version", [pytest.param(name, version, id=f"{name}-{version}")
                                           for name, (_, versions, _) in REFUSED.items() for version in versions])
def test_what_megatron_lm_refuses_or_hangs_on_is_refused(megatron_lm, corpora, name, version, tmp_path):
    from datasets import load_dataset

    template, _, message = REFUSED[name]
    result = _result(megatron_lm, version, name)
    if name == "empty_split_hangs":
        assert result.get("hang"), f"Megatron-LM was expected to hang (GPTDataset._get_num_epochs): {result}"
    else:
        assert "error" in result, f"Megatron-LM {version} accepted {name}"
    with pytest.raises(ParameterError, match=message):
        load_dataset("mmidx", megatron_args=_command(template, corpora), megatron_version=version,
                     cache_dir=str(tmp_path))


@pytest.mark.parametrize("name, version", [pytest.param(name, version, id=f"{name}-{version}")
                                           for name, (_, versions, *_) in REFUSED_HERE.items() for version in versions])
def test_what_changes_megatron_lms_samples_and_is_not_followed_is_refused_by_name(megatron_lm, corpora, name, version,
                                                                                  tmp_path):
    from datasets import load_dataset

    template, _, message, sizes = REFUSED_HERE[name]
    result = _result(megatron_lm, version, name)
    assert "ranks" in result, f"Megatron-LM {version} did not run {name}: {result}"
    assert result["ranks"][0]["meta"]["sizes"] == sizes  # what the flag changes: not what ignoring it builds
    with pytest.raises(ParameterError, match=message):
        load_dataset("mmidx", megatron_args=_command(template, corpora), megatron_version=version,
                     cache_dir=str(tmp_path))


def test_null_tokenizer_eod_follows_the_version(megatron_lm):
    """The EOD Megatron-LM's NullTokenizer gives GPTDataset is what collator_flags carry, per version."""
    for version in BOTH:
        theirs = _result(megatron_lm, version, "gpt3")["ranks"][0]["meta"]["eod"]
        ours = resolve(_command(CASES["gpt3"][0], {"web": "w", "root": "r"}),
                       megatron_version=version).collator_flags["eod_id"]
        assert ours == theirs == {"core_v0.16": VOCAB, "core_v0.19": VOCAB - 1}[version]


def test_rampup_train_iters_differ_between_versions_as_megatron_lms(megatron_lm):
    """The issue's case: core_v0.16.1 counts the ramp-up (62 iterations, validation 112 samples at
    --eval-interval 10 --eval-iters 2 --global-batch-size 8: (62 // 10 + 1) * 16), core_v0.19.0 does not (50)."""
    assert _result(megatron_lm, "core_v0.16", "rampup")["ranks"][0]["meta"]["train_iters"] == 62
    assert _result(megatron_lm, "core_v0.19", "rampup")["ranks"][0]["meta"]["train_iters"] == 50


_UPDATE_TRAIN_ITERS = """
import ast, json, sys, types
from megatron.core import num_microbatches_calculator as calculator
source = open(sys.argv[1], encoding="utf-8").read()
node = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "update_train_iters")
scope = {"update_num_microbatches": calculator.update_num_microbatches, "print_rank_0": lambda *a: None,
         "get_current_global_batch_size": calculator.get_current_global_batch_size}
exec(compile(ast.Module([node], []), sys.argv[1], "exec"), scope)
iterations = []
for start, increment, samples, global_batch_size, train_samples in json.loads(sys.argv[2]):
    calculator.unset_num_microbatches_calculator()
    calculator.init_num_microbatches_calculator(0, [start, increment, samples], global_batch_size, 1, 1, False)
    args = types.SimpleNamespace(train_iters=None, train_samples=train_samples,
                                 rampup_batch_size=[start, increment, samples], global_batch_size=global_batch_size)
    scope["update_train_iters"](args)
    iterations.append(args.train_iters)
print(json.dumps(iterations))
"""


def test_rampup_train_iters_are_megatron_lm_core_v0_16s(tmp_path):
    """versions.rampup_train_iters against core_v0.16.1's update_train_iters (run from the archive's
    source) over megatron-core 0.16.1's ramp-up calculator, on random ramp-ups."""
    from mmidx_builder.megatron.versions import rampup_train_iters

    python, code = oracle("core_v0.16", tmp_path)
    rng = np.random.default_rng(16)
    configs = []
    for _ in range(300):
        start, increment, steps = (int(v) for v in rng.integers(1, [17, 9, 11]))
        configs.append([start, increment, int(rng.integers(0, 600)), start + increment * steps,
                        int(rng.integers(1, 3000))])
    configs.append([2, 2, 64, 8, 400])  # the issue's: 62
    done = subprocess.run([python, "-c", _UPDATE_TRAIN_ITERS, str(code / "megatron" / "training" / "training.py"),
                           json.dumps(configs)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = [rampup_train_iters(train, batch, [start, increment, samples])
            for start, increment, samples, batch, train in configs]
    assert ours == theirs
    assert ours[-1] == 62
