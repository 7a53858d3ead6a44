"""What invalidates which index cache (issue 43, item 3; docs/reliability.md).

The sampling indices and an opened pair's record are read from the ``.idx`` alone: a write to
the ``.bin`` that keeps its size rebuilds neither (before, any write to the ``.bin`` moved its
ctime, so its identity, and validated the ``.idx`` and built every index again, ~40 s and 2.6
GB at 200M documents), while a changed ``.idx`` builds them again and a ``.bin`` of the wrong
size is still refused at open, naming the file and both sizes.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.errors import FormatError
from mmidx_builder.megatron import sampling
from mmidx_builder.sources.indexed import IndexedFile, write_documents
from mmidx_builder.storage import array_cache

SEQ = 8


@pytest.fixture
def counted(monkeypatch):
    """Counts index builds and whole-``.idx`` validations; files are trusted by stat at once
    (no 2 s settling wait: array_cache.SETTLE_SECONDS)."""
    monkeypatch.setattr(array_cache, "SETTLE_SECONDS", -1.0)
    counts = {"builds": 0, "validations": 0}
    build, validate = sampling.build_indices, IndexedFile._validate

    lock = threading.Lock()  # pairs are opened and built in threads

    def counting_build(*args, **kwargs):
        with lock:
            counts["builds"] += 1
        return build(*args, **kwargs)

    def counting_validate(self, *args, **kwargs):
        with lock:
            counts["validations"] += 1
        return validate(self, *args, **kwargs)

    monkeypatch.setattr(sampling, "build_indices", counting_build)
    monkeypatch.setattr(IndexedFile, "_validate", counting_validate)
    return counts


def _write(prefix: str, lengths, seed: int) -> None:
    rng = np.random.default_rng(seed)
    write_documents(prefix, [rng.integers(1, 60000, n) for n in lengths], dtype=np.uint16)


def _first_rows(tmp_path, prefixes, count: int = 5) -> list[list[int]]:
    from datasets import load_dataset

    stream = load_dataset("mmidx", data_path=prefixes, split_ratios="80,15,5", seq_length=SEQ, seed=7,
                          streaming=True, split="train", cache_dir=str(tmp_path / "hf"),
                          index_cache_dir=str(tmp_path / "indices"))
    return [list(row["input_ids"]) for _, row in zip(range(count), stream)]


def test_a_same_size_write_to_the_bin_rebuilds_nothing_a_changed_idx_rebuilds(tmp_path, counted):
    prefixes = [str(tmp_path / f"p{i}_text_document") for i in range(2)]
    for i, prefix in enumerate(prefixes):
        _write(prefix, [5, 17, 0, 9, 30, 3, 11] * (6 + i), seed=i)
    _first_rows(tmp_path, prefixes)
    first_builds = counted["builds"]
    assert counted["validations"] == 2 and first_builds >= 2  # each .idx once; each prefix's split(s)

    # Rewrite the first .bin in place with other tokens, keeping its size (ctime moves).
    size = os.path.getsize(prefixes[0] + ".bin")
    with open(prefixes[0] + ".bin", "r+b") as f:
        f.write(np.arange(size // 2, dtype="<u2").tobytes())
    counted.update(builds=0, validations=0)
    rows = _first_rows(tmp_path, prefixes)
    assert counted == {"builds": 0, "validations": 0}
    # ... and the rows hold the new bytes: those of a load with caches of its own.
    assert rows == _first_rows(tmp_path / "fresh", prefixes)

    # Another .idx (other lengths, the same token count): validated and sampled again.
    old_lengths = IndexedFile.open(prefixes[0]).sequence_lengths.tolist()
    new_lengths = old_lengths[::-1]
    _write(prefixes[0], new_lengths, seed=9)
    counted.update(builds=0, validations=0)
    _first_rows(tmp_path, prefixes)
    assert counted == {"builds": first_builds // 2, "validations": 1}  # the first prefix's, again


@pytest.mark.parametrize("change", [-2, 2], ids=["truncated", "grown"])
def test_a_bin_of_another_size_is_refused_at_a_warm_open_naming_it_and_both_sizes(tmp_path, counted, change):
    prefixes = [str(tmp_path / f"p{i}_text_document") for i in range(2)]
    for i, prefix in enumerate(prefixes):
        _write(prefix, [5, 17, 0, 9, 30, 3, 11] * 6, seed=i)
    _first_rows(tmp_path, prefixes)
    size = os.path.getsize(prefixes[1] + ".bin")
    os.truncate(prefixes[1] + ".bin", size + change)
    with pytest.raises(FormatError) as caught:
        _first_rows(tmp_path, prefixes)
    assert caught.value.path == prefixes[1] + ".bin"
    assert f"{size} bytes" in str(caught.value) and f"{size + change} bytes" in str(caught.value)
    assert counted["validations"] == 2  # the record was used (a warm open), and still refused it


def test_mmidx_cache_lists_the_caches_and_prunes_only_those_no_current_file_uses(tmp_path, counted, capsys):
    """Two prefixes loaded; then one's .idx is replaced (its old record and indices are unused),
    a cache of an earlier version lies beside them, and a blend's indices are of unknown use."""
    from mmidx_builder.cli import main
    from mmidx_builder.megatron import cache_folder

    prefixes = [str(tmp_path / f"p{i}_text_document") for i in range(2)]
    for i, prefix in enumerate(prefixes):
        _write(prefix, [5, 17, 0, 9, 30, 3, 11] * (6 + i), seed=i)
    _first_rows(tmp_path, prefixes)
    _write(prefixes[0], [40, 2] * 20, seed=5)  # another .idx: its caches are new ones
    _first_rows(tmp_path, prefixes)
    folder = str(tmp_path / "indices")
    (tmp_path / "indices" / ("0" * 32 + "-meta.json")).write_text('{"seq_length": 8}')  # an earlier version's
    before = {e.key: e for e in cache_folder.scan(folder)}
    by_status = {status: [e for e in before.values() if e.status == status]
                 for status in (cache_folder.IN_USE, cache_folder.UNUSED, cache_folder.UNKNOWN)}
    p0, p1 = (os.path.abspath(p + ".idx") for p in prefixes)
    unused = sorted((e.kind, tuple(e.files)) for e in by_status[cache_folder.UNUSED])
    assert unused == [("pair record", (p0,)), ("sampling indices", ()), ("sampling indices", (p0,))]
    in_use = sorted((e.kind, tuple(e.files)) for e in by_status[cache_folder.IN_USE])
    assert in_use == [("pair record", (p0,)), ("pair record", (p1,)), ("sampling indices", (p0,)),
                      ("sampling indices", (p1,))]
    assert {e.kind for e in by_status[cache_folder.UNKNOWN]} == {"blending indices"}

    assert main(["cache", "--index-cache-dir", folder, "--prune", "--dry-run"]) == 0
    assert {e.key for e in cache_folder.scan(folder)} == set(before)  # a dry run removes nothing
    assert main(["cache", "--index-cache-dir", folder, "--prune"]) == 0
    out = capsys.readouterr().out
    assert "freed" in out and "(3 caches)" in out
    after = cache_folder.scan(folder)
    assert {e.status for e in after} == {cache_folder.IN_USE, cache_folder.UNKNOWN}
    assert len(after) == len(before) - 3
    # What is left is what the next load uses: nothing is built or validated again.
    counted.update(builds=0, validations=0)
    _first_rows(tmp_path, prefixes)
    assert counted == {"builds": 0, "validations": 0}


def test_the_default_cache_folder_follows_datasets_rule(monkeypatch, tmp_path):
    """datasets/config.py: HF_DATASETS_CACHE, else HF_HOME/datasets, else XDG_CACHE_HOME/huggingface/datasets."""
    from mmidx_builder.hf.base_builder import INDEX_CACHE_FOLDER
    from mmidx_builder.megatron import cache_folder

    assert cache_folder.INDEX_CACHE_FOLDER == INDEX_CACHE_FOLDER
    for name in ("HF_DATASETS_CACHE", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder.default_folder() == str(tmp_path / "xdg" / "huggingface" / "datasets" / INDEX_CACHE_FOLDER)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_folder.default_folder() == str(tmp_path / "home" / "datasets" / INDEX_CACHE_FOLDER)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "ds"))
    assert cache_folder.default_folder() == str(tmp_path / "ds" / INDEX_CACHE_FOLDER)
