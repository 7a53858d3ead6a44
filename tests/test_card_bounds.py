"""Broken and oversized cards (issue 34, items 2 and 3): every card the card reader or
datasets' parser cannot read is a one-line ParameterError naming the README, in
``load_dataset``, ``mmidx card`` and ``mmidx upload --dry-run``; front matter past a bound
(size, nesting, configs) and a data_files pattern matching too many files are refused at
once, naming the limit and the variable that raises it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import MMIdxError, ParameterError
from mmidx_builder.hf.card_bounds import check_front_matter
from mmidx_builder.publishing.card import CardSettings, render_card
from mmidx_builder.sources.indexed import write_documents

ROOT = Path(__file__).resolve().parents[1]


def _pair(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    write_documents(folder / "train", [rng.integers(0, 100, size=40) for _ in range(20)], dtype=np.uint16)
    return folder


def _cli(*args, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **env}
    return subprocess.run([sys.executable, "-m", "mmidx_builder.cli", *args], capture_output=True, text=True,
                          env=environment, timeout=300)


def _block_nested(depth: int) -> str:
    """``x:`` holding a mapping ``depth`` deep, in YAML's indented block style."""
    return "x:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(depth)) + " " * (depth + 1) + "1\n"


CARDS = {  # front matter -> what the one-line error says
    "flow nested 5,000 deep": ("x: " + "[" * 5000 + "]" * 5000 + "\n", "front matter"),
    "flow nested 100,000 deep": ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "front matter"),
    "block nested 5,000 deep": (_block_nested(5000), "front matter"),
    "tags: 7": ("tags: 7\n", "'tags'"),
    "a list": ("- a\n- b\n", "must be a mapping"),
    "pretty_name: {a: 1}": ("pretty_name: {a: 1}\n", "'pretty_name'"),
}


@pytest.mark.parametrize("case", sorted(CARDS))
@pytest.mark.parametrize("command", ["card", "upload"])
def test_a_broken_card_is_one_line_in_the_cli(tmp_path, case, command):
    front, said = CARDS[case]
    folder = _pair(tmp_path / "data")
    (folder / "README.md").write_text("---\n" + front + "---\nbody\n")
    argv = ["card", str(folder), "--seq-length", "8"] if command == "card" else \
        ["upload", str(folder), "--repo-id", "me/tokens", "--dry-run", "--seq-length", "8"]
    result = _cli(*argv)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "README.md" in output and said in output, output[-2000:]


@pytest.mark.parametrize("case", [c for c in sorted(CARDS) if c not in ("tags: 7", "pretty_name: {a: 1}")])
@pytest.mark.parametrize("streaming", [False, True])
def test_a_card_datasets_cannot_parse_is_a_parameter_error_in_load_dataset(tmp_path, case, streaming):
    front, said = CARDS[case]
    folder = _pair(tmp_path / "data")
    (folder / "README.md").write_text("---\n" + front + "---\nbody\n")
    with pytest.raises(ParameterError) as error:
        load_dataset(str(folder), seq_length=8, streaming=streaming, cache_dir=str(tmp_path / "c"))
    assert str(folder / "README.md") in str(error.value) and said in str(error.value)
    assert "\n" not in str(error.value)


def _card_with_configs(count: int) -> str:
    return "configs:\n" + "".join(f"- config_name: c{i}\n  data_files: train.bin\n  seq_length: 8\n"
                                  for i in range(count))


@pytest.mark.parametrize("variable, front, given", [
    ("MMIDX_MAX_CARD_BYTES", "license: mit\npretty_name: " + "x" * 2_000 + "\n", "1000"),
    ("MMIDX_MAX_CARD_DEPTH", _block_nested(12), "10"),
    ("MMIDX_MAX_CARD_CONFIGS", _card_with_configs(4), "3"),
])
def test_a_card_past_a_bound_is_refused_naming_the_limit_and_how_to_raise_it(tmp_path, monkeypatch, variable,
                                                                           front, given):
    folder = _pair(tmp_path / "data")
    (folder / "README.md").write_text("---\n" + front + "---\nbody\n")
    monkeypatch.setenv(variable, given)
    for call in (lambda: load_dataset(str(folder), seq_length=8, streaming=True, cache_dir=str(tmp_path / "c")),
                 lambda: render_card(folder, CardSettings(seq_length=8))):
        with pytest.raises(ParameterError) as error:
            call()
        assert variable in str(error.value) and f"{int(given):,}" in str(error.value), str(error.value)
    result = _cli("card", str(folder), "--seq-length", "8", **{variable: given})
    assert result.returncode == 1 and variable in result.stderr and "Traceback" not in result.stderr
    monkeypatch.delenv(variable)  # under the default limits the same card is no problem
    render_card(folder, CardSettings(seq_length=8))


def test_the_default_bounds_refuse_a_large_card_at_once(tmp_path):
    folder = _pair(tmp_path / "data")
    (folder / "README.md").write_text("---\n" + "pretty_name: " + "x" * (2 << 20) + "\n" + "---\nbody\n")
    with pytest.raises(ParameterError, match="MMIDX_MAX_CARD_BYTES"):
        load_dataset(str(folder), seq_length=8, streaming=True)
    (folder / "README.md").write_text("---\n" + _card_with_configs(1_001) + "---\nbody\n")
    with pytest.raises(ParameterError, match="MMIDX_MAX_CARD_CONFIGS"):
        load_dataset(str(folder), seq_length=8, streaming=True)


def _aliased_front_matter(string_bytes: int, aliases: int = 7) -> str:
    """Front matter of one anchored string of ``string_bytes`` and ``aliases`` aliases of it.
    A YAML dump keeps anchors of lists and mappings, but writes a string out at every alias."""
    return f"notes: &n '{'x' * string_bytes}'\n" + "".join(f"more{i}: *n\n" for i in range(aliases))


def test_mmidx_card_never_writes_a_card_its_own_bounds_refuse(tmp_path):
    """Issue 40 item 4: front matter of YAML aliases within MMIDX_MAX_CARD_BYTES was
    rewritten expanded (~2 MB), a card load_dataset and mmidx upload then refused."""
    from mmidx_builder.hf.card_bounds import check_front_matter, limit

    folder = _pair(tmp_path / "data")
    front = _aliased_front_matter(limit("MMIDX_MAX_CARD_BYTES") // 5)  # ~210 KB, ~1.7 MB written out
    assert len(front.encode()) <= limit("MMIDX_MAX_CARD_BYTES")
    original = "---\n" + front + "---\nbody\n"
    (folder / "README.md").write_text(original)
    check_front_matter(original, "the card as given")  # within the bounds
    load_dataset(str(folder), seq_length=8, streaming=True)  # and loads
    with pytest.raises(ParameterError) as error:
        render_card(folder, CardSettings(seq_length=8))
    said = str(error.value)
    assert "MMIDX_MAX_CARD_BYTES" in said and "nothing was written" in said and "YAML alias" in said, said
    for command in (["card", str(folder), "--seq-length", "8"],
                    ["upload", str(folder), "--repo-id", "me/tokens", "--dry-run", "--seq-length", "8"]):
        result = _cli(*command)
        assert result.returncode == 1 and "MMIDX_MAX_CARD_BYTES" in result.stderr, result.stderr[-2000:]
        assert "Traceback" not in result.stderr
        assert (folder / "README.md").read_text() == original
    # Without the aliases' weight the same folder gets its card, and the card loads.
    (folder / "README.md").write_text("---\n" + _aliased_front_matter(20_000) + "---\nbody\n")  # 160 KB out
    assert _cli("card", str(folder), "--seq-length", "8").returncode == 0
    load_dataset(str(folder), seq_length=8, streaming=True)


def test_a_data_files_pattern_matching_too_many_files_is_refused(tmp_path, monkeypatch):
    folder = _pair(tmp_path / "data")
    for i in range(6):
        (folder / f"note{i}.bin").write_bytes(b"")
    monkeypatch.setenv("MMIDX_MAX_DATA_FILES", "5")
    with pytest.raises(ParameterError) as error:
        load_dataset("mmidx", data_files=str(folder / "*"), seq_length=8, streaming=True)
    assert "MMIDX_MAX_DATA_FILES" in str(error.value) and "5" in str(error.value)


# --- fuzz: any card shape is a typed error or a good load -----------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=8), st.just("train.bin"), st.just("*.bin"))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=12)
CONFIG = st.fixed_dictionaries({}, optional={"config_name": VALUES, "data_files": VALUES, "seq_length": VALUES,
                                             "features": VALUES, "seed": VALUES, "default": VALUES})
FIELDS = st.fixed_dictionaries({}, optional={
    "tags": VALUES, "license": VALUES, "pretty_name": VALUES, "task_categories": VALUES, "language": VALUES,
    "size_categories": VALUES, "configs": st.one_of(VALUES, st.lists(CONFIG, max_size=3)),
    "dataset_info": st.one_of(VALUES, st.fixed_dictionaries({}, optional={"features": VALUES, "splits": VALUES})),
})
FRONT = st.one_of(FIELDS, VALUES)


def _write_card(folder: Path, front) -> None:
    (folder / "README.md").write_text("---\n" + yaml.safe_dump(front, sort_keys=False) + "---\nbody\n")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(front=FRONT)
def test_fuzz_render_card_gives_a_card_or_a_typed_error(tmp_path_factory, front):
    folder = _pair(tmp_path_factory.mktemp("fuzz"))
    _write_card(folder, front)
    try:
        rendered = render_card(folder, CardSettings(seq_length=8))
    except MMIdxError as error:
        assert "\n" not in str(error).strip(), str(error)
    else:  # a card it renders is one its own bounds accept (issue 40 item 4)
        check_front_matter(rendered.text, "the rendered card")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(front=FRONT)
def test_fuzz_load_dataset_gives_rows_or_a_typed_error(tmp_path_factory, front):
    folder = _pair(tmp_path_factory.mktemp("fuzz"))
    _write_card(folder, front)
    try:
        loaded = load_dataset(str(folder), seq_length=8, streaming=True)
        for split in loaded.values():
            next(iter(split), None)
    except MMIdxError as error:
        assert "\n" not in str(error).strip(), str(error)
