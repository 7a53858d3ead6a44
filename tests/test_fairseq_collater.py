"""fairseq's ``load_langpair_dataset`` item options and ``LanguagePairDataset.collater``
against ours: the pairs, their sizes and the collated batches must be fairseq's.

fairseq-preprocess binarizes text written here (tests/fairseq_oracle.py, in fairseq's venv),
with words that land on special ids inside sentences (``</s>`` = EOS, ``<pad>`` = pad,
``<s>`` = BOS) so that stripping, truncation and length counting meet them, and ``[de]`` in
the German text but no ``[en]`` in the English (``append_source_id`` then appends ``<unk>``
to targets, as fairseq does). Then ``load_langpair_dataset`` loads the training split (three
shards, the first upsampled) under each set of options and collates chosen batches.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from mmidx_builder.errors import ParameterError
from mmidx_builder.fairseq import Dictionary, LanguagePairs, find_language_pairs
from mmidx_builder.training import FairseqCollater

pytestmark = pytest.mark.fairseq

ORACLE = os.path.join(os.path.dirname(__file__), "fairseq_oracle.py")
SPECIAL_WORDS = ["</s>", "<pad>", "<s>"]

# name -> (load_langpair_dataset keywords, upsample_primary)
OPTIONS = {
    "defaults": ({}, 1),
    "prepend-bos": ({"prepend_bos": True}, 1),
    "truncate-source": ({"truncate_source": True, "max_source_positions": 8}, 2),
    "truncate-source-1": ({"truncate_source": True, "max_source_positions": 1}, 1),
    "append-source-id": ({"append_source_id": True}, 1),
    "all-three": ({"prepend_bos": True, "truncate_source": True, "max_source_positions": 6,
                   "append_source_id": True}, 3),
    "right-pad-source-left-pad-target": ({"left_pad_source": False, "left_pad_target": True}, 1),
    "pad-to-multiple-8": ({"pad_to_multiple": 8, "prepend_bos": True}, 1),
}
COLLATER_OPTIONS = ("left_pad_source", "left_pad_target", "pad_to_multiple")


def _text(rng, count, words, *, lang_tag=None):
    lines = []
    for k in range(count):
        n = int(rng.integers(0, 14)) if k % 9 else 0
        line = list(rng.choice(words, n))
        if n and rng.random() < 0.3:   # a special word at either end or inside
            line.insert(int(rng.choice([0, n, n // 2])), str(rng.choice(SPECIAL_WORDS)))
        if lang_tag and rng.random() < 0.2:
            line.append(lang_tag)
        lines.append(" ".join(line) + "\n")
    return "".join(lines)


def _batches(rng, n):
    batches = [rng.choice(n, 40, replace=False).tolist() for _ in range(4)]   # ties in length, surely
    return batches + [[int(rng.integers(n))], [], list(range(min(n, 25)))]


@pytest.fixture(scope="module")
def fairseq(fairseq_python, tmp_path_factory):
    root = tmp_path_factory.mktemp("fairseq-collater")
    rng = np.random.default_rng(9)
    words = [f"w{i}" for i in range(60)]
    text = root / "text"
    text.mkdir()
    for shard, count in (("train", 90), ("train1", 30), ("train2", 12)):
        (text / f"{shard}.de").write_text(_text(rng, count, words, lang_tag="[de]"), encoding="utf-8")
        (text / f"{shard}.en").write_text(_text(rng, count, words), encoding="utf-8")
    data_bin = str(root / "data-bin")
    corpus = {"src": "de", "tgt": "en", "dest": data_bin, "train": f"{text}/train",
              "extra_train": [f"{text}/train1", f"{text}/train2"]}
    total = {1: 132, 2: 222, 3: 312}
    specs, batches = [], {}
    for name, (options, upsample) in OPTIONS.items():
        batches[name] = _batches(rng, total[upsample])
        specs.append({"data_bin": data_bin, "split": "train", "src": "de", "tgt": "en", "upsample_primary": upsample,
                      "options": options, "batches": batches[name]})
    request = root / "request.json"
    request.write_text(json.dumps({"corpora": [corpus], "langpairs": specs}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([fairseq_python, ORACLE, str(request), str(root / "response.json")],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"the fairseq oracle failed ({fairseq_python}):\n{done.stderr[-4000:]}")
    response = json.loads((root / "response.json").read_text())
    return {"data_bin": data_bin, "batches": batches, "results": dict(zip(OPTIONS, response["langpairs"]))}


def _pairs(data_bin, name):
    options, upsample = OPTIONS[name]
    items = {k: v for k, v in options.items() if k not in COLLATER_OPTIONS}
    dictionaries = tuple(Dictionary.load(os.path.join(data_bin, f"dict.{lang}.txt")) for lang in ("de", "en"))
    return LanguagePairs.open(find_language_pairs(data_bin, "de", "en")["train"], upsample_primary=upsample,
                              dictionaries=dictionaries, **items)


@pytest.mark.parametrize("name", list(OPTIONS))
def test_items_and_sizes_are_fairseqs(fairseq, name):
    theirs = fairseq["results"][name]
    pairs = _pairs(fairseq["data_bin"], name)
    assert pairs.source_sizes.tolist() == theirs["src_sizes"]
    assert pairs.target_sizes.tolist() == theirs["tgt_sizes"]
    ours = [[s.tolist(), t.tolist()] for s, t in (pairs[i] for i in range(len(pairs)))]
    assert ours == theirs["items"]


def test_the_options_met_their_edge_cases(fairseq):
    """Not vacuous: fairseq's truncation sizes differ from item lengths somewhere (an EOS
    word stripped with the final EOS), and [en] is <unk> while [de] is a real id."""
    theirs = fairseq["results"]["truncate-source"]
    assert any(size != len(item[0]) for size, item in zip(theirs["src_sizes"], theirs["items"]))
    tagged = fairseq["results"]["append-source-id"]["items"]
    assert {item[1][-1] for item in tagged} == {3} and len({item[0][-1] for item in tagged}) == 1
    assert tagged[0][0][-1] > 3


@pytest.mark.parametrize("name", list(OPTIONS))
def test_collated_batches_are_fairseqs(fairseq, name, torch):
    theirs = fairseq["results"][name]["collated"]
    pairs = _pairs(fairseq["data_bin"], name)
    collate = pairs.collater(**{k: v for k, v in OPTIONS[name][0].items() if k in COLLATER_OPTIONS})
    for batch, expected in zip(fairseq["batches"][name], theirs):
        rows = [{"id": i, "source": pairs[i][0], "target": pairs[i][1]} for i in batch]
        got = collate(rows)
        if not batch:
            assert got == expected == {}
            continue
        assert got["id"].tolist() == expected["id"]
        assert (got["nsentences"], got["ntokens"]) == (expected["nsentences"], expected["ntokens"])
        assert got["target"].tolist() == expected["target"]
        for key in ("src_tokens", "src_lengths", "prev_output_tokens"):
            assert got["net_input"][key].tolist() == expected["net_input"][key], key
            assert got["net_input"][key].dtype == torch.int64


def test_rows_of_load_dataset_follow_the_options(fairseq, tmp_path):
    from datasets import load_dataset

    ds = load_dataset(fairseq["data_bin"], split="train", upsample_primary=3, prepend_bos=True,
                      truncate_source=True, max_source_positions=6, append_source_id=True,
                      cache_dir=str(tmp_path / "cache"))
    expected = fairseq["results"]["all-three"]["items"]
    assert [[r["source"], r["target"]] for r in ds] == expected
    # The collater takes datasets rows, or a dict of columns (ds[batch]).
    batch = fairseq["batches"]["all-three"][0]
    collate = _pairs(fairseq["data_bin"], "all-three").collater()
    got = collate(ds[batch])
    assert got["net_input"]["src_tokens"].tolist() == fairseq["results"]["all-three"]["collated"][0]["net_input"][
        "src_tokens"]


def test_append_source_id_without_dictionaries_is_refused(fairseq):
    with pytest.raises(ParameterError, match="append_source_id needs"):
        LanguagePairs.open(find_language_pairs(fairseq["data_bin"], "de", "en")["train"], append_source_id=True)


def test_collater_refuses_a_bad_pad_to_multiple(torch):
    with pytest.raises(ParameterError, match="pad_to_multiple"):
        FairseqCollater(pad_to_multiple=0)
