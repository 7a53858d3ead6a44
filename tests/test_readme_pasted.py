"""The README's examples run as a newcomer pastes them (issue 40 item 5): in a fresh copy of the
repository, after command 1's example step (examples/quickstart.py, which scripts/quickstart.sh
runs into ./example), every block is pasted in order into one shell or one Python session
started in ``example/``, as the README says. tests/test_docs.py runs the same blocks in a
workspace of its own making; this is the check that the files they name are the ones
command 1 makes. Nothing is installed again: the copy runs on this interpreter, its own
source first on the path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from test_docs import _missing, runnable

ROOT = Path(__file__).resolve().parent.parent

# One interpreter for the session: Python blocks share a namespace, shell blocks run in between
# (as a reader with a terminal and a Python prompt, both in example/, would run them).
SESSION = r"""
import json, subprocess, sys, traceback
namespace = {"__name__": "__main__"}
for block in json.load(open(sys.argv[1])):
    where = f"README.md:{block['line']}"
    print(f"--- {where} ({block['language']})", flush=True)
    if block["language"] == "python":
        try:
            exec(compile(block["code"], where, "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"{where} failed")
    else:
        if subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]]).returncode != 0:
            sys.exit(f"{where} failed")
print("--- every block ran", flush=True)
"""


def _fresh_copy(destination: Path) -> Path:
    """The repository as a clone has it: the tracked files (as they are in this checkout)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (e.g. the tests run from the sdist): no list of tracked files to copy")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def test_the_readme_examples_run_as_pasted_after_command_1(tmp_path):
    clone = _fresh_copy(tmp_path / "clone")
    assert not (clone / "example").exists()
    bin_folder = str(Path(sys.executable).parent)  # the venv's python and mmidx, as `source .venv/bin/activate`
    env = {**os.environ, "PYTHONPATH": str(clone), "PATH": os.pathsep.join([bin_folder, os.environ.get("PATH", "")]),
           "HF_DATASETS_CACHE": str(tmp_path / "hf-cache"), "HF_HUB_OFFLINE": "1"}
    # Command 1's example step (scripts/quickstart.sh: .venv/bin/python examples/quickstart.py example).
    made = subprocess.run([sys.executable, "examples/quickstart.py", "example"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    blocks, pasted = [], 0
    for block in runnable(clone / "README.md"):
        marks = block["marks"]
        if "skip-test" in marks:  # an install or the Hub
            continue
        pasted += 1
        missing = _missing(marks.get("requires", ""))
        if missing:  # an extra command 1 does not install (tokenizers, torch): pasted where it is installed
            if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
                pytest.fail(f"README.md:{block['line']} needs {missing}, which CI installs")
            continue
        blocks.append({"language": "python" if block["language"] == "python" else "bash", "line": block["line"],
                       "code": block["code"]})
    assert pasted >= 5 and blocks, blocks  # the README's blocks were found, and some run here
    (tmp_path / "blocks.json").write_text(json.dumps(blocks))
    (tmp_path / "session.py").write_text(SESSION)
    ran = subprocess.run([sys.executable, str(tmp_path / "session.py"), str(tmp_path / "blocks.json")],
                         cwd=clone / "example", env=env, capture_output=True, text=True, timeout=1200)
    assert ran.returncode == 0 and "--- every block ran" in ran.stdout, \
        ran.stdout[-4000:] + "\n--- stderr\n" + ran.stderr[-4000:]
