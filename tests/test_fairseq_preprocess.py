"""``mmidx fairseq-preprocess`` against fairseq-preprocess itself.

The text is written here, awkward on purpose: Unicode whitespace inside lines (no-break
space, U+2028, U+0085, form feed, information separators), CRLF and lone CR line ends, blank
and whitespace-only lines, a last line without its line end, a byte-order mark, words that
spell fairseq's special symbols and its made-up padding words, ties in counts, non-ASCII
words. fairseq-preprocess (tests/fairseq_oracle.py, in fairseq's venv) and ours write a
data-bin each from the same files and flags; every file but fairseq's preprocess.log must
be equal, byte for byte.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from mmidx_builder.cli import main as mmidx
from mmidx_builder.errors import ConvertError, ParameterError
from mmidx_builder.fairseq import LanguagePairs, find_language_pairs
from mmidx_builder.fairseq import preprocess as fairseq_preprocess
from mmidx_builder.fairseq.preprocess import build_dictionary, decode_lines, preprocess, text_chunks

ORACLE = os.path.join(os.path.dirname(__file__), "fairseq_oracle.py")
ODD_SPACES = ["\u00a0", "\u2028", "\u0085", "\x0c", "\x1c", "\x1f", "\u3000", "\t", "\x0b", "  "]
ODD_WORDS = ["<unk>", "</s>", "<pad>", "<s>", "madeupword0001", "Ärger", "\u2581cat", "日本", "a", "B", "b", "ß"]


def _line(rng, vocab, n):
    words = [vocab[int(i)] for i in np.minimum(rng.zipf(1.3, n) - 1, len(vocab) - 1)]
    out = ""
    for word in words:
        out += word + (rng.choice(ODD_SPACES) if rng.random() < 0.15 else " ")
    return out


def _text(rng, count, vocab, *, last_newline=True):
    ends = ["\n"] * 8 + ["\r\n", "\r"]
    lines = []
    for k in range(count):
        n = int(rng.integers(0, 30))
        body = "" if k % 17 == 3 else (" \t " if k % 19 == 5 else _line(rng, vocab, n))
        if not body and lines and lines[-1].endswith("\r"):
            body = "."   # "\r" then an empty "\n" line would be one "\r\n" line end
        lines.append(body + ends[int(rng.integers(0, len(ends)))])
    text = "".join(lines)
    if not last_newline:
        text = text.rstrip("\r\n")
    return text


def _write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:   # line ends exactly as given
        f.write(text)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Text for de-en: train (three shards and their concatenation), valid, valid1, test,
    and a large-vocabulary pair (over 65,500 words: uint32 ids)."""
    root = tmp_path_factory.mktemp("fairseq-text")
    rng = np.random.default_rng(23)
    vocab = {"de": ODD_WORDS + [f"wort{i}" for i in range(300)], "en": ODD_WORDS[:6] + [f"word{i}" for i in range(200)]}
    for lang in ("de", "en"):
        shards = [_text(rng, n, vocab[lang]) for n in (400, 120, 45)]
        shards[0] = "\ufeff" + shards[0]            # a byte-order mark: part of the first word
        for k, text in enumerate(shards):
            _write(root / f"part{k}.{lang}", text)
        _write(root / f"train.{lang}", "".join(shards))
        _write(root / f"valid.{lang}", _text(rng, 70, vocab[lang] + ["unseen1", "unseen2"], last_newline=False))
        _write(root / f"valid1.{lang}", _text(rng, 15, vocab[lang]))
        _write(root / f"test.{lang}", _text(rng, 33, vocab[lang]))
        _write(root / f"empty.{lang}", "")
        for name in ("train", "valid", "valid1", "test"):   # the same text with \n line ends only
            text = (root / f"{name}.{lang}").read_bytes().decode("utf-8")
            _write(root / f"lf-{name}.{lang}", text.replace("\r\n", "\n").replace("\r", "\n"))
        big = [f"{lang}{i}" for i in range(66_000)]
        _write(root / f"big.{lang}", "".join(" ".join(big[i:i + 50]) + "\n" for i in range(0, len(big), 50)))
    return root


def _flags(root, **extra):
    flags = ["--source-lang", "de", "--target-lang", "en", "--trainpref", f"{root}/train",
             "--validpref", f"{root}/valid,{root}/valid1", "--testpref", f"{root}/test"]
    for name, value in extra.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is None:   # drop a default flag
            i = flags.index(flag)
            del flags[i:i + 2]
        elif flag in flags:
            flags[flags.index(flag) + 1] = str(value)
        else:
            flags += [flag, str(value)]
    return flags


# name -> flags (destdir added per side); dictionaries named as @config point at that
# config's output, written first.
CONFIGS = {
    "defaults": dict(),
    "thresholds-nwords": dict(thresholdsrc=3, thresholdtgt=2, nwordssrc=40, nwordstgt=25),
    "nwords-below-specials": dict(nwordssrc=2, nwordstgt=5, padding_factor=1),
    "joined": dict(joined_dictionary=True, thresholdsrc=2),
    "padding-1": dict(padding_factor=1),
    "padding-3": dict(padding_factor=3, nwordstgt=18),
    "given-dicts": dict(srcdict="@thresholds-nwords/dict.de.txt", tgtdict="@defaults/dict.en.txt"),
    "joined-given-dict": dict(joined_dictionary=True, srcdict="@joined/dict.de.txt"),
    "workers-3": dict(workers=3, trainpref="{root}/lf-train", validpref="{root}/lf-valid,{root}/lf-valid1",
                      testpref="{root}/lf-test"),
    "dict-only": dict(dict_only=True),
    "empty-test": dict(testpref="{root}/empty"),
    "big-vocabulary": dict(trainpref="{root}/big", validpref=None, testpref=None),
}
# fairseq's --workers cut files at offsets from text-mode tell(), which after a \r line end
# is an opaque cookie, not a byte offset: lines are then read twice or lost. Ours cut at
# bytes and write what one worker writes.
CR_WORKERS = dict(workers=3)
REFUSED = {
    "joined-both-dicts": dict(joined_dictionary=True, srcdict="@defaults/dict.de.txt",
                              tgtdict="@defaults/dict.en.txt"),
    "no-train-no-dict": dict(trainpref=None),
}


def _resolve(flags, root, out):
    resolved = []
    for value in flags:
        if value.startswith("@"):
            value = os.path.join(out, "theirs", value[1:])
        resolved.append(value.replace("{root}", str(root)))
    return resolved


@pytest.fixture(scope="module")
def fairseq_bins(fairseq_python, corpus, tmp_path_factory):
    """fairseq-preprocess's data-bins: {config: folder}, and its refusals {config: error}."""
    out = tmp_path_factory.mktemp("fairseq-preprocess")
    jobs = []
    for name, extra in {**CONFIGS, **REFUSED}.items():
        destination = ["--destdir", str(out / "theirs" / name)]
        jobs.append({"runs": [_resolve(_flags(corpus, **extra), corpus, out) + destination]})
    # Training shards: the dictionaries from all shards' text (their concatenation), then
    # each shard binarized with them, renamed train, train1, train2 as fairseq combines them.
    sharded = out / "theirs" / "train-shards"
    runs = [["-s", "de", "-t", "en", "--trainpref", f"{corpus}/train", "--dict-only", "--destdir", str(sharded)]]
    moves = []
    for k in range(3):
        scratch = out / f"scratch{k}"
        runs.append(["-s", "de", "-t", "en", "--trainpref", f"{corpus}/part{k}", "--destdir", str(scratch),
                     "--srcdict", str(sharded / "dict.de.txt"), "--tgtdict", str(sharded / "dict.en.txt")])
        moves += [[str(scratch / f"train.de-en.{lang}.{ext}"), str(sharded / f"train{k or ''}.de-en.{lang}.{ext}")]
                  for lang in ("de", "en") for ext in ("bin", "idx")]
    jobs.append({"runs": runs, "moves": moves})
    # Again into a folder that holds its dictionaries already: fairseq refuses.
    jobs.append({"runs": [_flags(corpus) + ["--destdir", str(out / "theirs" / "defaults")]]})
    jobs.append({"runs": [_flags(corpus, **CR_WORKERS) + ["--destdir", str(out / "theirs" / "cr-workers")]]})
    request = out / "request.json"
    request.write_text(json.dumps({"preprocess": jobs}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    done = subprocess.run([fairseq_python, ORACLE, str(request), str(out / "response.json")],
                          capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"the fairseq oracle failed ({fairseq_python}):\n{done.stderr[-4000:]}")
    results = json.loads((out / "response.json").read_text())["preprocess"]
    names = list(CONFIGS) + list(REFUSED) + ["train-shards", "existing-dictionary", "cr-workers"]
    return out, dict(zip(names, results))


def _ours(out, name, extra, corpus):
    flags = _resolve(_flags(corpus, **extra), corpus, out) + ["--destdir", str(out / "ours" / name)]
    return mmidx(["fairseq-preprocess", *flags])


def _files(folder):
    return sorted(f for f in os.listdir(folder) if f != "preprocess.log")


@pytest.mark.fairseq
@pytest.mark.parametrize("name", list(CONFIGS))
def test_data_bin_is_byte_identical_to_fairseq_preprocess(fairseq_bins, corpus, name, capsys):
    out, results = fairseq_bins
    assert results[name] == {"ok": True}, results[name]
    assert _ours(out, name, CONFIGS[name], corpus) == 0, capsys.readouterr().err
    theirs, ours = out / "theirs" / name, out / "ours" / name
    assert _files(ours) == _files(theirs)
    assert _files(theirs), "fairseq wrote nothing"
    for file in _files(theirs):
        assert (ours / file).read_bytes() == (theirs / file).read_bytes(), file
    if name == "big-vocabulary":   # fairseq's best_fitting_int_dtype past 65,500 symbols
        assert (theirs / "train.de-en.de.idx").read_bytes()[17] == 9   # uint32's code


@pytest.mark.fairseq
def test_workers_on_cr_line_ends_write_what_one_fairseq_worker_writes(fairseq_bins, corpus):
    out, results = fairseq_bins
    assert results["cr-workers"] == {"ok": True}
    assert _ours(out, "cr-workers", CR_WORKERS, corpus) == 0
    one_worker, fairseq_workers, ours = (out / "theirs" / "defaults", out / "theirs" / "cr-workers",
                                         out / "ours" / "cr-workers")
    for file in _files(one_worker):
        assert (ours / file).read_bytes() == (one_worker / file).read_bytes(), file
    # fairseq's own 3 workers on this text: a line read twice (its dictionary counts differ).
    assert (fairseq_workers / "dict.de.txt").read_bytes() != (one_worker / "dict.de.txt").read_bytes()


@pytest.mark.fairseq
def test_training_shards_are_fairseqs_with_one_dictionary(fairseq_bins, corpus):
    out, results = fairseq_bins
    assert results["train-shards"] == {"ok": True}, results["train-shards"]
    trainpref = ",".join(f"{corpus}/part{k}" for k in range(3))
    preprocess(source_lang="de", target_lang="en", trainpref=trainpref, destdir=out / "ours" / "train-shards")
    theirs, ours = out / "theirs" / "train-shards", out / "ours" / "train-shards"
    assert _files(ours) == _files(theirs)
    for file in _files(theirs):
        assert (ours / file).read_bytes() == (theirs / file).read_bytes(), file
    # And they load as one training split of three shards.
    pairs = LanguagePairs.open(find_language_pairs(str(ours))["train"])
    assert len(pairs.shards) == 3 and pairs.num_pairs == 400 + 120 + 45


@pytest.mark.fairseq
@pytest.mark.parametrize("name", list(REFUSED))
def test_refuses_what_fairseq_refuses(fairseq_bins, corpus, name, capsys):
    out, results = fairseq_bins
    assert "error" in results[name], results[name]
    assert _ours(out, name, REFUSED[name], corpus) == 1
    err = capsys.readouterr().err
    assert err.startswith("mmidx fairseq-preprocess: error:") and err.count("\n") == 1, err
    assert not os.path.exists(out / "ours" / name) or not os.listdir(out / "ours" / name)


@pytest.mark.fairseq
def test_an_existing_dictionary_is_refused_as_fairseq_refuses(fairseq_bins, corpus, tmp_path):
    out, results = fairseq_bins
    assert results["existing-dictionary"]["type"] == "FileExistsError", results["existing-dictionary"]
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "dict.en.txt").write_bytes((out / "theirs" / "defaults" / "dict.en.txt").read_bytes())
    with pytest.raises(ParameterError, match=r"dict\.en\.txt already exists"):
        preprocess(source_lang="de", target_lang="en", trainpref=f"{corpus}/train", destdir=tmp_path / "bin")
    assert os.listdir(tmp_path / "bin") == ["dict.en.txt"]


# --- without fairseq ---------------------------------------------------------------------

def test_chunks_end_at_line_ends_as_text_mode_reads_lines(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    text = _text(rng, 300, ODD_WORDS + ["x", "yy"], last_newline=False) + "\r\r\n\r"
    path = tmp_path / "t.de"
    _write(path, text)
    with open(path, encoding="utf-8") as f:   # Python's text mode, as fairseq reads
        expected = [line.rstrip("\n") for line in f]
    for size in (1, 2, 3, 7, 64, 10_000):
        chunks = list(text_chunks(str(path), size))
        assert b"".join(c for _, c in chunks) == path.read_bytes()
        assert [o for o, _ in chunks] == list(np.cumsum([0] + [len(c) for _, c in chunks[:-1]]))
        assert [line for o, c in chunks for line in decode_lines(str(path), o, c)] == expected, size


def test_workers_and_chunk_sizes_do_not_change_the_output(tmp_path, corpus, monkeypatch):
    preprocess(source_lang="de", target_lang="en", trainpref=f"{corpus}/train", validpref=f"{corpus}/valid",
               destdir=tmp_path / "one")
    monkeypatch.setattr(fairseq_preprocess, "CHUNK_BYTES", 1000)
    preprocess(source_lang="de", target_lang="en", trainpref=f"{corpus}/train", validpref=f"{corpus}/valid",
               destdir=tmp_path / "many", workers=3)
    assert _files(tmp_path / "one") == _files(tmp_path / "many")
    for file in _files(tmp_path / "one"):
        assert (tmp_path / "one" / file).read_bytes() == (tmp_path / "many" / file).read_bytes(), file


def test_bad_utf8_names_file_and_byte_and_leaves_nothing(tmp_path):
    _write(tmp_path / "train.de", "gut\nauch gut\n")
    _write(tmp_path / "train.en", "good\nfine\n")
    (tmp_path / "valid.de").write_bytes(b"ok\nbad \xff here\n")
    _write(tmp_path / "valid.en", "a\nb\n")
    with pytest.raises(ConvertError, match=r"valid\.de: byte 7: expected UTF-8"):
        preprocess(source_lang="de", target_lang="en", trainpref=tmp_path / "train", validpref=tmp_path / "valid",
                   destdir=tmp_path / "out")
    assert os.listdir(tmp_path / "out") == []   # no dictionary, no half data-bin, no temporary folder


def test_missing_text_is_named_before_anything_is_written(tmp_path):
    _write(tmp_path / "train.de", "a\n")
    with pytest.raises(ParameterError, match=r"train\.en: no such file"):
        preprocess(source_lang="de", target_lang="en", trainpref=tmp_path / "train", destdir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_dictionary_order_counts_then_code_points(tmp_path):
    # Independent of fairseq: written out by hand from finalize's rule.
    _write(tmp_path / "t.txt", "b a c\nc b\nä z\n")
    d = build_dictionary([str(tmp_path / "t.txt")], padding_factor=1)
    assert d.symbols[4:] == ["b", "c", "a", "z", "ä"]
    assert d.counts[4:] == [2, 2, 1, 1, 1]


@pytest.mark.parametrize("settings,message", [
    ({"workers": 0}, "workers= must be at least 1, got 0"),
    ({"nwordssrc": 2.5}, "nwordssrc= must be a whole number, got 2.5"),
    ({"target_lang": "de"}, "source and target language are both 'de'"),
    ({"joined_dictionary": True, "srcdict": "a", "tgtdict": "b"}, "cannot use both srcdict= and tgtdict= with joined_dictionary=True"),
])
def test_bad_settings_are_named(tmp_path, settings, message):
    args = dict(source_lang="de", target_lang="en", trainpref=str(tmp_path / "train"), destdir=tmp_path / "out")
    with pytest.raises(ParameterError, match=message):
        preprocess(**{**args, **settings})
    assert not (tmp_path / "out").exists()
