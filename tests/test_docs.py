"""Every ```python, ```bash and ```sh block of README.md and docs/*.md runs (docs/testing.md).

A documented call that breaks fails here. The blocks of one file run in order, in one
temporary folder the ``docs_workspace`` fixture fills with the small data the docs name
(``data/``, ``raw/``, ``data-bin/``, ``texts/``, ``tokenizer.json`` ...), and the Python blocks
of one file share one namespace, as a reader's session would. A block is skipped only when
the line right before its fence says why:

    <!-- skip-test: needs a GPU -->              never run here; the reason is reported
    <!-- requires: transformers accelerate -->   run when these import (always under
                                                 MMIDX_REQUIRE_ORACLE=1, as in CI)

A new docs file needs nothing here: its blocks are collected by name. A file that makes its
own data from nothing (docs/fairseq.md runs fairseq-preprocess) says so in its first lines,
``<!-- workspace: empty -->``, and its blocks run in an empty folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w+)?\s*$")
EMPTY_WORKSPACE = "<!-- workspace: empty -->"
MARK = re.compile(r"<!--\s*(skip-test|requires):\s*(.*?)\s*-->")
RUN = {"python": "python", "bash": "bash", "sh": "bash"}
EOD = 0


def blocks(path: pathlib.Path) -> list[dict]:
    """The fenced blocks of ``path``: language, first line number, code, and the marks on the
    lines just above the fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        marks, k = {}, i - 1
        while k >= 0 and MARK.search(lines[k]):
            kind, value = MARK.search(lines[k]).groups()
            marks[kind] = value
            k -= 1
        found.append({"language": opened.group(1) or "", "line": i + 1, "code": "\n".join(lines[i + 1:end]),
                      "marks": marks})
        i = end + 1
    return found


def runnable(path):
    return [b for b in blocks(path) if b["language"] in RUN]


def _missing(modules: str) -> list[str]:
    return [m for m in modules.split() if not _importable(m)]


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# --- the small data the docs name ------------------------------------------------------------------

def _documents(rng, count, high=60, vocab=1000, eod=True):
    docs = []
    for n in rng.integers(1, high, count).tolist():
        doc = rng.integers(1, vocab, n)
        if eod:
            doc[-1] = EOD
        docs.append(doc)
    return docs


def make_workspace(folder: pathlib.Path) -> pathlib.Path:
    """The files the docs' blocks use, small enough that every block runs in seconds."""
    from mmidx_builder.sources import provenance
    from mmidx_builder.sources.indexed import write_documents

    rng = np.random.default_rng(20)
    (folder / "data").mkdir(parents=True)
    for name, count in (("a_text_document", 400), ("b_text_document", 300), ("corpus_text_document", 500)):
        prefix = write_documents(folder / "data" / name, _documents(rng, count), dtype=np.uint16)
        provenance.write_sidecar(prefix, tokenizer="docs-tiny", vocab_size=1000, eod_id=EOD, append_eod=True)
    (folder / "corpus").mkdir()
    for split, count in (("train", 300), ("validation", 60)):
        prefix = write_documents(folder / "corpus" / split, _documents(rng, count), dtype=np.uint16)
        provenance.write_sidecar(prefix, tokenizer="docs-tiny", vocab_size=1000, eod_id=EOD, append_eod=True)
    for label, sizes in (("cat", (300, 1200)), ("dog", (500, 70))):
        (folder / "raw" / label).mkdir(parents=True)
        for i, size in enumerate(sizes):
            (folder / "raw" / label / f"{i}.jpg").write_bytes(rng.bytes(size))
    (folder / "data-bin").mkdir()
    for lang in ("de", "en"):
        symbols = [f"{lang}{i}" for i in range(40)]
        (folder / "data-bin" / f"dict.{lang}.txt").write_text("".join(f"{s} {100 - i}\n" for i, s in enumerate(symbols)))
    for shard, count in (("train", 50), ("train1", 20), ("valid", 10)):
        lengths = rng.integers(1, 12, count)
        for lang in ("de", "en"):
            sentences = [np.append(rng.integers(4, 44, n), 2) for n in lengths.tolist()]
            write_documents(folder / "data-bin" / f"{shard}.de-en.{lang}", sentences, dtype=np.int32, flavour="fairseq")
    (folder / "texts").mkdir()
    words = "the a corpus of token files trains models fast and exactly as megatron does".split()
    for part in range(2):
        with open(folder / "texts" / f"part-{part}.jsonl", "w") as f:
            for _ in range(40):
                f.write(json.dumps({"text": " ".join(rng.choice(words, int(rng.integers(3, 30))).tolist())}) + "\n")
    _write_tokenizer(folder / "tokenizer.json", words)
    # LLM Foundry's layout (out_root/train and out_root/val: samples of 64 ids, ndarray:int32),
    # written by our own MDS writer so that the docs do not need mosaicml-streaming.
    from mmidx_builder.convert import pairs_to_mds

    for split, prefix in (("train", "corpus_text_document"), ("val", "b_text_document")):
        pairs_to_mds(folder / "data" / prefix, folder / "mds" / split, concat_tokens=64)
    shutil.copy(ROOT / "hub_upload.py", folder / "hub_upload.py")
    return folder


def _write_tokenizer(path, words):
    tokenizers = pytest.importorskip("tokenizers")
    vocab = {"<unk>": 0, "<|endoftext|>": 1, **{w: i + 2 for i, w in enumerate(sorted(set(words)))}}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(path))


# --- running them ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def namespaces():
    return {}


@pytest.fixture(scope="module")
def workspaces(tmp_path_factory):
    made = {}

    def get(doc: str) -> pathlib.Path:
        if doc not in made:
            folder = tmp_path_factory.mktemp("docs-" + doc.replace("/", "-"))
            head = (ROOT / doc).read_text(encoding="utf-8").splitlines()[:5]
            made[doc] = folder if EMPTY_WORKSPACE in head else make_workspace(folder)
        return made[doc]

    return get


CASES = [pytest.param(path, block, id=f"{path.relative_to(ROOT)}:{block['line']}")
         for path in DOCS for block in runnable(path)]


@pytest.mark.parametrize("path, block", CASES)
def test_documented_block_runs(path, block, workspaces, namespaces, monkeypatch):
    marks = block["marks"]
    if "skip-test" in marks:
        pytest.skip(f"marked in {path.name}: {marks['skip-test']}")
    missing = _missing(marks.get("requires", ""))
    if missing:
        if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
            pytest.fail(f"{path.name}:{block['line']} needs {missing}, which CI installs")
        pytest.skip(f"needs {missing}")
    doc = str(path.relative_to(ROOT))
    workspace = workspaces(doc)
    cache = workspace / "hf-cache"
    env = {**os.environ, "HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if RUN[block["language"]] == "bash":
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]], cwd=workspace, env=env,
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, (f"{doc}:{block['line']} failed:\n{block['code']}\n--- stdout\n"
                                        f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
        return
    import datasets.config

    monkeypatch.chdir(workspace)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    namespace = namespaces.setdefault(doc, {"__name__": "__docs__"})
    code = compile(block["code"], f"{doc}:{block['line']}", "exec")
    exec(code, namespace)  # noqa: S102  (the docs' own code, which is what this test runs)


def test_the_docs_have_blocks_and_few_are_skipped():
    """The collection itself: a broken fence would silently drop every block after it."""
    all_blocks = [b for path in DOCS for b in runnable(path)]
    skipped = [b for b in all_blocks if "skip-test" in b["marks"]]
    assert len(all_blocks) >= 20
    assert len(skipped) <= len(all_blocks) // 3, [b["marks"] for b in skipped]
    for path in DOCS:
        assert path.read_text(encoding="utf-8").count("```") % 2 == 0, f"{path.name}: an unclosed fence"



def test_the_tokenizer_lists_agree_with_each_other_and_with_convert_help():
    """Issue 40 item 5: docs/convert.md said Megatron's GPT2BPETokenizer, BertWordPiece* and
    TikTokenizer were not supported, while the README, `mmidx convert --help` and
    docs/tokenizers.md (and the code, convert/megatron_tokenizers.NAMES) say they are."""
    from mmidx_builder.convert.megatron_tokenizers import NAMES

    helped = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "convert", "--help"], capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert helped.returncode == 0, helped.stderr
    texts = {"mmidx convert --help": " ".join(helped.stdout.split())}
    for doc in ("README.md", "docs/tokenizers.md", "docs/convert.md"):
        texts[doc] = (ROOT / doc).read_text(encoding="utf-8")
    # convert.md's own list of what --tokenizer takes, and tokenizers.md's table, name each one.
    tokenizer_row = next(line for line in texts["docs/convert.md"].splitlines() if line.startswith("| `--tokenizer T`"))
    table = "\n".join(line for line in texts["docs/tokenizers.md"].split("\n## ")[0].splitlines() if line.startswith("|"))
    texts.update({"docs/convert.md's --tokenizer row": tokenizer_row, "docs/tokenizers.md's table": table})
    for where, text in texts.items():
        missing = [name for name in NAMES if not re.search(rf"\b{name}\b", text)]
        assert not missing, f"{where} does not name {missing}"
    for doc in ("README.md", "docs/tokenizers.md", "docs/convert.md"):
        for line in texts[doc].splitlines():
            said = [name for name in NAMES if name in line]
            assert not (said and re.search(r"not supported|unsupported|not offered", line, re.I)), \
                f"{doc} says {said} are not supported: {line[:200]}"
