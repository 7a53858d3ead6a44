"""examples/train_tiny_gpt.py runs: 3 steps as rank 1 of 2, with 2 DataLoader workers."""

import os
import pathlib
import subprocess
import sys

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "train_tiny_gpt.py"


def test_trains_three_steps(torch, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE.parent.parent), "HF_DATASETS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "3", "--workers", "2",
                             "--world-size", "2", "--rank", "1", "--workdir", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "rank 1 of 2" in lines[0] and "EOD id 256" in lines[0]
    steps = [line.split() for line in lines if line.split()[:1] in (["1"], ["2"], ["3"])]
    assert [s[0] for s in steps] == ["1", "2", "3"] and all(float(s[1]) > 0 for s in steps)
    assert any(line.startswith("mean after the first step: loader wait") for line in lines)
