"""examples/train_tiny_gpt.py runs: 3 steps, with 2 DataLoader workers and with none."""

import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "train_tiny_gpt.py"


@pytest.mark.parametrize("workers", ["0", "2"])
def test_trains_three_steps(torch, tmp_path, workers):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent), "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3", "--workers", workers,
                             "--world-size", "2", "--rank", "1", "--workdir", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "rank 1 of 2" in lines[0] and "EOD id 256" in lines[0]
    steps = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [s[0] for s in steps] == ["1", "2", "3"] and all(float(s[1]) > 0 for s in steps)
    assert any(line.startswith("mean after the first step: loader wait") for line in lines)
    if workers == "0":
        assert lines[-1] == "state to resume from (any world size): consumed_samples=24"  # 3 steps x 2 ranks x 4
