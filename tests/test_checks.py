"""Each rule in one home (checks.py, sampling.py): whole numbers and seeds are judged alike
wherever a setting takes one, library messages name the keyword (``workers=``), and the CLI
says that keyword as its flag (``--workers``, cli/keywords.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mmidx_builder.megatron import sampling
from mmidx_builder.publishing.card import CardSettings
from mmidx_builder.errors import ParameterError
from mmidx_builder.fairseq import check_upsample_primary
from mmidx_builder.fairseq.batches import max_tokens_batches
from mmidx_builder.fairseq.items import PairItems
from mmidx_builder.fairseq.preprocess import preprocess
from mmidx_builder.megatron import resolve
from mmidx_builder.sources.raw import RawFiles, diff_chunks


@pytest.fixture
def raw(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"some bytes to cut")
    return RawFiles([tmp_path / "a.txt"], 1)


# Every way a whole number was checked before (7 of them), as (keyword, a call with that value).
WHOLE_NUMBERS = {
    "seq_length": lambda value, raw: sampling.count_samples(100, seq_length=value),
    "max_tokens": lambda value, raw: max_tokens_batches([3, 4], None, value),
    "workers": lambda value, raw: preprocess(source_lang="en", target_lang="de", workers=value, dict_only=True),
    "num_samples['train']": lambda value, raw: resolve(data_path="A", num_samples={"train": value}).plans,
    "upsample_primary": lambda value, raw: check_upsample_primary(value),
    "max_source_positions": lambda value, raw: PairItems(truncate_source=True, max_source_positions=value),
    "diff_chunks seq_length": lambda value, raw: diff_chunks(raw, value),
}


@pytest.mark.parametrize("name", WHOLE_NUMBERS)
@pytest.mark.parametrize("value", [True, 2.0, "2", -1])
def test_every_whole_number_setting_refuses_the_same_values_naming_the_keyword(name, value, raw):
    keyword = re.escape(name.split()[-1])
    said = "must be at least [01], got -1" if value == -1 else f"must be a whole number, got {re.escape(repr(value))}"
    with pytest.raises(ParameterError, match=rf"^{keyword}= {said}"):
        WHOLE_NUMBERS[name](value, raw)


@pytest.mark.parametrize("name", WHOLE_NUMBERS)
def test_every_whole_number_setting_takes_numpy_integers(name, raw, tmp_path, monkeypatch):
    """Before, some took only Python ints (preprocess' workers, the blending size's np.integer
    but not an index-able one) and some took floats (diff_chunks' seq_length 2.0)."""
    monkeypatch.chdir(tmp_path)
    try:
        WHOLE_NUMBERS[name](np.int64(2), raw)
    except ParameterError as error:
        assert "must be a whole number" not in str(error), error  # another rule may refuse the call


def test_a_fairseq_seed_numpy_cannot_take_is_refused_by_name():
    """fairseq seeds numpy with seed + epoch; before, 2**32 - 1 and epoch 1 ended in numpy's ValueError."""
    with pytest.raises(ParameterError, match=r"seed=4294967295 with epoch=1: .* below 2\*\*32"):
        max_tokens_batches([3, 4], None, 10, seed=2**32 - 1)
    with pytest.raises(ParameterError, match=r"seed= must be at least 0, got -1"):
        max_tokens_batches([3, 4], None, 10, seed=-1)


def test_the_defaults_have_one_home():
    from mmidx_builder.hf.gpt_samples import GPTConfig

    resolved = GPTConfig(name="x").resolved()
    assert CardSettings().merged_with({}).seq_length == resolved["seq_length"] == sampling.DEFAULT_SEQ_LENGTH
    assert CardSettings().merged_with({}).seed == resolved["seed"] == sampling.DEFAULT_SEED


def test_the_cli_says_library_keywords_as_its_flags(tmp_path, capsys):
    """fairseq-preprocess's library message names workers=; the command's user typed --workers."""
    from mmidx_builder.cli import main

    assert main(["fairseq-preprocess", "-s", "en", "-t", "de", "--destdir", str(tmp_path), "--workers", "0"]) == 1
    said = capsys.readouterr().err
    assert said.startswith("mmidx fairseq-preprocess: error: --workers must be at least 1, got 0"), said
    assert main(["fairseq-preprocess", "-s", "en", "-t", "de", "--destdir", str(tmp_path), "--joined-dictionary",
                 "--srcdict", "a", "--tgtdict", "b"]) == 1
    said = capsys.readouterr().err
    assert said.startswith("mmidx fairseq-preprocess: error: cannot use both --srcdict and --tgtdict with "
                           "--joined-dictionary\n"), said
    assert main(["samples", str(tmp_path / "x"), "--seq-length", "0"]) == 1
    assert "--seq-length" not in capsys.readouterr().err  # a missing file is said first, as it was
