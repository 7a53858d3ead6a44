"""mmidx convert against Megatron-LM's own ``tools/preprocess_data.py`` (core_v0.16.1; the
command-line table also against core_v0.19.0's).

The oracle is the script itself, run from the pinned archive under megatron-core 0.16.1
(tests/preprocess_data_oracle.py says how it is found), never a re-telling of its steps.
Every Megatron run of this module happens in one oracle process (:func:`megatron_outputs`):
each case is a tokenizer and an input, converted by both, and the ``.bin``/``.idx`` bytes
must be equal. Tokenizers are built here, offline: tokenizers-library models (BPE,
WordPiece, Unigram, WordLevel) saved with transformers' ``PreTrainedTokenizerFast
.save_pretrained``, with the ``tokenizer_config.json`` of each class transformers ships,
and the vocabulary files of Megatron's own GPT2BPETokenizer, BertWordPiece and TikTokenizer.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
import warnings

import pytest

from preprocess_data_oracle import OPTIONS_REQUEST, oracle_runner

from mmidx_builder.convert import convert
from mmidx_builder.errors import ConvertError

WORDS = ("the of and to in is was for on that with as by at from his her an were are which this be "
         "or has had one not but its new first also after who two they been more their over year").split()
ODD = ["Zürich", "naïve", "ＦＵＬＬ", "Ⅻ", "ﬁne", "日本語", "🙂", "Dr.", "U.S.", "UPPER", "MiXeD", "x\u00a0y",
       "<|endoftext|>", "</s>", "[SEP]", "<s>", "'s", "   ", "\t", "12345"]


def make_documents(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    documents = []
    for _ in range(count):
        words = rng.choices(WORDS * 3 + ODD, k=rng.randint(0, 40))
        documents.append(" ".join(words).capitalize() + rng.choice(["", ".", "!\n", ".\n\n"]))
    return documents


DOCUMENTS = make_documents(0, 24) + ["", "   \n ", "a<|endoftext|>b", "x</s>y [SEP] z<s>", "ＨＥＬＬＯ Ⅻ ﬁ 🙂 日本"]
TRAINING = make_documents(1, 300)


# --- tokenizer folders, built offline ---------------------------------------------------

def train(kind: str):
    """A small tokenizers-library tokenizer of one model kind."""
    tokenizers = pytest.importorskip("tokenizers")
    models, pre, trainers = tokenizers.models, tokenizers.pre_tokenizers, tokenizers.trainers
    if kind == "bpe":
        tokenizer = tokenizers.Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tokenizers.decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<unk>", "<s>", "</s>", "<pad>"],
                                      initial_alphabet=pre.ByteLevel.alphabet(), show_progress=False)
    elif kind == "wordpiece":
        tokenizer = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=False)  # cased
        tokenizer.pre_tokenizer = pre.BertPreTokenizer()
        trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
                                            show_progress=False)
    elif kind == "unigram":
        tokenizer = tokenizers.Tokenizer(models.Unigram())
        tokenizer.pre_tokenizer = pre.Metaspace()
        trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                          show_progress=False)
    else:
        tokenizer = tokenizers.Tokenizer(models.WordLevel(unk_token="[UNK]"))
        tokenizer.pre_tokenizer = pre.Whitespace()
        trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "[SEP]", "</s>"], show_progress=False)
    tokenizer.train_from_iterator(TRAINING, trainer)
    return tokenizer


KINDS = ("bpe", "wordpiece", "unigram", "wordlevel")


def save_folder(folder, tokenizer, config: dict | None = None, **special) -> str:
    """``PreTrainedTokenizerFast(tokenizer_object=...).save_pretrained(folder)``, then the
    given keys set in its tokenizer_config.json, as a Hub repo of that class has them."""
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)
        fast.save_pretrained(str(folder))
    if config:
        path = os.path.join(folder, "tokenizer_config.json")
        with open(path) as f:
            data = json.load(f)
        data.update(config)
        with open(path, "w") as f:
            json.dump(data, f)
    return str(folder)


def write_jsonl(path, documents, newline: str = "\n") -> str:
    with open(path, "w", encoding="utf-8", newline="") as f:
        for text in documents:
            f.write(json.dumps({"text": text}) + newline)
    return str(path)


@dataclasses.dataclass
class Case:
    """One tokenizer and one input, converted by preprocess_data.py and by mmidx convert."""

    name: str
    megatron: list  # preprocess_data.py's tokenizer arguments
    tokenizer: object  # mmidx convert's tokenizer (a spec or a Tokenizer)
    input: str = ""
    append_eod: bool = True
    options: dict = dataclasses.field(default_factory=dict)  # further convert() keywords


def hf_case(name, folder, source, **options) -> Case:
    transformers = pytest.importorskip("transformers")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = transformers.AutoTokenizer.from_pretrained(folder)
    # Without an EOS or SEP, Megatron's EOD is None and --append-eod crashes its worker.
    append_eod = loaded.eos_token is not None or loaded.sep_token is not None
    return Case(name, ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", folder], folder, source,
                append_eod, options)


# --- the cases ------------------------------------------------------------------

def item_cases(root, source) -> list[Case]:
    cases = []
    # 1. split_special_tokens: "a<|endoftext|>b" in ordinary pieces.
    folder = save_folder(root / "split_special", train("bpe"), {"split_special_tokens": True},
                         eos_token="<|endoftext|>")
    cases.append(hf_case("split_special_tokens", folder, source))
    # 2. GPT2TokenizerFast over a tokenizer.json with an NFKC + lowercase normaliser.
    tokenizers = pytest.importorskip("tokenizers")
    bpe = train("bpe")
    bpe.normalizer = tokenizers.normalizers.Sequence([tokenizers.normalizers.NFKC(),
                                                      tokenizers.normalizers.Lowercase()])
    folder = save_folder(root / "gpt2_fast", bpe, {"tokenizer_class": "GPT2TokenizerFast"}, eos_token="<|endoftext|>")
    cases.append(hf_case("gpt2_tokenizer_fast_normaliser", folder, source))
    # 3. BertTokenizer without do_lower_case over a cased tokenizer.json.
    folder = save_folder(root / "bert_cased", train("wordpiece"), {"tokenizer_class": "BertTokenizer"},
                         unk_token="[UNK]", sep_token="[SEP]", cls_token="[CLS]", pad_token="[PAD]",
                         mask_token="[MASK]")
    cases.append(hf_case("bert_tokenizer_default_lower_case", folder, source))
    # 4. The config's unk_token is not the model's: Unigram unknowns map to the config's.
    folder = save_folder(root / "unk", train("unigram"), {"unk_token": "<unknown>"}, eos_token="</s>")
    cases.append(hf_case("config_unk_token", folder, source))
    return cases


# --- one oracle run for the whole module ------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("cases")


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    return oracle_runner(tmp_path_factory)


@pytest.fixture(scope="module")
def source(root):
    return write_jsonl(root / "in.jsonl", DOCUMENTS)


@pytest.fixture(scope="module")
def all_cases(root, source) -> dict:
    cases = item_cases(root, source)
    cases += class_cases(root, source)
    cases += vocab_file_cases(root, source)
    cases.append(bare_cr_case(root))
    cases.append(sparse_case(root))
    return {case.name: case for case in cases}


@pytest.fixture(scope="module")
def oracle19(tmp_path_factory):
    return oracle_runner(tmp_path_factory, "core_v0.19")


@pytest.fixture(scope="module")
def megatron_outputs(oracle, oracle19, root, all_cases) -> dict:
    """name -> (output prefix, error) of preprocess_data.py for every case, in one run; and
    ``"cli:NAME"`` -> (output prefix, error) for every command line of COMMAND_LINES;
    ``"core_v0.19:NAME"`` the same from core_v0.19's script for COMMAND_LINES_019, in a second
    process started first, so that the two run side by side; ``"options"`` per release."""
    names19 = list(COMMAND_LINES_019)
    argvs19 = [command_line(name, root, "megatron19", COMMAND_LINES_019) for name in names19]
    gpt2_stand_in(root, oracle19.work)
    wait19 = oracle19.start(argvs19 + [[OPTIONS_REQUEST]])
    argvs, prefixes = [], []
    for k, case in enumerate(all_cases.values()):
        prefix = str(root / f"megatron{k}")
        argv = ["--input", case.input, "--output-prefix", prefix, "--workers", "1"] + case.megatron
        argvs.append(argv + (["--append-eod"] if case.append_eod else []))
        prefixes.append(prefix + "_text_document")
    names = list(all_cases) + [f"cli:{name}" for name in COMMAND_LINES]
    for name in COMMAND_LINES:
        argvs.append(command_line(name, root, "megatron"))
        prefixes.append(str(root / "megatron" / "out" / name))
    results = oracle.run(argvs + [[OPTIONS_REQUEST]])
    outputs = {name: (prefix, result["error"]) for name, prefix, result in zip(names, prefixes, results[:-1],
                                                                                 strict=True)}
    results19 = wait19()
    for name, result in zip(names19, results19[:-1], strict=True):
        outputs[f"core_v0.19:{name}"] = (str(root / "megatron19" / "out" / name), result["error"])
    return {**outputs, "options": {"core_v0.16": results[-1]["options"], "core_v0.19": results19[-1]["options"]}}


def ours(case: Case, folder) -> str:
    summary = convert([case.input], str(folder / case.name), case.tokenizer, append_eod=case.append_eod,
                      **case.options)
    return summary.outputs["text"]


def same_bytes(a: str, b: str) -> bool:
    return all(open(a + suffix, "rb").read() == open(b + suffix, "rb").read() for suffix in (".bin", ".idx"))


def check(name, all_cases, megatron_outputs, tmp_path):
    prefix, error = megatron_outputs[name]
    assert not error, f"preprocess_data.py failed on {name}: {error}"
    mine = ours(all_cases[name], tmp_path)
    from mmidx_builder.sources.indexed import IndexedFile

    if not same_bytes(mine, prefix):
        a, b = IndexedFile.open(mine), IndexedFile.open(prefix)
        for i in range(min(a.num_documents, b.num_documents)):
            assert a.document(i).tolist() == b.document(i).tolist(), f"document {i}"
        assert (a.dtype, a.num_documents) == (b.dtype, b.num_documents)
        raise AssertionError("the .idx bytes differ")


@pytest.mark.parametrize("name", ["split_special_tokens", "gpt2_tokenizer_fast_normaliser",
                                  "bert_tokenizer_default_lower_case", "config_unk_token"])
def test_tokenizer_config_followed_as_megatron_follows_it(name, all_cases, megatron_outputs, tmp_path):
    check(name, all_cases, megatron_outputs, tmp_path)


# --- every class transformers ships a tokenizer for -------------------------------------

def transformers_classes() -> list[str]:
    transformers = pytest.importorskip("transformers")
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    del transformers
    return sorted({name for name in TOKENIZER_MAPPING_NAMES.values() if name})


# The most used classes are tried over every model kind; the others over the first kind
# they build from (the rebuild is the class's, whatever the kind).
EVERY_KIND = {"TokenizersBackend", "PreTrainedTokenizerFast", "GPT2Tokenizer", "LlamaTokenizer", "BertTokenizer",
              "RobertaTokenizer", "Qwen2Tokenizer", "T5Tokenizer", "GemmaTokenizer"}


def class_cases(root, source) -> list[Case]:
    """Per class: a folder of each model kind, with ``tokenizer_class`` set, that
    transformers builds offline (classes that need a sentencepiece .model, a vocab.txt of
    their own or a missing package cannot be built from these folders)."""
    transformers = pytest.importorskip("transformers")
    bases = {}
    for kind in KINDS:
        bases[kind] = save_folder(root / f"base_{kind}", train(kind))
    cases = []
    for name in transformers_classes():
        kinds_built = 0
        for kind in KINDS:
            if kinds_built and name not in EVERY_KIND:
                break
            folder = root / f"class_{name}_{kind}"
            shutil.copytree(bases[kind], folder)
            path = folder / "tokenizer_config.json"
            config = json.loads(path.read_text())
            config["tokenizer_class"] = name
            path.write_text(json.dumps(config))
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    transformers.logging.set_verbosity_error()
                    loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
                    loaded.convert_tokens_to_ids(loaded.tokenize(DOCUMENTS[0]))
            except Exception:
                shutil.rmtree(folder)
                continue
            cases.append(hf_case(f"class {name} {kind}", str(folder), source))
            kinds_built += 1
        if not kinds_built:
            cases += own_files_case(root, name, source)
    return cases


def own_files_case(root, name: str, source) -> list[Case]:
    """A folder without tokenizer.json, of the files classes build from themselves: a
    sentencepiece model under the names they look for, a WordPiece vocab.txt, GPT-2's
    vocab.json and merges.txt."""
    transformers = pytest.importorskip("transformers")
    sentencepiece = pytest.importorskip("sentencepiece")
    base = root / "own_files"
    if not base.exists():
        base.mkdir()
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(TRAINING), model_prefix=str(root / "sp"),
                                                 vocab_size=300, model_type="unigram", minloglevel=2,
                                                 hard_vocab_limit=False)
        for file in ("spiece.model", "sentencepiece.bpe.model", "tokenizer.model", "spm.model"):
            shutil.copy(root / "sp.model", base / file)
        vocab = train("wordpiece").get_vocab()
        (base / "vocab.txt").write_text("".join(t + "\n" for t, _ in sorted(vocab.items(), key=lambda t: t[1])))
        byte_level_bpe(500).model.save(str(base))
    folder = root / f"class_{name}_own_files"
    shutil.copytree(base, folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": name}))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = transformers.AutoTokenizer.from_pretrained(str(folder))
            loaded.convert_tokens_to_ids(loaded.tokenize(DOCUMENTS[0]))
    except Exception:
        shutil.rmtree(folder)
        return []
    return [hf_case(f"class {name} own_files", str(folder), source)]


def test_every_transformers_class_built_offline_equals_megatron(all_cases, megatron_outputs, tmp_path):
    """Equal bytes wherever preprocess_data.py writes its pair; where its worker crashes (a
    class whose unk token is missing from the vocabulary, a piece mapped to None), a
    ConvertError naming the record, never a traceback or a pair."""
    names = [name for name in all_cases if name.startswith("class ")]
    classes = {name.split()[1] for name in names}
    assert len(classes) >= 60, sorted(classes)  # transformers 5.23 builds 65 of its classes from these folders
    different, crashed = [], []
    for name in names:
        if megatron_outputs[name][1]:
            crashed.append(name)
            with pytest.raises(ConvertError, match=r"in\.jsonl, line \d+: 'text': the tokenizer cannot encode"):
                ours(all_cases[name], tmp_path)
            continue
        try:
            check(name, all_cases, megatron_outputs, tmp_path)
        except AssertionError as error:
            different.append(f"{name}: {str(error)[:200]}")
    assert not different, "\n".join(different)
    assert len(crashed) < len(names) // 10, crashed


# --- Megatron's vocabulary-file tokenizers ----------------------------------------------

def byte_level_bpe(vocab_size: int):
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(TRAINING, trainer)
    return tokenizer


def gpt2_byte_decoder() -> dict:
    """GPT-2's byte-level alphabet, inverted: printable stand-in character -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    stand_ins = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in stand_ins:
            stand_ins[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in stand_ins.items()}


def write_tiktoken_vocab(path) -> int:
    """A tiktoken-format vocabulary (Megatron's: a JSON list of rank, base64 token_bytes,
    token_str): the 256 bytes, then a byte-level BPE's tokens in id order; its length."""
    import base64

    decode = gpt2_byte_decoder()
    tokenizer = byte_level_bpe(700)
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        if token == "<|endoftext|>":
            continue
        data = bytes(decode[c] for c in token)
        if data not in seen:
            seen.add(data)
            ranks.append(data)
    entries = [{"rank": i, "token_bytes": base64.b64encode(data).decode(), "token_str": data.decode("utf-8", "replace")}
               for i, data in enumerate(ranks)]
    path.write_text(json.dumps(entries))
    return len(entries)


def vocab_file_cases(root, source) -> list[Case]:
    """GPT2BPETokenizer and BertWordPiece*: Megatron-LM's own tokenizers (--legacy-tokenizer,
    the path that builds from the files offline); TikTokenizer: the default path's."""
    cases = []
    folder = root / "gpt2_files"
    folder.mkdir()
    byte_level_bpe(500).model.save(str(folder))  # vocab.json + merges.txt ("#version: 0.2" first)
    vocab, merges = str(folder / "vocab.json"), str(folder / "merges.txt")
    cases.append(Case("GPT2BPETokenizer", ["--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab,
                                           "--merge-file", merges, "--legacy-tokenizer"],
                      "GPT2BPETokenizer", source, options={"tokenizer_options": {"vocab_file": vocab,
                                                                                 "merge_file": merges}}))
    wordpiece = train("wordpiece")
    path = root / "bert_vocab.txt"
    path.write_text("".join(token + "\n" for token, _ in sorted(wordpiece.get_vocab().items(), key=lambda t: t[1])),
                    encoding="utf-8")
    for kind in ("BertWordPieceLowerCase", "BertWordPieceCase"):
        cases.append(Case(kind, ["--tokenizer-type", kind, "--vocab-file", str(path), "--legacy-tokenizer"], kind,
                          source, options={"tokenizer_options": {"vocab_file": str(path)}}))
    path = root / "tiktoken" / "vocab.json"
    path.parent.mkdir()
    size = write_tiktoken_vocab(path)
    for pattern, special in (("v2", 1000), ("v1", 12)):
        argv = ["--tokenizer-type", "TikTokenizer", "--tokenizer-model", str(path), "--vocab-size", str(size + special),
                "--tiktoken-num-special-tokens", str(special), "--tiktoken-pattern", pattern]
        options = {"tokenizer_options": {"tokenizer_model": str(path), "tiktoken_pattern": pattern,
                                         "tiktoken_num_special_tokens": special}, "vocab_size": size + special}
        cases.append(Case(f"TikTokenizer {pattern}", argv, "TikTokenizer", source, options=options))
    return cases


@pytest.mark.parametrize("name", ["GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase",
                                  "TikTokenizer v2", "TikTokenizer v1"])
def test_megatron_vocab_file_tokenizers(name, all_cases, megatron_outputs, tmp_path):
    check(name, all_cases, megatron_outputs, tmp_path)


# --- item 5: JSON lines ended by a bare \r ---------------------------------------------

def bare_cr_case(root) -> Case:
    folder = save_folder(root / "cr", train("wordlevel"), eos_token="</s>")
    path = root / "cr.jsonl"
    with open(path, "w", encoding="utf-8", newline="") as f:
        for k, text in enumerate(DOCUMENTS):
            f.write(json.dumps({"text": text}) + ("\r", "\r\n", "\n")[k % 3])
    return Case("bare_cr", ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", folder], folder,
                str(path))


def test_jsonl_with_bare_cr_line_ends_read_as_megatron_reads_it(all_cases, megatron_outputs, tmp_path):
    from mmidx_builder.sources.indexed import IndexedFile

    check("bare_cr", all_cases, megatron_outputs, tmp_path)
    assert IndexedFile.open(megatron_outputs["bare_cr"][0]).num_documents == len(DOCUMENTS)


# --- item 6: an id past the output dtype -----------------------------------------------

def sparse_case(root) -> Case:
    """A WordLevel vocabulary of three entries whose ids run to 70,000."""
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "a": 1, "far": 70000}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    folder = root / "sparse"
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    source = write_jsonl(root / "sparse.jsonl", ["a a", "a far a"])
    return Case("sparse_ids", ["--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(folder)],
                str(folder), source, append_eod=False)


def test_token_id_past_the_dtype_is_one_line_from_the_cli(all_cases, megatron_outputs, tmp_path):
    """The dtype follows the vocabulary size (uint16, as Megatron picks it) and the id 70,000
    does not fit: preprocess_data.py's worker dies with an OverflowError, convert says so."""
    assert megatron_outputs["sparse_ids"][1]  # no pair from Megatron
    case = all_cases["sparse_ids"]
    done = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "convert", case.input, "--output-prefix",
                           str(tmp_path / "out"), "--tokenizer", case.tokenizer, "--no-progress"],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "line 2" in done.stderr and "70000" in done.stderr and "uint16" in done.stderr
    assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]


# --- without transformers --------------------------------------------------------------

def test_without_transformers_generic_folders_follow_the_config(all_cases, megatron_outputs, tmp_path):
    """The files-only build (no transformers installed) of generic-class folders:
    split_special_tokens and the config's unk_token, as Megatron's ids have them."""
    from mmidx_builder.convert.tokenize import HFTokenizersTokenizer

    for name in ("split_special_tokens", "config_unk_token", "bare_cr"):
        case = dataclasses.replace(all_cases[name], tokenizer=HFTokenizersTokenizer(all_cases[name].tokenizer,
                                                                                    use_transformers=False))
        prefix, error = megatron_outputs[name]
        assert not error
        assert same_bytes(ours(case, tmp_path / name), prefix), name


def test_without_transformers_a_class_folder_is_refused_with_the_install_hint(all_cases):
    from mmidx_builder.convert.tokenize import HFTokenizersTokenizer

    with pytest.raises(ConvertError, match=r"tokenizer_class 'GPT2TokenizerFast'.*pip install 'mmidx-builder\[transformers\]'"):
        HFTokenizersTokenizer(all_cases["gpt2_tokenizer_fast_normaliser"].tokenizer, use_transformers=False)


# --- preprocess_data.py's own command lines, run unchanged by `mmidx preprocess-data` ----------

COMMAND_LINES = {  # Megatron-LM's docs and examples, pointed at files made here
    # README.md, "Data Preprocessing" (GPT): its command line, with --workers (required by both) and
    # --legacy-tokenizer (without it core_v0.16.1 builds GPT-2 through transformers from the Hub)
    "readme_gpt2": "--input {d}/corpus.jsonl --output-prefix {out} --vocab-file {gpt2}/vocab.json "
                   "--tokenizer-type GPT2BPETokenizer --merge-file {gpt2}/merges.txt --append-eod --workers 2 "
                   "--legacy-tokenizer",
    # README.md (BERT), without --split-sentences (nltk would download Punkt), Megatron's own tokenizer
    "readme_bert": "--input {d}/corpus.jsonl --output-prefix {out} --vocab-file {bert} "
                   "--tokenizer-type BertWordPieceLowerCase --legacy-tokenizer --workers 1",
    # shared/MEGATRON_CORE.md's measured form, a Hugging Face tokenizer folder
    "huggingface": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                   "--tokenizer-model {hf} --append-eod --workers 2",
    "include_special_tokens": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                              "--tokenizer-model {hf} --tokenizer-hf-include-special-tokens --workers 1 "
                              "--log-interval 5",
    # examples/llama's tokenizer kinds, over a sentencepiece model trained here
    "sentencepiece": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type GPTSentencePieceTokenizer "
                     "--tokenizer-model {sp} --append-eod --workers 1",
    "llama2_legacy": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type Llama2Tokenizer "
                     "--tokenizer-model {sp} --legacy-tokenizer --append-eod --workers 1",
    # --partitions: lines dealt to the partitions in turn, then the pairs joined in partition order
    "partitions": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                  "--tokenizer-model {hf} --append-eod --workers 2 --partitions 2",
    # (an input of its own: preprocess_data.py reuses the partition files it finds beside its input)
    "partitions_sequential": "--input {d}/sequential.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                             "--tokenizer-model {hf} --append-eod --workers 2 --partitions 2 "
                             "--keep-sequential-samples",
    "partitions_glob": "--input {d}/parts/*.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                       "--tokenizer-model {hf} --workers 3 --partitions 3",
    "json_keys": "--input {d}/keys.jsonl --json-keys text title --output-prefix {out} "
                 "--tokenizer-type GPT2BPETokenizer --vocab-file {gpt2}/vocab.json --merge-file {gpt2}/merges.txt "
                 "--legacy-tokenizer --append-eod --workers 1",
}


# core_v0.19.0's script: no --legacy-tokenizer nor --tokenizer-hf-include-special-tokens (its
# HuggingFaceTokenizer includes the special tokens by default), so the lines of COMMAND_LINES it takes
# and lines of its own flags, over a BertTokenizer folder whose post-processor adds [CLS] ... [SEP].
COMMAND_LINES_019 = {
    **{name: COMMAND_LINES[name] for name in ("huggingface", "sentencepiece", "partitions", "partitions_sequential",
                                              "partitions_glob")},
    # README.md's GPT line as it is: core_v0.19 opens the Hub's "gpt2" through transformers with the
    # files given; a folder "gpt2" in its working directory, of the same files, stands in for the repo
    # (gpt2_stand_in). "a<|endoftext|>b" of DOCUMENTS is one special token there.
    "readme_gpt2": "--input {d}/corpus.jsonl --output-prefix {out} --vocab-file {gpt2}/vocab.json "
                   "--tokenizer-type GPT2BPETokenizer --merge-file {gpt2}/merges.txt --append-eod --workers 2",
    "bert_special_tokens": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                           "--tokenizer-model {bert_hf} --append-eod --workers 1",
    "bert_no_special_tokens": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                              "--tokenizer-model {bert_hf} --tokenizer-hf-no-include-special-tokens "
                              "--tokenizer-hf-no-use-fast --append-eod --workers 1 --log-interval 5",
    "bert_partitions": "--input {d}/bert.jsonl --output-prefix {out} --tokenizer-type HuggingFaceTokenizer "
                       "--tokenizer-model {bert_hf} --append-eod --workers 2 --partitions 2",
    "llama2": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type Llama2Tokenizer "
              "--tokenizer-model {sp} --append-eod --workers 1",
    "tiktoken": "--input {d}/corpus.jsonl --output-prefix {out} --tokenizer-type TikTokenizer --tokenizer-model {tik} "
                "--tiktoken-pattern v2 --vocab-size {tik_size} --append-eod --workers 1",
    # every key's .idx is written from core_v0.17 on
    "json_keys_hf": "--input {d}/keys.jsonl --json-keys text title --output-prefix {out} "
                    "--tokenizer-type HuggingFaceTokenizer --tokenizer-model {bert_hf} --append-eod --workers 1",
}


def gpt2_stand_in(root, work: str) -> None:
    """``work/gpt2``: what AutoTokenizer.from_pretrained("gpt2") finds before the Hub (a folder of
    that name in the working directory), holding the vocabulary files the command line gives, as
    the README's gpt2-vocab.json and gpt2-merges.txt are the Hub repo's."""
    folder = os.path.join(work, "gpt2")
    os.makedirs(folder, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(root / "gpt2_files" / name, folder)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2"}, f)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 1024}, f)


def command_line(name: str, root, side: str, table: dict = COMMAND_LINES) -> list[str]:
    """table[name] for one side: each side reads its own copy of the inputs (Megatron-LM
    writes its partition files beside them, where a glob would find them) and writes its own outputs."""
    import shlex

    d = root / side
    if not d.exists():
        (d / "parts").mkdir(parents=True)
        (d / "out").mkdir()
        write_jsonl(d / "corpus.jsonl", DOCUMENTS)  # 29 lines: partitions of unequal sizes
        write_jsonl(d / "sequential.jsonl", DOCUMENTS)
        write_jsonl(d / "bert.jsonl", DOCUMENTS, newline="\r\n")
        write_jsonl(d / "parts" / "a.jsonl", DOCUMENTS[:11])
        write_jsonl(d / "parts" / "b.jsonl", DOCUMENTS[11:], newline="\r\n")
        with open(d / "keys.jsonl", "w", encoding="utf-8") as f:
            for k, text in enumerate(DOCUMENTS):
                f.write(json.dumps({"title": f"Title {k} {text[:9]}", "text": text}) + "\n")
    tiktoken = root / "tiktoken" / "vocab.json"
    text = table[name].format(d=d, out=d / "out" / name, gpt2=root / "gpt2_files", bert=root / "bert_vocab.txt",
                              hf=root / "cr", sp=root / "sp.model", bert_hf=root / "bert_cased", tik=tiktoken,
                              tik_size=len(json.loads(tiktoken.read_text())) + 1000)
    return shlex.split(text)


@pytest.mark.parametrize("release, name", [("core_v0.16", name) for name in COMMAND_LINES]
                         + [("core_v0.19", name) for name in COMMAND_LINES_019])
def test_preprocess_data_command_lines_run_unchanged_with_the_same_pairs(release, name, all_cases, megatron_outputs,
                                                                         root):
    """Each release's command line, given to `mmidx preprocess-data --megatron-version RELEASE`."""
    from mmidx_builder.cli import main

    if release == "core_v0.16":
        prefix, error = megatron_outputs[f"cli:{name}"]
        side, table = "ours", COMMAND_LINES
    else:
        prefix, error = megatron_outputs[f"core_v0.19:{name}"]
        side, table = "ours19", COMMAND_LINES_019
    argv = command_line(name, root, side, table)
    keys = argv[argv.index("--json-keys") + 1:argv.index("--output-prefix")] if "--json-keys" in argv else ["text"]
    # core_v0.16.1 finalizes the last key's .idx only (its finalize call sits after its loop over the
    # keys): the other keys' .bin files are the same, their .idx is never written there.
    last_only = release == "core_v0.16" and len(keys) > 1
    unwritten = f"no {prefix}_{keys[0]}_document.idx" if last_only else ""
    assert error == unwritten, f"{release}'s preprocess_data.py failed on {name}: {error}"
    assert main(["preprocess-data", "--megatron-version", release, *argv]) == 0
    for k, key in enumerate(keys):
        theirs, mine = f"{prefix}_{key}_document", str(root / side / "out" / f"{name}_{key}_document")
        if last_only and k < len(keys) - 1:
            assert open(mine + ".bin", "rb").read() == open(theirs + ".bin", "rb").read(), (name, key)
        else:
            assert same_bytes(mine, theirs), (release, name, key)


def test_core_v0_19_default_includes_the_special_tokens_that_core_v0_16_leaves_out(megatron_outputs):
    """The table's discriminating pair: core_v0.19's default over a BertTokenizer folder adds
    [CLS] ... [SEP] to every document (an empty one becomes [CLS] [SEP] and then gets its EOD);
    with --tokenizer-hf-no-include-special-tokens it does not."""
    from mmidx_builder.sources.indexed import IndexedFile

    with_tokens = IndexedFile.open(megatron_outputs["core_v0.19:bert_special_tokens"][0] + "_text_document")
    without = IndexedFile.open(megatron_outputs["core_v0.19:bert_no_special_tokens"][0] + "_text_document")
    assert with_tokens.num_documents == without.num_documents
    for i in range(without.num_documents):
        n = len(without.document(i))
        assert len(with_tokens.document(i)) == (n + 2 if n else 3), i


def test_without_megatron_version_the_newest_release_is_followed_and_said(root, capsys, all_cases):
    from mmidx_builder.cli import main

    argv = command_line("bert_special_tokens", root, "ours19", COMMAND_LINES_019)
    argv[argv.index("--output-prefix") + 1] += "_default"
    assert main(["preprocess-data", *argv]) == 0
    assert "following core_v0.19's preprocess_data.py (the default --megatron-version)" in capsys.readouterr().err
    prefix = argv[argv.index("--output-prefix") + 1]
    assert same_bytes(prefix + "_text_document", str(root / "megatron19" / "out" / "bert_special_tokens_text_document"))


@pytest.mark.parametrize("flags, says", [
    ("--tokenizer-type NullTokenizer --vocab-size 100", "NullTokenizer is not supported by mmidx: .*--tokenizer none"),
    ("--megatron-version core_v0.16 --tokenizer-type HuggingFaceTokenizer --tokenizer-model M --tokenizer-hf-use-fast",
     "--tokenizer-hf-use-fast is not followed by mmidx"),
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model M --tokenizer-hf-include-special-tokens",
     "--tokenizer-hf-include-special-tokens is a flag of core_v0.16's preprocess_data.py, not of core_v0.19's "
     r"\(--megatron-version core_v0.19, the default\): add --megatron-version core_v0.16"),
    ("--megatron-version core_v0.19 --tokenizer-type Llama2Tokenizer --tokenizer-model M --legacy-tokenizer",
     "--legacy-tokenizer is a flag of core_v0.16's preprocess_data.py, not of core_v0.19's"),
    ("--megatron-version core_v0.16 --tokenizer-type HuggingFaceTokenizer --tokenizer-model M "
     "--tokenizer-hf-no-include-special-tokens", "--tokenizer-hf-no-include-special-tokens is a flag of core_v0.19's "
                                                 "preprocess_data.py, not of core_v0.16's"),
    ("--tokenizer-type BertWordPieceLowerCase --vocab-file V", "core_v0.19: its script adds \\[CLS\\] ... \\[SEP\\]"),
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model M --partitions 2", "--workers 1 is not divisible by "
                                                                                 "--partitions 2"),
    ("--tokenizer-type GPT2BPETokenizer --vocab-file V", "GPT2BPETokenizer needs --merge-file"),
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model M --find-optimal-num-workers", "run with --workers N"),
])
def test_a_preprocess_data_flag_not_followed_is_refused_naming_what_to_use(flags, says, tmp_path, capsys):
    from mmidx_builder.cli import main

    with pytest.raises(SystemExit):
        main(["preprocess-data", "--input", "x.jsonl", "--output-prefix", str(tmp_path / "o"), "--workers", "1",
              *flags.split()])
    assert re.search(says, capsys.readouterr().err)
    assert not list(tmp_path.iterdir())


def test_mmidx_convert_given_preprocess_data_flags_names_the_command_that_takes_them(capsys):
    from mmidx_builder.cli import main

    with pytest.raises(SystemExit):
        main(["convert", "--input", "x.jsonl", "--output-prefix", "o", "--tokenizer-type", "HuggingFaceTokenizer",
              "--workers", "1"])
    assert "run its command line unchanged as `mmidx preprocess-data" in capsys.readouterr().err


def test_every_flag_of_preprocess_data_is_taken_by_mmidx_preprocess_data(megatron_outputs):
    """Its parser's options at each release (with the tokenizer flags it adds): each one is
    parsed by `mmidx preprocess-data`, then followed or refused by name, never unrecognized;
    the flags of one release only are the ones refused under the other (ONLY_IN)."""
    from mmidx_builder.cli import build_parser
    from mmidx_builder.cli.preprocess_data import ONLY_IN

    options = {release: set(found) - {"-h", "--help"} for release, found in megatron_outputs["options"].items()}
    for release, theirs in options.items():
        assert {"--input", "--partitions", "--tokenizer-type", "--keep-sequential-samples"} <= theirs
        command = build_parser()._subparsers._group_actions[0].choices["preprocess-data"]
        ours = {o for a in command._actions for o in a.option_strings}
        assert theirs <= ours, (release, sorted(theirs - ours))
    own = {release: {flag for flag, _ in ONLY_IN[release].values()} for release in ONLY_IN}
    # (a flag with aliases is listed once in ONLY_IN: its aliases are checked as the same option)
    aliases = {"--disable-pad-vocab-size": "--no-pad-vocab-size",
               "--disable-tokenizer-sentencepiece-ignore-extra-whitespaces":
                   "--no-tokenizer-sentencepiece-ignore-extra-whitespaces"}
    only = {r: {aliases.get(o, o) for o in options[r] - options[other]} for r, other in
            (("core_v0.16", "core_v0.19"), ("core_v0.19", "core_v0.16"))}
    assert only == own
