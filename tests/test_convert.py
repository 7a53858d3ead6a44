"""mmidx convert / merge: real tokenizers trained here, read-back against each tokenizer's
own encode, worker-count and shard+merge invariance, megatron-core as the byte oracle,
and bad input."""

from __future__ import annotations

import bz2
import glob
import gzip
import json
import lzma
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mmidx_builder.convert.readers import base as readers_base
from mmidx_builder.cli import main
from mmidx_builder.convert import convert, merge
from mmidx_builder.errors import ConvertError, MMIdxError
from mmidx_builder.sources.indexed import IndexedFile

WORDS = ("the of and to in is was for on that with as by at from his her an were are which this be "
         "or has had one not but its new first also after who two they been more their over year").split()


def make_documents(seed: int, count: int) -> list[str]:
    """Awkward on purpose: empty documents, whitespace only, non-ASCII, one very long document."""
    rng = random.Random(seed)
    documents = []
    for i in range(count):
        words = rng.choices(WORDS + ["Zürich", "naïve", "日本語", "🙂"], k=rng.randint(0, 40))
        documents.append(" ".join(words))
    documents[1] = ""
    documents[5] = "   "
    documents[9] = " ".join(rng.choices(WORDS, k=3000))  # far longer than any training sequence
    return documents


DOCUMENTS = make_documents(0, 97)


@pytest.fixture(scope="session")
def training_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("train") / "train.txt"
    path.write_text("\n".join(make_documents(1, 2000)) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def bpe_path(training_text, tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers extra trains the BPE tokenizer")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "</s>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train([training_text], trainer)
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


@pytest.fixture(scope="session")
def spm_path(training_text, tmp_path_factory):
    sentencepiece = pytest.importorskip("sentencepiece", reason="the sentencepiece extra trains the unigram model")
    prefix = tmp_path_factory.mktemp("spm") / "unigram"
    sentencepiece.SentencePieceTrainer.train(input=training_text, model_prefix=str(prefix), vocab_size=70, hard_vocab_limit=False,
                                             model_type="unigram", character_coverage=1.0,
                                             num_threads=1, minloglevel=2)
    return str(prefix) + ".model"


def reference_encoder(kind: str, path: str | None):
    """Each tokenizer's own single-document encode, independent of the package's adapters."""
    if kind == "bpe":
        import tokenizers

        tokenizer = tokenizers.Tokenizer.from_file(path)
        return lambda text: tokenizer.encode(text).ids, tokenizer.token_to_id("</s>")
    if kind == "spm":
        import sentencepiece

        processor = sentencepiece.SentencePieceProcessor(model_file=path)
        return lambda text: processor.encode(text), processor.eos_id()
    return lambda text: list(text.encode("utf-8")), 256


def write_jsonl(path, documents, key="text", opener=open, extra=True):
    with opener(path, "wt", encoding="utf-8") as f:
        for i, document in enumerate(documents):
            record = {key: document, "id": i}
            if extra:
                record["title"] = f"title {i}"
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return str(path)


def write_parquet(path, documents, row_group_size=10, key="text"):
    pq.write_table(pa.table({key: documents, "title": [f"title {i}" for i in range(len(documents))]}),
                   path, row_group_size=row_group_size)
    return str(path)


def documents_of(prefix):
    indexed = IndexedFile.open(prefix)
    return [indexed.document(i).tolist() for i in range(indexed.num_documents)]


def pair_bytes(prefix):
    with open(prefix + ".bin", "rb") as b, open(prefix + ".idx", "rb") as i:
        return b.read(), i.read()


def leftovers(directory):
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(directory, "*")))


@pytest.mark.parametrize("kind", ["bpe", "spm", "bytes"])
def test_tokens_read_back_equal_the_tokenizers_encode(kind, request, tmp_path):
    path = {"bpe": lambda: request.getfixturevalue("bpe_path"),
            "spm": lambda: request.getfixturevalue("spm_path"), "bytes": lambda: None}[kind]()
    source = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS)
    summary = convert([source], str(tmp_path / "out" / "corpus"), path or "bytes", append_eod=True)

    encode, eod = reference_encoder(kind, path)
    expected = [encode(d) + [eod] if encode(d) else [] for d in DOCUMENTS]
    prefix = str(tmp_path / "out" / "corpus_text_document")
    assert summary.outputs == {"text": prefix}
    assert documents_of(prefix) == expected
    assert IndexedFile.open(prefix).dtype == np.uint16  # Megatron's rule: vocab < 65500
    assert summary.documents == len(DOCUMENTS)
    assert summary.tokens["text"] == sum(map(len, expected))


def test_bytes_identical_to_megatron_builder(megatron, bpe_path, tmp_path):
    """What megatron-core's IndexedDatasetBuilder writes, fed as preprocess_data feeds it:
    ids plus EOD, and no sequence at all for a document that tokenized to nothing."""
    source = write_jsonl(tmp_path / "docs.jsonl", DOCUMENTS)
    convert([source], str(tmp_path / "ours"), bpe_path, json_keys=["text", "title"], append_eod=True)

    encode, eod = reference_encoder("bpe", bpe_path)
    import tokenizers

    vocab_size = tokenizers.Tokenizer.from_file(bpe_path).get_vocab_size(with_added_tokens=True)
    dtype = megatron.indexed_dataset.DType.optimal_dtype(vocab_size)
    for key in ("text", "title"):
        prefix = str(tmp_path / f"megatron_{key}")
        builder = megatron.indexed_dataset.IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for i, document in enumerate(DOCUMENTS):
            ids = encode(document if key == "text" else f"title {i}")
            ids = ids + [eod] if ids else ids
            builder.add_document(np.array(ids, dtype=np.int64), [len(ids)] if ids else [])
        builder.finalize(prefix + ".idx")
        assert pair_bytes(str(tmp_path / f"ours_{key}_document")) == pair_bytes(prefix)


@pytest.fixture
def mixed_inputs(tmp_path):
    """Every input kind, several files, more records than one batch."""
    docs = make_documents(2, 160)
    root = tmp_path / "in"
    root.mkdir()
    return [
        write_jsonl(root / "a.jsonl", docs[:50]),
        write_jsonl(root / "b.jsonl.gz", docs[50:70], opener=gzip.open),
        write_parquet(root / "c.parquet", docs[70:110], row_group_size=7),
        write_jsonl(root / "d.json", []),  # an empty file
        write_jsonl(root / "e.jsonl.bz2", docs[110:120], opener=bz2.open),
        write_jsonl(root / "f.jsonl", docs[120:160]),
    ]


def test_worker_count_does_not_change_the_bytes(bpe_path, mixed_inputs, tmp_path, monkeypatch):
    monkeypatch.setattr(readers_base, "BATCH_RECORDS", 6)  # many batches in flight at once
    one = convert(mixed_inputs, str(tmp_path / "one"), bpe_path, append_eod=True, workers=1)
    two = convert(mixed_inputs, str(tmp_path / "two"), bpe_path, append_eod=True, workers=2)
    assert one.documents == two.documents == 160
    assert pair_bytes(one.outputs["text"]) == pair_bytes(two.outputs["text"])


@pytest.mark.parametrize("num_shards", [2, 3, 8, 400])
def test_merged_shards_equal_a_single_run(num_shards, mixed_inputs, tmp_path):
    whole = convert(mixed_inputs, str(tmp_path / "whole"), "bytes", append_eod=True)
    shards = [convert(mixed_inputs, str(tmp_path / f"part{i:04d}"), "bytes", append_eod=True,
                      num_shards=num_shards, shard_index=i).outputs["text"] for i in range(num_shards)]
    sizes = [IndexedFile.open(s).num_documents for s in shards]
    assert sum(sizes) == whole.documents
    if num_shards <= 3:
        assert all(sizes), sizes  # a byte-range cut gives every shard some documents here
    merged = merge(shards, str(tmp_path / "merged"))
    assert pair_bytes(merged) == pair_bytes(whole.outputs["text"])


def test_inputs_of_every_kind(tmp_path):
    docs = ["first line", "", "dritte Zeile ü", "last"]
    (tmp_path / "lines.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    with lzma.open(tmp_path / "lines.txt.xz", "wt", encoding="utf-8") as f:
        f.write("\r\n".join(docs) + "\r\n")
    for i, doc in enumerate(docs):
        (tmp_path / f"doc{i}.txt").write_text(doc + "\nsecond line", encoding="utf-8")

    summary = convert([str(tmp_path / "lines.txt"), str(tmp_path / "lines.txt.xz")], str(tmp_path / "t"), "bytes")
    assert documents_of(summary.outputs["text"]) == [list(d.encode()) for d in docs * 2]

    summary = convert([str(tmp_path / "doc*.txt")], str(tmp_path / "w"), "bytes", one_document_per_file=True)
    assert documents_of(summary.outputs["text"]) == [list((d + "\nsecond line").encode()) for d in docs]


def test_pretokenized_json_and_parquet(tmp_path):
    rng = np.random.default_rng(3)
    lists = [rng.integers(0, 70000, size=n).tolist() for n in (0, 5, 1, 2000, 17)]
    write_jsonl(tmp_path / "ids.jsonl", lists, key="ids", extra=False)
    pq.write_table(pa.table({"ids": pa.array(lists, pa.list_(pa.int64()))}), tmp_path / "ids.parquet")
    summary = convert([str(tmp_path / "ids.jsonl"), str(tmp_path / "ids.parquet")], str(tmp_path / "p"), "none",
                      json_keys=["ids"], vocab_size=70000, append_eod=True, eod_id=69999)
    indexed = IndexedFile.open(summary.outputs["ids"])
    assert indexed.dtype == np.int32  # vocab >= 65500
    assert documents_of(summary.outputs["ids"]) == [ids + [69999] if ids else [] for ids in lists] * 2

    with pytest.raises(ConvertError, match="vocab_size="):
        convert([str(tmp_path / "ids.jsonl")], str(tmp_path / "q"), "none", json_keys=["ids"])
    with pytest.raises(ConvertError, match=r"ids\.jsonl, line 2: 'ids': token ids must lie in \[0, 1000\)"):
        convert([str(tmp_path / "ids.jsonl")], str(tmp_path / "q"), "none", json_keys=["ids"], vocab_size=1000)


def test_hf_dataset_input_with_shards(tmp_path):
    folder = tmp_path / "hfdata"
    folder.mkdir()
    docs = make_documents(4, 30)
    write_jsonl(folder / "train.jsonl", docs)
    whole = convert([f"hf:{folder}:train"], str(tmp_path / "hf"), "bytes")
    assert documents_of(whole.outputs["text"]) == [list(d.encode()) for d in docs]
    streamed = convert([f"hf:{folder}"], str(tmp_path / "hfs"), "bytes", streaming=True)
    assert pair_bytes(streamed.outputs["text"]) == pair_bytes(whole.outputs["text"])
    shards = [convert([f"hf:{folder}:train"], str(tmp_path / f"hf{i}"), "bytes", num_shards=3,
                      shard_index=i).outputs["text"] for i in range(3)]
    assert pair_bytes(merge(shards, str(tmp_path / "hfm"))) == pair_bytes(whole.outputs["text"])


BAD_CASES = [
    ('{"text": "fine"}\n{"text": "fine"}\n{"text": \n{"text": "fine"}\n', "line 3: expected a JSON object"),
    ('{"text": "fine"}\n{"body": "no text"}\n', "line 2: no key 'text'"),
    ('{"text": "fine"}\n{"text": 42}\n', "line 2: 'text': expected a string, found int"),
    ('{"text": "fine"}\n[1, 2]\n', "line 2: expected a JSON object, found a list"),
]


@pytest.mark.parametrize("content, message", BAD_CASES)
def test_bad_record_stops_and_leaves_nothing(content, message, tmp_path):
    (tmp_path / "bad.jsonl").write_text(content)
    out = tmp_path / "out"
    with pytest.raises(ConvertError, match=r"bad\.jsonl, " + message.replace("[", r"\[")):
        convert([str(tmp_path / "bad.jsonl")], str(out / "x"), "bytes", workers=2)
    assert leftovers(out) == []

    summary = convert([str(tmp_path / "bad.jsonl")], str(out / "x"), "bytes", skip_bad_records=True)
    good = content.count('"text": "fine"')
    assert summary.bad_records == 1 and summary.documents == good
    assert message.split(":")[0] in summary.bad_examples[0][0]
    assert "bad:" in summary.table()
    assert leftovers(out) == ["x_text_document.bin", "x_text_document.idx", "x_text_document.mmidx-info"]


def test_unreadable_file_and_broken_tokenizer(tmp_path):
    good = write_jsonl(tmp_path / "good.jsonl", ["one", "two"])
    missing = str(tmp_path / "missing.jsonl")
    with pytest.raises(ConvertError, match="missing.jsonl: cannot read"):
        convert([good, missing], str(tmp_path / "o" / "x"), "bytes")
    summary = convert([good, missing], str(tmp_path / "o" / "x"), "bytes", skip_bad_records=True)
    assert (summary.documents, summary.bad_records) == (2, 1)

    (tmp_path / "corrupt.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ConvertError, match="corrupt.jsonl.gz: cannot read"):
        convert([good, str(tmp_path / "corrupt.jsonl.gz")], str(tmp_path / "o" / "y"), "bytes")
    assert not os.path.exists(tmp_path / "o" / "y_text_document.bin")

    (tmp_path / "broken.model").write_bytes(b"\x00garbage")
    with pytest.raises(ConvertError, match="cannot tell the input format"):
        convert([str(tmp_path / "broken.model")], str(tmp_path / "t"), "bytes")
    # The tokenizer files' own loaders (optional extras) refuse them:
    (tmp_path / "tokenizer.json").write_text("{not a tokenizer")
    pytest.importorskip("tokenizers", reason="the tokenizers extra loads tokenizer.json")
    with pytest.raises(ConvertError, match="tokenizer.json: cannot load"):
        convert([good], str(tmp_path / "t"), str(tmp_path / "tokenizer.json"))
    pytest.importorskip("sentencepiece", reason="the sentencepiece extra loads .model files")
    with pytest.raises(ConvertError, match="broken.model: cannot load"):
        convert([good], str(tmp_path / "t"), str(tmp_path / "broken.model"))
    assert not glob.glob(str(tmp_path / "t_*"))


def test_existing_output_is_left_alone_unless_overwrite(tmp_path):
    source = write_jsonl(tmp_path / "a.jsonl", ["one", "two"])
    first = convert([source], str(tmp_path / "x"), "bytes").outputs["text"]
    before = pair_bytes(first)
    write_jsonl(tmp_path / "a.jsonl", ["three"])
    with pytest.raises(ConvertError, match="exists; pass overwrite=True"):
        convert([source], str(tmp_path / "x"), "bytes")
    assert pair_bytes(first) == before
    convert([source], str(tmp_path / "x"), "bytes", overwrite=True)
    assert documents_of(first) == [list(b"three")]


def test_cli_convert_shards_and_merge(bpe_path, tmp_path, capsys):
    source = write_jsonl(tmp_path / "a.jsonl", DOCUMENTS)
    common = ["--tokenizer", bpe_path, "--append-eod", "--no-progress", "--json-keys", "text", "title"]
    assert main(["convert", source, "--output-prefix", str(tmp_path / "whole"), *common]) == 0
    assert "docs/s" in capsys.readouterr().out
    for i in range(3):
        assert main(["convert", source, "--output-prefix", str(tmp_path / f"part{i}"), *common,
                     "--num-shards", "3", "--shard-index", str(i)]) == 0
    for key in ("text", "title"):
        parts = [str(tmp_path / f"part{i}_{key}_document") for i in range(3)]
        assert main(["merge", *parts, "--output-prefix", str(tmp_path / f"merged_{key}")]) == 0
        assert pair_bytes(str(tmp_path / f"merged_{key}")) == pair_bytes(str(tmp_path / f"whole_{key}_document"))
    capsys.readouterr()

    (tmp_path / "bad.jsonl").write_text('{"text": "x"}\nnot json\n')
    assert main(["convert", str(tmp_path / "bad.jsonl"), "--output-prefix", str(tmp_path / "b"),
                 "--tokenizer", "bytes", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "bad.jsonl, line 2" in err
    assert main(["merge", str(tmp_path / "whole_text_document"), "--output-prefix",
                 str(tmp_path / "merged_text")]) == 1  # exists


# --- library messages name keywords, the CLI its flags (issue 21) ---------------------------

@pytest.mark.parametrize("keyword, flag, value, said", [
    ("workers", "--workers", 0, "must be at least 1, got 0"),
    ("num_shards", "--num-shards", 0, "must be at least 1, got 0"),
    ("max_document_chars", "--max-document-chars", -5, "must be at least 0, got -5"),
])
def test_library_messages_name_keywords_and_the_cli_its_flags(keyword, flag, value, said, tmp_path, capsys):
    source = write_jsonl(tmp_path / "a.jsonl", ["one", "two"])
    with pytest.raises(MMIdxError) as raised:
        convert([source], str(tmp_path / "lib"), "bytes", **{keyword: value})
    assert f"{keyword}= {said}" in str(raised.value) and "--" not in str(raised.value)

    assert main(["convert", source, "--output-prefix", str(tmp_path / "cli"), "--tokenizer", "bytes",
                 "--no-progress", flag, str(value)]) == 1
    err = capsys.readouterr().err
    assert f"{flag} {said}" in err and f"{keyword}=" not in err
    assert not list(tmp_path.glob("lib*")) and not list(tmp_path.glob("cli*"))


def test_cli_says_flags_with_values_and_leaves_paths_alone(tmp_path, capsys):
    folder = tmp_path / "lang=en"  # a partition folder, as data lakes name them
    folder.mkdir()
    source = write_jsonl(folder / "a.jsonl", ["short", "x" * 50])
    with pytest.raises(ConvertError) as raised:
        convert([source], str(tmp_path / "lib"), "bytes", max_document_chars=10)
    assert "more than max_document_chars=10 " in str(raised.value)
    assert "pass skip_bad_records=True to skip" in str(raised.value)

    assert main(["convert", source, "--output-prefix", str(tmp_path / "cli"), "--tokenizer", "bytes",
                 "--no-progress", "--max-document-chars", "10"]) == 1
    err = capsys.readouterr().err
    assert f"{folder}/a.jsonl, line 2" in err  # the path's "lang=en" is not a flag
    assert "more than --max-document-chars 10 " in err and "pass --skip-bad-records to skip" in err


# --- a new input format is its module plus one line in READERS -----------------------------

def test_a_reader_added_to_the_table_is_planned_read_and_parsed(tmp_path, monkeypatch):
    from mmidx_builder.convert import plan_inputs
    from mmidx_builder.convert.readers import READERS
    from mmidx_builder.convert.readers.base import Reader, line_batches, read_payloads

    class KeyValueReader(Reader):  # "text=..." lines, one document each
        suffixes = (".kv",)

        @staticmethod
        def batches(item, start, context):
            yield from line_batches(item, start, context)

        @staticmethod
        def records(batch, keys, bad):
            good = []
            for k, payload in read_payloads(batch, bad):
                name, _, value = payload.decode("utf-8").rstrip("\n").partition("=")
                good.append((k, {name: value}))
            return good

    monkeypatch.setitem(READERS, "kv", KeyValueReader)
    lines = ["text=first", "text=zweite ü", "other=no text key", "text="]
    (tmp_path / "a.kv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert [item.kind for item in plan_inputs([str(tmp_path / "*.kv")])] == ["kv"]
    with pytest.raises(ConvertError, match=r"a\.kv, line 3: no key 'text'"):
        convert([str(tmp_path / "a.kv")], str(tmp_path / "out"), "bytes")
    for workers in (1, 2):  # parsed in worker processes too
        summary = convert([str(tmp_path / "a.kv")], str(tmp_path / f"out{workers}"), "bytes", workers=workers,
                          skip_bad_records=True)
        assert summary.bad_records == 1
        assert documents_of(summary.outputs["text"]) == [list(b"first"), list("zweite ü".encode()), []]
