import os

import pytest

REQUIRE_ORACLE = os.environ.get("MMIDX_REQUIRE_ORACLE") == "1"


def require_or_skip(why: str):
    """Skips a test that lacks an oracle or an optional package, except under
    MMIDX_REQUIRE_ORACLE=1 (set by .ci/run, which installs every one of them): there the run
    fails, so that the suite cannot go green by losing coverage."""
    if REQUIRE_ORACLE:
        pytest.fail(f"required under MMIDX_REQUIRE_ORACLE=1: {why}", pytrace=False)
    pytest.skip(why)


def _importorskip_or_fail(importorskip):
    """``pytest.importorskip`` that fails instead of skipping under MMIDX_REQUIRE_ORACLE=1: CI
    installs every optional package the tests import this way (pycurl, s3fs, moto, trustme,
    torch, torchdata, tokenizers, transformers, sentencepiece)."""
    def required(modname, *args, **kwargs):
        try:
            return importorskip(modname, *args, **kwargs)
        except pytest.skip.Exception as skipped:
            require_or_skip(f"{modname} does not import ({skipped})")

    required._mmidx = True
    return required


if REQUIRE_ORACLE and not getattr(pytest.importorskip, "_mmidx", False):
    pytest.importorskip = _importorskip_or_fail(pytest.importorskip)

# Tests that compare with an oracle (megatron-core, Megatron-LM's archives, fairseq,
# preprocess_data.py, MosaicML's streaming), marked "oracle" by the fixture or module they use;
# tests that take long, marked "slow". `pytest -m "not oracle and not slow"` is the fast local
# tier; CI runs everything. A module listed here is marked as a whole.
ORACLE_FIXTURES = {"megatron", "fairseq_python", "megatron_lm", "oracle", "preprocess_data", "mosaic"}
ORACLE_MODULES = {"test_megatron_lm_oracle.py", "test_convert_preprocess_data.py", "test_fairseq_oracle.py",
                  "test_format_oracle.py", "test_sampling_oracle.py", "test_convert_megatron_lm.py",
                  "test_megatron_builder.py", "test_megatron_plan.py", "test_megatron_resolve.py",
                  "test_training_collator.py", "test_mosaic_order.py"}
SLOW_MODULES = {"test_megatron_lm_oracle.py", "test_example_train_tiny_gpt.py", "test_convert_preprocess_data.py",
                "test_fairseq_oracle.py", "test_remote_s3.py", "test_hub_download.py"}


def pytest_collection_modifyitems(items):
    for item in items:
        module = os.path.basename(str(item.fspath))
        if (module in ORACLE_MODULES or ORACLE_FIXTURES & set(getattr(item, "fixturenames", ()))
                or item.get_closest_marker("megatron") or item.get_closest_marker("fairseq")):
            item.add_marker(pytest.mark.oracle)
        if module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _warnings_said_anew():
    """warn_once (mmidx_builder/warnings_once.py) remembers a warning for the life of the process:
    each test starts with none said, so a test that expects one sees it whatever ran before."""
    import sys

    said = sys.modules.get("mmidx_builder.warnings_once")  # not imported for it: tests of light imports
    if said is not None:
        said._said.clear()


@pytest.fixture(scope="session")
def megatron():
    """megatron-core's dataset package, the differential oracle.

    Skips where it is not installed, except when MMIDX_REQUIRE_ORACLE=1 (set by .ci/run,
    which installs it): there a missing oracle fails instead of skipping silently.
    """
    try:
        from megatron.core.datasets import gpt_dataset, helpers, indexed_dataset
    except ImportError as error:
        require_or_skip(f"megatron-core does not import ({error})")

    class Oracle:
        pass

    oracle = Oracle()
    oracle.indexed_dataset = indexed_dataset
    oracle.gpt_dataset = gpt_dataset
    oracle.helpers = helpers
    return oracle


@pytest.fixture(scope="session")
def mosaic():
    """tests/mosaic_oracle.py, MosaicML's own shard writers and readers (mosaicml-streaming
    0.13.0 for MDS, Composer 0.9.0 for the legacy format), once both import: ``mosaic.write_mds``,
    ``mosaic.read_mds_streaming``, ``mosaic.write_legacy``, ``mosaic.read_legacy_index``...

    Skips where either is missing (scripts/install_mosaic_oracle.sh installs them), except
    under MMIDX_REQUIRE_ORACLE=1 (CI), where it fails.
    """
    import mosaic_oracle

    mosaic_oracle.streaming_or_skip()
    mosaic_oracle.composer_streaming_or_skip()
    return mosaic_oracle


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
    require_or_skip(f"no fairseq under {python} (install it: bash scripts/install_fairseq_oracle.sh .venv-fairseq)")


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
        require_or_skip(f"torch does not import ({error})")
    return module


@pytest.fixture
def quick_worker_shutdown(torch, monkeypatch):
    """A DataLoader whose worker raised is shut down in ~0.2 s instead of ~10: torch joins each
    worker for MP_STATUS_CHECK_INTERVAL (5 s) and the worker that raised in its dataset's
    ``__iter__`` is never sent its stop signal (its status was already cleared), so the join
    always times out. For the tests of refusals raised inside workers."""
    monkeypatch.setattr(torch.utils.data._utils, "MP_STATUS_CHECK_INTERVAL", 0.1)


# The three ways mapped.py reads a local file: memcpy out of the map under a read lease, the
# kernel's copy out of the map (process_vm_readv) where no lease is granted, pread where that
# call is refused too.
LOCAL_READ_WAYS = ["lease", "process_vm_readv", "pread"]


def use_local_read_way(way: str, monkeypatch) -> None:
    """Makes mapped.py read local files ``way`` (one of LOCAL_READ_WAYS) for this test."""
    from mmidx_builder.storage import mapped, read_lease

    if way == "lease":
        assert read_lease.USABLE, "read leases are not usable here (/proc/sys/fs/leases-enable, lease-break-time)"
        return
    monkeypatch.setattr(read_lease, "USABLE", False)
    if way == "pread":
        monkeypatch.setattr(mapped, "_READV", None)


def require_oracle_module(module: str, install: str = "scripts/install_oracle_extras.sh"):
    """Imports an oracle's ``module``: skip where it is missing, fail under
    MMIDX_REQUIRE_ORACLE=1 (CI installs every oracle)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as error:
        require_or_skip(f"{module} does not import ({install}): {error}")


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
