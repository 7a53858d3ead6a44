"""Pretraining scale at a size CI affords: a sparse prefix of a few million sequences.

What must hold however large the corpus (issue 31; benchmarks/bench_scale.py measures the
speed and memory against megatron-core): DataLoader workers share the index arrays instead
of holding copies (Pss_Anon from /proc/PID/smaps_rollup), a warm open reads the ``.idx``'s
header and not its tables (/proc/self/io), a resume lands on the sample a full pass gives
there without reading what comes before, and a stream's first row costs one micro-batch.
"""

import json
import os
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import mmidx_builder
from mmidx_builder import MMIdx  # megatron_rank_stream (torch) is looked up in the tests that have the torch fixture
from mmidx_builder.sources.indexed import IndexedFile, IndexedFileWriter

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux /proc needed")

SEQUENCES = 4_000_000
LENGTH = 8  # tokens a sequence; seq_length 8 makes about one sample a sequence
SETTLE = 2.2  # array_cache.SETTLE_SECONDS and a margin: files older than this are trusted by stat


def write_sparse_prefix(prefix: str, count: int, length: int) -> None:
    """A Megatron .idx of ``count`` sequences of ``length`` tokens (uint16) and a sparse .bin."""
    lengths = np.full(count, length, "<i4")
    pointers = np.arange(count, dtype="<i8") * (2 * length)
    with open(prefix + ".idx", "wb") as f:
        f.write(struct.pack("<9sQBQQ", b"MMIDIDX\x00\x00", 1, 8, count, count + 1))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(np.arange(count + 1, dtype="<i8").tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(count * length * 2)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """A 4M-sequence prefix with its index cache built and settled (as after a first run)."""
    root = tmp_path_factory.mktemp("scale")
    prefix = str(root / "big_text_document")
    write_sparse_prefix(prefix, SEQUENCES, LENGTH)
    time.sleep(SETTLE)  # a just-written .idx is validated at every open (format.OpeningRecord)
    settings = dict(data_files={"train": [prefix + ".bin"]}, seq_length=LENGTH, seed=5,
                    cache_dir=str(root / "hf"), index_cache_dir=str(root / "indices"))
    next(iter(MMIdx(**settings).as_streaming_dataset("train")))
    time.sleep(SETTLE)
    next(iter(MMIdx(**settings).as_streaming_dataset("train")))  # checks the new cache's digests once
    write_sparse_prefix(str(root / "tiny_text_document"), 1000, LENGTH)
    return root, prefix, settings


def _run(code: str, folder) -> dict:
    """``code`` run as a script of its own (spawned workers import its classes from it)."""
    script = os.path.join(folder, "probe.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(code))
    done = subprocess.run([sys.executable, script], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_spawned_dataloader_workers_share_the_index_arrays(big, torch):
    """Each spawned worker opens the split itself; its private memory must not grow with the
    corpus: before, every worker copied the lengths and sequence starts (8 bytes a sequence)."""
    root, _, settings = big
    found = _run(f"""
        import json, torch
        from mmidx_builder import MMIdx, megatron_rank_stream

        def pss_anon():
            with open("/proc/self/smaps_rollup") as f:
                return next(int(l.split()[1]) * 1024 for l in f if l.startswith("Pss_Anon:"))

        class Probe(torch.utils.data.IterableDataset):
            def __init__(self, inner, warm_up):
                self.inner, self.warm_up = inner, warm_up
            def __iter__(self):
                # What any first stream costs a worker (imports, first tables), on a tiny corpus.
                for _ in zip(range(64), self.warm_up):
                    pass
                before = pss_anon()
                rows = iter(self.inner)
                for _ in range(64):
                    next(rows)
                yield {{"before": before, "after": pss_anon()}}

        if __name__ == "__main__":
            stream = MMIdx(**{settings!r}).as_streaming_dataset("train")
            ranked = megatron_rank_stream(stream, 0, 1, 4)
            tiny = {{**{settings!r}, "data_files": {{"train": [{str(root / "tiny_text_document.bin")!r}]}}}}
            warm_up = megatron_rank_stream(MMIdx(**tiny).as_streaming_dataset("train"), 0, 1, 4)
            loader = torch.utils.data.DataLoader(Probe(ranked, warm_up), batch_size=None, num_workers=2,
                                                 multiprocessing_context="spawn")
            print(json.dumps({{"workers": [dict(r) for r in loader], "rows": ranked.total_samples}}))
        """, root)
    rows = found["rows"]
    assert rows > 0.9 * SEQUENCES
    for worker in found["workers"]:
        grown = worker["after"] - worker["before"]
        # Far below one byte a sequence (4 MB here); the copies were 8 bytes a sequence (32 MB).
        assert grown < 0.25 * rows, f"a worker's private memory grew by {grown / 2**20:.1f} MiB over {rows} samples"


def _folder_bytes(folder) -> dict:
    """Apparent bytes of every file under ``folder``, by name."""
    return {os.path.relpath(os.path.join(d, n), folder): os.path.getsize(os.path.join(d, n))
            for d, _, names in os.walk(folder) for n in names}


def test_the_index_cache_is_no_larger_than_megatron_cores(big, megatron, tmp_path):
    """Issue 43: the same configuration's index cache, ours (the opened pair's record and the
    sampling indices) against megatron-core's GPTDataset's (path_to_cache). Before, the record
    kept the lengths and the starts of the sequences too: 8 bytes a sequence more, 2.6x."""
    from megatron.core.datasets.utils import Split
    from conftest import MegatronTokenizer

    _, prefix, settings = big
    ours = tmp_path / "ours"
    first = next(iter(MMIdx(**{**settings, "index_cache_dir": str(ours)}).as_streaming_dataset("train")))["input_ids"]
    config = megatron.gpt_dataset.GPTDatasetConfig(
        random_seed=settings["seed"], sequence_length=settings["seq_length"], blend=([prefix], None), split="1,0,0",
        tokenizer=MegatronTokenizer(), path_to_cache=str(tmp_path / "megatron"), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False)
    low_level = megatron.indexed_dataset.IndexedDataset(prefix)
    documents = np.arange(len(low_level.sequence_lengths), dtype=np.int32)
    theirs = megatron.gpt_dataset.GPTDataset(low_level, prefix, documents, None, Split.train, config)
    assert len(first) == settings["seq_length"] + 1
    # The same configuration: as many samples on both sides (ours as its cache records them).
    metas = [json.loads((ours / name).read_text()) for name in os.listdir(ours)
             if name.endswith("-meta.json") and not name.startswith("opened-")]
    assert [meta["num_samples"] for meta in metas] == [len(theirs)]
    ours_bytes, their_bytes = _folder_bytes(ours), _folder_bytes(tmp_path / "megatron")
    # Both hold the three sampling arrays (document, sample, shuffle index) in megatron-core's
    # dtypes; ours has no array of its own beside them.
    per_sequence = SEQUENCES * 4
    assert sum(their_bytes.values()) > 3 * per_sequence, their_bytes
    # Allowing our two meta files (under 1 KiB each) against its description: per cache, not per sequence.
    assert sum(ours_bytes.values()) <= sum(their_bytes.values()) + 2048, (ours_bytes, their_bytes)
    assert not any(name.startswith("opened-") and size > 64 * 1024 for name, size in ours_bytes.items()), ours_bytes


@pytest.mark.parametrize("in_place", [True, False], ids=["in-its-file", "in-memory"])
def test_a_cold_build_holds_no_index_array_in_the_process(big, tmp_path, monkeypatch, in_place):
    """Issue 43 item 5: large sampling indices are built in their cache file, from lengths
    spilled to a mapped file, so the process's own memory (numpy's allocations, traced) holds
    the document index while it is shuffled (a file's pages take random writes ~10x slower)
    and chunks, not every array of the corpus's size (a billion documents: ~10 GB of them)."""
    import tracemalloc
    from mmidx_builder.megatron import sampling

    root, _, settings = big
    monkeypatch.setattr(sampling, "IN_PLACE_BYTES", 0 if in_place else 1 << 62)
    # What any first stream costs (datasets imports torch for its epoch counter), not traced.
    tiny = {**settings, "data_files": {"train": [str(root / "tiny_text_document.bin")]}}
    next(iter(MMIdx(**{**tiny, "index_cache_dir": str(tmp_path / "tiny")}).as_streaming_dataset("train")))
    tracemalloc.start()
    try:
        # Three epochs: ~180 MiB of indices against the build's chunks (a few MiB each), whatever N.
        row = next(iter(MMIdx(**{**settings, "num_epochs": 3, "index_cache_dir": str(tmp_path)})
                        .as_streaming_dataset("train")))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(row["input_ids"]) == LENGTH + 1
    arrays = sum(os.path.getsize(tmp_path / n) for n in os.listdir(tmp_path) if n.endswith("-indices.npy"))
    assert arrays > 3 * 12 * SEQUENCES  # document, sample and shuffle index: 4 + 8 + 4 bytes a sample here
    shuffled = 3 * 4 * SEQUENCES  # the document index: 4 bytes a sequence an epoch
    if in_place:
        assert peak < shuffled + 32 * 2**20, f"{peak / 2**20:.1f} MiB allocated for {arrays / 2**20:.1f} MiB of indices"
    else:  # what the goal is measured against: the arrays in memory, and the lengths
        assert peak > arrays, f"{peak / 2**20:.1f} MiB allocated for {arrays / 2**20:.1f} MiB of indices"


def test_a_warm_open_reads_the_idx_header_not_its_tables(big):
    """Counted with every read going through pread (mapped.py's fallback), which /proc/self/io
    counts (copies out of the map are not read calls)."""
    root, prefix, settings = big
    idx_size = os.path.getsize(prefix + ".idx")
    found = _run(f"""
        import json
        from mmidx_builder.storage import mapped, read_lease
        from mmidx_builder.sources.indexed import IndexedFile

        read_lease.USABLE = False  # no copy out of the map under a lease,
        mapped._disabled.set()  # nor by process_vm_readv: every read a pread, counted in rchar

        def rchar():
            with open("/proc/self/io") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("rchar:"))

        IndexedFile.open({prefix!r})  # imports and first-use costs out of the way
        before = rchar()
        warm = IndexedFile.open({prefix!r}, cache_dir={settings["index_cache_dir"]!r})
        tokens = warm.num_tokens
        first = warm.read_pieces([{SEQUENCES - 1}], [0], [{LENGTH}]).tolist()
        warm_bytes = rchar() - before
        before = rchar()
        IndexedFile.open({prefix!r})
        uncached_bytes = rchar() - before
        print(json.dumps({{"warm": warm_bytes, "uncached": uncached_bytes, "tokens": tokens, "first": first}}))
        """, root)
    assert found["tokens"] == SEQUENCES * LENGTH and found["first"] == [0] * LENGTH
    # Opening without the record validates every table: the whole file.
    assert found["uncached"] >= idx_size
    # The header, the record's small meta file and .npy headers: a few KB, whatever N is.
    assert found["warm"] < 64 * 1024, (found, idx_size)


def test_a_replaced_idx_is_validated_again_not_trusted_from_the_record(tmp_path):
    prefix = str(tmp_path / "p")
    with IndexedFileWriter(prefix, dtype=np.uint16) as w:
        for n in (3, 5, 2):
            w.add_document(np.arange(n))
    cache = str(tmp_path / "indices")
    time.sleep(SETTLE)
    assert IndexedFile.open(prefix, cache_dir=cache).sequence_lengths.tolist() == [3, 5, 2]
    assert any(name.startswith("opened-") for name in os.listdir(cache))
    # The same byte count, other lengths: in place (same inode), so only the ctime tells.
    with open(prefix + ".idx", "r+b") as f:
        f.seek(34)
        f.write(np.array([5, 3, 2], "<i4").tobytes())
    from mmidx_builder.errors import FormatError

    with pytest.raises(FormatError, match="sequence_pointers"):
        IndexedFile.open(prefix, cache_dir=cache)


def _collect(stream):
    return [np.asarray(row["input_ids"]).tolist() for row in stream]


def test_resume_at_a_late_sample_equals_the_full_pass_there(tmp_path, torch):
    prefix = str(tmp_path / "c")
    rng = np.random.default_rng(2)
    with IndexedFileWriter(prefix, dtype=np.uint16) as w:
        for _ in range(3000):
            w.add_document(rng.integers(0, 60000, int(rng.integers(1, 30))))
    stream = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=5, seed=9,
                   cache_dir=str(tmp_path / "hf")).as_streaming_dataset("train")
    full = _collect(mmidx_builder.megatron_rank_stream(stream, 1, 2, 3))
    per_rank_batch = 3
    late = (len(full) // per_rank_batch - 7) * 2 * per_rank_batch  # 7 global batches before the end
    resumed = _collect(mmidx_builder.megatron_rank_stream(stream, 1, 2, 3, consumed_samples=late))
    assert resumed == full[late // 2:]
    # From a saved state, deep into the pass.
    state = mmidx_builder.megatron_rank_stream(stream, 1, 2, 3, consumed_samples=late).state_dict()
    ranked = mmidx_builder.megatron_rank_stream(stream, 1, 2, 3)
    ranked.load_state_dict(state)
    assert _collect(ranked) == full[late // 2:]


def _counting_gathers(tmp_path, monkeypatch, documents: int, **settings):
    """A builder over ``documents`` short documents, and the list to which each gather of its
    samples appends how many samples it reads."""
    from mmidx_builder.hf import gpt_samples

    prefix = str(tmp_path / "c")
    with IndexedFileWriter(prefix, dtype=np.uint16) as w:
        for n in range(1, documents):
            w.add_document(np.arange(n % 40 + 1))
    builder = MMIdx(data_files={"train": [prefix + ".bin"]}, seq_length=5, seed=9, cache_dir=str(tmp_path / "hf"),
                    **settings)
    gathered = []
    real = gpt_samples.pooled_samples

    def counting(source, indices, sample_ids):
        gathered.append(len(sample_ids))
        return real(source, indices, sample_ids)

    monkeypatch.setattr(gpt_samples, "pooled_samples", counting)
    return builder, gathered


def test_a_streams_first_row_gathers_one_micro_batch(tmp_path, monkeypatch, torch):
    builder, gathered = _counting_gathers(tmp_path, monkeypatch, 2000)
    stream = builder.as_streaming_dataset("train")
    rows = iter(mmidx_builder.megatron_rank_stream(stream, 0, 2, 4))
    next(rows)
    assert gathered == [4]
    for _ in range(4 + 8 * 4):
        next(rows)
    assert gathered == [4, 8 * 4, 64 * 4]


def test_a_plain_streams_first_row_gathers_one_sample(tmp_path, monkeypatch):
    builder, gathered = _counting_gathers(tmp_path, monkeypatch, 3000, num_shards=1)
    stream = builder.as_streaming_dataset("train")
    rows = iter(stream)
    first = next(rows)
    assert gathered[0] == 1
    # The rows are the same as the prepared dataset's, in the same order, whatever the cuts.
    streamed = [first["input_ids"]] + [row["input_ids"] for row in rows]
    builder.download_and_prepare()
    assert streamed == builder.as_dataset("train")["input_ids"]
    assert gathered[:5] == [1, 8, 64, 512, 1000]


def test_leaving_one_ahead_early_never_waits_for_the_table_being_made():
    import threading

    from mmidx_builder.hf.tables import one_ahead

    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def make(rows):
        if rows[0] == 1:
            started.set()
            release.wait(120)
            finished.set()
        return rows

    tables = one_ahead(make, [(k, np.array([k])) for k in range(3)])
    assert next(tables)[0] == 0
    assert started.wait(120)
    tables.close()  # a break: returns while table 1 is still being made
    assert not finished.is_set()
    release.set()
    assert finished.wait(120)


def test_the_interpreter_exits_without_waiting_for_a_table_made_ahead(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import threading, numpy as np
        from mmidx_builder.hf.tables import one_ahead
        never = threading.Event()
        def make(rows):
            if rows[0] == 1:
                never.wait()  # a table that is never done
            return rows
        tables = one_ahead(make, [(k, np.array([k])) for k in range(3)])
        next(tables)
        print("left")
        """)], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout.strip() == "left", done.stderr[-2000:]


@pytest.mark.parametrize("damage", ["shuffle_index", "sample_index", "negative offset"])
def test_index_entries_out_of_range_are_refused_where_they_are_used(damage):
    """A cache written whole but wrong (digests match: built for other data, or by a buggy
    version) is no longer scanned at every open; the entries a read uses are checked instead."""
    import dataclasses

    from mmidx_builder.errors import FormatError
    from mmidx_builder.megatron import sampling

    lengths = np.array([5, 9, 0, 30, 2, 17, 1] * 40, np.int32)
    indices = sampling.build_indices(lengths, seq_length=8, seed=3)
    shuffle, sample = indices.shuffle_index.copy(), indices.sample_index.copy()
    if damage == "shuffle_index":
        shuffle[3] = indices.total_samples + 7
    elif damage == "sample_index":
        sample[shuffle[3] + 1, 0] = len(indices.document_index) + 2
    else:
        sample[shuffle[3], 1] = -4
    damaged = dataclasses.replace(indices, shuffle_index=shuffle, sample_index=sample)
    sampling.sample_pieces(damaged, lengths, [0, 1, 2])  # the entries of other samples are fine
    with pytest.raises(FormatError, match="index cache is damaged"):
        sampling.sample_pieces(damaged, lengths, [2, 3])


@pytest.mark.parametrize("array", [
    np.arange(20011, dtype=np.int32), np.zeros((5, 2), np.int64), np.zeros(0, np.uint16), np.float64(3.0).reshape(()),
    np.zeros((3, 4), np.float32, order="F"), np.zeros((2, 3, 4), ">u8"), np.zeros(7, bool),
    np.zeros(3, dtype=[("a", "<i4"), ("b", "<f8")]),  # not a plain dtype: numpy's own reader
    np.zeros((1,) * 60, np.int8),  # a header longer than map_npy's first read of the file
], ids=lambda a: f"{a.dtype.str}{list(a.shape)}"[:40])
def test_npy_headers_of_the_cache_read_as_numpy_reads_them(tmp_path, array):
    """map_npy reads the headers np.save writes for plain dtypes without ast.literal_eval
    (6,000 of them at a warm open of a 1,000-prefix blend): the same shape, order and dtype as
    numpy's reader, the file left at the same byte, and the same array mapped."""
    from mmidx_builder.storage import array_cache

    path = tmp_path / "a.npy"
    np.save(path, array, allow_pickle=False)
    with open(path, "rb") as f:
        ours = array_cache._npy_header(f)
        ours_at = f.tell()
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        theirs = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                  else np.lib.format.read_array_header_2_0(f))
        assert ours == theirs and ours_at == f.tell()
    mapped = array_cache.map_npy(str(path))
    assert mapped.dtype == array.dtype and mapped.shape == array.shape
    assert np.array_equal(np.asarray(mapped), array)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc/self/maps")
def test_a_mapped_cache_array_is_unmapped_with_its_last_view_and_not_before(tmp_path):
    """map_npy's map is unmapped when the last array over it is collected: a slice kept alone
    (everything made while mapping collected) still reads the file's values (an early unmap
    is SIGSEGV here), and once the slice goes the map is gone (no map leaks a blend's open)."""
    import gc

    from mmidx_builder.storage import array_cache

    path = tmp_path / "kept.npy"
    np.save(path, np.arange(300_000, dtype=np.int64), allow_pickle=False)

    def mapped_here() -> bool:
        with open("/proc/self/maps") as f:
            return any(line.rstrip().endswith(str(path)) for line in f)

    tail = array_cache.map_npy(str(path))[-5:][::2]
    gc.collect()
    assert mapped_here()
    assert tail.tolist() == [299_995, 299_997, 299_999]
    del tail
    gc.collect()
    assert not mapped_here()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_another_thread_reads_can_read(tmp_path):
    """DataLoader workers are forked while a table is made ahead in a thread, which holds the
    pool of open files' lock during its reads: a child forked then inherited the lock held by
    a thread it does not have, and its first read waited forever (a 1,000-prefix blend's
    workers hung under ulimit -n 1024). The fork now waits for the lock."""
    import threading

    from mmidx_builder.storage import mapped

    path = tmp_path / "f"
    path.write_bytes(bytes(range(256)) * 16)
    file = mapped.MappedFile(path)
    holding, done = threading.Event(), threading.Event()

    def reader():
        with mapped._POOL.lock:  # what a read in another thread holds
            holding.set()
            done.wait(0.5)

    thread = threading.Thread(target=reader)
    thread.start()
    holding.wait()
    pid = os.fork()
    if pid == 0:  # the child: one read, then out
        try:
            ok = bytes(file.read(10, 4, np.uint8)) == bytes([10, 11, 12, 13])
        finally:
            os._exit(0 if ok else 1)
    done.set()
    thread.join()
    deadline = time.monotonic() + 30
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        if finished or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if not finished:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert finished, "the forked child's read waited for a lock no thread of it holds"
    assert os.waitstatus_to_exitcode(status) == 0


def test_arrays_packed_in_one_file_come_back_as_written_each_with_its_own_digest(tmp_path):
    """Arrays given one path are packed into one file (one map and one stat at each open: the
    sampling indices and an opened pair's arrays). Each comes back equal, mapped, with the
    digest of its own bytes, also beside another of the same dtype and shape."""
    from mmidx_builder.storage import array_cache

    arrays = {"up": np.arange(1000, dtype=np.int32), "down": np.arange(1000, dtype=np.int32)[::-1],
              "grid": np.arange(15, dtype=np.int64).reshape(3, 5), "none": np.zeros(0, np.int16),
              "odd": np.arange(7, dtype=np.uint8)}
    packed = str(tmp_path / "k-arrays.npy")
    array_cache.save_arrays(str(tmp_path / "k-meta.json"), {name: packed for name in arrays}, arrays, {"x": 1})
    assert sorted(os.listdir(tmp_path)) == ["k-arrays.npy", "k-meta.json"]
    fields, loaded = array_cache.load_arrays(str(tmp_path / "k-meta.json"), {name: packed for name in arrays})
    assert fields == {"x": 1}
    for name, array in arrays.items():
        assert isinstance(loaded[name], np.memmap) and loaded[name].dtype == array.dtype
        assert np.array_equal(np.asarray(loaded[name]), array), name
        assert array_cache.recorded_digest(loaded[name]) == array_cache.array_digest(array), name
    assert array_cache.recorded_digest(loaded["up"]) != array_cache.recorded_digest(loaded["down"])
    assert array_cache.recorded_digest(loaded["up"][:10]) is None  # a part is not the array


def test_a_bit_flipped_between_packed_arrays_is_caught(tmp_path, monkeypatch):
    """The zeros that align packed arrays are checked with the digests: a bit flipped there is
    damage the arrays' own digests would not see."""
    from mmidx_builder.storage import array_cache

    arrays = {"a": np.arange(100, dtype=np.int8), "b": np.arange(50, dtype=np.int64)}
    packed, meta = tmp_path / "k-arrays.npy", str(tmp_path / "k-meta.json")
    paths = {name: str(packed) for name in arrays}
    array_cache.save_arrays(meta, paths, arrays, {})
    data = bytearray(packed.read_bytes())
    data_start = len(data) - 128 - 448  # a: 100 bytes aligned to 128; b: 400 bytes aligned to 448
    assert data[data_start:data_start + 100] == bytes(range(100))
    data[data_start + 110] ^= 4  # in the gap after a
    packed.write_bytes(bytes(data))
    monkeypatch.setenv(array_cache.CHECK_ALWAYS_VARIABLE, "1")
    with pytest.warns(UserWarning, match="not the zeros written there"):
        assert array_cache.load_arrays(meta, paths) is None
