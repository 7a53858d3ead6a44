"""`mmidx inspect` and `mmidx show`: numbers from the documents, one-line errors, exit code 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mmidx_builder import cli
from mmidx_builder.sources.indexed import IndexedFileWriter, write_documents

MMIDX = os.path.join(os.path.dirname(sys.executable), "mmidx")

# Sequences per document: an empty document, a document of two sequences, a long one.
DOCUMENTS = [[[5, 6, 7]], [], [[1], [2, 3, 4, 5]], [list(range(100, 1100))], [[9, 9]]]


@pytest.fixture
def pair(tmp_path):
    prefix = str(tmp_path / "corpus")
    with IndexedFileWriter(prefix, vocab_size=70000) as writer:
        for document in DOCUMENTS:
            for sequence in document:
                writer.add_sequence(sequence)
            writer.end_document()
    return prefix


@pytest.fixture
def corrupt(tmp_path):
    prefix = write_documents(tmp_path / "bad", [[1, 2, 3]], dtype=np.uint16)
    with open(prefix + ".idx", "r+b") as f:
        f.seek(9)
        f.write((7).to_bytes(8, "little"))  # version 7
    return prefix


def run(*args):
    return subprocess.run([MMIDX, *args], capture_output=True, text=True, timeout=120)


def test_inspect_json(pair):
    result = run("inspect", pair + ".idx", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    sequences = [s for d in DOCUMENTS for s in d]
    document_lengths = [sum(len(s) for s in d) for d in DOCUMENTS]
    assert info["flavour"] == "megatron"
    assert info["dtype"] == "int32"  # vocabulary 70000 > uint16, Megatron's table has no uint32
    assert info["num_sequences"] == len(sequences)
    assert info["num_documents"] == len(DOCUMENTS)
    assert info["num_tokens"] == sum(len(s) for s in sequences)
    assert info["shortest_document"] == min(document_lengths)
    assert info["longest_document"] == max(document_lengths)
    assert info["median_document"] == float(np.median(document_lengths))
    assert info["idx_bytes"] == os.path.getsize(pair + ".idx")
    assert info["bin_bytes"] == os.path.getsize(pair + ".bin")


def test_inspect_text(pair, capsys):
    assert cli.main(["inspect", pair]) == 0
    out = capsys.readouterr().out
    assert "megatron" in out and "int32" in out
    tokens = sum(len(s) for d in DOCUMENTS for s in d)
    assert tokens > 1000 and f"{tokens:,}" in out  # with thousands separators
    assert f"{os.path.getsize(pair + '.bin'):,}" in out


def test_inspect_fairseq_and_empty(tmp_path, capsys):
    fairseq = write_documents(tmp_path / "fs", [[1, 2], [3]], dtype=np.uint32, flavour="fairseq")
    assert cli.main(["inspect", fairseq, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["flavour"], info["dtype"], info["num_documents"]) == ("fairseq", "uint32", 2)
    empty = write_documents(tmp_path / "empty", [], dtype=np.uint16)
    assert cli.main(["inspect", empty]) == 0
    assert "None" not in capsys.readouterr().out


def test_show_json_lines(pair):
    result = run("show", pair, "--sequences", "1:4", "--json")
    assert result.returncode == 0, result.stderr
    sequences = [s for d in DOCUMENTS for s in d]
    assert [json.loads(line) for line in result.stdout.splitlines()] == sequences[1:4]


def test_show_text_and_ranges(pair, capsys):
    sequences = [s for d in DOCUMENTS for s in d]
    assert cli.main(["show", pair, "--sequences", "0:2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{i}\t{' '.join(map(str, s))}" for i, s in enumerate(sequences[:2])]
    assert cli.main(["show", pair, "--sequences=-1:", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == sequences[-1]
    assert cli.main(["show", pair, "--sequences", "3:100", "--json"]) == 0  # clipped like a slice
    assert len(capsys.readouterr().out.splitlines()) == len(sequences) - 3


@pytest.mark.parametrize("command", [["inspect"], ["inspect", "--json"], ["show"], ["show", "--json"]])
def test_corrupt_file_one_line_exit_1(corrupt, command):
    result = run(*command[:1], corrupt, *command[1:])
    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "bad.idx" in lines[0] and "version" in lines[0]


@pytest.mark.parametrize("argv", [
    ["inspect", "{corrupt}"], ["show", "{corrupt}"], ["inspect", "{missing}"],
    ["show", "{pair}", "--sequences", "a:b"], ["show", "{pair}", "--sequences", "1:2:3"],
])
def test_errors_through_main(corrupt, pair, tmp_path, capsys, argv):
    argv = [a.format(corrupt=corrupt, pair=pair, missing=tmp_path / "missing") for a in argv]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith(f"mmidx {argv[0]}: error:")


def test_missing_partner_names_the_missing_file(pair, capsys):
    os.remove(pair + ".bin")
    assert cli.main(["inspect", pair]) == 1
    assert "corpus.bin" in capsys.readouterr().err
