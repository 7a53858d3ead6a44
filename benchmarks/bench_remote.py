"""Streaming token files from remote storage against the local stream, in one run.

    .venv/bin/python benchmarks/bench_remote.py [--tokens 10e6] [--samples 0] [--latencies 0,25,100]

Servers, all on 127.0.0.1, each with a latency added to every request:
  aio    an asyncio Range server in its own process (async_range_server.py): every request
         waits the latency, the waits overlap as at a real endpoint, ``data_files=http://...``
  http   the threaded test server (tests/range_server.py): a thread per connection, sharing
         this process's GIL; it bounds the request rate (~1,700/s on 2 cores)
  hub    the local Hub test server (tests/hub_server.py), ``data_files=hf://datasets/...``
  s3     moto's S3 API (tests/s3_server.py) through s3fs, ``data_files=s3://...``
Each row runs in a fresh subprocess (its own peak memory): ``load_dataset("mmidx",
streaming=True)`` over a corpus of lognormal document lengths (mean 500 tokens, heavy tail),
seq_length 2048, rows taken in order, three passes over the same samples: Python rows from
``load_dataset`` on (time to first sample), then Arrow batches and Python rows again.

Columns:
  rows/s, batches    samples per second as ``for row in stream`` and as
                     ``stream.with_format("arrow").iter(batch_size=100)``
  x local            over the local stream (the same files on disk) with the same consumer
  first sample       seconds from load_dataset to the first sample (opening, the .idx, indices)
  requests           GETs of the .bin per 1,000 samples
  x needed           .bin bytes sent for Range requests over the bytes the samples hold
                     (2,049 tokens x 2 bytes); a pass reads the whole split by default, so
                     nothing read ahead is left unread
  peak MB            the row's process peak RSS; read-ahead peak: what its tables held at most
  CPU us/request     the row's process CPU time (all threads, from load_dataset on) per GET:
                     what bounds a stream of many small ranges (one interpreter's GIL)
Extra rows: ``+cache`` streams through ``remote_cache_dir`` (passes 2-3 read local blocks);
``passes of 400 samples`` (``--short-pass``) stops each pass early, so what the read-ahead
fetched past the stop counts in the bytes; ``DataLoader, n workers`` (``--workers``) reads
whole passes through ``torch.utils.data.DataLoader`` with 0 and n workers (requests for the
same samples: each worker reads every n-th shard and plans its own gathers);
``megatron _S3BinReader`` reads the same samples' pieces through megatron-core's S3 reader
(boto3, ``bin_chunk_nbytes`` 256 MiB as its default) on the same moto server.

``--slow-servers overloaded-s3,trickle,rate-limited-hub`` prints instead a table of servers that
misbehave (issue 32 item 4): moto with a 300 MB object (each GET costs it a copy of the
object), a 1 byte/s server (each HTTP client), the Hub's resolver budget spent at start; each
row a time to the end or to the error, and whether the tokens are the local stream's.
``silent``, ``retry-now`` and ``last-modified`` (issue 41) add rows of servers as deployed ones
fail: one silent before its headers, one answering 429 with ``Retry-After: 0`` forever, one
with ``Last-Modified`` and no ``ETag`` (412 to ``If-Match``, as nginx and Apache).

``--blend-prefixes 50`` prints another table instead: a Megatron blend of that many prefixes
(``data_path``, ``split_ratios``, ``--blend-tokens`` tokens each) loaded from a local folder and
from the threaded test server at each latency, each in a fresh process with its own index
cache: seconds to the first sample, requests per prefix to open it (HEADs and GETs of the
``.idx``, ``.bin`` and sidecar; the ``.bin``'s ranged GETs are samples, counted apart) and the
most prefixes whose opening requests the server answered at once.

moto answers each request with ~5-7 ms of Python, so its rows are bounded by moto (~200
requests/s on this machine): the ``s3`` rows say little about real S3, whose request rate
per prefix is in the thousands.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

SEQ = 2048
SAMPLE_BYTES = (SEQ + 1) * 2
DEFAULT_READ_AHEAD_MB = 256


def make_corpus(folder: str, tokens: float, seed: int = 0) -> str:
    from mmidx_builder.sources.indexed import write_documents

    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(np.log(500) - 0.5, 1.0, size=int(3 * tokens / 500))).astype(np.int64)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    return write_documents(os.path.join(folder, "corpus"), (rng.integers(0, 50_000, n) for n in lengths),
                           dtype=np.uint16)


# --- one row, in a subprocess ------------------------------------------------------------------

def _import_torch_before_the_clock() -> None:
    """A training script has torch imported before load_dataset; datasets imports it on the
    first iteration when it is installed (~3 s here), which is not the stream's time to first
    sample. A row times from load_dataset on, so it imports torch first when it can."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass

def _own_peak_mb() -> float:
    """This process's peak resident memory. Not ``ru_maxrss``: Linux carries it over an exec
    from the parent at fork time, and the parent holds the Hub and S3 test servers' files
    (the Hub rows read 2,988 MB that way, the row's own peak being ~530 MB)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024


def _read_ahead_peak_mb() -> float:
    """The most bytes the read-ahead held at once in this process (its own estimate, which its bound caps)."""
    import gc

    from mmidx_builder.hf.readahead import ReadAhead

    return max([o.peak_bytes for o in gc.get_objects() if isinstance(o, ReadAhead)] or [0]) / 2**20


def run_row(spec: dict) -> dict:
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401

    from mmidx_builder.storage.remote import fetching

    fetching.HTTP_CLIENT = spec.get("http_client", "auto")
    _import_torch_before_the_clock()
    options = dict(seq_length=SEQ, split="train", streaming=True, cache_dir=spec["hf_cache"])
    if spec.get("storage_options"):
        options["storage_options"] = spec["storage_options"]
    if spec.get("remote_cache_dir"):
        options["remote_cache_dir"] = spec["remote_cache_dir"]
    started, cpu_started = time.perf_counter(), time.process_time()
    stream = load_dataset("mmidx", data_files={"train": spec["url"]}, **options)
    batches = stream.with_format("arrow")
    # Pass "cold": Python rows, from load_dataset on (time to first sample: opening, the .idx,
    # the indices). Then the same samples again with the sources open, as Arrow batches
    # (stream.iter) and as Python rows (for row in stream). Nothing remote is kept between
    # passes unless the row has remote_cache_dir.
    passes = {}
    for name, consumer in (("cold", "rows"), ("arrow", "arrow"), ("rows", "rows")):
        first, count = None, 0
        begin = time.perf_counter()
        items = ((t.num_rows for t in batches.iter(batch_size=100)) if consumer == "arrow"
                 else (1 for _ in stream))
        for n in items:
            if first is None:
                first = time.perf_counter()
            count += n
            if spec["samples"] and count >= spec["samples"]:
                break
        end = time.perf_counter()
        passes[name] = {"first": first - (started if name == "cold" else begin), "rate": count / (end - begin),
                        "samples": count}
    return {"passes": passes, "peak_mb": _own_peak_mb(), "read_ahead_mb": _read_ahead_peak_mb(),
            "cpu_seconds": time.process_time() - cpu_started}


def run_loader(spec: dict) -> dict:
    """Whole passes through a torch DataLoader with ``spec["workers"]`` workers: cold (from
    load_dataset on), then again with the files open. The read-ahead peak is this process's
    (0 with workers: theirs is in their processes)."""
    import torch
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401

    started, cpu_started = time.perf_counter(), time.process_time()
    stream = load_dataset("mmidx", data_files={"train": spec["url"]}, seq_length=SEQ, split="train", streaming=True,
                          cache_dir=spec["hf_cache"])
    passes = {}
    for name in ("cold", "rows"):
        begin, first, count = time.perf_counter(), None, 0
        for _ in torch.utils.data.DataLoader(stream, batch_size=None, num_workers=spec["workers"]):
            first = first or time.perf_counter()
            count += 1
        passes[name] = {"first": first - (started if name == "cold" else begin),
                        "rate": count / (time.perf_counter() - begin), "samples": count}
    return {"passes": passes, "peak_mb": _own_peak_mb(), "read_ahead_mb": _read_ahead_peak_mb(),
            "cpu_seconds": time.process_time() - cpu_started}


def run_megatron(spec: dict) -> dict:
    """megatron-core's IndexedDataset on S3 reading the pieces of the same samples, in order."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

    from mmidx_builder.megatron import sampling
    from mmidx_builder.sources.indexed import IndexedFile

    local = IndexedFile.open(spec["local_prefix"])
    indices = sampling.build_indices(local.sequence_lengths, seq_length=SEQ, seed=1234)
    ids, offsets, lengths, _ = sampling.sample_pieces(indices, local.sequence_lengths, np.arange(spec["samples"]))
    started = time.perf_counter()
    dataset = IndexedDataset(spec["url"], mmap=False,
                             object_storage_config=ObjectStorageConfig(path_to_idx_cache=spec["idx_cache"]))
    passes = {}
    for name in ("cold", "rows"):  # as run_row's Python rows: one sample after another
        begin, first = time.perf_counter(), None
        for i, o, n in zip(ids.tolist(), offsets.tolist(), lengths.tolist()):
            dataset.get(i, o, n)
            if first is None:
                first = time.perf_counter()
        passes[name] = {"first": first - (started if name == "cold" else begin),
                        "rate": spec["samples"] / (time.perf_counter() - begin), "samples": spec["samples"]}
    return {"passes": passes, "peak_mb": _own_peak_mb(),
            "read_ahead_mb": 0.0}


def run_tokens(spec: dict) -> dict:
    """One pass of ``samples`` Python rows: the seconds it took (or until the error it ended
    with), a digest of the tokens, and the fewest requests in flight the reader went down to."""
    import hashlib

    from datasets import load_dataset

    import mmidx_builder  # noqa: F401
    from mmidx_builder.storage.remote import fetching, request_queue

    fetching.HTTP_CLIENT = spec.get("http_client", "auto")
    fewest = [request_queue.REQUESTS_IN_FLIGHT]
    failed = request_queue.InFlight.failed

    def watched(self, error, cuts_at_send):  # the limit after each overload signal
        failed(self, error, cuts_at_send)
        fewest[0] = min(fewest[0], self.now())

    request_queue.InFlight.failed = watched
    _import_torch_before_the_clock()
    options = dict(seq_length=SEQ, split="train", streaming=True, cache_dir=spec["hf_cache"])
    if spec.get("storage_options"):
        options["storage_options"] = spec["storage_options"]
    digest, count, first = hashlib.sha256(), 0, None
    started = time.perf_counter()
    try:
        for row in load_dataset("mmidx", data_files={"train": spec["url"]}, **options):
            digest.update(np.asarray(row["input_ids"], dtype=np.int64).tobytes())
            count += 1
            first = first if first is not None else time.perf_counter() - started
            if count >= spec["samples"]:
                break
    except Exception as error:  # noqa: BLE001 (what the row reports)
        return {"seconds": time.perf_counter() - started, "samples": count, "fewest_in_flight": fewest[0],
                "error": f"{type(error).__name__}: {error}"}
    return {"seconds": time.perf_counter() - started, "first": first, "samples": count,
            "digest": digest.hexdigest(), "fewest_in_flight": fewest[0]}


def run_blend_row(spec: dict) -> dict:
    """A blend's first sample from load_dataset on, then ``samples`` rows of train."""
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401

    _import_torch_before_the_clock()
    started = time.perf_counter()
    streams = load_dataset("mmidx", data_path=spec["data_path"], split_ratios="90,8,2",
                           num_samples={"train": spec["samples"], "validation": 100, "test": 10}, seq_length=SEQ, streaming=True,
                           cache_dir=spec["hf_cache"])
    rows = iter(streams["train"])
    next(rows)
    first = time.perf_counter() - started
    begin, count = time.perf_counter(), 1
    for _ in rows:
        count += 1
        if count >= spec["samples"]:
            break
    return {"first": first, "rate": count / (time.perf_counter() - begin), "samples": count,
            "peak_mb": _own_peak_mb()}


def blend_table(args) -> None:
    """The --blend-prefixes table: a blend of many prefixes, local and over HTTP at each latency."""
    from range_server import RangeServer

    work = tempfile.mkdtemp(prefix="mmidx-bench-blend-")
    folder = os.path.join(work, "data")
    names = []
    for i in range(args.blend_prefixes):
        name = f"part{i:03d}"
        os.makedirs(folder, exist_ok=True)
        make_corpus(folder, args.blend_tokens, seed=i)
        for suffix in (".bin", ".idx"):
            os.replace(os.path.join(folder, "corpus" + suffix), os.path.join(folder, name + suffix))
        names.append(name)
    samples = args.samples or 1000

    def data_path(base):
        return [token for i, name in enumerate(names) for token in (str(1 + i % 3), f"{base}/{name}")]

    def row(base, label):
        return in_subprocess({"blend_row": True, "data_path": data_path(base), "samples": samples, "url": label,
                              "hf_cache": os.path.join(work, f"hf-{label}")})

    # Rows taken in turn, --blend-repeats times, each row's fastest first sample kept: on a
    # shared machine a single run of each is mostly noise.
    latencies = [float(x) for x in args.latencies.split(",")]
    best: dict = {}
    with RangeServer(folder) as server:
        for repeat in range(args.blend_repeats):
            for latency in [None, *latencies]:
                if latency is None:
                    result, answered = row(folder, f"local-{repeat}"), None
                else:
                    server.latency = latency / 1000
                    server.answered.clear()
                    result, answered = row(server.url, f"http-{latency:g}-{repeat}"), list(server.answered)
                kept = best.get(latency)
                if kept is None or "error" in kept[0] or ("error" not in result and result["first"] < kept[0]["first"]):
                    best[latency] = (result, answered)
    table = [("local folder", "-", *best[None])]
    table += [("http (threaded server)", latency, *best[latency]) for latency in latencies]
    print(f"blend: {len(names)} prefixes of {args.blend_tokens / 1e6:g}M tokens (weights 1, 2, 3 in turn), "
          f"split_ratios 90,8,2, num_samples train {samples:,} / validation 100 / test 10, seq_length {SEQ}; train: first sample, then {samples:,} rows; the fastest of {args.blend_repeats} runs per row\n")
    print("| source | ms/request | first sample (s) | over local (s) | rows/s | opening requests per prefix "
          "(HEAD .idx / GET .idx / HEAD .bin / sidecar) | .bin GETs | most prefixes opened at once | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    local = table[0][2]
    for name, latency, result, answered in table:
        if "error" in result:
            print(f"| {name} | {latency} | error: {result['error'][:80]} | | | | | | |")
            continue
        opening, gets, most = "-", "-", "-"
        if answered is not None:
            kinds = {}
            for method, file, _, _ in answered:
                kind = "sidecar" if file.endswith(".mmidx-info") else f"{method} {os.path.splitext(file)[1]}"
                kinds[kind] = kinds.get(kind, 0) + 1
            gets = f"{kinds.get('GET .bin', 0):,}"
            opening = " / ".join(f"{kinds.get(k, 0) / len(names):.1f}" for k in ("HEAD .idx", "GET .idx", "HEAD .bin",
                                                                                   "sidecar"))
            spans = [(begin, end, os.path.splitext(file)[0]) for method, file, begin, end in answered
                     if not (method == "GET" and file.endswith(".bin"))]
            most = max(len({p for b, e, p in spans if b <= at < e}) for at, _, _ in spans)
        over = "-" if result is local else f"{result['first'] - local['first']:+.2f}"
        print(f"| {name} | {latency if latency == '-' else int(latency)} | {result['first']:.2f} | {over} | "
              f"{result['rate']:,.0f} | {opening} | {gets} | {most} | {result['peak_mb']:.0f} |")
    print("\nfirst sample: from load_dataset to the first train row (each run has its own datasets cache), the"
          " fastest run's. opening requests: the server's HEADs and GETs per prefix, all splits together (sidecar: HEAD"
          " and GET, none exists); .bin GETs: ranged reads of samples, all prefixes.")


def in_subprocess(spec: dict, env: dict | None = None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--row", json.dumps(spec)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})},
                              timeout=spec.get("deadline", 600))
    except subprocess.TimeoutExpired:
        return {"error": f"no end within {spec.get('deadline', 600):.0f} s", "failed": True}
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}",
                "failed": True}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(spec["url"], json.dumps(result), file=sys.stderr, flush=True)  # progress: a row at a time
    return result


# --- rows of their own: a short pass, DataLoader workers ------------------------------------------

def short_pass_rows(args, folder: str, spec) -> list:
    """The asyncio server's rows with passes that stop after ``--short-pass`` samples: what the
    read-ahead had fetched for rows after the stop counts in the bytes column."""
    from async_range_server import AsyncRangeServer

    rows = []
    with AsyncRangeServer(folder) as server:
        for latency in (float(x) for x in args.latencies.split(",")):
            server.configure(latency=latency / 1000, bandwidth=args.bandwidth)
            result = in_subprocess(spec(server.url + "/corpus.bin", args.short_pass, hf_cache=tempfile.mkdtemp()))
            got = server.stats()
            rows.append((f"http (asyncio server), passes of {args.short_pass} samples", latency, result,
                         got["requests"].get("corpus.bin"), got["sent"].get("corpus.bin"), args.short_pass))
    return rows


def loader_rows(args, folder: str, spec) -> list:
    """Whole passes through a DataLoader with 0 and ``--workers`` workers, at 25 ms."""
    from async_range_server import AsyncRangeServer

    rows = []
    with AsyncRangeServer(folder) as server:
        for workers in (0, args.workers):
            server.configure(latency=0.025, bandwidth=args.bandwidth)
            result = in_subprocess(spec(server.url + "/corpus.bin", 0, workers=workers, hf_cache=tempfile.mkdtemp()))
            got = server.stats()
            rows.append((f"http (asyncio server), DataLoader, {workers} workers", 25.0, result,
                         got["requests"].get("corpus.bin"), got["sent"].get("corpus.bin"), 0))
    return rows


def loader_note(rows) -> str:
    """The requests of n workers over 0 workers' for the same samples, from loader_rows."""
    per_sample = {name: requests / sum(p["samples"] for p in result["passes"].values())
                  for name, _, result, requests, _, _ in rows
                  if "DataLoader" in name and requests and "error" not in result}
    if len(per_sample) != 2:
        return ""
    none, some = per_sample.values()
    return f"DataLoader: requests per sample with workers over without: {some / none:.3f}"


def goals_table(rows, local_passes: dict) -> str:
    """Issue 41's item-6 goals at 25 ms, met or not, beside the floor the read-ahead's ramp
    sets (ramp_floor.py: no CPU spent, every gather one round trip): whole passes >= 0.3x the
    local Python rows and passes of 400 samples >= 0.15x, each at <= 1.5x the bytes needed."""
    from ramp_floor import ramp_floor

    local = local_passes["rows"]["rate"]
    split = local_passes["cold"]["samples"]
    lines = []
    for name, latency, result, _, sent, samples in rows:
        whole = name == "http (asyncio server)"
        if latency != 25.0 or "error" in result or not (whole or (name.endswith(" samples") and samples == 400)):
            continue
        goal = 0.3 if whole else 0.15
        passes = result["passes"]
        ratio = passes["rows"]["rate"] / local
        needed = sent / (sum(p["samples"] for p in passes.values()) * SAMPLE_BYTES)
        floor = ramp_floor(split, samples, latency / 1000, SAMPLE_BYTES) / local
        met = ratio >= goal and needed <= 1.5
        lines.append(f"| {'whole passes' if whole else 'passes of 400 samples'}, 25 ms | {ratio:.3f}x | {needed:.2f} | "
                     f">= {goal}x at <= 1.5x | {floor:.3f}x | {'met' if met else 'not met'} |")
    if not lines:
        return ""
    return ("issue 41's goals (item 6), over the local rows of this run; floor: the most the read-ahead's ramp allows "
            "at this round trip with no CPU spent at all (ramp_floor.py):\n"
            "| pass | x local rows | bytes x needed | goal | floor | verdict |\n|---|---|---|---|---|---|\n"
            + "\n".join(lines))


# --- slow and overloaded servers (issue 32 item 4; --slow-servers) ---------------------------------

def _slow_row(name: str, result: dict, local: dict, requests=None, extra: str = "") -> str:
    if result.get("failed"):
        return f"| {name} | error in the row: {result['error'][:120]} | | | | | |"
    right = ("-" if "digest" not in result else "yes" if result["digest"] == local["digest"] else "**no**")
    ended = f"error: {result['error'][:110]}" if "error" in result else f"{result['samples']:,} samples"
    first = f"{result['first']:.1f}" if result.get("first") is not None else "-"
    return (f"| {name} | {ended} | {result['seconds']:.1f} | {first} | {right} | "
            f"{requests if requests is not None else '-'} | {result['fewest_in_flight']}{extra} |")


def overloaded_s3_rows(args, work: str) -> list[str]:
    """moto's S3 at 25 ms with a large object (each ranged GET costs moto a copy of it): issue
    32's overloaded server, where 512 requests in flight queued at moto until they timed out."""
    from s3_server import LocalS3

    folder = os.path.join(work, "overload")
    prefix = make_corpus(folder, args.overload_tokens)
    local = in_subprocess({"url": prefix + ".bin", "samples": args.overload_samples, "tokens": True,
                           "hf_cache": os.path.join(work, "hf-overload-local")})
    with LocalS3(latency=0.025) as s3:
        s3.put_folder("bench", folder, "data")
        result = in_subprocess({"url": "s3://bench/data/corpus.bin", "samples": args.overload_samples, "tokens": True,
                                "storage_options": s3.storage_options, "deadline": args.slow_deadline,
                                "hf_cache": os.path.join(work, "hf-overload-s3")})
        gets = s3.gets.get("data/corpus.bin")
    return [_slow_row(f"s3 (moto), {args.overload_tokens / 1e6:.0f}M tokens, 25 ms", result, local, gets)]


def trickle_rows(args, work: str, folder: str, prefix: str) -> list[str]:
    """A server that sends every body of the .bin at 1 byte/s, through each HTTP client, with
    the default RemoteAccess (speed floor 1 KiB/s over 30 s, timeout 60 s, 5 retries)."""
    from range_server import RangeServer

    rows = []
    for client in args.http_clients.split(","):
        with RangeServer(folder) as server:
            server.trickle["corpus.bin"] = 10 ** 9
            result = in_subprocess({"url": server.url + "/corpus.bin", "samples": 10, "tokens": True,
                                    "http_client": client, "deadline": args.slow_deadline,
                                    "hf_cache": os.path.join(work, f"hf-trickle-{client}")})
            requests = server.requests.get("corpus.bin")
        rows.append(_slow_row(f"1 byte/s server ({'libcurl' if client == 'auto' else client})", result, {}, requests))
    return rows


# Servers that fail as deployed ones do (issue 41): name -> (row label, how the RangeServer is set).
HOSTILE_SERVERS = {
    "silent": ("server silent before its headers", lambda server: (setattr(server, "stall_seconds", 3600),
                                                                   server.stall.update({"corpus.bin": 10 ** 9}))),
    "retry-now": ("429 Retry-After: 0 forever", lambda server: (setattr(server, "limit_headers", {"Retry-After": "0"}),
                                                                server.limit.update({"corpus.bin": 10 ** 9}))),
    "last-modified": ("Last-Modified, no ETag (412 to If-Match)",
                      lambda server: (setattr(server, "etags", False), setattr(server, "last_modified", True))),
}


def hostile_rows(args, work: str, folder: str, local: dict, case: str) -> list[str]:
    """One of HOSTILE_SERVERS through each HTTP client, with the default RemoteAccess: a time to
    the end or to the error (every wait bounded), and whether the tokens are the local ones."""
    from range_server import RangeServer

    label, setup = HOSTILE_SERVERS[case]
    rows = []
    for client in args.http_clients.split(","):
        with RangeServer(folder) as server:
            setup(server)
            result = in_subprocess({"url": server.url + "/corpus.bin", "samples": args.hub_limit_samples,
                                    "tokens": True, "http_client": client, "deadline": args.slow_deadline,
                                    "hf_cache": os.path.join(work, f"hf-{case}-{client}")})
            requests = server.requests.get("corpus.bin")
        rows.append(_slow_row(f"{label} ({'libcurl' if client == 'auto' else client})", result, local, requests))
    return rows


def rate_limited_hub_rows(args, work: str, folder: str, local: dict) -> list[str]:
    """The Hub as huggingface.co serves large files (/resolve/ redirects to a CDN at signed
    URLs), with and without a resolver budget spent by others (other ranks, other jobs of the
    same account) when the stream starts: 3 /resolve/ requests per 20 s window, all used."""
    from hub_server import LocalHub

    rows = []
    with LocalHub(token="hf_benchTOKEN") as hub:
        env = _publish_to_hub(hub, folder, work)
        hub.redirect = True
        hub.latency = 0.025
        refused, take = [0], hub._take_resolver_request

        def counted():  # resolver requests answered 429
            taken = take()
            refused[0] += taken is not None and taken[1] < 0
            return taken

        hub._take_resolver_request = counted
        for limit in (None, (3, 20.0)):
            hub.resolver_limit = limit
            if limit is not None:
                for _ in range(limit[0]):  # the window's budget, spent
                    hub._take_resolver_request()
            first, refused[0] = len(hub.requests), 0
            result = in_subprocess({"url": "hf://datasets/me/bench/corpus.bin", "samples": args.hub_limit_samples,
                                    "tokens": True, "deadline": args.slow_deadline,
                                    "hf_cache": os.path.join(work, f"hf-hublimit-{limit is not None}")}, env)
            made = hub.requests[first:]
            resolves = sum(1 for r in made if "/resolve/" in r["path"])
            name = ("hub, CDN redirects" if limit is None
                    else f"hub, CDN redirects, resolver budget of {limit[0]} per {limit[1]:.0f} s spent at start")
            rows.append(_slow_row(name, result, local, len(hub.downloads_of("corpus.bin")),
                                  f"; /resolve/ {resolves}, of which 429: {refused[0]}"))
            hub.downloads.clear()
    return rows


def _publish_to_hub(hub, folder: str, work: str) -> dict:
    """``folder`` as the dataset repo ``me/bench`` on ``hub``; the environment a row's process reads it with."""
    from huggingface_hub import HfApi

    env = {"HF_ENDPOINT": hub.url, "HF_HOME": os.path.join(work, "hf_home"), "HF_UPDATE_DOWNLOAD_COUNTS": "0",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "0", "HF_TOKEN": "hf_benchTOKEN"}
    os.environ.update(env)
    import huggingface_hub.constants as constants

    constants.ENDPOINT = hub.url
    constants.HUGGINGFACE_CO_URL_TEMPLATE = hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    api = HfApi(endpoint=hub.url, token="hf_benchTOKEN")
    api.create_repo("me/bench", repo_type="dataset")
    api.upload_folder(repo_id="me/bench", repo_type="dataset", folder_path=folder)
    return env


def slow_servers(args) -> None:
    """The rows of ``--slow-servers``: a table of their own (a time to the end or to an error,
    whether the tokens are the local stream's), not rates against the local stream."""
    work = tempfile.mkdtemp(prefix="mmidx-bench-slow-")
    cases = args.slow_servers.split(",")
    lines = []
    if "overloaded-s3" in cases:
        lines += overloaded_s3_rows(args, work)
    if {"trickle", "rate-limited-hub", *HOSTILE_SERVERS} & set(cases):
        folder = os.path.join(work, "data")
        prefix = make_corpus(folder, args.tokens)
        local = in_subprocess({"url": prefix + ".bin", "samples": args.hub_limit_samples, "tokens": True,
                               "hf_cache": os.path.join(work, "hf-local")})
        if "trickle" in cases:
            lines += trickle_rows(args, work, folder, prefix)
        if "rate-limited-hub" in cases:
            lines += rate_limited_hub_rows(args, work, folder, local)
        for case in HOSTILE_SERVERS:
            if case in cases:
                lines += hostile_rows(args, work, folder, local, case)
    print("| server | ended with | seconds | first sample (s) | tokens = local | GETs of the .bin | "
          "fewest requests in flight |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))
    print("\nseconds: from load_dataset to the last sample or the error, one pass of Python rows; tokens = local:"
          " the rows' tokens hash equal to the same samples of the local folder; fewest requests in flight: the"
          " lowest the reader's limit went (request_queue.InFlight; 512 when no server was overloaded).")


# --- the table -----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=10e6, help="corpus tokens (default 10M: a 20 MB .bin)")
    parser.add_argument("--samples", type=int, default=0,
                        help="samples streamed per pass (default 0: the whole split, so that nothing read ahead"
                             " is left unread when a pass stops, and the bytes column is what the samples need)")
    parser.add_argument("--s3-samples", type=int, default=0, help="samples per pass on moto (0: the whole split)")
    parser.add_argument("--megatron-samples", type=int, default=1000, help="samples read by _S3BinReader")
    parser.add_argument("--latencies", default="0,25,100", help="ms added to every request")
    parser.add_argument("--bandwidth", type=float, default=None, help="bytes/s per response on the HTTP server")
    parser.add_argument("--backends", default="aio,http,hub,s3",
                        help="aio: asyncio server in its own process; http: the threaded test server")
    parser.add_argument("--http-clients", default="auto",
                        help="aio rows per HTTP client: auto (libcurl when pycurl is installed, as a user gets it),"
                             " aiohttp (fetching.HTTP_CLIENT), or both: auto,aiohttp")
    parser.add_argument("--short-pass", type=int, default=400,
                        help="rows for passes of this many samples on the asyncio server (0: none)")
    parser.add_argument("--workers", type=int, default=4,
                        help="rows for whole passes through a DataLoader with 0 and this many workers (0: none)")
    parser.add_argument("--slow-servers", default="",
                        help="instead of the table: overloaded-s3, trickle, rate-limited-hub, silent, retry-now,"
                             " last-modified (comma-separated), each a row of time to the end or to an error")
    parser.add_argument("--overload-tokens", type=float, default=150e6, help="corpus of the overloaded-s3 row")
    parser.add_argument("--overload-samples", type=int, default=200, help="samples of the overloaded-s3 row")
    parser.add_argument("--hub-limit-samples", type=int, default=1000, help="samples of the rate-limited-hub rows")
    parser.add_argument("--slow-deadline", type=float, default=1800, help="seconds a slow-server row may take")
    parser.add_argument("--blend-prefixes", type=int, default=0,
                        help="instead of the table above: a blend of this many prefixes, local and over HTTP")
    parser.add_argument("--blend-tokens", type=float, default=1e6, help="tokens per prefix of --blend-prefixes")
    parser.add_argument("--blend-repeats", type=int, default=3, help="runs of each --blend-prefixes row (the fastest kept)")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.slow_servers and not args.row:
        slow_servers(args)
        return
    if args.row:
        spec = json.loads(args.row)
        result = (run_megatron(spec) if spec.get("megatron") else run_blend_row(spec) if spec.get("blend_row")
                  else run_loader(spec) if "workers" in spec else run_tokens(spec) if spec.get("tokens")
                  else run_row(spec))
        print(json.dumps(result))
        return
    if args.blend_prefixes:
        blend_table(args)
        return

    work = tempfile.mkdtemp(prefix="mmidx-bench-remote-")
    folder = os.path.join(work, "data")
    prefix = make_corpus(folder, args.tokens)
    latencies = [float(x) for x in args.latencies.split(",")]
    backends = args.backends.split(",")
    clients = args.http_clients.split(",")
    rows = []

    def spec(url, samples, **extra):
        return {"url": url, "samples": samples, "hf_cache": os.path.join(work, f"hf-{len(rows)}"), **extra}

    local = in_subprocess(spec(prefix + ".bin", args.samples))
    rows.append(("local folder", "-", local, None, None, args.samples))

    from async_range_server import AsyncRangeServer
    from hub_server import LocalHub
    from range_server import RangeServer
    from s3_server import LocalS3

    if "aio" in backends:
        with AsyncRangeServer(folder) as server:
            for latency in latencies:
                for client in clients:
                    server.configure(latency=latency / 1000, bandwidth=args.bandwidth)
                    result = in_subprocess(spec(server.url + "/corpus.bin", args.samples, http_client=client))
                    got = server.stats()
                    name = "http (asyncio server)" + (" through aiohttp" if client == "aiohttp" else "")
                    rows.append((name, latency, result, got["requests"].get("corpus.bin"),
                                 got["sent"].get("corpus.bin"), args.samples))
            server.configure(latency=0.025, bandwidth=args.bandwidth)
            result = in_subprocess(spec(server.url + "/corpus.bin", args.samples,
                                        remote_cache_dir=os.path.join(work, "blocks")))
            got = server.stats()
            rows.append(("http (asyncio) +cache", 25.0, result, got["requests"].get("corpus.bin"),
                         got["sent"].get("corpus.bin"), args.samples))

    if "aio" in backends and args.short_pass:
        rows += short_pass_rows(args, folder, spec)
    if "aio" in backends and args.workers:
        rows += loader_rows(args, folder, spec)

    if "http" in backends:
        with RangeServer(folder, bandwidth=args.bandwidth) as server:
            for latency in latencies:
                server.latency = latency / 1000
                server.requests.clear()
                server.sent.clear()
                result = in_subprocess(spec(server.url + "/corpus.bin", args.samples))
                rows.append(("http (threaded server)", latency, result, server.requests.get("corpus.bin"),
                             server.sent.get("corpus.bin"), args.samples))

    if "hub" in backends:
        with LocalHub(token="hf_benchTOKEN") as hub:
            env = _publish_to_hub(hub, folder, work)
            for latency in latencies:
                hub.latency = latency / 1000
                hub.downloads.clear()
                result = in_subprocess(spec("hf://datasets/me/bench/corpus.bin", args.samples), env)
                got = hub.downloads_of("corpus.bin")
                rows.append(("hub", latency, result, len(got), sum(d.sent for d in got), args.samples))
            # As huggingface.co serves large files: /resolve/ redirects to a CDN at signed URLs, and
            # resolver requests are rate-limited (100 per 5-minute window here).
            hub.redirect, hub.resolver_limit = True, (100, 300)
            for latency in latencies:
                hub.latency = latency / 1000
                hub.downloads.clear()
                first = len(hub.requests)
                result = in_subprocess(spec("hf://datasets/me/bench/corpus.bin", args.samples), env)
                got = hub.downloads_of("corpus.bin")
                resolves = sum(1 for r in hub.requests[first:]
                               if "/resolve/" in r["path"] and r["path"].endswith("/corpus.bin"))
                rows.append((f"hub, CDN redirects, rate-limited resolver ({resolves} /resolve/ of the .bin)", latency,
                             result, len(got), sum(d.sent for d in got), args.samples))
            hub.redirect, hub.resolver_limit = False, None

    if "s3" in backends:
        with LocalS3() as s3:
            s3.put_folder("bench", folder, "data")
            for latency in latencies:
                s3.latency = latency / 1000
                s3.gets.clear()
                s3.sent.clear()
                result = in_subprocess(spec("s3://bench/data/corpus.bin", args.s3_samples,
                                            storage_options=s3.storage_options))
                rows.append(("s3 (moto)", latency, result, s3.gets.get("data/corpus.bin"),
                             s3.sent.get("data/corpus.bin"), args.s3_samples))
            s3.latency = 0.025
            s3.gets.clear()
            s3.sent.clear()
            env = {"AWS_ENDPOINT_URL": s3.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1"}
            result = in_subprocess(spec("s3://bench/data/corpus", args.megatron_samples, megatron=True, local_prefix=prefix,
                                        idx_cache=os.path.join(work, "megatron_idx")), env)
            rows.append(("megatron _S3BinReader (moto)", 25.0, result, s3.gets.get("data/corpus.bin"),
                         s3.sent.get("data/corpus.bin"), args.s3_samples))

    from mmidx_builder.storage.remote import curl as remote_curl

    print(f"corpus: {args.tokens / 1e6:.0f}M tokens, lognormal documents (mean 500), seq_length {SEQ}; "
          f"{args.samples or 'all'} samples per pass ({args.s3_samples or 'all'} on moto), 3 passes per row; "
          f"read_ahead_bytes {DEFAULT_READ_AHEAD_MB} MiB; HTTP and Hub ranges through "
          f"{'libcurl (pycurl)' if remote_curl.available() else 'aiohttp'} unless a row says otherwise\n")
    print("| source | ms/request | rows/s | x local rows | batches: samples/s | x local batches | "
          "first sample (s) | requests/1,000 samples | bytes x needed | peak MB | read-ahead peak MB | CPU us/request |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ceiling = local["passes"]
    for name, latency, result, requests, sent, samples in rows:
        if "error" in result:
            print(f"| {name} | {latency} | error: {result['error'][:80]} | | | | | | | | | |")
            continue
        passes = result["passes"]
        cached = "cache" in name or "megatron" in name  # the later passes read what the first kept
        count = sum(p["samples"] for p in passes.values())
        req = f"{1000 * requests / count:,.0f}" if requests is not None and not cached else "-"
        ratio = f"{sent / (count * SAMPLE_BYTES):.2f}" if sent is not None and not cached else "-"
        cpu = (f"{1e6 * result['cpu_seconds'] / requests:.0f}" if requests and not cached and "cpu_seconds" in result
               else "-")
        if cached and sent is not None:
            req, ratio = f"{requests:,} in all", f"{sent / (passes['cold']['samples'] * SAMPLE_BYTES):.2f} (pass 1)"
        cells = []
        for consumer in ("rows", "arrow"):
            p = passes.get(consumer)
            cells += ([f"{p['rate']:,.0f}", f"{p['rate'] / ceiling[consumer]['rate']:.3f}"] if p else ["-", "-"])
        if cached:
            cold = passes["cold"]
            print(f"| {name} pass 1 (cold) | {latency if latency == '-' else int(latency)} | {cold['rate']:,.0f} | "
                  f"{cold['rate'] / ceiling['rows']['rate']:.3f} | - | - | {cold['first']:.2f} | {req} | {ratio} | "
                  f"{result['peak_mb']:.0f} | {result['read_ahead_mb']:.0f} | - |")
            name, req, ratio = f"{name} passes 2-3", "0" if "cache" in name else req, "-"
        print(f"| {name} | {latency if latency == '-' else int(latency)} | {' | '.join(cells)} | "
              f"{passes['cold']['first']:.2f} | {req} | {ratio} | {result['peak_mb']:.0f} | "
              f"{result['read_ahead_mb']:.0f} | {cpu} |")
    print("\nrows/s: `for row in stream` (Python dicts); batches: `stream.with_format('arrow').iter(batch_size=100)`;"
          " both over the same samples with the files open (passes 2 and 3); x local: over the local folder's rate"
          " of the same consumer, measured in this run. first sample: from load_dataset to the first row (pass 1)."
          " requests and bytes: all passes, per sample streamed (a +cache row's: pass 1's, the later passes read"
          " local blocks). peak MB: the row's process peak RSS; read-ahead peak: the most its tables held at once."
          " CPU us/request: the row's process CPU time from load_dataset on (all threads) per GET.")

    if loader_note(rows):
        print("\n" + loader_note(rows))
    goals = goals_table(rows, ceiling)
    if goals:
        print("\n" + goals)


if __name__ == "__main__":
    main()
