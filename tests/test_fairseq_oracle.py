"""fairseq itself as the differential oracle of the fairseq pairs and their batches.

One subprocess per module runs tests/fairseq_oracle.py under fairseq's own venv (the
``fairseq_python`` fixture): ``fairseq-preprocess`` binarizes text written here (a training
split of three shards, validation and test splits), fairseq's ``TranslationTask`` loads it,
and ``task.get_batch_iterator(...).next_epoch_itr(shuffle=True)`` serves batches for several
epochs. The rows and batches must be fairseq's, id for id and in fairseq's order; our side
reads the same data-bin with our own reader.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import numpy as np
import pytest

from mmidx_builder.errors import ParameterError
from mmidx_builder.fairseq import LanguagePairs, batch_by_size, find_language_pairs, max_tokens_batches

pytestmark = pytest.mark.fairseq

ORACLE = os.path.join(os.path.dirname(__file__), "fairseq_oracle.py")
WORDS = [f"w{i}" for i in range(400)]
SHARDS = {"train": 700, "train1": 150, "train2": 40, "valid": 60, "test": 50}

# What fairseq loads: (split, source, target, upsample_primary, return every item).
DATASETS = [
    ("train", "de", "en", 1, False),
    ("train", "de", "en", 3, True),    # train repeated 3 times, then train1 and train2
    ("train", "en", "de", 1, True),    # the reverse direction of de-en files
    ("valid", "de", "en", 1, True),
    ("test", "de", "en", 1, False),    # TranslationTask does not shuffle the test split
]


def _case(name, dataset=0, epochs=3, version="0.12.3.1", shuffle=True, **kwargs):
    return {"id": name, "dataset": dataset, "epochs": epochs, "fairseq_version": version, "shuffle": shuffle,
            "kwargs": kwargs}


CASES = [
    _case(f"tokens{t}-multiple{m}-sentences{s}", max_tokens=t, required_batch_size_multiple=m, max_sentences=s)
    for t in (256, 1000, 4096) for m in (1, 3, 8) for s in (None, 10)
] + [
    _case("sentences-only", max_sentences=16, required_batch_size_multiple=8),
    _case("multiple-above-max-sentences", max_tokens=1000, max_sentences=5, required_batch_size_multiple=8),
    _case("upsampled-shards", dataset=1, max_tokens=1000, required_batch_size_multiple=8),
    _case("upsampled-shards-sentences", dataset=1, max_tokens=4096, max_sentences=32),
    _case("reversed", dataset=2, max_tokens=1000, required_batch_size_multiple=8),
    _case("reversed-sentences", dataset=2, max_tokens=256, max_sentences=7),
    _case("valid", dataset=3, max_tokens=256, required_batch_size_multiple=8),
    _case("test-split-unshuffled", dataset=4, shuffle=False, max_tokens=1000, required_batch_size_multiple=8),
    _case("seed-7", max_tokens=1000, required_batch_size_multiple=8, seed=7),
    _case("resumed-at-epoch-3", max_tokens=1000, required_batch_size_multiple=8, epoch=3),
    _case("max-positions-pair-skipped", max_tokens=128, required_batch_size_multiple=8,
          max_positions=[60, 80], ignore_invalid_inputs=True),
    _case("max-positions-number-skipped", max_tokens=256, required_batch_size_multiple=3,
          max_positions=100, ignore_invalid_inputs=True),
    _case("max-positions-all-fit", max_tokens=1000, required_batch_size_multiple=8,
          max_positions=[1024, 1024], ignore_invalid_inputs=False),
    _case("release-tokens1000-multiple8", version="0.12.2", max_tokens=1000, required_batch_size_multiple=8),
    _case("release-tokens256-multiple3-sentences10", version="0.12.2", max_tokens=256,
          required_batch_size_multiple=3, max_sentences=10),
    _case("release-upsampled-shards", dataset=1, version="0.12.2", max_tokens=1000, required_batch_size_multiple=8),
    _case("release-max-positions-skipped", version="0.12.2", max_tokens=128, required_batch_size_multiple=8,
          max_positions=[60, 80], ignore_invalid_inputs=True),
    _case("release-resumed-at-epoch-2", version="0.12.2", max_tokens=1000, required_batch_size_multiple=8, epoch=2),
]
# Data-parallel ranks (get_batch_iterator(num_shards=, shard_id=)): every rank of each
# configuration, so the tests can check that the ranks' batches add up to the whole.
SHARDED = {
    "shards2": dict(num_shards=2, max_tokens=1000, required_batch_size_multiple=8),
    "shards3": dict(num_shards=3, max_tokens=1000, required_batch_size_multiple=8),
    "shards5-sentences": dict(num_shards=5, max_tokens=4096, max_sentences=10),
    "shards8-tokens256": dict(num_shards=8, max_tokens=256, required_batch_size_multiple=3),
    "shards3-grouped": dict(num_shards=3, max_tokens=1000, required_batch_size_multiple=8, grouped_shuffling=True),
    "shards4-grouped-sentences": dict(num_shards=4, max_tokens=4096, max_sentences=7, grouped_shuffling=True),
    "shards4-upsampled": dict(dataset=1, num_shards=4, max_tokens=1000, required_batch_size_multiple=8),
    "shards3-test-unshuffled": dict(dataset=4, shuffle=False, num_shards=3, max_tokens=1000),
    "shards6-valid-few-batches": dict(dataset=3, num_shards=6, max_tokens=4096),   # more ranks than batches
    "shards4-resumed": dict(num_shards=4, max_tokens=1000, required_batch_size_multiple=8, epoch=3),
    "shards3-release": dict(version="0.12.2", num_shards=3, max_tokens=1000, required_batch_size_multiple=8),
}


def _sharded_cases():
    cases = []
    for name, settings in SHARDED.items():
        settings = dict(settings)
        common = {key: settings.pop(key) for key in ("dataset", "version", "shuffle") if key in settings}
        for rank in range(settings["num_shards"]):
            cases.append(_case(f"{name}-rank{rank}", epochs=2, shard_id=rank, **common, **settings))
    return cases


CASES += _sharded_cases()
REFUSED = [
    _case("max-positions-refused", epochs=1, max_tokens=1000, required_batch_size_multiple=8,
          max_positions=[60, 80], ignore_invalid_inputs=False),
    _case("max-tokens-below-a-pair", epochs=1, max_tokens=100),
]


def _text(rng, count):
    """Long-tailed sentence lengths, as in real corpora: most short, a few of hundreds of
    words, some empty; targets roughly as long as their sources; Zipf-like word counts."""
    source_lengths = np.minimum(rng.pareto(1.6, count) * 8, 240).astype(int)
    target_lengths = np.minimum(source_lengths * rng.lognormal(0, 0.25, count) + rng.integers(0, 3, count),
                                240).astype(int)
    source_lengths[rng.integers(0, count, max(1, count // 40))] = 0
    weights = 1 / np.arange(1, len(WORDS) + 1)
    weights /= weights.sum()

    def line(n):
        return " ".join(rng.choice(WORDS, n, p=weights)) + "\n"

    return [line(n) for n in source_lengths], [line(n) for n in target_lengths]


def _vectors(rng, count):
    """Token-count vectors and limits for batch_by_size, sizes awkward on purpose."""
    vectors = []
    for k in range(count):
        n = int(rng.integers(1, 80))
        tokens = rng.integers(1, rng.choice([3, 12, 50]), n)
        if k % 3 == 0:
            tokens = np.sort(tokens)  # the usual case: ordered by length
        max_tokens = None if k % 11 == 0 else int(tokens.max() + rng.integers(0, 3 * tokens.max()))
        max_sentences = None if k % 2 else int(rng.integers(1, 20))
        if max_tokens is None and max_sentences is None and k % 4 == 0:
            max_sentences = 6
        vectors.append({"indices": (rng.permutation(n) * 7 + 3).tolist(), "num_tokens": tokens.tolist(),
                        "max_tokens": max_tokens, "max_sentences": max_sentences,
                        "multiple": int(rng.choice([1, 1, 2, 3, 8, 16]))})
    return vectors


@pytest.fixture(scope="module")
def fairseq(fairseq_python, tmp_path_factory):
    root = tmp_path_factory.mktemp("fairseq-oracle")
    rng = np.random.default_rng(2024)
    (root / "text").mkdir()
    for shard, count in SHARDS.items():
        for lang, lines in zip(("de", "en"), _text(rng, count)):
            (root / "text" / f"{shard}.{lang}").write_text("".join(lines), encoding="utf-8")
    data_bin = str(root / "data-bin")
    text = str(root / "text")
    corpus = {"src": "de", "tgt": "en", "dest": data_bin, "train": f"{text}/train", "valid": f"{text}/valid",
              "test": f"{text}/test", "extra_train": [f"{text}/train1", f"{text}/train2"]}
    datasets = [{"data_bin": data_bin, "split": split, "src": src, "tgt": tgt, "upsample_primary": upsample,
                 "items": items} for split, src, tgt, upsample, items in DATASETS]
    vectors = _vectors(rng, 400)
    request = {"corpora": [corpus], "datasets": datasets, "iterators": CASES + REFUSED, "vectors": vectors}
    (root / "request.json").write_text(json.dumps(request))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([fairseq_python, ORACLE, str(root / "request.json"), str(root / "response.json")],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"the fairseq oracle failed ({fairseq_python}):\n{done.stderr[-4000:]}")
    response = json.loads((root / "response.json").read_text())
    response["iterators"] = {case["id"]: result for case, result in zip(CASES + REFUSED, response["iterators"])}
    response["vectors"] = list(zip(vectors, response["vectors"]))
    response["data_bin"] = data_bin
    return response


def _pairs(data_bin, split, src, tgt, upsample):
    return LanguagePairs.open(find_language_pairs(data_bin, src, tgt)[split], upsample_primary=upsample)


def _ours(fairseq, case, epoch):
    split, src, tgt, upsample, _ = DATASETS[case["dataset"]]
    pairs = _pairs(fairseq["data_bin"], split, src, tgt, upsample)
    kwargs = dict(case["kwargs"])
    start = kwargs.pop("epoch", 1)
    if isinstance(kwargs.get("max_positions"), list):
        kwargs["max_positions"] = tuple(kwargs["max_positions"])
    return max_tokens_batches(pairs.source_sizes, pairs.target_sizes, kwargs.pop("max_tokens", None),
                              seed=kwargs.pop("seed", 1), epoch=epoch, start_epoch=start, shuffle=case["shuffle"],
                              fairseq_version=case["fairseq_version"], **kwargs)


def test_pairs_have_fairseqs_sizes(fairseq):
    for (split, src, tgt, upsample, _), theirs in zip(DATASETS, fairseq["datasets"]):
        pairs = _pairs(fairseq["data_bin"], split, src, tgt, upsample)
        assert pairs.source_sizes.tolist() == theirs["src_sizes"], (split, src, upsample)
        assert pairs.target_sizes.tolist() == theirs["tgt_sizes"], (split, src, upsample)
    assert max(fairseq["datasets"][0]["src_sizes"]) > 200  # the long tail is there


def test_load_dataset_rows_are_fairseqs_items(fairseq, tmp_path):
    from datasets import load_dataset

    items = {(split, src, upsample): d["items"] for (split, src, _, upsample, wanted), d
             in zip(DATASETS, fairseq["datasets"]) if wanted}
    cache = str(tmp_path / "hf-cache")
    ds = load_dataset(fairseq["data_bin"], upsample_primary=3, cache_dir=cache)
    reversed_train = load_dataset(fairseq["data_bin"], source_lang="en", target_lang="de", cache_dir=cache,
                                  split="train")
    for rows, expected in ((ds["train"], items["train", "de", 3]), (ds["validation"], items["valid", "de", 1]),
                           (reversed_train, items["train", "en", 1])):
        assert rows.num_rows == len(expected)
        assert rows["id"][:] == list(range(len(expected)))
        assert [[r["source"], r["target"]] for r in rows] == expected


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_batches_are_fairseqs_epoch_after_epoch(fairseq, case):
    theirs = fairseq["iterators"][case["id"]]
    assert "error" not in theirs, theirs
    start = case["kwargs"].get("epoch", 1)
    for k, epoch in enumerate(theirs["epochs"]):
        assert epoch["epoch"] == start + k
        # The loader served the sampler's batches (the harness reads the right thing).
        assert epoch["served"] == [sorted(b) for b in epoch["batches"]]
        ours = [b.tolist() for b in _ours(fairseq, case, epoch["epoch"])]
        assert len(ours) == len(epoch["batches"]), f"epoch {epoch['epoch']}"
        assert ours == epoch["batches"], f"epoch {epoch['epoch']}"
    # Not vacuous: fairseq reorders the batches between epochs (except unshuffled).
    first, second = theirs["epochs"][0]["batches"], theirs["epochs"][1]["batches"]
    if "num_shards" not in case["kwargs"]:
        assert (first == second) == (not case["shuffle"])


@pytest.mark.parametrize("name", sorted(SHARDED))
def test_ranks_run_equal_steps_and_share_out_every_batch(fairseq, name):
    """fairseq pads a short rank with empty batches; the ranks' batches are the unsharded
    ones, dealt out in turn; and ours are theirs (checked batch by batch above)."""
    ranks = [fairseq["iterators"][f"{name}-rank{r}"] for r in range(SHARDED[name]["num_shards"])]
    for k in range(2):
        per_rank = [rank["epochs"][k]["batches"] for rank in ranks]
        assert len({len(batches) for batches in per_rank}) == 1, "every rank runs the same number of steps"
        dealt = [b for step in zip(*per_rank) for b in step if b]
        settings = {key: value for key, value in SHARDED[name].items() if key != "num_shards"}
        common = {key: settings.pop(key) for key in ("dataset", "version", "shuffle") if key in settings}
        case = _case(name, **common, **settings)
        whole = [b.tolist() for b in _ours(fairseq, case, ranks[0]["epochs"][k]["epoch"])]
        if not settings.get("grouped_shuffling"):
            assert dealt == whole
        else:   # whole groups of num_shards batches only: the rest of the epoch is left out
            frozen = {tuple(sorted(b)) for b in whole}
            assert all(tuple(sorted(b)) in frozen for b in dealt)
            assert len(dealt) == len(whole) // len(ranks) * len(ranks)


def test_some_rank_needed_padding(fairseq):
    """The padding is exercised: several configurations leave some rank one batch short."""
    padded = {case["id"].rsplit("-rank", 1)[0] for case in CASES if "num_shards" in case["kwargs"]
              if [] in fairseq["iterators"][case["id"]]["epochs"][0]["batches"]}
    assert len(padded) >= 5, padded


def test_a_pair_beyond_max_positions_is_refused_as_fairseq_refuses(fairseq):
    case = REFUSED[0]
    theirs = fairseq["iterators"][case["id"]]
    assert "Size of sample" in theirs.get("error", ""), theirs
    first = int(re.search(r"sample #(\d+)", theirs["error"]).group(1))
    with pytest.raises(ParameterError, match=rf"pair {first} has .* max_positions=\(60, 80\)"):
        _ours(fairseq, case, 1)


def test_a_pair_beyond_max_tokens_is_refused(fairseq):
    case = REFUSED[1]
    theirs = fairseq["iterators"][case["id"]]
    assert theirs.get("type") == "AssertionError" and "max_tokens" in theirs["error"], theirs
    with pytest.raises(ParameterError, match="max_tokens=100"):
        _ours(fairseq, case, 1)


def test_batch_by_size_is_fairseqs_on_awkward_vectors(fairseq):
    dropped = kept = 0
    for vector, theirs in fairseq["vectors"]:
        args = (vector["indices"], vector["num_tokens"], vector["max_tokens"], vector["max_sentences"],
                vector["multiple"])
        for version in ("0.12.2", "0.12.3.1"):
            ours = [b.tolist() for b in batch_by_size(*args, fairseq_version=version)]
            assert ours == theirs[version], (version, vector)
        dropped += len(theirs["0.12.3.1"]) < len(theirs["0.12.2"])
        kept += len(theirs["0.12.3.1"]) == len(theirs["0.12.2"])
    assert dropped > 20 and kept > 20  # both sides of the version difference were exercised
