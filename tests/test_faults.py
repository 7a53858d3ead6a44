"""Faults that used to serve wrong data or leave debris (issue 13), one test each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from datasets import load_dataset

import mmidx_builder  # noqa: F401  registers the builders
from mmidx_builder.sources import indexed as fmt
from mmidx_builder.errors import FormatError, MissingPartnerError, ParameterError
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter, write_documents

SEQ = 8


def _first_rows(folder, cache, **kwargs):
    ds = load_dataset(str(folder), seq_length=SEQ, seed=1, cache_dir=cache, split="train", **kwargs)
    return np.array([row["input_ids"] for row in ds])


def _rewrite_same_sizes(prefix, rng):
    """Other tokens, same lengths, and the old mtimes put back (rsync -t, restores)."""
    old = IndexedFile.open(prefix)
    lengths = old.sequence_lengths.tolist()
    times = {ext: os.stat(prefix + ext) for ext in (".bin", ".idx")}
    write_documents(prefix, [rng.integers(0, 60_000, n) for n in lengths], dtype=np.uint16)
    for ext, stat in times.items():
        os.utime(prefix + ext, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_rewrite_with_mtimes_put_back_is_not_served_from_the_cache(tmp_path, random_documents):
    rng = np.random.default_rng(0)
    folder = tmp_path / "data"
    prefix = write_documents(folder / "train", random_documents(rng, [30] * 20), dtype=np.uint16)
    cache = str(tmp_path / "cache")
    before = _first_rows(folder, cache)
    _rewrite_same_sizes(prefix, rng)
    after = _first_rows(folder, cache)
    source = IndexedFile.open(prefix)
    from mmidx_builder.megatron import sampling
    indices = sampling.build_indices(source.sequence_lengths, seq_length=SEQ, seed=1)
    np.testing.assert_array_equal(after, sampling.assemble_samples(source, indices, np.arange(indices.num_samples)))
    assert not np.array_equal(before, after)


def test_a_rewritten_idx_alone_is_seen_with_a_data_files_glob(tmp_path):
    folder = tmp_path / "data"
    tokens = np.arange(400) % 50_000
    prefix = write_documents(folder / "train", [tokens[:100], tokens[100:400]], dtype=np.uint16)
    kwargs = dict(data_files={"train": str(folder / "*.bin")}, seq_length=SEQ, seed=1, cache_dir=str(tmp_path / "c"),
                  split="train", document_structure=True)
    before = load_dataset("mmidx", **kwargs)["piece_lengths"]
    stat = os.stat(prefix + ".idx")
    with IndexedFileWriter(tmp_path / "other", dtype=np.uint16) as writer:  # same tokens, other boundaries
        writer.add_document(tokens[:300])
        writer.add_document(tokens[300:])
    os.replace(tmp_path / "other.idx", prefix + ".idx")
    os.utime(prefix + ".idx", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert before != load_dataset("mmidx", **kwargs)["piece_lengths"]


def test_streaming_in_the_same_process_reopens_a_rewritten_pair(tmp_path, random_documents):
    rng = np.random.default_rng(1)
    folder = tmp_path / "data"
    prefix = write_documents(folder / "train", random_documents(rng, [30] * 20), dtype=np.uint16)
    stream = lambda: np.array([r["input_ids"] for r in load_dataset(  # noqa: E731
        str(folder), seq_length=SEQ, seed=1, cache_dir=str(tmp_path / "c"), split="train", streaming=True)])
    before = stream()
    _rewrite_same_sizes(prefix, rng)
    assert not np.array_equal(before, stream())


def test_a_killed_writers_temporary_file_is_invisible_and_cleaned(tmp_path, random_documents):
    folder = tmp_path / "data"
    write_documents(folder / "train", random_documents(np.random.default_rng(2), [30] * 10), dtype=np.uint16)
    code = textwrap.dedent(f"""
        import os, signal, numpy as np
        from mmidx_builder.sources.indexed import IndexedFileWriter
        w = IndexedFileWriter({str(folder / "other")!r}, dtype=np.uint16)
        w.add_document(np.arange(100))
        w._bin.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    result = subprocess.run([sys.executable, "-c", code])
    assert result.returncode == -signal.SIGKILL
    leftovers = [name for name in os.listdir(folder) if fmt.TEMPORARY_MARK in name]
    assert leftovers and all(name.startswith(".") for name in leftovers)
    assert len(_first_rows(folder, str(tmp_path / "c"))) > 0  # the folder still loads
    write_documents(folder / "other", [[1, 2, 3]], dtype=np.uint16)  # the next writer of that prefix cleans up
    assert not [name for name in os.listdir(folder) if fmt.TEMPORARY_MARK in name]


@pytest.mark.parametrize("crash_at", ["remove_idx", "rename_bin", "rename_idx"])
def test_a_crash_while_replacing_a_pair_never_leaves_a_mismatched_pair(tmp_path, monkeypatch, crash_at):
    prefix = str(tmp_path / "train")
    write_documents(prefix, [list(range(10)), list(range(10, 30))], dtype=np.uint16)
    replace, remove = os.replace, fmt.remove_quietly
    calls = []

    def crashing_replace(src, dst):
        calls.append(dst)
        if (crash_at == "rename_bin" and dst.endswith(".bin")) or (crash_at == "rename_idx" and dst.endswith(".idx")):
            raise KeyboardInterrupt
        replace(src, dst)

    def crashing_remove(path):
        remove(path)
        if crash_at == "remove_idx" and path == prefix + ".idx":
            raise KeyboardInterrupt

    monkeypatch.setattr(fmt.os, "replace", crashing_replace)
    monkeypatch.setattr(fmt, "remove_quietly", crashing_remove)
    writer = IndexedFileWriter(prefix, dtype=np.uint16)
    writer.add_document(list(range(100, 130)))  # same byte count as the old pair: garbage if mismatched
    writer.add_document([])
    with pytest.raises(KeyboardInterrupt):
        writer.close()
    monkeypatch.undo()
    try:
        opened = IndexedFile.open(prefix)
    except MissingPartnerError:
        return  # a lone file: a clear error, never garbage
    tokens = [opened.document(i).tolist() for i in range(opened.num_documents)]
    assert tokens in ([list(range(10)), list(range(10, 30))], [list(range(100, 130)), []])


def test_a_full_disk_while_closing_leaves_no_temporary_file(tmp_path, monkeypatch):
    writer = IndexedFileWriter(tmp_path / "train", dtype=np.uint16)
    writer.add_document(list(range(1000)))

    class FullDisk:
        def __init__(self, f):
            self.f = f

        def close(self):
            self.f.close()
            raise OSError(28, "No space left on device")

    writer._bin = FullDisk(writer._bin)
    with pytest.raises(OSError, match="No space"):
        writer.close()
    assert os.listdir(tmp_path) == []


def test_truncating_a_bin_while_streaming_is_an_error_not_sigbus(tmp_path, random_documents):
    folder = tmp_path / "data"
    rng = np.random.default_rng(3)
    prefix = write_documents(folder / "train", random_documents(rng, [2000] * 200), dtype=np.uint16)
    code = textwrap.dedent(f"""
        import os, mmidx_builder
        from datasets import load_dataset
        from mmidx_builder.errors import FormatError
        stream = load_dataset({str(folder)!r}, seq_length=64, cache_dir={str(tmp_path / "c")!r}, split="train",
                              streaming=True, num_shards=4)
        rows = iter(stream)
        next(rows)
        os.truncate({prefix + ".bin"!r}, 1000)
        try:
            for _ in rows:
                pass
        except FormatError as error:
            print("FormatError:", error)
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "FormatError:" in result.stdout and "truncated" in result.stdout


def test_a_thread_still_reading_an_index_cache_map_at_exit_does_not_crash_the_exit(tmp_path):
    # The truncation test above died with SIGSEGV after printing its error, one run in six:
    # the stream's read-ahead thread was still reading the sample index when the interpreter's
    # exit unmapped it. Here a daemon thread reads such a map for as long as the process lives.
    path = tmp_path / "sample_index.npy"
    np.save(path, np.arange(1 << 22, dtype=np.int64))
    code = textwrap.dedent(f"""
        import threading
        from mmidx_builder.storage.array_cache import map_npy
        array = map_npy({str(path)!r})
        reading = threading.Event()
        def read():
            reading.set()
            while True:
                int(array.sum())
        threading.Thread(target=read, daemon=True).start()
        reading.wait()
        """)
    for _ in range(5):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, (result.returncode, result.stderr[-2000:])


def test_an_empty_glob_says_no_file_matched_and_which_pattern(tmp_path):
    pattern = str(tmp_path / "nowhere" / "*.bin")
    with pytest.raises(ParameterError, match=r"data_files\['train'\]: no file matched .*nowhere/\*\.bin"):
        load_dataset("mmidx", data_files={"train": pattern}, seq_length=SEQ, cache_dir=str(tmp_path / "c"))


def _card(folder, configs_yaml):
    (folder / "README.md").write_text(f"---\nconfigs:\n{configs_yaml}---\n")


def test_a_card_cannot_name_files_outside_its_folder(tmp_path, random_documents):
    docs = random_documents(np.random.default_rng(4), [30] * 10)
    write_documents(tmp_path / "outside" / "train", docs, dtype=np.uint16)
    folder = tmp_path / "dataset"
    write_documents(folder / "train", docs, dtype=np.uint16)
    _card(folder, "- config_name: default\n  data_files:\n  - split: train\n    path: ../outside/*.bin\n  seq_length: 8\n")
    with pytest.raises(ParameterError, match="outside the dataset folder"):
        load_dataset(str(folder), cache_dir=str(tmp_path / "c"), split="train")


def test_a_card_cannot_choose_where_indices_are_written(tmp_path, random_documents):
    folder = tmp_path / "dataset"
    write_documents(folder / "train", random_documents(np.random.default_rng(5), [30] * 10), dtype=np.uint16)
    target = tmp_path / "elsewhere"
    _card(folder, f"- config_name: default\n  data_files:\n  - split: train\n    path: train.bin\n"
                  f"  seq_length: 8\n  index_cache_dir: {target}\n")
    ds = load_dataset(str(folder), cache_dir=str(tmp_path / "c"), split="train")
    assert len(ds) > 0 and not target.exists()


# --- convert ---------------------------------------------------------------------------

def test_skip_bad_records_says_how_much_of_a_truncated_gz_was_kept(tmp_path):
    import gzip

    from mmidx_builder.convert import convert

    lines = b"".join(b'{"text": "document %d with some words in it"}\n' % i for i in range(20_000))
    data = gzip.compress(lines)
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    summary = convert([str(tmp_path / "cut.jsonl.gz")], str(tmp_path / "out"), "bytes", skip_bad_records=True)
    assert summary.documents > 0
    (where, problem), = summary.bad_examples
    assert where.endswith("cut.jsonl.gz") and f"the {summary.documents:,} records before the damage" in problem


@pytest.mark.parametrize("eod", [-1, 2**31, 2**40])
def test_an_eod_id_outside_the_dtype_is_one_clear_error(tmp_path, eod):
    (tmp_path / "a.jsonl").write_text('{"text": [1, 2, 3]}\n')
    result = subprocess.run([sys.executable, "-m", "mmidx_builder.cli", "convert", str(tmp_path / "a.jsonl"),
                             "--output-prefix", str(tmp_path / "out"), "--tokenizer", "none", "--vocab-size", "1000",
                             "--append-eod", "--eod-id", str(eod)], capture_output=True, text=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "end-of-document id" in result.stderr and str(eod) in result.stderr


def test_a_huge_document_is_refused_not_tokenized(tmp_path):
    from mmidx_builder.convert import convert
    from mmidx_builder.errors import ConvertError

    (tmp_path / "a.jsonl").write_text('{"text": "short"}\n{"text": "%s"}\n' % ("word " * 3000))
    with pytest.raises(ConvertError, match=r"line 2.*more than max_document_chars=1,000"):
        convert([str(tmp_path / "a.jsonl")], str(tmp_path / "out"), "bytes", max_document_chars=1000)
    summary = convert([str(tmp_path / "a.jsonl")], str(tmp_path / "out"), "bytes", max_document_chars=1000,
                      skip_bad_records=True)
    assert summary.documents == 1 and summary.bad_records == 1


# --- smaller ones ----------------------------------------------------------------------

def test_indices_too_large_for_the_machine_are_refused_up_front(monkeypatch):
    from mmidx_builder.megatron import sampling

    monkeypatch.setattr(sampling, "_physical_memory", lambda: 2**30)
    with pytest.raises(ParameterError, match=r"need [\d.,]+ GiB of memory, more than this machine's 1.0 GiB"):
        sampling.build_indices(np.full(1000, 1000, np.int32), seq_length=8, seed=1, num_samples=2**28)


def test_nan_in_a_float_bin_read_as_int64_is_a_parameter_error(tmp_path):
    write_documents(tmp_path / "data" / "train", [np.array([1.0, np.nan, 3.0] * 10, np.float32)], dtype=np.float32)
    stream = load_dataset(str(tmp_path / "data"), seq_length=4, dtype="int64", cache_dir=str(tmp_path / "c"), split="train",
                          streaming=True)
    with pytest.raises(ParameterError, match="nan.*does not fit dtype=int64"):
        list(stream)
    # Preparing the Arrow cache: datasets wraps what the builder raises; the load raises ours,
    # from datasets' error.
    with pytest.raises(ParameterError, match="nan.*does not fit dtype=int64") as raised:
        load_dataset(str(tmp_path / "data"), seq_length=4, dtype="int64", cache_dir=str(tmp_path / "c"), split="train")
    assert type(raised.value.__cause__).__name__ == "DatasetGenerationError"


def test_a_damaged_index_cache_is_rebuilt_not_used(tmp_path):
    from mmidx_builder.megatron import sampling

    lengths = np.array([5, 9, 0, 30, 2] * 20, np.int32)
    cache = tmp_path / "indices"
    good = sampling.load_or_build_indices(lengths, cache_dir=cache, identity="x", seq_length=8, seed=3)
    (path,) = cache.glob("*-indices.npy")  # the three arrays packed: where each lies is in the meta file
    (meta,) = cache.glob("*-meta.json")
    entry = json.loads(meta.read_text())["arrays"]["shuffle_index"]
    packed = np.load(path)
    shuffle = packed[entry["offset"]:].view(entry["dtype"])
    shuffle[5] = 10**6  # right shape, wrong value
    np.save(path, packed)
    with pytest.warns(UserWarning, match="damaged; rebuilding"):
        again = sampling.load_or_build_indices(lengths, cache_dir=cache, identity="x", seq_length=8, seed=3)
    np.testing.assert_array_equal(again.shuffle_index, good.shuffle_index)


def test_upload_dry_run_of_a_small_folder_shows_the_plan_and_the_problem(tmp_path, capsys, monkeypatch):
    from mmidx_builder.cli import main

    monkeypatch.setenv("HF_TOKEN", "hf_aTokenSoThatOnlyTheCardStopsIt00")  # no request is made
    write_documents(tmp_path / "train", [[1, 2, 3]] * 10, dtype=np.uint16)
    assert main(["upload", str(tmp_path), "--repo-id", "me/tokens", "--dry-run"]) == 1  # the upload would stop
    out, err = capsys.readouterr()
    assert "train.bin" in out and "pass --seq-length" in out and "pass --seq-length" in err
    assert main(["upload", str(tmp_path), "--repo-id", "me/tokens", "--dry-run", "--seq-length", "4"]) == 0
    assert "cannot be made" not in capsys.readouterr().out
