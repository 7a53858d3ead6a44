"""Megatron-LM's own ``tools/preprocess_data.py`` (core_v0.16.1, core_v0.19.0) as a differential oracle.

Two halves in one file, as tests/fairseq_oracle.py is:

- run as a script under the oracle's python (never importing mmidx_builder)::

      python preprocess_data_oracle.py MEGATRON_LM_ROOT REQUEST.json RESPONSE.json

  REQUEST holds a list of argument lists; each is given to preprocess_data's ``main()`` in
  turn, in this one process (megatron-core and torch are imported once, which is most of a
  run's time). RESPONSE says per case whether every output pair was written, or the error.
  preprocess_data encodes in a child process and does not look at its exit code: a case
  whose worker crashed shows as missing outputs, with the child's stderr in ours.

- imported by the tests: :func:`oracle_runner` finds the pinned archive
  (``shared/oracles/megatron-lm/megatron-lm-core_v0.16.1.tar.gz``; ``MMIDX_SHARED`` names the
  ``shared`` folder, default ``../shared`` beside the repository) and a python with
  megatron-core 0.16.1, which that tag's preprocess_data.py needs (0.19's
  ``megatron.core.tokenizers`` lost ``text.utils.build_tokenizer``):
  ``MMIDX_MEGATRON016_PYTHON``; else ``.venv-megatron016/bin/python`` at the repository root
  when it holds megatron-core 0.16.1 with transformers and tiktoken; else the project's own
  python with megatron-core 0.16.1 laid over it from ``.cache/megatron-core-0.16.1``
  (``scripts/install_preprocess_data_oracle.sh`` puts it there: ``pip install --target``,
  no dependencies, since torch, transformers and the rest are the venv's). Where neither
  archive nor megatron-core 0.16.1 is found the tests skip, except under
  MMIDX_REQUIRE_ORACLE=1 (CI), where they fail.

  ``oracle_runner(..., release="core_v0.19")``: core_v0.19.0's script under megatron-core 0.19.2
  (``MMIDX_MEGATRON019_PYTHON``, else the project's own python, where scripts/install_oracle.sh
  puts it). Its ``megatron.training`` uses Python 3.12's ``typing.override``, given it here from
  typing_extensions on 3.11 (as tests/megatron_lm_archive.py's READ does). Its ``main()`` waits
  on a queue for each partition's worker: a worker that dies hangs it, so its runs get a shorter
  timeout. :meth:`Runner.start` starts a run without waiting (the two releases' runs overlap).
"""

from __future__ import annotations

import json
import os
import sys

ARCHIVE = "oracles/megatron-lm/megatron-lm-core_v0.16.1.tar.gz"
VERSION = "0.16.1"
# release -> (archive under the shared folder, megatron-core version its script needs)
RELEASES = {"core_v0.16": (ARCHIVE, VERSION),
            "core_v0.19": ("oracles/megatron-lm/megatron-lm-core_v0.19.0.tar.gz", "0.19.2")}
# core_v0.19's python, checked without importing megatron.core (seconds).
PROBE_019 = ("import sys, importlib.metadata as m, importlib.util as u; "
             "sys.exit(m.version('megatron-core') != '0.19.2' or not all(u.find_spec(n) for n in "
             "('transformers', 'tokenizers', 'tiktoken', 'sentencepiece', 'triton', 'pydantic', 'typing_extensions')))")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERLAY = os.path.join(REPO, ".cache", f"megatron-core-{VERSION}")
# What the tests need of the oracle's python besides megatron-core itself.
PROBE = ("import sys, megatron.core, transformers, tokenizers, tiktoken; "
         f"sys.exit(megatron.core.__version__ != '{VERSION}')")


# --- the tests' half -------------------------------------------------------------------

def _skip_or_fail(why: str):
    import pytest

    if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
        pytest.fail(f"Megatron-LM's preprocess_data.py is required here: {why}")
    pytest.skip(why)


def _oracle_python(release: str = "core_v0.16") -> tuple[str, str]:
    """(python, extra PYTHONPATH) of an interpreter that imports the release's megatron-core."""
    import subprocess

    if release == "core_v0.19":
        python = os.environ.get("MMIDX_MEGATRON019_PYTHON") or sys.executable
        if os.path.isfile(python) and subprocess.run([python, "-c", PROBE_019], capture_output=True).returncode == 0:
            return python, ""
        _skip_or_fail(f"no megatron-core 0.19.2 with transformers, tiktoken and sentencepiece under {python} "
                      "(install: bash scripts/install_oracle.sh .venv, or set MMIDX_MEGATRON019_PYTHON)")
    candidates = []
    if os.environ.get("MMIDX_MEGATRON016_PYTHON"):
        candidates.append((os.environ["MMIDX_MEGATRON016_PYTHON"], ""))
    candidates.append((os.path.join(REPO, ".venv-megatron016", "bin", "python"), ""))
    candidates.append((sys.executable, OVERLAY))
    for python, overlay in candidates:
        if not os.path.isfile(python) or (overlay and not os.path.isdir(overlay)):
            continue
        env = dict(os.environ, PYTHONPATH=overlay) if overlay else dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        if subprocess.run([python, "-W", "ignore", "-c", PROBE], env=env, capture_output=True).returncode == 0:
            return python, overlay
    _skip_or_fail(f"no python with megatron-core {VERSION}, transformers and tiktoken (install: bash "
                  "scripts/install_preprocess_data_oracle.sh, or set MMIDX_MEGATRON016_PYTHON)")


def _megatron_lm(folder: str, release: str = "core_v0.16") -> str:
    """The release's archive extracted into ``folder``; returns its root."""
    import tarfile

    shared = os.environ.get("MMIDX_SHARED") or os.path.join(os.path.dirname(REPO), "shared")
    archive = os.path.join(shared, RELEASES[release][0])
    if not os.path.isfile(archive):
        _skip_or_fail(f"{archive} not found (set MMIDX_SHARED to the shared folder)")
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    return folder


class Runner:
    """Runs batches of preprocess_data.py cases under the oracle."""

    def __init__(self, root: str, python: str, overlay: str, work: str, release: str = "core_v0.16"):
        self.root, self.python, self.overlay, self.work, self.release = root, python, overlay, work, release
        self.runs = 0

    def run(self, cases: list[list[str]], cwd: str | None = None) -> list[dict]:
        """Each case is preprocess_data.py's argument list; returns per case ``{"ok": bool,
        "error": str}`` (ok: every output .idx of the case exists). A case ``[OPTIONS_REQUEST]``
        returns ``{"options": [...]}``, the option strings of its parser."""
        return self.start(cases, cwd)()

    def start(self, cases: list[list[str]], cwd: str | None = None):
        """Starts :meth:`run` in a subprocess; returns the function that waits for its answer."""
        import signal
        import subprocess

        self.runs += 1
        request = os.path.join(self.work, f"request{self.runs}.json")
        response = os.path.join(self.work, f"response{self.runs}.json")
        with open(request, "w") as f:
            json.dump(cases, f)
        path = os.pathsep.join(p for p in (self.overlay, self.root) if p)
        env = dict(os.environ, PYTHONPATH=path, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
        # stderr to a file: a pipe nobody reads while the other release runs would fill and stall it
        log = open(os.path.join(self.work, f"stderr{self.runs}.txt"), "w+")
        process = subprocess.Popen([self.python, "-W", "ignore", os.path.abspath(__file__), self.root, request,
                                    response], env=env, cwd=cwd or self.work, stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
        # core_v0.19's main() waits forever on a worker that died: a shorter bound for its runs.
        timeout = 900 if self.release == "core_v0.16" else 300

        def answer() -> list[dict]:
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its session: the script and its workers
                process.wait()
            finally:
                log.seek(0)
                stderr = log.read()
                log.close()
            if process.returncode is None or process.returncode < 0:
                raise AssertionError(f"the {self.release} preprocess_data oracle did not finish in {timeout} s:\n"
                                     f"{stderr[-4000:]}")
            if process.returncode != 0:
                raise AssertionError(f"the {self.release} preprocess_data oracle failed:\n{stderr[-4000:]}")
            with open(response) as f:
                return json.load(f)

        return answer


def oracle_runner(tmp_path_factory, release: str = "core_v0.16") -> Runner:
    python, overlay = _oracle_python(release)
    root = _megatron_lm(str(tmp_path_factory.mktemp(f"megatron-lm-{release}")), release)
    return Runner(root, python, overlay, str(tmp_path_factory.mktemp(f"preprocess_data-{release}")), release)


# --- the oracle's half -----------------------------------------------------------------

def _outputs(argv: list[str]) -> list[str]:
    def value(flag, default=None):
        return argv[argv.index(flag) + 1] if flag in argv else default

    keys = []
    if "--json-keys" in argv:
        for item in argv[argv.index("--json-keys") + 1:]:
            if item.startswith("--"):
                break
            keys.append(item)
    level = "sentence" if "--split-sentences" in argv else "document"
    return [f"{value('--output-prefix')}_{key}_{level}.idx" for key in keys or ["text"]]


# A case of this one token asks for every option string of preprocess_data.py's parser.
OPTIONS_REQUEST = "__options__"


def _parser_options(preprocess_data) -> list[str]:
    """The option strings of the parser ``get_args`` builds, caught as it parses."""
    import argparse

    caught = []
    parse = argparse.ArgumentParser.parse_args

    def catch(self, *args, **kwargs):
        caught.append(self)
        raise KeyboardInterrupt  # stop before anything runs

    argparse.ArgumentParser.parse_args = catch
    try:
        preprocess_data.get_args()
    except KeyboardInterrupt:
        pass
    finally:
        argparse.ArgumentParser.parse_args = parse
    return sorted({o for a in caught[0]._actions for o in a.option_strings})


def main(root: str, request: str, response: str) -> None:
    import typing
    import warnings

    warnings.simplefilter("ignore")
    if not hasattr(typing, "override"):  # core_v0.19.0's megatron.training: Python 3.12's typing.override
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, os.path.join(root, "tools"))
    sys.path.insert(0, root)
    import preprocess_data  # noqa: E402  (Megatron-LM's tools/preprocess_data.py)

    # The tokenizer libraries every case's workers import (transformers through megatron-core's
    # text tokenizers, seconds each), imported once here: the forked workers inherit them.
    import megatron.core.tokenizers.text.libraries  # noqa: F401

    with open(request) as f:
        cases = json.load(f)
    import time

    results = []
    started = time.perf_counter()
    for argv in cases:
        if os.environ.get("MMIDX_ORACLE_TIMES"):  # where an oracle run's time goes, case by case
            print(f"{time.perf_counter() - started:7.2f} s {argv[:1] + argv[-6:]}", file=sys.stderr, flush=True)
        if argv == [OPTIONS_REQUEST]:
            results.append({"ok": True, "error": "", "options": _parser_options(preprocess_data)})
            continue
        sys.argv = ["preprocess_data.py"] + argv
        try:
            preprocess_data.main()
            missing = [path for path in _outputs(argv) if not os.path.exists(path)]
            results.append({"ok": not missing, "error": f"no {missing[0]}" if missing else ""})
        except BaseException as error:  # SystemExit from argparse or an assert included
            results.append({"ok": False, "error": f"{type(error).__name__}: {error}"})
    with open(response, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
