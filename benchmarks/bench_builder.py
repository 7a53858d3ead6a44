"""Builder throughput and memory against two ceilings measured in the same run.

    .venv/bin/python benchmarks/bench_builder.py [--tokens 100e6] [--lengths lognormal|uniform]
                                                 [--repeats 5] [--workdir DIR] [--index-sequences 5e6]

One epoch of seq_length 2048 over a generated uint16 corpus (heavy-tailed lognormal document
lengths, median 612 tokens, by default; uniform 1-2,000 with --lengths uniform). Every row is
the best of --repeats full passes (noise on a shared machine only slows a pass down).

Ceilings (tokens/s):
  window, np.memmap   2,049-token windows at random starts, sliced from the np.memmap object into
                      a preallocated batch of 1,000 (the issue's "sequential window" ceiling)
  window, ndarray     the same through a plain ndarray view of the map (no np.memmap per-slice cost)
  same pieces         a plain numpy copy of the very pieces the builder reads (the same sequences,
                      offsets and lengths, in training order, as sampling.sample_pieces gives them)
                      into a preallocated batch: the limit of a shuffled gather done with numpy
Rows:
  index build         sampling.build_indices for the corpus (seconds, tracemalloc peak)
  load_dataset        download_and_prepare (the Arrow cache) + as_dataset, indices cached
  cached read         the prepared dataset, numpy format with the file dtype, batches of 1,000
  streaming, arrow    streaming=True, with_format("arrow").iter(1000)
  streaming, numpy    streaming=True, with_format("numpy").iter(1000): datasets' formatter, int64
  streaming, recipe   mmidx_builder.numpy_batches: Arrow batches viewed as numpy (file dtype)
  our gather alone    the same pieces through IndexedFile.read_pieces (the builder's own copy,
                      safe against a truncated file: memcpy under a read lease) into a
                      preallocated batch, nothing else; and the same by the kernel's copy
                      (process_vm_readv), as where no read lease is granted
  datasets alone      load_dataset, the stream (arrow, numpy, numpy_batches) of a builder whose
                      tables are already made, in memory: datasets' own cost on each path, so
                      the most any reader could reach there; load_dataset over tables of 1,000
                      rows (the builder's layout) and over a table a shard (its layout when
                      datasets.config.SAVE_ORIGINAL_SHARD_LENGTHS is set)
  numpy formatter     datasets' numpy formatter alone on the same tables, already made: what
                      with_format("numpy") costs on top of the arrow row, whatever the reader
Memory: the index build's peak of numpy allocations (tracemalloc), and the process's anonymous RSS
(heap; the page cache of the mapped .bin is not counted) after every batch of a streaming pass.

Passes in a row: 10 passes of the ceiling, the Arrow stream and numpy_batches back to back,
the garbage collector left to itself as in a training loop (the table above collects before
every run): the mean and the slowest pass, and the collections made a pass.

Index build against megatron-core (--index-sequences, default 5M lognormal lengths, 3 epochs; 0
skips): sampling.build_indices against _build_document_index + the C++ helpers.build_sample_idx +
_build_shuffle_index as GPTDataset calls them, best of --repeats, the two taking turns.

Issue 43's goals for these paths are printed last, met or not: load_dataset and numpy_batches
>= 0.8x the np.memmap window ceiling, with_format("numpy") >= 0.5x, the index build <= 0.8x
megatron-core's time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import glob
import os
import platform
import shutil
import time
import tracemalloc

import numpy as np

from bench_format import LENGTH_DISTRIBUTIONS, make_corpus, through_kernel  # corpora generated once per workdir

SEQ_LENGTH = 2048
WINDOW = SEQ_LENGTH + 1
BATCH = 1000


def machine() -> str:
    """The CPU, its cores and its last-level cache, and the 1-minute load: the figures below
    moved with these from one machine to the next (docs/benchmarks.md), above all the ratio
    of numpy's own loops to anything made of many numpy calls."""
    caches = {}
    for folder in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*")):
        try:
            with open(os.path.join(folder, "level")) as level, open(os.path.join(folder, "size")) as size:
                caches[int(level.read())] = size.read().strip()  # "107520K"
        except (OSError, ValueError):
            continue
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    if not caches:
        last = "caches unknown"
    else:
        size = caches[max(caches)]
        kib = int(size[:-1]) if size.endswith("K") and size[:-1].isdigit() else None
        last = f"L{max(caches)} " + (f"{kib / 1024:,.0f} MiB" if kib else size)
    return f"{model}, {os.cpu_count()} cores, {last}, load {os.getloadavg()[0]:.2f}"


def rss_anon_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def best_rates(repeats: int, tokens: int, runs: dict) -> dict:
    """Tokens/s of the fastest of ``repeats`` runs of each ``runs[name]`` (a function, or a
    (setup, function) pair whose setup is not timed). The runs take turns, so that a busy spell
    of a shared machine slows one repeat of every row instead of every repeat of one row."""
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeats):
        for name, run in runs.items():
            setup, run = run if isinstance(run, tuple) else (None, run)
            if setup is not None:
                setup()
            gc.collect()
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return {name: tokens / seconds for name, seconds in best.items()}


# Passes of a path run back to back, the garbage collector left to itself, as a training
# loop runs them (best_rates collects before each run: its figures never show a collection).
PASSES_IN_A_ROW = 10


def passes_in_a_row(runs: dict, passes: int) -> None:
    """Prints the mean and the slowest of ``passes`` passes of each of ``runs`` in a row,
    against the first run's mean, and the collections the garbage collector made a pass."""
    print(f"\n{passes} passes in a row, no gc.collect() between them:\n")
    print("| path | mean s | slowest s | mean x the first row's mean | collections a pass |\n|---|---|---|---|---|")
    first = None
    for name, run in runs.items():
        run()
        collections = sum(generation["collections"] for generation in gc.get_stats())
        seconds = []
        for _ in range(passes):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        made = (sum(generation["collections"] for generation in gc.get_stats()) - collections) / passes
        mean = sum(seconds) / passes
        first = first or mean
        print(f"| {name} | {mean:.3f} | {max(seconds):.3f} | {first / mean:.2f}x | {made:.0f} |")


def window_ceiling(prefix: str, num_samples: int, plain_view: bool):
    """Random WINDOW-token windows copied into a preallocated batch. ``plain_view`` slices an
    ndarray view of the map instead of the ``np.memmap`` object, whose per-slice Python
    overhead makes it about 3x slower (both are zero-copy maps of the same file)."""
    tokens = np.memmap(prefix + ".bin", dtype=np.uint16, mode="r")
    if plain_view:
        tokens = tokens.view(np.ndarray)
    starts = np.random.default_rng(1).integers(0, len(tokens) - WINDOW, size=num_samples).tolist()
    out = np.empty((BATCH, WINDOW), np.uint16)

    def run():
        for i, start in enumerate(starts):
            out[i % BATCH] = tokens[start:start + WINDOW]
    return run


def batch_pieces(indexed, indices, num_samples: int) -> list:
    """(sequence ids, offsets, lengths) of the pieces of each batch of BATCH samples, in
    training order, as the builder reads them (sampling.sample_pieces)."""
    from mmidx_builder.megatron import sampling

    return [sampling.sample_pieces(indices, indexed.sequence_lengths,
                                   np.arange(first, min(first + BATCH, num_samples)))[:3]
            for first in range(0, num_samples, BATCH)]


def same_pieces_ceiling(indexed, indices, num_samples: int):
    """The builder's own pieces (training order), copied with numpy slices of the mapped .bin
    into a preallocated batch of BATCH samples: no bounds checks, no tables, no datasets."""
    tokens = np.memmap(indexed.bin_path, dtype=indexed.dtype, mode="r").view(np.ndarray)
    batches = [((indexed.sequence_starts[ids] + offsets).tolist(), lengths.tolist())
               for ids, offsets, lengths in batch_pieces(indexed, indices, num_samples)]
    out = np.empty(BATCH * WINDOW, indexed.dtype)
    pieces = sum(len(lengths) for _, lengths in batches)

    def run():
        for starts, lengths in batches:
            position = 0
            for start, length in zip(starts, lengths):
                out[position:position + length] = tokens[start:start + length]
                position += length
    return run, pieces


def datasets_alone(tables: list, features, folder: str) -> dict:
    """datasets' own paths over Arrow tables already made (in memory), as runs for best_rates:
    what load_dataset, a stream and its formats cost above a reader that costs nothing, so the
    most any reader of ours can reach on those paths. load_dataset twice: over tables of BATCH
    rows (the builder's layout: consecutive small shards joined in tables of up to 1,000 rows),
    and over a table per shard of DEFAULT_NUM_SHARDS, each under its shard's key (the builder's
    layout when datasets.config.SAVE_ORIGINAL_SHARD_LENGTHS asks for each shard's row count)."""
    import datasets
    import pyarrow as pa

    from mmidx_builder import numpy_batches
    from mmidx_builder.hf.base_builder import DEFAULT_NUM_SHARDS
    from mmidx_builder.hf.tables import shard_ranges

    whole = pa.concat_tables(tables)
    shard_tables = [whole.slice(start, stop - start) for start, stop in shard_ranges(len(whole), DEFAULT_NUM_SHARDS)]

    class PremadeTables(datasets.ArrowBasedBuilder):
        BUILDER_CONFIGS = [datasets.BuilderConfig(name="batches"), datasets.BuilderConfig(name="shards")]
        DEFAULT_CONFIG_NAME = "batches"

        def _info(self):
            return datasets.DatasetInfo(features=features)

        def _split_generators(self, dl_manager):
            made = shard_tables if self.config.name == "shards" else tables
            return [datasets.SplitGenerator(datasets.Split.TRAIN, gen_kwargs={"tables": made})]

        def _generate_tables(self, tables):
            for shard, table in enumerate(tables):
                yield datasets.builder.Key(shard, 0), table

    def prepare(name="batches"):
        builder = PremadeTables(cache_dir=folder, config_name=name)
        builder.download_and_prepare()
        return builder.as_dataset("train")

    stream = PremadeTables(cache_dir=folder).as_streaming_dataset("train")

    def stream_arrow():
        for table in stream.with_format("arrow").iter(BATCH):
            assert table.num_rows

    def stream_numpy():
        for batch in stream.with_format("numpy").iter(BATCH):
            assert batch["input_ids"].shape[1] == WINDOW

    def stream_recipe():
        for batch in numpy_batches(stream, BATCH):
            assert batch["input_ids"].shape[1] == WINDOW

    return {"datasets alone: load_dataset (Arrow cache)": (lambda: shutil.rmtree(folder, ignore_errors=True), prepare),
            "datasets alone: load_dataset, a table a shard": (lambda: shutil.rmtree(folder, ignore_errors=True),
                                                              lambda: prepare("shards")),
            "datasets alone: streaming, arrow": stream_arrow,
            "datasets alone: streaming, numpy (datasets)": stream_numpy,
            "datasets alone: streaming, arrow -> numpy (recipe)": stream_recipe}


def read_pieces_alone(indexed, indices, num_samples: int, leases: bool = True):
    """The same pieces through the builder's own gather (``IndexedFile.read_pieces``, safe
    against a truncated file: docs/reliability.md) into a preallocated batch: no tables, no
    datasets. What the streams' table making can be at most. ``leases=False`` reads a pair
    opened anew with read leases off (``MMIDX_READ_LEASES=0``): the kernel's copy."""
    from mmidx_builder.sources.indexed import IndexedFile

    way = contextlib.nullcontext if leases else through_kernel
    if not leases:
        indexed = IndexedFile.open(indexed.prefix)
    batches = [(ids, offsets, lengths, int(lengths.sum()))
               for ids, offsets, lengths in batch_pieces(indexed, indices, num_samples)]
    out = np.empty(BATCH * WINDOW, indexed.dtype)

    def run():
        with way():
            for ids, offsets, lengths, count in batches:
                indexed.read_pieces(ids, offsets, lengths, out=out[:count])
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=100e6)
    parser.add_argument("--workdir", default="/tmp/mmidx-bench")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--lengths", choices=LENGTH_DISTRIBUTIONS, default="lognormal",
                        help="document lengths: heavy-tailed (the main case) or uniform 1-2000")
    parser.add_argument("--index-sequences", type=float, default=5e6,
                        help="sequences of the index build compared with megatron-core (0: not run)")
    args = parser.parse_args()

    import datasets
    from datasets.formatting import get_formatter

    import mmidx_builder  # noqa: F401  registers the builder
    from mmidx_builder.megatron import sampling
    from mmidx_builder.sources.indexed import IndexedFile

    datasets.disable_progress_bars()
    prefix = make_corpus(args.workdir, int(args.tokens), args.lengths)
    indexed = IndexedFile.open(prefix)
    cache = os.path.join(args.workdir, "hf-cache")
    shutil.rmtree(cache, ignore_errors=True)
    kwargs = dict(data_files={"train": prefix + ".bin"}, seq_length=SEQ_LENGTH, seed=1234, split="train",
                  index_cache_dir=os.path.join(cache, "mmidx_indices"))
    repeats = args.repeats

    # Index build, alone: seconds and the peak of numpy's allocations.
    build_seconds, build_peak = float("inf"), 0
    for _ in range(repeats):
        gc.collect()
        tracemalloc.start()
        start = time.perf_counter()
        indices = sampling.build_indices(indexed.sequence_lengths, seq_length=SEQ_LENGTH, seed=1234)
        build_seconds = min(build_seconds, time.perf_counter() - start)
        build_peak = max(build_peak, tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    num_samples = indices.num_samples
    total = num_samples * WINDOW
    output_bytes = sum(a.nbytes for a in (indices.document_index, indices.sample_index, indices.shuffle_index))

    # Warm up: the index cache is built, the page cache holds the .bin, datasets' lazy imports are done.
    stream = datasets.load_dataset("mmidx", streaming=True, cache_dir=cache, **kwargs)
    next(iter(stream))
    int(np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")[::4096].sum())

    # Streaming heap, in a pass of its own: anonymous RSS before and after every batch.
    heap_before = rss_anon_mib()
    memory = []
    for _ in stream.with_format("numpy").iter(BATCH):
        memory.append(rss_anon_mib())

    run, pieces = same_pieces_ceiling(indexed, indices, num_samples)
    runs = {"ceiling: windows, np.memmap slices": window_ceiling(prefix, num_samples, plain_view=False),
            "ceiling: windows, ndarray view slices": window_ceiling(prefix, num_samples, plain_view=True),
            "ceiling: the same pieces, numpy slices": run,
            "the same pieces, our gather alone": read_pieces_alone(indexed, indices, num_samples),
            "the same, kernel's copy (no lease)": read_pieces_alone(indexed, indices, num_samples, leases=False)}
    notes = {"ceiling: the same pieces, numpy slices": f"{pieces / num_samples:.2f} pieces per sample, "
                                                       f"mean {total / pieces:,.0f} tokens",
             "the same pieces, our gather alone": "IndexedFile.read_pieces (memcpy under a read lease), no tables",
             "the same, kernel's copy (no lease)": "MMIDX_READ_LEASES=0: process_vm_readv"}
    prepared_folder = os.path.join(args.workdir, "hf-prepare")

    def prepare():
        return datasets.load_dataset("mmidx", cache_dir=prepared_folder, **kwargs)
    runs["load_dataset (Arrow cache)"] = (lambda: shutil.rmtree(prepared_folder, ignore_errors=True), prepare)
    notes["load_dataset (Arrow cache)"] = "indices cached"
    prepared = prepare()

    def cached_read():
        for batch in prepared.with_format("numpy", dtype=np.uint16).iter(BATCH):
            assert batch["input_ids"].shape[1] == WINDOW
    runs["cached read, numpy uint16"] = cached_read

    def stream_arrow():
        for table in stream.with_format("arrow").iter(BATCH):
            assert table.num_rows
    runs["streaming, arrow"] = stream_arrow
    notes["streaming, arrow"] = "pyarrow tables"

    def stream_numpy():
        for batch in stream.with_format("numpy").iter(BATCH):
            assert batch["input_ids"].shape[1] == WINDOW
    runs["streaming, numpy (datasets)"] = stream_numpy
    notes["streaming, numpy (datasets)"] = "int64, datasets' formatter"

    def stream_recipe():
        from mmidx_builder import numpy_batches

        for batch in numpy_batches(stream, BATCH):
            assert batch["input_ids"].dtype == indexed.dtype
    runs["streaming, arrow -> numpy (recipe)"] = stream_recipe
    notes["streaming, arrow -> numpy (recipe)"] = "uint16, mmidx_builder.numpy_batches"

    rates = best_rates(repeats, total, runs)

    # After the others, which it would crowd with its 2 bytes per token of tables held at once.
    tables = list(stream.with_format("arrow").iter(BATCH))
    formatter = get_formatter("numpy", features=stream.features)

    def format_only():
        for table in tables:
            formatter.format_batch(table)
    alone = datasets_alone(tables, stream.features, os.path.join(args.workdir, "hf-premade"))
    rates.update(best_rates(repeats, total, {"datasets' numpy formatter alone": format_only, **alone}))
    notes["datasets' numpy formatter alone"] = "tables already made"
    notes.update(dict.fromkeys(alone, "tables already made, in memory: no reader"))
    del tables, alone
    rows = [(name, rate, notes.get(name, "")) for name, rate in rates.items()]
    memmap_rate = rates["ceiling: windows, np.memmap slices"]
    view_rate = rates["ceiling: windows, ndarray view slices"]
    pieces_rate = rates["ceiling: the same pieces, numpy slices"]

    print(f"\n{args.lengths} document lengths: {indexed.num_documents:,} documents, {num_samples:,} samples of "
          f"{WINDOW} tokens ({total / 1e6:,.0f}M tokens, .bin {os.path.getsize(prefix + '.bin') / 2**20:,.0f} MiB), "
          f"best of {repeats}; {machine()}\n")
    print(f"| {'path':<40} | {'M tokens/s':>10} | {'x np.memmap windows':>19} | {'x view windows':>14} "
          f"| {'x same pieces':>13} | note")
    print(f"|{'-' * 42}|{'-' * 12}|{'-' * 21}|{'-' * 16}|{'-' * 15}|------")
    for name, rate, note in rows:
        print(f"| {name:<40} | {rate / 1e6:>10,.0f} | {rate / memmap_rate:>19.2f} | {rate / view_rate:>14.2f} "
              f"| {rate / pieces_rate:>13.2f} | {note}")
    print(f"\nnumpy formatting / arrow formatting: datasets' formatter "
          f"{rates['streaming, numpy (datasets)'] / rates['streaming, arrow']:.2f}, recipe "
          f"{rates['streaming, arrow -> numpy (recipe)'] / rates['streaming, arrow']:.2f}")
    quarter = max(1, len(memory) // 4)
    print(f"\n| memory | MiB | note |\n|---|---|---|")
    print(f"| index build, peak of numpy allocations | {build_peak / 2**20:,.1f} | {build_seconds:.2f} s; the three "
          f"index arrays are {output_bytes / 2**20:,.1f} MiB ({build_peak / output_bytes:.2f}x) |")
    print(f"| streaming, anonymous RSS before the pass | {heap_before:,.0f} | interpreter, datasets, pyarrow, torch |")
    print(f"| streaming, anonymous RSS peak | {max(memory):,.0f} | first quarter of the pass "
          f"{max(memory[:quarter]):,.0f}, last quarter {max(memory[-quarter:]):,.0f} (flat: nothing accumulates) |")

    passes_in_a_row({name: runs[name] for name in ("ceiling: windows, np.memmap slices", "streaming, arrow",
                                                   "streaming, arrow -> numpy (recipe)")}, PASSES_IN_A_ROW)

    index_ratio = index_build_against_megatron(int(args.index_sequences), repeats) if args.index_sequences else None
    def alone(path):
        return rates[f"datasets alone: {path}"] / memmap_rate

    def copying_only(path):
        """A reader that did nothing but copy its pieces with numpy slices (no lookups, no
        tables, no truncation safety), under datasets' own path: the two times added."""
        return 1 / (1 / pieces_rate + 1 / rates[f"datasets alone: {path}"]) / memmap_rate

    paths = {"load_dataset (Arrow cache)": ("load_dataset (Arrow cache) / np.memmap windows", 0.8),
             "streaming, arrow -> numpy (recipe)": ("numpy_batches on a stream / np.memmap windows", 0.8),
             "streaming, numpy (datasets)": ('with_format("numpy") on a stream / np.memmap windows', 0.5)}
    gather_alone = rates["the same pieces, our gather alone"] / memmap_rate
    goals = [(name, rates[path] / memmap_rate, ">=", goal, f"{alone(path):.2f}x", f"{copying_only(path):.2f}x",
              f"{gather_alone:.2f}x") for path, (name, goal) in paths.items()]
    goals.append(("index build / megatron-core's (C++ sample index)", index_ratio, "<=", 0.8, "-", "-", "-"))
    print("\nissue 43's goals (item 6). datasets alone: the same path over tables already made (no reader); "
          "numpy copies + datasets: a reader that did nothing but copy its pieces with numpy slices, its time "
          "added to datasets' (no overlap); our gather alone: the builder's own copy of the same pieces, "
          "nothing else:\n| goal | measured | datasets alone | numpy copies + datasets | our gather alone | goal "
          "| verdict |\n|---|---|---|---|---|---|---|")
    for name, value, sense, goal, ceiling, bound, gathered in goals:
        if value is None:
            print(f"| {name} | not run | {ceiling} | {bound} | {gathered} | {sense} {goal}x | - |")
            continue
        met = value >= goal if sense == ">=" else value <= goal
        print(f"| {name} | {value:.2f}x | {ceiling} | {bound} | {gathered} | {sense} {goal}x "
              f"| {'met' if met else 'not met'} |")


def index_build_against_megatron(sequences: int, repeats: int) -> float | None:
    """Best-of-``repeats`` time of sampling.build_indices over ``sequences`` lognormal lengths
    (3 epochs, seq_length 2048) against megatron-core's GPTDataset steps, taking turns; the
    arrays are checked equal. None (and a line saying why) without megatron-core."""
    from bench_format import document_lengths
    from bench_sampling import megatron_build

    from mmidx_builder.megatron import sampling

    try:
        import megatron.core.datasets.helpers  # noqa: F401
    except ImportError as error:
        print(f"\nindex build: megatron-core not importable ({error}); not compared")
        return None
    sizes = document_lengths(np.random.default_rng(0), sequences, "lognormal").astype(np.int32)
    best = {"ours": float("inf"), "megatron-core": float("inf")}
    builds = {"ours": lambda: sampling.build_indices(sizes, seq_length=SEQ_LENGTH, seed=1234, num_epochs=3),
              "megatron-core": lambda: megatron_build(sizes, 3, SEQ_LENGTH, 1234)}
    results = {}
    for _ in range(repeats):
        for name, build in builds.items():
            gc.collect()
            start = time.perf_counter()
            results[name] = build()
            best[name] = min(best[name], time.perf_counter() - start)
    ours, theirs = results["ours"], results["megatron-core"]
    same = all(np.array_equal(a, b) for a, b in
               zip((ours.document_index, ours.sample_index, ours.shuffle_index), theirs))
    print(f"\nindex build, {sequences:,} lognormal sequences x 3 epochs ({ours.total_samples:,} samples), best of "
          f"{repeats}: ours {best['ours']:.2f} s, megatron-core {best['megatron-core']:.2f} s "
          f"({best['ours'] / best['megatron-core']:.2f}x); arrays {'identical' if same else 'DIFFERENT'}")
    return best["ours"] / best["megatron-core"]


if __name__ == "__main__":
    main()
