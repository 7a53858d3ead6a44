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
