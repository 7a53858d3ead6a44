import os

import pytest


@pytest.fixture(scope="session")
def megatron():
    """megatron-core's dataset package, the differential oracle.

    Skips where it is not installed, except when MMIDX_REQUIRE_ORACLE=1 (set by .ci/run,
    which installs it): there a missing oracle fails instead of skipping silently.
    """
    try:
        from megatron.core.datasets import gpt_dataset, helpers, indexed_dataset
    except ImportError as error:
        if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
            pytest.fail(f"megatron-core is required here but does not import: {error}")
        pytest.skip(f"megatron-core not installed ({error})")

    class Oracle:
        pass

    oracle = Oracle()
    oracle.indexed_dataset = indexed_dataset
    oracle.gpt_dataset = gpt_dataset
    oracle.helpers = helpers
    return oracle


@pytest.fixture(scope="session")
def fairseq_python():
    """The python of the virtual environment that holds fairseq, the oracle of the fairseq
    differential tests (fairseq and its pins cannot share the project's venv, so the tests
    run tests/fairseq_oracle.py under it in a subprocess).

    MMIDX_FAIRSEQ_PYTHON names it; the default is .venv-fairseq/bin/python at the repository
    root, where ``scripts/install_fairseq_oracle.sh`` installs it. Skips where it is missing,
    except under MMIDX_REQUIRE_ORACLE=1 (CI), where it fails.
    """
    import subprocess
    from pathlib import Path

    python = os.environ.get("MMIDX_FAIRSEQ_PYTHON") or str(
        Path(__file__).resolve().parent.parent / ".venv-fairseq" / "bin" / "python")
    # find_spec, not import: importing fairseq takes seconds.
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('fairseq') is None)"
    if os.path.isfile(python) and subprocess.run([python, "-c", probe], capture_output=True).returncode == 0:
        return python
    why = f"no fairseq under {python} (install it: bash scripts/install_fairseq_oracle.sh .venv-fairseq)"
    if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
        pytest.fail(f"the fairseq oracle is required here: {why}")
    pytest.skip(why)


# --- shared data makers: every test file builds its corpora with these -------------------

def _random_documents(rng, lengths, vocab=60_000):
    """One random document per length (token ids below ``vocab``)."""
    return [rng.integers(0, vocab, size=int(n)) for n in lengths]


def _awkward_lengths(rng, count, seq_length, high=40):
    """Random lengths with the edge cases every sampler must survive: an empty document
    and one longer than several samples (and, from the random draw, more empties)."""
    lengths = rng.integers(0, high, size=count)
    lengths[min(3, count - 1)] = 0
    lengths[min(5, count - 1)] = 5 * seq_length + 3
    return lengths


@pytest.fixture(scope="session")
def random_documents():
    """``random_documents(rng, lengths, vocab=60000)`` -> list of int64 arrays."""
    return _random_documents


@pytest.fixture(scope="session")
def awkward_lengths():
    """``awkward_lengths(rng, count, seq_length)`` -> lengths with an empty and a very long document."""
    return _awkward_lengths


@pytest.fixture(scope="session")
def write_corpus():
    """``write_corpus(folder, {name: documents}, dtype=np.uint16)`` writes one pair per name
    (Megatron flavour) and returns {name: prefix}."""
    import numpy as np

    from mmidx_builder.sources.indexed import write_documents

    def write(folder, named_documents, dtype=np.uint16):
        return {name: write_documents(os.path.join(str(folder), name), documents, dtype=dtype)
                for name, documents in named_documents.items()}

    return write


@pytest.fixture(scope="session")
def torch():
    """torch, for the training helpers (an optional extra). CI installs it with the oracle, so
    there (MMIDX_REQUIRE_ORACLE=1) a missing torch fails instead of skipping."""
    try:
        import torch as module
    except ImportError as error:
        if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
            pytest.fail(f"torch is required here but does not import: {error}")
        pytest.skip(f"torch not installed ({error})")
    return module


def require_oracle_module(module: str, install: str = "scripts/install_oracle_extras.sh"):
    """Imports an oracle's ``module``: skip where it is missing, fail under
    MMIDX_REQUIRE_ORACLE=1 (CI installs every oracle)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as error:
        if os.environ.get("MMIDX_REQUIRE_ORACLE") == "1":
            pytest.fail(f"{module} is required here ({install}) but does not import: {error}")
        pytest.skip(f"{module} not installed ({error})")


class MegatronTokenizer:
    """What megatron-core's GPTDataset asks of a tokenizer (an EOD id, a pad id, an identity)."""

    eod = 0
    pad = -1
    vocab_size = None
    unique_identifiers = {"class": "MegatronTokenizer"}


def pytest_terminal_summary(terminalreporter):
    """How many documented code blocks did not run (tests/test_docs.py), so that a skip is seen."""
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "test_docs.py" in getattr(r, "nodeid", "")]
    if skipped:
        terminalreporter.write_line(f"docs: {len(skipped)} code block(s) of README.md and docs/ not run "
                                    "(marked skip-test, or a package missing); `pytest -rs tests/test_docs.py` says why")
