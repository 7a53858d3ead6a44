"""Progress bars on long work, all off when the user turns progress bars off
(mmidx_builder/progress.py): index builds and blends, ``mmidx convert``, Hub uploads."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import datasets
from mmidx_builder import progress
from mmidx_builder.megatron import blending_indices, sampling


@pytest.fixture
def fast_bars(monkeypatch):
    """Bars that appear at once and tick often, so that a job of a second shows one."""
    monkeypatch.setattr(progress.Steps, "DELAY_SECONDS", 0.0)
    monkeypatch.setattr(progress.Steps, "TICK_SECONDS", 0.05)


@pytest.fixture
def bars_on():
    was_off = datasets.utils.are_progress_bars_disabled()
    datasets.enable_progress_bars()
    yield
    if was_off:
        datasets.disable_progress_bars()


def _slowly(function, seconds=0.4):
    def slow(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)
    return slow


@pytest.mark.parametrize("beside", [False, True], ids=["one thread", "shuffle index beside"])
def test_build_indices_names_its_steps_in_order(monkeypatch, beside):
    if beside:  # the shuffle index made in a thread while the sample index is built
        monkeypatch.setattr(sampling, "BESIDE_SAMPLES", 1)
    seen = []
    plain = sampling.build_indices(np.array([5, 9, 0, 30]), seq_length=4, seed=3, num_epochs=2)
    hooked = sampling.build_indices(np.array([5, 9, 0, 30]), seq_length=4, seed=3, num_epochs=2,
                                    on_step=seen.append)
    assert seen == list(sampling.BUILD_STEPS) == ["documents", "samples", "shuffle"]
    for name in ("document_index", "sample_index", "shuffle_index"):
        np.testing.assert_array_equal(getattr(hooked, name), getattr(plain, name))


def test_a_long_index_build_shows_the_prefix_and_each_step(monkeypatch, capsys, fast_bars, bars_on, tmp_path):
    for step in ("build_document_index", "build_sample_index", "build_shuffle_index"):
        monkeypatch.setattr(sampling, step, _slowly(getattr(sampling, step)))
    sampling.load_or_build_indices(np.arange(1, 50), cache_dir=tmp_path, identity="x", seq_length=8, seed=1,
                                   label="data/a_text_document (train)")
    err = capsys.readouterr().err
    for step in ("documents", "samples", "shuffle"):
        assert f"data/a_text_document (train): {step}" in err, err
    assert "3/3" in err


def test_checking_a_large_index_shows_a_bar(capsys, fast_bars, bars_on, tmp_path):
    """A billion-sequence .idx takes a minute to check at its first open: a bar counts it."""
    import struct

    from mmidx_builder.sources.indexed import IndexedFile

    count = (1 << 20) + 1
    with open(tmp_path / "big.idx", "wb") as f:
        f.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, count, count + 1))
        f.write(np.ones(count, "<i4").tobytes() + (np.arange(count, dtype="<i8") * 2).tobytes()
                + np.arange(count + 1, dtype="<i8").tobytes())
    with open(tmp_path / "big.bin", "wb") as f:
        f.truncate(count * 2)
    IndexedFile.open(tmp_path / "big")
    err = capsys.readouterr().err
    assert f"{tmp_path / 'big'}: checking the index" in err and "sequences" in err, err


def test_a_long_blend_shows_a_bar(monkeypatch, capsys, fast_bars, bars_on):
    monkeypatch.setattr(blending_indices, "build_blending_indices", _slowly(blending_indices.build_blending_indices))
    blending_indices.load_or_build_blending_indices(cache_dir=None, weights=[0.3, 0.7], size=100,
                                                    label="2 datasets (train)")
    assert "2 datasets (train): blend" in capsys.readouterr().err


def test_a_quick_build_prints_nothing(capsys, bars_on):
    sampling.load_or_build_indices(np.arange(1, 50), cache_dir=None, identity="x", seq_length=8, seed=1, label="q")
    assert capsys.readouterr().err == ""


def test_datasets_switch_turns_index_bars_off(monkeypatch, capsys, fast_bars, bars_on):
    monkeypatch.setattr(sampling, "build_shuffle_index", _slowly(sampling.build_shuffle_index))
    datasets.disable_progress_bars()
    sampling.load_or_build_indices(np.arange(1, 50), cache_dir=None, identity="x", seq_length=8, seed=1, label="off")
    assert capsys.readouterr().err == ""
    datasets.enable_progress_bars()
    sampling.load_or_build_indices(np.arange(1, 50), cache_dir=None, identity="x", seq_length=8, seed=1, label="on")
    assert "on: shuffle" in capsys.readouterr().err


@pytest.mark.parametrize("variable", ["HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"])
def test_either_librarys_variable_turns_them_off_before_it_is_imported(variable):
    code = ("import sys, mmidx_builder.progress as p; "
            "assert 'datasets' not in sys.modules; print(p.enabled())")
    env = {k: v for k, v in os.environ.items() if "PROGRESS_BARS" not in k}
    on = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    off = subprocess.run([sys.executable, "-c", code], env={**env, variable: "1"}, capture_output=True, text=True,
                         check=True)
    assert (on.stdout.strip(), off.stdout.strip()) == ("True", "False")


def test_huggingface_hubs_own_switch_turns_ours_off(bars_on):
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    assert progress.enabled()
    disable_progress_bars()
    try:
        assert not progress.enabled()
    finally:
        enable_progress_bars()


def test_uploads_follow_datasets_switch(bars_on):
    from huggingface_hub.utils import are_progress_bars_disabled

    with progress.hub_bars_follow_the_switch():
        assert not are_progress_bars_disabled()
    datasets.disable_progress_bars()
    with progress.hub_bars_follow_the_switch():
        assert are_progress_bars_disabled()  # huggingface_hub's upload bars are off here
    assert not are_progress_bars_disabled()  # and restored after


@pytest.mark.parametrize("off", [False, True], ids=["on", "HF_DATASETS_DISABLE_PROGRESS_BARS=1"])
def test_convert_shows_its_bar_unless_turned_off(tmp_path, off):
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(20)))
    env = {k: v for k, v in os.environ.items() if "PROGRESS_BARS" not in k}
    if off:
        env["HF_DATASETS_DISABLE_PROGRESS_BARS"] = "1"
    result = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "convert", str(tmp_path / "in.jsonl"),
                             "--output-prefix", str(tmp_path / "out"), "--tokenizer", "bytes"],
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert ("docs" in result.stderr) != off, result.stderr
