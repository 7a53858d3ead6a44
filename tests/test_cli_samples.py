"""`mmidx samples`: what training will see, printed or as JSON."""

import json

import numpy as np
import pytest

from mmidx_builder.megatron import sampling
from mmidx_builder.cli import main
from mmidx_builder.sources.indexed import IndexedFileWriter

LENGTHS = [5, 0, 61, 1, 17, 0, 9]  # an empty sequence, one longer than seq_length, a partial tail


@pytest.fixture
def prefix(tmp_path):
    path = str(tmp_path / "data")
    with IndexedFileWriter(path, dtype=np.uint16) as writer:
        for i, n in enumerate(LENGTHS):
            writer.add_document(np.arange(n) + 100 * i)
    return path


def run_json(capsys, *argv):
    assert main(["samples", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_is_the_whole_story(prefix, capsys):
    out = run_json(capsys, prefix, "--seq-length", "8", "--num-samples", "20", "--seed", "5", "--first", "4")
    indices = sampling.build_indices(np.array(LENGTHS, np.int32), seq_length=8, seed=5, num_samples=20)
    assert out["num_epochs"] == indices.num_epochs == 2
    assert out["num_samples"] == 20 and out["separate_final_epoch"] == indices.separate_final_epoch
    assert out["document_index"] == indices.document_index.tolist()
    assert out["sample_index"] == indices.sample_index.tolist()
    assert out["shuffle_index"] == indices.shuffle_index.tolist()
    # Each printed sample is 9 tokens of the epoch-ordered stream at shuffle_index[i] * 8.
    stream = np.concatenate([np.arange(LENGTHS[s]) + 100 * s for s in out["document_index"]])
    assert len(out["samples"]) == 4
    for i, sample in enumerate(out["samples"]):
        j = out["shuffle_index"][i]
        assert sample == stream[j * 8: j * 8 + 9].tolist()


def test_no_extra_token_and_whole_epochs(prefix, capsys):
    out = run_json(capsys, prefix, "--seq-length", "8", "--num-epochs", "3", "--no-extra-token", "--first", "100")
    assert out["num_epochs"] == 3 and out["num_samples"] == 3 * sum(LENGTHS) // 8
    assert not out["separate_final_epoch"]
    assert len(out["samples"]) == out["num_samples"] and {len(s) for s in out["samples"]} == {8}


def test_text_output(prefix, capsys):
    assert main(["samples", prefix, "--seq-length", "16", "--first", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    total = (sum(LENGTHS) - 1) // 16
    assert lines[0].split() == ["epochs", "1"]
    assert lines[1].startswith("samples") and f"{total:,}" in lines[1]
    assert "17 tokens" in lines[2] and lines[3].split()[-1] == "no"
    assert [len(line.split("\t")[1].split()) for line in lines[4:]] == [17, 17]


def test_save_indices(prefix, capsys, tmp_path):
    out_dir = tmp_path / "indices"
    out = run_json(capsys, prefix, "--seq-length", "8", "--num-samples", "20", "--save-indices", str(out_dir))
    for name in ("document_index", "sample_index", "shuffle_index"):
        assert np.load(out_dir / f"{name}.npy", allow_pickle=False).tolist() == out[name]
    assert json.loads((out_dir / "meta.json").read_text())["num_samples"] == 20


@pytest.mark.parametrize("argv, words", [
    (["--seq-length", "0"], "--seq-length must be at least 1, got 0"),  # the library's seq_length=, as a flag
    (["--seq-length", "500"], "lower seq_length"),
    (["--seq-length", "8", "--seed", "-3"], "--seed must be at least 0, got -3"),
    (["--seq-length", "8", "--num-samples", "0"], "--num-samples must be at least 1, got 0"),
    (["--seq-length", "8", "--first", "-1"], "--first"),
])
def test_bad_parameters_are_one_line(prefix, capsys, argv, words):
    assert main(["samples", prefix, *argv]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mmidx samples: error:") and words in err and len(err.strip().splitlines()) == 1


def test_epochs_and_samples_exclude_each_other(prefix):
    with pytest.raises(SystemExit) as exit_info:
        main(["samples", prefix, "--seq-length", "8", "--num-epochs", "2", "--num-samples", "3"])
    assert exit_info.value.code == 2


def test_missing_file_is_one_line(tmp_path, capsys):
    assert main(["samples", str(tmp_path / "nothing"), "--seq-length", "8"]) == 1
    assert "nothing" in capsys.readouterr().err


# --- every option changes the result or is refused (issue 20, item 7) -------------------------

def _megatron_command(prefix, seq_length=8, seed=None):
    seed = "" if seed is None else f" --seed {seed}"
    return (f"--data-path {prefix} --split 1,0,0 --seq-length {seq_length}{seed} --train-iters 3 "
            "--global-batch-size 4 --eval-iters 1 --eval-interval 2")


def test_seq_length_seed_and_no_extra_token_apply_to_a_megatron_command_line(prefix, capsys):
    """Beside --megatron-args, --seq-length and --seed override the command line's (as
    load_dataset's keywords do) and --no-extra-token gives seq_length-token samples: the same
    report as those values written inside the command line."""
    overridden = run_json(capsys, "--megatron-args", _megatron_command(prefix, 8, 5), "--seq-length", "6",
                          "--seed", "9", "--show", "0:6")
    written = run_json(capsys, "--megatron-args", _megatron_command(prefix, 6, 9), "--show", "0:6")
    default = run_json(capsys, "--megatron-args", _megatron_command(prefix, 8, 5), "--show", "0:6")
    assert overridden == written != default
    assert {len(s["input_ids"]) for s in written["train"]["samples"]} == {7}
    short = run_json(capsys, "--megatron-args", _megatron_command(prefix, 6, 9), "--no-extra-token", "--show", "0:6")
    assert {len(s["input_ids"]) for s in short["train"]["samples"]} == {6}
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401
    expected = load_dataset("mmidx", megatron_args=_megatron_command(prefix, 6, 9), add_extra_token=False,
                            split="train", streaming=True)
    assert [s["input_ids"] for s in short["train"]["samples"]] == [r["input_ids"] for r, _ in zip(expected, range(6))]


@pytest.mark.parametrize("extra, words", [
    (["--num-epochs", "2"], "--train-samples or --train-iters"),
    (["--num-samples", "20"], "--train-samples or --train-iters"),
    (["--first", "2"], "--show START:STOP"),
    (["--save-indices", "somewhere"], "PATH"),
])
def test_options_a_megatron_command_line_cannot_use_are_refused(prefix, capsys, extra, words):
    assert main(["samples", "--megatron-args", _megatron_command(prefix), *extra]) == 1
    err = capsys.readouterr().err
    assert extra[0] in err and words in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, words", [(["--split-name", "train"], "--megatron-args"),
                                          (["--show", "0:2"], "--first")])
def test_megatron_only_options_are_refused_with_a_path(prefix, capsys, extra, words):
    assert main(["samples", prefix, "--seq-length", "8", *extra]) == 1
    err = capsys.readouterr().err
    assert extra[0] in err and words in err
