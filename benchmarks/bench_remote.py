"""Streaming token files from remote storage against the local stream, in one run.

    .venv/bin/python benchmarks/bench_remote.py [--tokens 10e6] [--samples 1000] [--latencies 0,25,100]

Servers, all on 127.0.0.1 in this process, each with a latency added to every request:
  http   a plain Range-capable HTTP server (tests/range_server.py), ``data_files=http://...``
  hub    the local Hub test server (tests/hub_server.py), ``data_files=hf://datasets/...``
  s3     moto's S3 API (tests/s3_server.py) through s3fs, ``data_files=s3://...``
Each row runs in a fresh subprocess (its own peak memory; the client does not share a GIL
with the servers): ``load_dataset("mmidx", streaming=True)`` over a corpus of lognormal
document lengths (mean 500 tokens, heavy tail), seq_length 2048, rows taken in order.

Columns:
  samples/s      samples streamed per second after the first
  x local        over the local stream (the same files on disk), measured in this run
  first sample   seconds from load_dataset to the first sample (opening, the .idx, indices)
  requests       GETs of the .bin per 1,000 samples
  x needed       .bin bytes sent over the bytes the samples hold (2,049 tokens x 2 bytes)
  peak MB        the row's process peak RSS
Extra rows: ``+cache`` streams twice through ``remote_cache_dir`` (pass 2 reads local blocks);
``megatron _S3BinReader`` reads the same samples' pieces through megatron-core's S3 reader
(boto3, ``bin_chunk_nbytes`` 256 MiB as its default) on the same moto server.

moto answers each request with ~5-7 ms of Python, so its rows are bounded by moto (~150
requests/s on this machine): the ``s3`` rows say little about real S3, whose request rate
per prefix is in the thousands.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def make_corpus(folder: str, tokens: float, seed: int = 0) -> str:
    from mmidx_builder.format import write_documents

    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(np.log(500) - 0.5, 1.0, size=int(3 * tokens / 500))).astype(np.int64)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    return write_documents(os.path.join(folder, "corpus"), (rng.integers(0, 50_000, n) for n in lengths),
                           dtype=np.uint16)


# --- one row, in a subprocess ------------------------------------------------------------------

def run_row(spec: dict) -> dict:
    from datasets import load_dataset

    import mmidx_builder  # noqa: F401

    options = dict(seq_length=SEQ, split="train", streaming=True, cache_dir=spec["hf_cache"])
    if spec.get("storage_options"):
        options["storage_options"] = spec["storage_options"]
    if spec.get("remote_cache_dir"):
        options["remote_cache_dir"] = spec["remote_cache_dir"]
    passes = []
    started = time.perf_counter()
    stream = load_dataset("mmidx", data_files={"train": spec["url"]}, **options).with_format("arrow")
    # Pass 1 opens the files and builds the indices (time to first sample); pass 2 streams the
    # same samples again with the sources open: the steady rate (nothing remote is cached
    # between passes unless the row has remote_cache_dir).
    for _ in range(2):
        first, count = None, 0
        begin = time.perf_counter()
        for table in stream.iter(batch_size=100):
            if first is None:
                first = time.perf_counter()
            count += table.num_rows
            if count >= spec["samples"]:
                break
        end = time.perf_counter()
        passes.append({"first": first - started, "rate": count / (end - begin), "samples": count})
        started = time.perf_counter()
    return {"passes": passes, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def run_megatron(spec: dict) -> dict:
    """megatron-core's IndexedDataset on S3 reading the pieces of the same samples, in order."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.object_storage_utils import ObjectStorageConfig

    from mmidx_builder import sampling
    from mmidx_builder.format import IndexedFile

    local = IndexedFile.open(spec["local_prefix"])
    indices = sampling.build_indices(local.sequence_lengths, seq_length=SEQ, seed=1234)
    ids, offsets, lengths, _ = sampling.sample_pieces(indices, local.sequence_lengths, np.arange(spec["samples"]))
    started = time.perf_counter()
    dataset = IndexedDataset(spec["url"], mmap=False,
                             object_storage_config=ObjectStorageConfig(path_to_idx_cache=spec["idx_cache"]))
    passes = []
    for _ in range(2):  # as run_row: pass 2 is the steady rate
        begin, first = time.perf_counter(), None
        for i, o, n in zip(ids.tolist(), offsets.tolist(), lengths.tolist()):
            dataset.get(i, o, n)
            if first is None:
                first = time.perf_counter()
        passes.append({"first": first - started, "rate": spec["samples"] / (time.perf_counter() - begin),
                       "samples": spec["samples"]})
        started = time.perf_counter()
    return {"passes": passes, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def in_subprocess(spec: dict, env: dict | None = None) -> dict:
    command = [sys.executable, os.path.abspath(__file__), "--row", json.dumps(spec)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=spec.get("deadline", 600))
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the table -----------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=float, default=10e6, help="corpus tokens (default 10M: a 20 MB .bin)")
    parser.add_argument("--samples", type=int, default=3000,
                        help="samples streamed per row: several of the 1,000-row tables a gather makes")
    parser.add_argument("--s3-samples", type=int, default=1000, help="samples per moto row (moto is slow)")
    parser.add_argument("--latencies", default="0,25,100", help="ms added to every request")
    parser.add_argument("--bandwidth", type=float, default=None, help="bytes/s per response on the HTTP server")
    parser.add_argument("--backends", default="http,hub,s3")
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.row:
        spec = json.loads(args.row)
        result = run_megatron(spec) if spec.get("megatron") else run_row(spec)
        print(json.dumps(result))
        return

    work = tempfile.mkdtemp(prefix="mmidx-bench-remote-")
    folder = os.path.join(work, "data")
    prefix = make_corpus(folder, args.tokens)
    latencies = [float(x) for x in args.latencies.split(",")]
    backends = args.backends.split(",")
    rows = []

    def spec(url, samples, **extra):
        return {"url": url, "samples": samples, "hf_cache": os.path.join(work, f"hf-{len(rows)}"), **extra}

    local = in_subprocess(spec(prefix + ".bin", args.samples))
    ceiling = local["passes"][1]["rate"]
    rows.append(("local folder", "-", local, None, None, args.samples))

    from hub_server import LocalHub
    from range_server import RangeServer
    from s3_server import LocalS3

    if "http" in backends:
        with RangeServer(folder, bandwidth=args.bandwidth) as server:
            for latency in latencies:
                server.latency = latency / 1000
                server.requests.clear()
                server.sent.clear()
                result = in_subprocess(spec(server.url + "/corpus.bin", args.samples))
                rows.append(("http", latency, result, server.requests.get("corpus.bin"), server.sent.get("corpus.bin"),
                             args.samples))
            server.latency = 0.025
            server.requests.clear()
            server.sent.clear()
            result = in_subprocess(spec(server.url + "/corpus.bin", args.samples,
                                        remote_cache_dir=os.path.join(work, "blocks")))
            rows.append(("http +cache", 25.0, result, server.requests.get("corpus.bin"), server.sent.get("corpus.bin"),
                         args.samples))

    if "hub" in backends:
        with LocalHub(token="hf_benchTOKEN") as hub:
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
            for latency in latencies:
                hub.latency = latency / 1000
                hub.downloads.clear()
                result = in_subprocess(spec("hf://datasets/me/bench/corpus.bin", args.samples), env)
                got = hub.downloads_of("corpus.bin")
                rows.append(("hub", latency, result, len(got), sum(d.sent for d in got), args.samples))

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
            result = in_subprocess(spec("s3://bench/data/corpus", args.s3_samples, megatron=True, local_prefix=prefix,
                                        idx_cache=os.path.join(work, "megatron_idx")), env)
            rows.append(("megatron _S3BinReader (moto)", 25.0, result, s3.gets.get("data/corpus.bin"),
                         s3.sent.get("data/corpus.bin"), args.s3_samples))

    print(f"corpus: {args.tokens / 1e6:.0f}M tokens, lognormal documents (mean 500), seq_length {SEQ}; "
          f"{args.samples} samples per row ({args.s3_samples} on moto)\n")
    print("| source | ms/request | samples/s | x local | first sample (s) | requests/1,000 samples | "
          "bytes x needed | peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    for name, latency, result, requests, sent, samples in rows:
        if "error" in result:
            print(f"| {name} | {latency} | error: {result['error'][:80]} | | | | | |")
            continue
        passes = result["passes"]
        cached = "cache" in name or "megatron" in name  # pass 2 reads what pass 1 kept
        shown = [(f"{name} pass 1 (cold)", passes[0]), (f"{name} pass 2", passes[1])] if cached else [(name, passes[1])]
        for k, (label, p) in enumerate(shown):
            req = f"{1000 * requests / (2 * samples):,.0f}" if requests is not None and not cached else "-"
            ratio = f"{sent / (2 * samples * SAMPLE_BYTES):.2f}" if sent is not None and not cached else "-"
            if cached and k == 0 and sent is not None:
                req, ratio = f"{requests:,} in all", f"{sent / (samples * SAMPLE_BYTES):.2f} in all"
            first = passes[0]["first"] if k == 0 else p["first"]
            print(f"| {label} | {latency if latency == '-' else int(latency)} | {p['rate']:,.0f} | "
                  f"{p['rate'] / ceiling:.3f} | {first:.2f} | {req} | {ratio} | {result['peak_mb']:.0f} |")
    print("\nsamples/s: the second pass over the same samples (files open, indices built); x local: over the"
          " local folder's, same measure. requests and bytes: both passes, per sample streamed; a +cache row's"
          " are its totals (pass 2 reads local blocks only).")


if __name__ == "__main__":
    main()
