"""mmidx convert against Megatron's preprocess_data.py, rebuilt from megatron-core itself.

The oracle is what preprocess_data.py (core_v0.16.1, default path, no --legacy-tokenizer)
does with each document, step by step: ``megatron.core.tokenizers`` built as its
``build_tokenizer`` builds it, ``tokenize(text)`` per document (per sentence with
--split-sentences, nltk's Punkt loaded by the same ``nltk.load`` call), the EOD appended to a
non-empty document, and megatron-core's ``IndexedDatasetBuilder`` writing the bytes.
Tokenizers are trained here: a WordPiece tokenizer.json with the truncation, fixed padding
and BERT post-processor that sentence-embedding models publish, with and without a
tokenizer_config.json, and a sentencepiece model.
"""

from __future__ import annotations

import json
import os
import random
import shutil

import numpy as np
import pytest

from conftest import require_oracle_module

from mmidx_builder.convert import convert
from mmidx_builder.errors import ConvertError

WORDS = ("the of and to in is was for on that with as by at from his her an were are which this be "
         "or has had one not but its new first also after who two they been more their over year").split()


def make_documents(seed: int, count: int) -> list[str]:
    """Empty, whitespace-only, non-ASCII, special-token strings in the text, sentences with
    abbreviations and newlines, and documents far longer than the tokenizer's 8-token limit."""
    rng = random.Random(seed)
    documents = []
    for i in range(count):
        sentences = []
        for _ in range(rng.randint(0, 6)):
            words = rng.choices(WORDS + ["Zürich", "naïve", "Dr.", "U.S.", "日本語"], k=rng.randint(1, 14))
            sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ".\n", ".\n\n"]))
        documents.append(" ".join(sentences))
    documents[1] = ""
    documents[4] = "   \n "
    documents[6] = "Mr. Smith met [SEP] and </s> at 5 p.m. on Jan. 3. Then he left.\nThe end."
    documents[8] = " ".join(rng.choices(WORDS, k=900)) + "."
    return documents


DOCUMENTS = make_documents(0, 41)


@pytest.fixture(scope="module")
def megatron_tokenizers(megatron):
    require_oracle_module("transformers")
    return require_oracle_module("megatron.core.tokenizers")


# --- tokenizer files -------------------------------------------------------------------

def train_wordpiece(folder, *, truncate_and_pad: bool, config: dict | None):
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = tokenizers.trainers.WordPieceTrainer(vocab_size=300, show_progress=False,
                                                   special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    tokenizer.train_from_iterator(make_documents(1, 400), trainer)
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    if truncate_and_pad:  # what all-MiniLM-L6-v2's tokenizer.json carries, with 8 for 128
        tokenizer.enable_truncation(max_length=8)
        tokenizer.enable_padding(length=8, pad_id=tokenizer.token_to_id("[PAD]"), pad_token="[PAD]")
    os.makedirs(folder, exist_ok=True)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))
    if config is not None:
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config, f)
    return str(folder)


BERT_CONFIG = {"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 8,
               "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]",
               "mask_token": "[MASK]"}
# eos_token missing from tokenizer.json: transformers adds it with the next id.
EOS_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "</s>", "model_max_length": 512}

HF_CASES = {
    "plain": dict(truncate_and_pad=False, config=None),
    "truncating": dict(truncate_and_pad=True, config=None),
    "truncating+bert_config": dict(truncate_and_pad=True, config=BERT_CONFIG),
    "eos_added_by_config": dict(truncate_and_pad=True, config=EOS_CONFIG),
}


@pytest.fixture(scope="module")
def hf_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {name: train_wordpiece(root / name.replace("+", "_"), **case) for name, case in HF_CASES.items()}


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    sentencepiece = pytest.importorskip("sentencepiece")
    prefix = str(tmp_path_factory.mktemp("sp") / "sp")
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(make_documents(2, 400)), model_prefix=prefix,
                                             vocab_size=120, model_type="unigram", minloglevel=2,
                                             hard_vocab_limit=False)
    return prefix + ".model"


def write_jsonl(path, documents) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + "\n")
    return str(path)


# --- the oracle: preprocess_data.py's Encoder + IndexedDatasetBuilder ------------------

def megatron_hf_tokenizer(megatron_tokenizers, folder: str, include_special_tokens: bool):
    """build_tokenizer(args) for --tokenizer-type HuggingFaceTokenizer --tokenizer-model DIR, with
    core_v0.16.1's defaults (use_fast False; include_special_tokens from
    --tokenizer-hf-include-special-tokens, default False)."""
    return megatron_tokenizers.MegatronTokenizer.from_pretrained(
        tokenizer_path=folder, metadata_path={"library": "huggingface"}, vocab_file=None, merges_file=None,
        additional_special_tokens=[], use_fast=False, trust_remote_code=False,
        include_special_tokens=include_special_tokens)


def megatron_sentencepiece_tokenizer(megatron_tokenizers, model: str):
    """build_tokenizer(args) for --tokenizer-type GPTSentencePieceTokenizer --tokenizer-model M."""
    return megatron_tokenizers.MegatronTokenizer.from_pretrained(
        tokenizer_path=model, metadata_path={"library": "sentencepiece"}, legacy=False, special_tokens=None)


def megatron_write(megatron, prefix: str, documents: list[list[str]], tokenize, eod: int | None,
                   vocab_size: int) -> str:
    """preprocess_data's encode + add_document for documents given as lists of sentences."""
    indexed = megatron.indexed_dataset
    builder = indexed.IndexedDatasetBuilder(prefix + ".bin", dtype=indexed.DType.optimal_dtype(vocab_size))
    for sentences in documents:
        doc_ids, sentence_lens = [], []
        for sentence in sentences:
            ids = tokenize(sentence)
            if len(ids) > 0:
                doc_ids.extend(ids)
                sentence_lens.append(len(ids))
        if len(doc_ids) > 0 and eod is not None:
            doc_ids.append(eod)
            sentence_lens[-1] += 1
        builder.add_document(doc_ids, sentence_lens)
    builder.finalize(prefix + ".idx")
    return prefix


def assert_same_files(ours: str, theirs: str) -> None:
    for suffix in (".bin", ".idx"):
        with open(ours + suffix, "rb") as a, open(theirs + suffix, "rb") as b:
            assert a.read() == b.read(), suffix


def read_documents(prefix: str) -> list[list[int]]:
    from mmidx_builder.sources.indexed import IndexedFile

    pair = IndexedFile.open(prefix)
    return [pair.document(i).tolist() for i in range(pair.num_documents)]


# --- never truncated, never padded (no oracle needed) ----------------------------------

def test_truncating_tokenizer_json_keeps_every_token(hf_folders, tmp_path):
    """The tokenizer.json says: cut at 8 tokens, pad to 8. A document keeps all its tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = hf_folders["truncating"]
    reference = tokenizers.Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    assert reference.truncation is not None and reference.padding is not None  # the trap is set
    reference.no_truncation()
    reference.no_padding()
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS)
    summary = convert([source], str(tmp_path / "out"), folder)
    expected = [reference.encode(text, add_special_tokens=False).ids for text in DOCUMENTS]
    assert max(len(ids) for ids in expected) > 800
    got = read_documents(summary.outputs["text"])
    assert got == expected
    assert summary.tokens["text"] == sum(len(ids) for ids in expected)


def test_summary_warns_about_documents_longer_than_model_max_length(hf_folders, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS)
    summary = convert([source], str(tmp_path / "out"), hf_folders["truncating+bert_config"], append_eod=True)
    assert summary.model_max_length == 8
    lengths = [len(ids) for ids in read_documents(summary.outputs["text"])]
    assert summary.long_documents == sum(n > 8 for n in lengths) > 0
    assert summary.longest_document == max(lengths)
    assert "WARNING" in summary.table() and "model_max_length 8" in summary.table()
    plain = convert([source], str(tmp_path / "plain"), hf_folders["plain"])
    assert plain.model_max_length is None and "model max length" not in plain.table()


# --- HuggingFace tokenizer.json: ids and bytes against megatron-core --------------------

@pytest.mark.parametrize("case", list(HF_CASES))
@pytest.mark.parametrize("special", [False, True], ids=["default", "add_special_tokens"])
def test_hf_ids_and_bytes_equal_megatron(megatron, megatron_tokenizers, hf_folders, case, special, tmp_path):
    folder = hf_folders[case]
    theirs = megatron_hf_tokenizer(megatron_tokenizers, folder, include_special_tokens=special)
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS)
    append_eod = theirs.eod is not None  # without one, preprocess_data.py crashes on --append-eod
    summary = convert([source], str(tmp_path / "ours"), folder, append_eod=append_eod, add_special_tokens=special)
    expected_ids = [theirs.tokenize(text) for text in DOCUMENTS]
    eod = [theirs.eod] if append_eod else []
    assert read_documents(summary.outputs["text"]) == [ids + eod if ids else [] for ids in expected_ids]
    reference = megatron_write(megatron, str(tmp_path / "theirs"), [[text] for text in DOCUMENTS],
                               theirs.tokenize, theirs.eod if append_eod else None, theirs.vocab_size)
    assert_same_files(summary.outputs["text"], reference)


def test_eod_taken_where_megatron_takes_it(megatron_tokenizers, hf_folders):
    """sep_token when the config has no eos_token; an eos_token missing from tokenizer.json
    gets a new id; no config and no usual name: no EOD (Megatron would crash)."""
    from mmidx_builder.convert.tokenize import load_tokenizer

    expected = {"truncating+bert_config": "[SEP]", "eos_added_by_config": "</s>"}
    for case, token in expected.items():
        theirs = megatron_hf_tokenizer(megatron_tokenizers, hf_folders[case], include_special_tokens=False)
        ours = load_tokenizer(hf_folders[case])
        assert (ours.eod_id, ours.vocab_size) == (theirs.eod, theirs.vocab_size)
        assert token in ours.eod_source
    for case in ("plain", "truncating"):
        assert megatron_hf_tokenizer(megatron_tokenizers, hf_folders[case], include_special_tokens=False).eod is None
        assert load_tokenizer(hf_folders[case]).eod_id is None


def test_append_eod_without_an_eod_token_is_a_clear_error(hf_folders, tmp_path):
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS)
    with pytest.raises(ConvertError, match="no end-of-document token; pass eod_id="):
        convert([source], str(tmp_path / "out"), hf_folders["truncating"], append_eod=True)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]


def test_workers_reload_the_tokenizer_with_its_settings(hf_folders, tmp_path):
    """Worker processes reload tokenizer.json: truncation stays off, config tokens stay registered."""
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS * 40)
    one = convert([source], str(tmp_path / "one"), hf_folders["eos_added_by_config"], append_eod=True)
    two = convert([source], str(tmp_path / "two"), hf_folders["eos_added_by_config"], append_eod=True, workers=2)
    assert_same_files(one.outputs["text"], two.outputs["text"])


# --- sentencepiece ---------------------------------------------------------------------

@pytest.mark.parametrize("special", [False, True], ids=["default", "add_special_tokens"])
def test_sentencepiece_ids_and_bytes_equal_megatron(megatron, megatron_tokenizers, sentencepiece_model, special,
                                                    tmp_path):
    theirs = megatron_sentencepiece_tokenizer(megatron_tokenizers, sentencepiece_model)
    # --add-special-tokens is the legacy Llama2Tokenizer's tokenize: BOS, then the pieces.
    tokenize = (lambda text: [theirs.bos_id] + theirs.tokenize(text)) if special else theirs.tokenize
    source = write_jsonl(tmp_path / "in.jsonl", DOCUMENTS)
    summary = convert([source], str(tmp_path / "ours"), sentencepiece_model, append_eod=True,
                      add_special_tokens=special)
    # With a BOS, an empty document is [BOS, EOD], as preprocess_data.py writes it.
    assert read_documents(summary.outputs["text"]) == [
        tokenize(text) + [theirs.eod] if tokenize(text) else [] for text in DOCUMENTS]
    reference = megatron_write(megatron, str(tmp_path / "theirs"), [[text] for text in DOCUMENTS], tokenize,
                               theirs.eod, theirs.vocab_size)
    assert_same_files(summary.outputs["text"], reference)


# --- --split-sentences / --keep-newlines -----------------------------------------------

@pytest.fixture()
def punkt_data(tmp_path, monkeypatch):
    """An 'english' Punkt model trained here by nltk's own trainer, installed where nltk.load
    finds it, so that the oracle can call nltk exactly as preprocess_data.py does."""
    nltk_punkt = require_oracle_module("nltk.tokenize.punkt")
    import nltk.data

    trainer = nltk_punkt.PunktTrainer()
    trainer.train(" ".join(make_documents(3, 600)), finalize=True)
    params = trainer.get_params()
    folder = tmp_path / "nltk_data" / "tokenizers" / "punkt_tab" / "english"
    folder.mkdir(parents=True)
    (folder / "abbrev_types.txt").write_text("".join(f"{t}\n" for t in sorted(params.abbrev_types)))
    (folder / "collocations.tab").write_text("".join(f"{a}\t{b}\n" for a, b in sorted(params.collocations)))
    (folder / "sent_starters.txt").write_text("".join(f"{t}\n" for t in sorted(params.sent_starters)))
    (folder / "ortho_context.tab").write_text("".join(f"{t}\t{v}\n" for t, v in sorted(params.ortho_context.items())))
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "nltk_data")] + list(nltk.data.path))
    nltk.data._resource_cache.clear()
    yield nltk_punkt
    nltk.data._resource_cache.clear()


def megatron_splitter(nltk_punkt, keep_newlines: bool):
    """preprocess_data's Encoder.initializer: nltk.load of the punkt pickle, or for
    --keep-newlines a tokenizer over its parameters whose sentence end is followed by
    optional whitespace, the word before it included."""
    import nltk

    splitter = nltk.load("nltk:tokenizers/punkt/english.pickle")
    if not keep_newlines:
        return splitter

    class NewlineKeepingVars(nltk_punkt.PunktLanguageVars):
        _period_context_fmt = r"""
            \S*  %(SentEndChars)s  \s*
            (?=(?P<after_tok> %(NonWord)s | (?P<next_tok>\S+) ))"""

    return nltk_punkt.PunktSentenceTokenizer(train_text=splitter._params, lang_vars=NewlineKeepingVars())


@pytest.mark.parametrize("keep_newlines", [False, True], ids=["split", "keep_newlines"])
def test_split_sentences_equal_megatron(megatron, megatron_tokenizers, punkt_data, sentencepiece_model,
                                        keep_newlines, tmp_path, monkeypatch):
    from mmidx_builder.convert import sentences

    theirs = megatron_sentencepiece_tokenizer(megatron_tokenizers, sentencepiece_model)
    splitter = megatron_splitter(punkt_data, keep_newlines)
    # preprocess_data's split step cuts texts in pieces of max_len = 1,000,000 characters and
    # splits each on its own; pieces of 60 put that cut inside most documents here.
    assert sentences.PIECE_CHARS == 1_000_000
    monkeypatch.setattr(sentences, "PIECE_CHARS", 60)  # forked workers inherit it
    documents = DOCUMENTS
    split = [[s for i in range(0, len(text), 60) for s in splitter.tokenize(text[i:i + 60])]
             for text in documents]
    assert sum(len(text) > 60 for text in documents) > 10
    assert sum(map(len, split)) > 2 * len(documents)
    source = write_jsonl(tmp_path / "in.jsonl", documents)
    summary = convert([source], str(tmp_path / "ours"), sentencepiece_model, append_eod=True,
                      split_sentences=True, keep_newlines=keep_newlines, workers=2)
    assert summary.outputs["text"].endswith("ours_text_sentence")
    assert "nltk punkt_tab english (" + str(tmp_path) in summary.sentences  # nltk's data, not the package's
    reference = megatron_write(megatron, str(tmp_path / "theirs"), split, theirs.tokenize, theirs.eod,
                               theirs.vocab_size)
    assert_same_files(summary.outputs["text"], reference)
