"""MosaicML shards: our streams against MosaicML's own readers over the same shards, in one run.

    .venv/bin/python benchmarks/bench_mosaic.py [--token-samples 10000] [--mixed-samples 10000] [--repeats 3]
                                                [--latency-ms 25] [--remote-repeats 1] [--no-remote]
                                                [--workdir /tmp/mmidx-bench-mosaic]

The data is written in the run by MosaicML's own MDSWriter (mosaicml-streaming 0.13.0, through
tests/mosaic_oracle.py; ``bash scripts/install_mosaic_oracle.sh .venv`` installs it):
  tokens       LLM Foundry's token shards (``convert_dataset_hf.py --concat_tokens 2048``): one
               ``tokens`` column, ``ndarray:int32``, 2,048 ids a sample, documents of lognormal
               lengths (median 600) packed with an EOS id as ``llm_foundry_concat`` packs them,
               MDSWriter's default 64 MiB shards; uncompressed
  tokens zstd  the same samples, ``compression="zstd"`` (LLM Foundry's README commands)
  mixed        str (0-400 characters), int, float32, ndarray:int32 of 1-300 ids (MDS refuses empty
               arrays), bytes (0-200)

Local rows: every sample read once a pass, a fresh reader each pass, the rows taking turns
(a busy spell of the shared machine slows one pass of every row, not every pass of one row);
each row's fastest of --repeats passes. Before them, each reader is made once and reads one
sample (imports, datasets' caches, our token runs and Arrow caches), and the shards are read
into the page cache. rows/s: the samples after the first item (a sample, or a batch for the
batch rows) over the time after it: the pace once running. first sample: from making the
reader (its constructor, load_dataset) to its first item, the fastest pass's. load: the
1-minute load average when that pass ended (os.getloadavg; 2 cores).
  LocalDataset            streaming.LocalDataset(folder), ``ds[i]`` for every i. It reads no
                          compressed shards: the zstd rows are divided by the uncompressed
                          folder's, the same samples (and so are their ceilings)
  StreamingDataset        streaming.StreamingDataset(local=copy, shuffle=False, batch_size=1,
                          predownload=every sample), iterated in this process. Its consumer
                          sleeps 7 ms (streaming's TICK) whenever it reaches the predownload
                          window, so its default window (8 x batch_size) caps a pass near
                          predownload / 7 ms: ``x StreamingDataset`` divides by its fastest
                          setting, and the ``batch_size=32`` row shows its default window for a
                          per-device batch of 32
  ceiling: datasets from memory
                          the same rows as one in-memory table read by datasets itself
                          (``Dataset(table).to_iterable_dataset()``, numpy or Python rows; a
                          map-style Dataset for the prepared row): what datasets' per-row
                          formatting allows any reader; ``x datasets from memory`` divides each
                          of our rows by the ceiling of its consumer
  ours, numpy rows        ``load_dataset(folder, split="train", streaming=True).with_format("numpy")``,
                          rows (their readers return numpy arrays: the fair comparison)
  ours, Python rows       the same stream's rows as Python objects
  ours, token_column      ``token_column="tokens"``: ``input_ids`` rows, numpy
  ours, numpy_batches     ``mmidx_builder.numpy_batches(stream, 1000)`` over the token_column
                          stream, every row of the 2-D batches visited (the package's recipe)
  ours, arrow batches     ``with_format("arrow").iter(1000)``: our reader without datasets' per-row
                          formatting
  ours, prepared          ``load_dataset(folder, split="train")``, its Arrow cache built before the
                          pass (the build's own seconds: the ``prepare`` row), numpy rows
  cold rows (zstd)        the first pass of a fresh copy (StreamingDataset) or of a fresh index
                          cache (ours): every shard decompressed during the pass

Remote rows (``--latency-ms`` added to every request): each a fresh process, one pass over every
sample, the fastest of --remote-repeats. Imported before the clock: torch, datasets, both
packages, aiohttp (fsspec's HTTP), s3fs and boto3; our side also reads one sample of the same
folder on disk first, since the builders' modules load on the first load_dataset.
  ours, http      ``data_files={"train": URL + "/index.json"}`` from benchmarks/async_range_server.py
                  (its own process; the waits overlap as at an object store), numpy rows and
                  arrow batches
  ours, s3        ``s3://`` data files with ``storage_options``, on moto's S3 (tests/s3_server.py)
  StreamingDataset, s3   its own remote: ``remote="s3://..."``, ``local=`` a fresh folder, on the
                  same moto server (its downloaders have no http(s); S3_ENDPOINT_URL points boto3
                  at moto), predownload = every sample as above
rows/s over the whole pass, opening included; GETs and bytes: of the shard files (``bytes x
needed``: over the shard files' bytes, the compressed ones for zstd: what one pass over every
sample must fetch at least). moto answers each request with milliseconds of Python and copies
the object it serves a range of: its rows bound what S3 readers do here, not real S3.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

CONCAT_TOKENS = 2048
EOS = 0
SHARD_LIMIT = 1 << 26  # MDSWriter's default size_limit, which convert_dataset_hf.py keeps
BATCH = 1000
MIXED_COLUMNS = {"text": "str", "id": "int", "score": "float32", "ids": "ndarray:int32", "blob": "bytes"}


# --- data, written by MDSWriter ------------------------------------------------------------------

def import_streaming():
    import mosaic_oracle

    try:
        return mosaic_oracle.streaming_or_skip()
    except BaseException as error:  # pytest's Skipped, where the oracle is not installed
        raise SystemExit(f"mosaicml-streaming does not import ({error}); install it: {mosaic_oracle.INSTALL}")


def token_samples(count: int, seed: int = 0) -> np.ndarray:
    """``count`` samples of CONCAT_TOKENS int32 ids, as llm_foundry_concat(documents, 2048,
    eos=[EOS]) packs documents of lognormal lengths (median 600 ids, ids 1-49,999): the
    documents back to back, each followed by EOS, cut every 2,048 ids (done in numpy here; the
    helper's Python lists take ~40 s for 20M ids)."""
    rng = np.random.default_rng(seed)
    total = count * CONCAT_TOKENS
    ids = rng.integers(1, 50_000, total, dtype=np.int32)
    lengths = np.maximum(1, rng.lognormal(np.log(600), 1.0, size=total // 300 + 10)).astype(np.int64) + 1
    ends = np.cumsum(lengths) - 1  # each document's EOS
    ids[ends[ends < total]] = EOS
    return ids.reshape(count, CONCAT_TOKENS)


def mixed_samples(count: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    words = np.array(["shard", "token", "sample", "stream", "mosaic", "arrow", "numpy", "ünïcode", "日本語", "x"])
    for i in range(count):
        text = " ".join(words[rng.integers(0, len(words), int(rng.integers(0, 60)))].tolist())[:400]
        yield {"text": text, "id": i * 7 - 3, "score": np.float32(rng.random()),
               "ids": rng.integers(0, 50_000, int(rng.integers(1, 301)), dtype=np.int32),
               "blob": rng.bytes(int(rng.integers(0, 201)))}


def write_data(work: str, token_count: int, mixed_count: int) -> dict[str, str]:
    """The three folders, written by MDSWriter (tests/mosaic_oracle.write_mds) into ``work``."""
    import mosaic_oracle

    import_streaming()
    shutil.rmtree(work, ignore_errors=True)
    folders = {"tokens": os.path.join(work, "tokens"), "tokens zstd": os.path.join(work, "tokens-zstd"),
               "mixed": os.path.join(work, "mixed")}
    samples = token_samples(token_count)
    for name, compression in (("tokens", None), ("tokens zstd", "zstd")):
        mosaic_oracle.write_mds(folders[name], {"tokens": "ndarray:int32"}, ({"tokens": s} for s in samples),
                                compression=compression, size_limit=SHARD_LIMIT)
    mosaic_oracle.write_mds(folders["mixed"], MIXED_COLUMNS, mixed_samples(mixed_count), size_limit=SHARD_LIMIT)
    return folders


def shard_bytes(folder: str) -> int:
    """What one pass over every sample must fetch at least: the shard files (compressed ones
    where the index names them, as a remote reader fetches those)."""
    with open(os.path.join(folder, "index.json")) as f:
        shards = json.load(f)["shards"]
    return sum((s["zip_data"] or s["raw_data"])["bytes"] for s in shards)


def num_samples(folder: str) -> int:
    with open(os.path.join(folder, "index.json")) as f:
        return sum(s["samples"] for s in json.load(f)["shards"])


# --- the readers: each a generator of sample counts, its reader made inside it -------------------

def their_local(folder: str):
    ds = import_streaming().LocalDataset(folder)
    for i in range(len(ds)):
        ds[i]
        yield 1


def their_streaming(local: str, remote: str | None = None, **options):
    """StreamingDataset as one process of one node; its shared memory and locks released after."""
    from mosaic_oracle import _one_process_world, _release  # the oracle's own: the world and the cleanup

    streaming = import_streaming()
    with _one_process_world():
        ds = streaming.StreamingDataset(local=local, remote=remote, shuffle=False, **options)
        try:
            for _ in ds:
                yield 1
        finally:
            iterator = getattr(ds, "_iterator", None)
            if iterator is not None:  # left early: its threads stop before _release joins them
                iterator.exit()
            _release(ds)


def ours(folder_or_url: str, fmt: str | None, cache: str, **options):
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401  registers the builders

    if "://" in folder_or_url:
        stream = load_dataset("mmidx", data_files={"train": folder_or_url}, split="train", streaming=True,
                              cache_dir=cache, **options)
    else:
        stream = load_dataset(folder_or_url, split="train", streaming=True, cache_dir=cache, **options)
    if fmt == "arrow":
        for table in stream.with_format("arrow").iter(BATCH):
            yield table.num_rows
        return
    for _ in (stream.with_format(fmt) if fmt else stream):
        yield 1


def ours_numpy_batches(folder: str, cache: str):
    from datasets import load_dataset

    from mmidx_builder import numpy_batches

    stream = load_dataset(folder, split="train", streaming=True, cache_dir=cache, token_column="tokens")
    for batch in numpy_batches(stream, BATCH):
        count = 0
        for _ in batch["input_ids"]:  # one row view of the 2-D batch each
            count += 1
        yield count


def ours_prepared(folder: str, cache: str):
    from datasets import load_dataset

    for _ in load_dataset(folder, split="train", cache_dir=cache).with_format("numpy"):
        yield 1


def from_memory(memory: dict, data: str, fmt: str | None, streaming: bool = True):
    """datasets' own reading of the same rows from a table in memory: what any reader that
    hands datasets its rows is bounded by, for that consumer."""
    dataset = memory[data]
    rows = dataset.to_iterable_dataset() if streaming else dataset
    for _ in (rows.with_format(fmt) if fmt else rows):
        yield 1


def memory_table(folder: str, cache: str):
    """Every row of ``folder`` as one in-memory ``datasets.Dataset`` (read by our stream, untimed)."""
    import datasets
    import pyarrow as pa
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401  registers the builders

    stream = load_dataset(folder, split="train", streaming=True, cache_dir=cache)
    table = pa.concat_tables(list(stream.with_format("arrow").iter(BATCH)))
    return datasets.Dataset(table, info=datasets.DatasetInfo(features=stream.features))


def prepare(folder: str, cache: str):
    from datasets import load_dataset

    load_dataset(folder, split="train", cache_dir=cache)
    yield 1


def timed_pass(make, expected: int | None) -> dict:
    """One pass: the reader made, its first item (a sample, or a batch's count), every item after
    it. ``rate``: the samples after the first item over the time after it (the reader's pace once
    it runs; the start is ``first``); ``whole_rate``: every sample over the whole pass."""
    gc.collect()
    start = time.perf_counter()
    samples = make()
    head = count = next(samples)
    first = time.perf_counter() - start
    for n in samples:
        count += n
    seconds = time.perf_counter() - start
    if expected is not None and count != expected:
        raise RuntimeError(f"a pass read {count} samples, not {expected}")
    return {"seconds": seconds, "first": first, "samples": count, "whole_rate": count / seconds,
            "rate": (count - head) / (seconds - first) if count > head else float("nan"),
            "load": os.getloadavg()[0]}


# --- local rows ----------------------------------------------------------------------------------

def local_rows(folders: dict, work: str) -> list[dict]:
    """The rows of the local table: {data, name, make, setup (untimed, or None), peer, group,
    consumer (what the row's rows are, for the ceiling of the same consumer), note}."""
    every = {name: num_samples(folder) for name, folder in folders.items()}
    memory: dict = {}
    rows = []

    def row(data, name, make, setup=None, peer=None, group="steady", consumer=None, note="", expected=True):
        rows.append({"data": data, "name": name, "make": make, "setup": setup, "peer": peer, "group": group,
                     "consumer": consumer, "note": note, "expected": every[data] if expected else 1})

    for data, folder in folders.items():
        tokens, zstd = data.startswith("tokens"), data.endswith("zstd")
        cache = os.path.join(work, "hf", data.replace(" ", "-"))
        copy = os.path.join(work, "streaming-copies", data.replace(" ", "-"))
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)  # StreamingDataset decompresses into the folder it reads
        whole = dict(batch_size=1, predownload=every[data])
        if not zstd:
            row(data, "LocalDataset, ds[i]", lambda f=folder: their_local(f), peer="local")
        row(data, "StreamingDataset, predownload all", lambda c=copy: their_streaming(c, **whole), peer="streaming")
        if not zstd:
            row(data, "StreamingDataset, batch_size=32 (predownload 256)",
                lambda c=copy: their_streaming(c, batch_size=32),
                note="its default window for a per-device batch of 32")
            memory[data] = memory_table(folder, cache)  # the zstd rows' ceilings are the same samples'
            row(data, "ceiling: datasets from memory, numpy rows", lambda d=data: from_memory(memory, d, "numpy"),
                consumer="numpy", peer="ceiling", note="Dataset(table).to_iterable_dataset(), with_format('numpy')")
            row(data, "ceiling: datasets from memory, Python rows", lambda d=data: from_memory(memory, d, None),
                consumer="python", peer="ceiling", note="the same, Python rows")
            row(data, "ceiling: in-memory Dataset, numpy rows",
                lambda d=data: from_memory(memory, d, "numpy", streaming=False), consumer="prepared", peer="ceiling",
                note="a map-style Dataset of the same table, with_format('numpy')")
        row(data, "ours, numpy rows", lambda f=folder, c=cache: ours(f, "numpy", c), consumer="numpy",
            note="with_format('numpy')")
        if not zstd:
            row(data, "ours, Python rows", lambda f=folder, c=cache: ours(f, None, c), consumer="python")
        if tokens:
            row(data, "ours, token_column, numpy rows", lambda f=folder, c=cache: ours(f, "numpy", c,
                                                                                       token_column="tokens"),
                consumer="numpy", note="input_ids")
            row(data, "ours, token_column, numpy_batches", lambda f=folder, c=cache: ours_numpy_batches(f, c),
                note="rows of numpy_batches(stream, 1000)")
        row(data, "ours, arrow batches", lambda f=folder, c=cache: ours(f, "arrow", c),
            note="with_format('arrow').iter(1000)")
        prepared = os.path.join(work, "hf-prepared", data.replace(" ", "-"))
        row(data, "ours, prepared, numpy rows", lambda f=folder, p=prepared: ours_prepared(f, p), consumer="prepared",
            note="Arrow cache built before the pass")
        row(data, "ours, prepare (Arrow cache build)", lambda f=folder, p=prepared: prepare(f, p),
            setup=lambda p=prepared: shutil.rmtree(p, ignore_errors=True), group="build",
            note="seconds, not rows/s", expected=False)
        if zstd:
            fresh = os.path.join(work, "streaming-cold")

            def fresh_copy(f=folder, target=fresh):
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(f, target)
            cold_cache = os.path.join(work, "hf-cold")
            row(data, "StreamingDataset, cold (decompressing)", lambda t=fresh: their_streaming(t, **whole),
                setup=fresh_copy, peer="streaming", group="cold", note="a fresh copy: every shard decompressed")
            row(data, "ours, numpy rows, cold (decompressing)", lambda f=folder, c=cold_cache: ours(f, "numpy", c),
                setup=lambda c=cold_cache: shutil.rmtree(c, ignore_errors=True), group="cold",
                note="a fresh index cache: every shard decompressed")
    return rows


def warm_page_cache(folders: dict) -> None:
    for folder in folders.values():
        for name in os.listdir(folder):
            with open(os.path.join(folder, name), "rb") as f:
                while f.read(1 << 24):
                    pass


def measure_local(rows: list[dict], repeats: int) -> None:
    # Warm-up: imports, the datasets caches, the token runs and the Arrow caches (each row's
    # reader made and its first sample read; the page cache holds the shards already).
    for row in rows:
        if row["setup"] is not None:
            row["setup"]()
        samples = row["make"]()
        next(samples)
        samples.close()
        print(f"warm: {row['data']}: {row['name']}", file=sys.stderr, flush=True)
    for repeat in range(repeats):
        for row in rows:
            if row["setup"] is not None:
                row["setup"]()
            got = timed_pass(row["make"], row["expected"])
            best = row.get("best")
            key = (lambda p: -p["seconds"]) if row["group"] == "build" else (lambda p: p["rate"])
            if best is None or key(got) > key(best):
                row["best"] = got
            row["first"] = min(row.get("first", float("inf")), got["first"])
        print(f"repeat {repeat + 1} of {repeats} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)


def print_local(rows: list[dict], repeats: int) -> None:
    def same(data):  # the zstd rows are divided by the uncompressed folder's LocalDataset and ceilings
        return "tokens" if data == "tokens zstd" else data

    local = {r["data"]: r["best"]["rate"] for r in rows if r["peer"] == "local"}
    streaming = {(r["data"], r["group"]): r["best"]["rate"] for r in rows if r["peer"] == "streaming"}
    ceilings = {(r["data"], r["consumer"]): r["best"]["rate"] for r in rows if r["peer"] == "ceiling"}
    print(f"\nlocal: every sample once a pass, best of {repeats} passes (a fresh reader each)\n")
    print("| data | reader | rows/s | x LocalDataset | x StreamingDataset | x datasets from memory | first sample (s) "
          "| load | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        best = r["best"]
        if r["group"] == "build":
            print(f"| {r['data']} | {r['name']} | {best['seconds']:.2f} s | - | - | - | - | {best['load']:.2f} | "
                  f"{r['note']} |")
            continue
        peer_local = local.get(same(r["data"])) if r["group"] == "steady" else None
        peer_streaming = streaming.get((r["data"], "cold" if r["group"] == "cold" else "steady"))
        ceiling = ceilings.get((same(r["data"]), r["consumer"])) if r["group"] == "steady" else None
        cells = [f"{best['rate'] / peer:.2f}" if peer else "-" for peer in (peer_local, peer_streaming, ceiling)]
        note = r["note"] + ("; ratios to the uncompressed copy's LocalDataset and ceilings (the same samples)"
                            if r["data"] == "tokens zstd" and r["group"] == "steady" else "")
        print(f"| {r['data']} | {r['name']} | {best['rate']:,.0f} | {' | '.join(cells)} | {r['first']:.3f} | "
              f"{best['load']:.2f} | {note.lstrip('; ')} |")


# --- remote rows, each in a process of its own ---------------------------------------------------

def run_remote_row(spec: dict) -> dict:
    """One pass of numpy rows or arrow batches (ours) or samples (StreamingDataset) in this
    fresh process. What a training process has imported before it opens a dataset is imported
    before the clock: torch, datasets, both packages, the HTTP and S3 clients; and our side
    first reads one sample of the same folder on disk, since the builders' modules load on the
    first load_dataset (an import, not the remote's cost)."""
    import boto3  # noqa: F401
    import datasets
    import fsspec.implementations.http  # noqa: F401  (aiohttp)
    import s3fs  # noqa: F401
    import torch  # noqa: F401  datasets imports it on the first row when installed

    import mmidx_builder  # noqa: F401

    datasets.disable_progress_bars()
    import_streaming()
    if spec["side"] == "ours":
        warm = ours(spec["warm"], "numpy", tempfile.mkdtemp(dir=spec["cache"]))
        next(warm)
        warm.close()
        options = {"storage_options": spec["storage_options"]} if spec.get("storage_options") else {}
        make = lambda: ours(spec["url"], spec["format"], spec["cache"], **options)  # noqa: E731
    else:
        make = lambda: their_streaming(spec["local"], spec["remote"], batch_size=1,  # noqa: E731
                                       predownload=spec["samples"])
    return timed_pass(make, spec["samples"])


def in_subprocess(spec: dict, env: dict | None = None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--row", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=1800)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_remote(folders: dict, work: str, latency: float, repeats: int) -> list[dict]:
    from async_range_server import AsyncRangeServer
    from s3_server import KEY, REGION, SECRET, LocalS3

    rows = []
    env = {"HF_UPDATE_DOWNLOAD_COUNTS": "0", "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
           "AWS_DEFAULT_REGION": REGION}
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)

    def best_of(run):
        best = None
        for _ in range(repeats):
            got = run()
            if best is None or "error" in best or ("error" not in got and got["seconds"] < best["seconds"]):
                best = got
        return best

    with LocalS3(latency=latency) as s3:
        env["S3_ENDPOINT_URL"] = s3.url
        for data, folder in folders.items():
            key = data.replace(" ", "-")
            s3.put_folder("bench", folder, key)
            samples, needed = num_samples(folder), shard_bytes(folder)
            with AsyncRangeServer(folder) as server:
                def http(fmt):
                    def run():
                        server.configure(latency=latency)
                        got = in_subprocess({"side": "ours", "url": server.url + "/index.json", "format": fmt,
                                             "warm": folder, "samples": samples, "cache": tempfile.mkdtemp(dir=work)},
                                            env)
                        stats = server.stats()
                        got["gets"] = sum(n for f, n in stats["requests"].items() if ".mds" in f)
                        got["sent"] = sum(n for part in ("sent", "unranged") for f, n in stats.get(part, {}).items()
                                          if ".mds" in f)
                        return got
                    return run
                rows.append({"data": data, "name": "ours, http (asyncio server), numpy rows", "needed": needed,
                             **best_of(http("numpy"))})
                rows.append({"data": data, "name": "ours, http (asyncio server), arrow batches", "needed": needed,
                             **best_of(http("arrow"))})

            def s3_row(side):
                def run():
                    s3.gets.clear()
                    s3.sent.clear()
                    spec = {"side": side, "samples": samples, "cache": tempfile.mkdtemp(dir=work)}
                    if side == "ours":
                        spec.update(url=f"s3://bench/{key}/index.json", storage_options=s3.storage_options,
                                    format="numpy", warm=folder)
                    else:
                        spec.update(remote=f"s3://bench/{key}", local=tempfile.mkdtemp(dir=work))
                    got = in_subprocess(spec, env)
                    got["gets"] = sum(n for f, n in s3.gets.items() if ".mds" in f)
                    got["sent"] = sum(n for f, n in s3.sent.items() if ".mds" in f)
                    return got
                return run
            rows.append({"data": data, "name": "ours, s3 (moto), numpy rows", "needed": needed,
                         **best_of(s3_row("ours"))})
            rows.append({"data": data, "name": "StreamingDataset, s3 (moto)", "needed": needed,
                         **best_of(s3_row("streaming")), "peer": True})
            print(f"remote: {data} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    return rows


def print_remote(rows: list[dict], latency_ms: float, repeats: int) -> None:
    peers = {r["data"]: r for r in rows if r.get("peer") and "error" not in r}
    print(f"\nremote at {latency_ms:g} ms a request: one pass over every sample, a fresh process a row "
          f"(fastest of {repeats})\n")
    print("| data | reader | rows/s (whole pass) | x StreamingDataset (s3) | first sample (s) | x StreamingDataset's | "
          "shard GETs | bytes x needed | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['data']} | {r['name']} | error: {r['error'][:100]} | | | | | | |")
            continue
        peer = peers.get(r["data"])
        x_rate = f"{r['whole_rate'] / peer['whole_rate']:.2f}" if peer else "-"
        x_first = f"{r['first'] / peer['first']:.2f}" if peer else "-"
        print(f"| {r['data']} | {r['name']} | {r['whole_rate']:,.0f} | {x_rate} | {r['first']:.2f} | {x_first} | "
              f"{r['gets']:,} | {r['sent'] / r['needed']:.2f} | {r['load']:.2f} |")


# --- main ----------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--token-samples", type=int, default=10000,
                        help="samples of 2,048 int32 ids (default 10,000: 82 MB, a 64 MiB shard and a partial one)")
    parser.add_argument("--mixed-samples", type=int, default=10000, help="samples of the mixed-columns dataset")
    parser.add_argument("--repeats", type=int, default=3, help="passes of each local row (the fastest kept)")
    parser.add_argument("--latency-ms", type=float, default=25, help="added to every remote request")
    parser.add_argument("--remote-repeats", type=int, default=1, help="fresh processes per remote row (fastest kept)")
    parser.add_argument("--no-remote", action="store_true", help="local rows only")
    parser.add_argument("--workdir", default="/tmp/mmidx-bench-mosaic")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        print(json.dumps(run_remote_row(json.loads(args.row))))
        return

    import datasets

    import mmidx_builder  # noqa: F401  registers the builders

    datasets.disable_progress_bars()
    started_load = os.getloadavg()
    begin = time.perf_counter()
    folders = write_data(os.path.join(args.workdir, "data"), args.token_samples, args.mixed_samples)
    written = time.perf_counter() - begin
    work = os.path.join(args.workdir, "run")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    warm_page_cache(folders)
    rows = local_rows(folders, work)
    measure_local(rows, args.repeats)
    remote = [] if args.no_remote else measure_remote(folders, work, args.latency_ms / 1000, args.remote_repeats)

    columns = ", ".join(f"{c} {e}" for c, e in MIXED_COLUMNS.items())
    print(f"\ndata written by MDSWriter in {written:.0f} s: tokens {num_samples(folders['tokens']):,} samples of "
          f"{CONCAT_TOKENS} int32 ids ({shard_bytes(folders['tokens']) / 1e6:,.0f} MB; zstd "
          f"{shard_bytes(folders['tokens zstd']) / 1e6:,.0f} MB), mixed {num_samples(folders['mixed']):,} samples "
          f"({shard_bytes(folders['mixed']) / 1e6:,.0f} MB, columns {columns}); "
          f"load average at the start {started_load[0]:.2f} / {started_load[1]:.2f} / {started_load[2]:.2f}, "
          f"at the end {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores)")
    print_local(rows, args.repeats)
    if remote:
        print_remote(remote, args.latency_ms, args.remote_repeats)


if __name__ == "__main__":
    main()
