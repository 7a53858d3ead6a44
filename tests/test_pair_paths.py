"""A pair named by its prefix, its .bin or its .idx is the same pair, in the library's Megatron
arguments and in every ``mmidx`` command that takes a pair (inspect, show, samples, merge)."""

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  (registers the builders)
from mmidx_builder.cli import main
from mmidx_builder.sources.indexed import IndexedFile, write_documents

COMMAND = ("--data-path 0.4 {a} 0.6 {b} --split 90,10,0 --seq-length 8 --train-samples 40 --global-batch-size 2 "
           "--eval-iters 1 --eval-interval 10 --seed 9")


@pytest.fixture
def pairs(tmp_path):
    rng = np.random.default_rng(11)
    return [write_documents(tmp_path / name, [rng.integers(1, 900, n) for n in rng.integers(0, 40, 60)],
                            dtype=np.uint16)
            for name in ("a_text_document", "b_text_document")]


@pytest.mark.parametrize("suffix", [".bin", ".idx"])
def test_megatron_arguments_take_a_pair_file_as_its_prefix(pairs, tmp_path, suffix):
    a, b = pairs
    by_prefix = load_dataset("mmidx", megatron_args=COMMAND.format(a=a, b=b), cache_dir=str(tmp_path / "c1"))
    by_file = load_dataset("mmidx", megatron_args=COMMAND.format(a=a + suffix, b=b), cache_dir=str(tmp_path / "c2"))
    for split in ("train", "validation"):
        assert by_file[split]["input_ids"] == by_prefix[split]["input_ids"]
        assert by_file[split]["dataset_id"] == by_prefix[split]["dataset_id"]
    keywords = load_dataset("mmidx", data_path=["0.4", a + suffix, "0.6", b + suffix], split_ratios="90,10,0",
                            num_samples={"train": 40, "validation": 2}, seq_length=8, seed=9,
                            cache_dir=str(tmp_path / "c3"))
    assert keywords["train"]["input_ids"] == by_prefix["train"]["input_ids"]


def _out(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("suffix", [".bin", ".idx"])
def test_every_command_that_takes_a_pair_takes_its_files(pairs, tmp_path, capsys, suffix):
    a, b = pairs
    for argv in (["inspect", "{a}"], ["show", "{a}", "--sequences", "3:9"],
                 ["samples", "{a}", "--seq-length", "8", "--first", "5"],
                 ["samples", "--megatron-args", COMMAND.replace("{b}", b)]):
        by_prefix = _out(capsys, *[arg.format(a=a) for arg in argv])
        by_file = _out(capsys, *[arg.format(a=a + suffix) for arg in argv])
        assert by_file == by_prefix, argv
    merged = {}
    for name, given in (("by-prefix", a), ("by-file", a + suffix)):
        out = str(tmp_path / name / "merged")
        _out(capsys, "merge", given, b + suffix, "--output-prefix", out + suffix)
        merged[name] = IndexedFile.open(out)
    assert merged["by-file"].num_sequences == merged["by-prefix"].num_sequences == 120
    np.testing.assert_array_equal(merged["by-file"].sequence(100), merged["by-prefix"].sequence(100))
