"""Pretraining scale: this package against megatron-core on corpora of 10M-1B documents and
blends of hundreds of prefixes, side by side in one run (1B documents: this package's side alone).

    .venv/bin/python benchmarks/bench_scale.py [--documents 10e6] [--blend 200x20000]
        [--uneven-blend 1000x1e3-2e6] [--split 969,30,1] [--ours-only]
        [--seq-length 4096] [--consumed 20e6] [--workers 2] [--workdir /tmp/scale-bench] [--keep]

Each corpus is a real ``.idx`` of N documents with lognormal lengths (median 500 tokens,
sigma 0.6: ~600 tokens a document, as the issue's 200M-document corpus of 119.7B tokens)
beside a sparse ``.bin`` (truncated to its size: the index work, memory and open files
behave as on the real corpus, the tokens read are zeros; the ``.idx`` is written 16M documents
at a time, under 0.5 GiB of memory whatever N: at 1B documents 20 GB on disk, the ``.bin``
1.2 TB apparent and none allocated). ``--documents`` takes a list
(``10e6,50e6,200e6``); ``--blend PxN`` a blend of P prefixes of N documents each (also a
list); ``--uneven-blend PxLOW-HIGH`` a blend of P prefixes of LOW to HIGH documents
(log-uniform), split ``--split`` (Megatron's "969,30,1") and read as its train stream, each
side's cold build, warm open and resume the best of 3 with the sides taking turns, the
1-minute load printed beside each figure, and the counts the load does not move: pairs opened
and datasets sampled. Every figure is measured in a fresh subprocess (clean time and memory), after its
imports; the two sides build the same samples (GPTDataset through
BlendedMegatronDatasetBuilder as pretrain_gpt.py builds it; ``load_dataset("mmidx", ...,
streaming=True)`` here), seq_length 4096, one epoch, seed 1234:

  cold open + first sample     no index cache: build the indices, read sample 0; each side's
                               fastest of --cold-runs (3), the sides taking turns after the first
                               (os.sync() first: no side pays for writing back the corpus
                               or the other side's caches)
  warm open + first sample     the index cache present (the second open after the build;
                               the first one after a build also checks the cache's digests once,
                               its own row); the best of 3 processes, as the resume
  resume at consumed C         megatron_rank_stream(stream, 0, 8, 4, consumed_samples=C), first
                               row; megatron-core: dataset[C] (what its sampler asks for first)
  peak memory                  ru_maxrss of the cold open (imports included: torch's ~0.3 GiB)
  anonymous peak, cold open    RssAnon's peak from the imports to the first sample, sampled every
                               20 ms (/proc/self/status) by a thread of the measuring process: what
                               the process holds for itself (ru_maxrss also counts the file pages
                               of its memory maps, which the kernel can drop); what the imports
                               hold beside it; then RssFile+RssShmem's peak, and the machine's
                               lowest MemAvailable meanwhile (other work on the machine moves it)
  index cache on disk          the bytes of each side's index cache right after its cold build
                               (our index_cache_dir, megatron-core's path_to_cache): allocated
                               (st_blocks * 512) and, below, apparent (st_size)
  Pss_Anon per worker          private memory of each DataLoader worker (fork) after 20
                               batches, from /proc/PID/smaps_rollup, and per sequence; then
                               the same on a tiny corpus of 20,000 documents (what a worker
                               holds whatever the corpus: interpreter, torch, datasets or
                               megatron-core), and the difference: what this corpus adds;
                               and the floor: a worker yielding plain ints (torch only)
  Pss_Anon of the rank         the same of the process that opened the corpus and forked
                               the workers, and what this corpus adds to it
  open files                   /proc/self/fd after the warm open and first sample
  exit tracebacks              "Exception ignored" lines a process prints at exit after
                               streaming a few rows (blends)

Under a soft limit of open files (``bash -c 'ulimit -Sn 1024; ...'``) ``--raise-peer-nofile``
lets megatron-core's processes raise theirs to the hard limit (it keeps 6 descriptors a
prefix: without it a 1,000-prefix blend fails there). megatron-core's side of a corpus is left
out, its cells "-" and a row saying why, when it is not importable, under ``--ours-only``, or
when its estimated need exceeds the machine's MemAvailable as the corpus comes up (``peer_need``:
its anonymous arrays, 28 B a document of the largest prefix and 8 B of the others, 12 B a sample,
and 0.5 GiB of imports: ~28 GiB at 1B documents, so ``--documents 1e9`` runs this package's side
alone on a 24 GiB machine). Lines after the table extrapolate the warm open and the per-node
private memory (8 ranks x 8 workers) to 1B documents from the growth measured between the
smallest and largest corpus.

The last table holds issue 43's goals for the corpora run, each with the figure measured, the
goal, and met or not: 1,000 uneven prefixes split 969,30,1 (an ``--uneven-blend``): cold open,
warm open and resume at most 1.0x, 0.5x and 0.5x megatron-core's; 200M documents: cold build,
peak RSS and index cache on disk at most 0.7x, 0.8x and 1.0x megatron-core's; 1B documents:
anonymous peak of the cold build and first sample at most 4 GiB, warm open and resume at most
0.3 s. A ``--documents`` corpus takes the nearer of the last two (1B from 500M documents); a
corpus other than the goal's own is marked indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"MMIDIDX\x00\x00"
UINT16 = 8  # the .idx dtype code of uint16 (both flavours)
SEED = 1234
MEDIAN, SIGMA = 500, 0.6


# --- corpora ---------------------------------------------------------------------------------

def write_sparse_prefix(prefix: str, documents: int, seed: int) -> int:
    """A Megatron-flavour ``.idx`` of ``documents`` lognormal lengths and a sparse ``.bin`` of
    the size it says; returns the token count. Written with numpy a chunk at a time."""
    if os.path.exists(prefix + ".idx") and os.path.exists(prefix + ".bin"):
        with open(prefix + ".idx", "rb") as f:
            head = f.read(34)
        if struct.unpack_from("<Q", head, 18)[0] == documents:
            return os.path.getsize(prefix + ".bin") // 2
    rng = np.random.default_rng(seed)
    chunk = 1 << 24
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    tokens = 0
    with open(prefix + ".idx.part", "wb") as f:
        f.write(struct.pack("<9sQBQ", MAGIC, 1, UINT16, documents))
        f.write(struct.pack("<Q", documents + 1))
        lengths_at = f.tell()
        f.truncate(lengths_at + 12 * documents + 8 * (documents + 1))
        pointers_at = lengths_at + 4 * documents
        for begin in range(0, documents, chunk):
            count = min(chunk, documents - begin)
            lengths = np.clip(np.rint(rng.lognormal(np.log(MEDIAN), SIGMA, count)), 1, 2**31 - 1).astype("<i4")
            pointers = np.cumsum(lengths, dtype=np.int64)
            pointers -= lengths
            pointers += tokens
            pointers *= 2
            f.seek(lengths_at + 4 * begin)
            f.write(lengths.tobytes())
            f.seek(pointers_at + 8 * begin)
            f.write(pointers.astype("<i8").tobytes())
            tokens += int(lengths.sum(dtype=np.int64))
        documents_at = pointers_at + 8 * documents
        for begin in range(0, documents + 1, chunk):
            f.seek(documents_at + 8 * begin)
            f.write(np.arange(begin, min(begin + chunk, documents + 1), dtype="<i8").tobytes())
    with open(prefix + ".bin", "wb") as f:
        f.truncate(tokens * 2)
    os.replace(prefix + ".idx.part", prefix + ".idx")
    return tokens


# --- what a child process measures --------------------------------------------------------------

def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _pss_anon(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _proc_fields(path: str, names: tuple[str, ...]) -> dict[str, int]:
    """Fields of a /proc file of "Name:  1234 kB" lines, in bytes."""
    found = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in names:
                found[name] = int(rest.split()[0]) * 1024
    return found


class MemorySampler:
    """The peaks of this process's RssAnon and RssFile+RssShmem (/proc/self/status) and the
    machine's lowest MemAvailable (/proc/meminfo) while it runs, sampled by a daemon thread
    every ``interval`` seconds. ru_maxrss is the exact peak of all resident pages, file pages
    of the memory maps included (the kernel may drop those under pressure); RssAnon is what
    the process cannot give back, and what issue 43's 1B-document goal counts. A sample is a
    lower bound: an allocation shorter than the interval may fall between two samples (numpy
    releases the GIL in its large loops, shuffles and reads, so the thread gets its turns)."""

    STATUS = ("RssAnon", "RssFile", "RssShmem")

    def __init__(self, interval: float = 0.02):
        import threading

        self.interval = interval
        self.found = {"anon_peak": 0, "file_peak": 0, "mem_available_min": None}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)

    def _sample(self) -> None:
        status = _proc_fields("/proc/self/status", self.STATUS)
        available = _proc_fields("/proc/meminfo", ("MemAvailable",)).get("MemAvailable")
        found = self.found
        found["anon_peak"] = max(found["anon_peak"], status.get("RssAnon", 0))
        found["file_peak"] = max(found["file_peak"], status.get("RssFile", 0) + status.get("RssShmem", 0))
        if available is not None:
            low = found["mem_available_min"]
            found["mem_available_min"] = available if low is None else min(low, available)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def start(self) -> "MemorySampler":
        self._sample()
        self.found["anon_imports"] = self.found["anon_peak"]  # what the interpreter and imports hold
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        self._sample()
        return self.found


def folder_bytes(folder: str) -> dict:
    """Bytes the files under ``folder`` hold: allocated (st_blocks * 512: what the disk gives
    them, holes of sparse files excluded) and apparent (st_size); a hard-linked file once."""
    allocated = apparent = files = 0
    seen = set()
    for root, _, names in os.walk(folder):
        for name in names:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            allocated += st.st_blocks * 512
            apparent += st.st_size
            files += 1
    return {"allocated": allocated, "apparent": apparent, "files": files}


def _workers_pss(dataset, batch_size: int, workers: int) -> list[int]:
    import torch

    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                                         multiprocessing_context="fork", collate_fn=lambda rows: len(rows))
    iterator = iter(loader)
    for _ in range(20):
        next(iterator)
    found = [_pss_anon(w.pid) for w in iterator._workers]
    del iterator
    return found


def _count_ours() -> dict:
    """Counters the child fills while it opens: pairs opened (IndexedFile made) and datasets
    sampled (sampling indices built or loaded from the cache). Counts are not moved by the load."""
    from mmidx_builder.megatron import sampling
    from mmidx_builder.sources.indexed import IndexedFile

    counts = {"opens": 0, "sampled": 0}
    init, load = IndexedFile.__init__, sampling.load_or_build_indices

    def counting_init(self, *args, **kwargs):
        counts["opens"] += 1
        init(self, *args, **kwargs)

    def counting_load(*args, **kwargs):
        counts["sampled"] += 1
        return load(*args, **kwargs)

    IndexedFile.__init__, sampling.load_or_build_indices = counting_init, counting_load
    return counts


def _count_megatron() -> dict:
    """The same counters on megatron-core's side: IndexedDataset made, GPTDataset made."""
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    counts = {"opens": 0, "sampled": 0}
    indexed_init, gpt_init = IndexedDataset.__init__, GPTDataset.__init__

    def counting_indexed(self, *args, **kwargs):
        counts["opens"] += 1
        indexed_init(self, *args, **kwargs)

    def counting_gpt(self, *args, **kwargs):
        counts["sampled"] += 1
        gpt_init(self, *args, **kwargs)

    IndexedDataset.__init__, GPTDataset.__init__ = counting_indexed, counting_gpt
    return counts


def child_ours(spec: dict) -> dict:
    import warnings

    warnings.simplefilter("ignore")
    from datasets import load_dataset
    from datasets.utils.logging import disable_progress_bar

    import torch  # noqa: F401  imported before the clock starts, as megatron-core's side imports it

    # The builders' modules, as megatron-core's side imports its builder and GPTDataset before
    # its clock (load_dataset imports them at the first call of a process otherwise: ~0.2 s).
    import mmidx_builder.hf.mmidx  # noqa: F401
    from mmidx_builder.training.rank_stream import megatron_rank_stream

    disable_progress_bar()
    counts = _count_ours()
    prefixes = spec["prefixes"]
    common = dict(seq_length=spec["seq_length"], seed=SEED, streaming=True, split="train",
                  cache_dir=spec["hf_cache"], index_cache_dir=spec["index_cache"])
    sampler = MemorySampler().start()
    start = time.perf_counter()
    if len(prefixes) == 1:
        stream = load_dataset("mmidx", data_files={"train": [prefixes[0] + ".bin"]}, **common)
    elif spec.get("weights"):  # a run's blend: weighted, a size for every split (pretrain_gpt.py's)
        data_path = [token for w, p in zip(spec["weights"], prefixes) for token in (str(w), p)]
        stream = load_dataset("mmidx", data_path=data_path, split_ratios=spec["split"],
                              num_samples=dict(zip(("train", "validation", "test"), spec["sizes"])),
                              mid_level_dataset_surplus=spec["surplus"], **common)
    else:
        stream = load_dataset("mmidx", data_path=prefixes, split_ratios=spec.get("split", "100,0,0"),
                              num_samples={"train": spec["num_samples"]}, **common)
    result = {}
    if spec["what"] == "resume":
        ranked = megatron_rank_stream(stream, 0, 8, 4, consumed_samples=spec["consumed"])
        row = next(iter(ranked))
    else:
        iterator = iter(stream)
        row = next(iterator)
    result["seconds"] = time.perf_counter() - start
    result.update(sampler.stop())  # before any worker is forked
    result["row_tokens"] = len(row["input_ids"])
    result.update(counts)
    result["fds"] = _fds()
    result["peak"] = _peak()
    result["rows"] = int(megatron_rank_stream(stream, 0, 1, 1).total_samples)
    if spec["what"] == "workers":
        result["pss"] = _workers_pss(megatron_rank_stream(stream, 0, 1, 4), 4, spec["workers"])
        result["rank_pss"] = _pss_anon(os.getpid())
    if spec["what"] == "exit":
        for _, _ in zip(range(200), iterator):
            pass
    return result


def child_megatron(spec: dict) -> dict:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    class Tokenizer:
        eod, pad, vocab_size = 0, -1, None
        unique_identifiers = {"class": "bench"}

    prefixes = spec["prefixes"]
    if spec.get("raise_nofile"):  # megatron-core keeps 6 descriptors a prefix: past a soft limit of 1,024
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (resource.getrlimit(resource.RLIMIT_NOFILE)[1],) * 2)
    counts = _count_megatron()
    sampler = MemorySampler().start()
    start = time.perf_counter()
    config = GPTDatasetConfig(random_seed=SEED, sequence_length=spec["seq_length"], tokenizer=Tokenizer(),
                              path_to_cache=spec["index_cache"], blend=(prefixes, spec.get("weights")),
                              split=spec.get("split", "100,0,0"),
                              **({"mid_level_dataset_surplus": spec["surplus"]} if "surplus" in spec else {}),
                              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    sizes = spec.get("sizes") or [spec["num_samples"] if len(prefixes) > 1 else None, None, None]
    dataset = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()[0]
    index = spec["consumed"] if spec["what"] == "resume" else 0
    row = dataset[index]
    result = {"seconds": time.perf_counter() - start, **sampler.stop(), "row_tokens": len(row["tokens"]),
              "fds": _fds(), "peak": _peak(), "rows": len(dataset), **counts}
    if spec["what"] == "workers":
        result["pss"] = _workers_pss(dataset, 4, spec["workers"])
        result["rank_pss"] = _pss_anon(os.getpid())
    return result


def child_floor(spec: dict) -> dict:
    """What any DataLoader worker holds: workers forked from a process with torch imported,
    yielding plain ints (no dataset, no file)."""
    import torch

    class Counting(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(10**9))

    return {"pss": _workers_pss(Counting(), 4, spec["workers"]), "rank_pss": _pss_anon(os.getpid())}


def run_child(side: str, spec: dict) -> dict:
    """One measurement in a fresh interpreter; also counts its exit tracebacks."""
    done = subprocess.run([sys.executable, __file__, "--child", side, json.dumps(spec)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-5:]
        return {"error": f"exit {done.returncode}: " + " | ".join(tail)}
    result = json.loads(lines[-1])
    result["exit_tracebacks"] = done.stderr.count("Exception ignored")
    result["load"] = os.getloadavg()[0]  # the 1-minute load when it ended, printed beside its figure
    return result


# Warm opens and resumes take a couple of seconds: each side's best of this many fresh
# processes (a single run moved by +-20% on the 2-core machine).
WARM_RUNS = 3


def best_of(runs: int, side: str, spec: dict) -> dict:
    """The fastest of ``runs`` measurements (each in a fresh interpreter); an error if any failed."""
    results = [run_child(side, spec) for _ in range(runs)]
    failed = [r for r in results if "error" in r]
    return failed[0] if failed else min(results, key=lambda r: r["seconds"])


def clear_caches(folders) -> None:
    """A side's caches removed before its cold build, then os.sync(): neither side's cold build
    pays for writing back the other's caches."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    os.sync()


def interleaved_best(runs: int, sides: list[str], spec_of, before=None) -> dict:
    """Each side's fastest of ``runs`` measurements, the sides taking turns (ours, megatron-core,
    ours, ...) so that a change of the machine's load falls on both; ``before(side)`` runs
    before each measurement (e.g. removing the caches for a cold build)."""
    results = {side: [] for side in sides}
    for _ in range(runs):
        for side in sides:
            if before is not None:
                before(side)
            results[side].append(run_child(side, spec_of(side)))
    best = {}
    for side, found in results.items():
        failed = [r for r in found if "error" in r]
        best[side] = failed[0] if failed else min(found, key=lambda r: r["seconds"])
    return best


# --- the table ----------------------------------------------------------------------------------

def megatron_available() -> bool:
    done = subprocess.run([sys.executable, "-c", "import megatron.core.datasets.gpt_dataset"], capture_output=True)
    return done.returncode == 0


def _fmt(value, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "GiB":
        return f"{value / 2**30:,.2f} GiB"
    if unit == "MiB":
        return f"{value / 2**20:,.1f} MiB"
    if unit == "size":  # a folder's bytes: MiB below a GiB
        return _fmt(value, "GiB" if value >= 2**30 else "MiB")
    return f"{value:,}"


def _mean(values) -> float | None:
    return sum(values) / len(values) if values else None


def _per_sequence(owed, num_samples: int) -> str:
    """Bytes a sequence of memory owed to a corpus (a negative difference is noise: 0)."""
    return f"{max(owed, 0) / num_samples:.3f}" if owed is not None else "-"


def _ratio(ours, theirs) -> str:
    if not ours or not theirs or ours <= 0 or theirs <= 0:
        return "-"
    return f"{ours / theirs:.2f}x"


def memory_rows(name: str, cold: dict) -> list[tuple]:
    """The sampled peaks of a cold open (MemorySampler) and the machine's lowest MemAvailable."""
    ours, theirs = cold.get("ours", {}), cold.get("megatron", {})

    def anon(result):
        if result.get("anon_peak") is None:
            return "-"
        return f"{_fmt(result['anon_peak'], 'GiB')} ({_fmt(result.get('anon_imports'), 'GiB')} after imports)"

    return [
        (name, "anonymous peak, cold open (RssAnon, sampled every 20 ms)", anon(ours), anon(theirs),
         _ratio(ours.get("anon_peak"), theirs.get("anon_peak"))),
        (name, "  file-backed peak, cold open (RssFile+RssShmem, sampled)", _fmt(ours.get("file_peak"), "GiB"),
         _fmt(theirs.get("file_peak"), "GiB"), _ratio(ours.get("file_peak"), theirs.get("file_peak"))),
        (name, "  machine's MemAvailable, lowest during the cold open", _fmt(ours.get("mem_available_min"), "GiB"),
         _fmt(theirs.get("mem_available_min"), "GiB"), "-"),
    ]


def disk_rows(name: str, disk: dict) -> list[tuple]:
    """The index cache folder after each side's cold build: ours its ``index_cache_dir``,
    megatron-core's its ``path_to_cache``."""
    ours, theirs = disk.get("ours", {}), disk.get("megatron", {})

    def cell(found, field):
        value = found.get(field)
        if value is None:
            return "-"
        return _fmt(value, "size") + (f" ({found['files']:,} files)" if field == "allocated" else "")

    return [
        (name, "index cache on disk after the cold build (allocated: st_blocks)", cell(ours, "allocated"),
         cell(theirs, "allocated"), _ratio(ours.get("allocated"), theirs.get("allocated"))),
        (name, "  same, apparent size (st_size)", cell(ours, "apparent"), cell(theirs, "apparent"),
         _ratio(ours.get("apparent"), theirs.get("apparent"))),
    ]


TINY_DOCUMENTS = 20_000


def baseline_pss(args, megatron: bool, scratch: str) -> dict:
    """Pss_Anon per worker of each side on a tiny corpus (20,000 documents, ~2,900 sequences):
    what a worker holds whatever the corpus (the interpreter, torch, datasets or megatron-core,
    the DataLoader), to subtract from the figures of the large corpora."""
    prefix = os.path.join(args.workdir, f"docs{TINY_DOCUMENTS}", "corpus_text_document")
    write_sparse_prefix(prefix, TINY_DOCUMENTS, seed=0)
    num_samples = (os.path.getsize(prefix + ".bin") // 2 - 1) // args.seq_length
    found = {}
    for side in ["ours"] + (["megatron"] if megatron else []):
        hf, indices = os.path.join(scratch, f"tiny-{side}-hf"), os.path.join(scratch, f"tiny-{side}-indices")
        spec = dict(prefixes=[prefix], seq_length=args.seq_length, hf_cache=hf, index_cache=indices,
                    num_samples=num_samples, consumed=0, workers=args.workers, what="workers")
        print(f"  tiny corpus ({TINY_DOCUMENTS:,} documents): {side} ...", file=sys.stderr, flush=True)
        run_child(side, spec)  # the build
        measured = run_child(side, spec)
        found[side] = _mean(measured.get("pss"))
        found[side + "_rank"] = measured.get("rank_pss")
        shutil.rmtree(hf, ignore_errors=True)
        shutil.rmtree(indices, ignore_errors=True)
    found["floor"] = _mean(run_child("floor", {"workers": args.workers}).get("pss"))
    return found


def measure(name: str, prefixes: list[str], args, megatron: bool, scratch: str,
            baseline: dict | None = None) -> list[tuple]:
    """The rows of one corpus (one prefix or a blend)."""
    tokens = sum(os.path.getsize(p + ".bin") // 2 for p in prefixes)
    num_samples = (tokens - 1) // args.seq_length
    caches = {side: (os.path.join(scratch, f"{side}-hf"), os.path.join(scratch, f"{side}-indices"))
              for side in ("ours", "megatron")}
    for folder in (f for pair in caches.values() for f in pair):
        shutil.rmtree(folder, ignore_errors=True)
    consumed = min(int(args.consumed), num_samples // 2)
    sides = ["ours"] + (["megatron"] if megatron else [])
    found, specs = {}, {}
    for side in sides:
        hf, indices = caches[side]
        spec = specs[side] = dict(prefixes=prefixes, seq_length=args.seq_length, hf_cache=hf, index_cache=indices,
                                  num_samples=num_samples, consumed=consumed, workers=args.workers,
                                  raise_nofile=side == "megatron" and args.raise_peer_nofile)
        print(f"  {name}: {side} ...", file=sys.stderr, flush=True)
        # The corpus just written and the other side's caches are dirty pages the kernel is
        # still writing back: flushed first, so that neither side's cold build pays for them.
        os.sync()
        found[side] = {"cold": run_child(side, {**spec, "what": "first"})}
        # What the cold build left, before any warm open (a failed build's are partial: no figure).
        found[side]["disk"] = folder_bytes(indices) if "error" not in found[side]["cold"] else {}
        found[side]["warm1"] = run_child(side, {**spec, "what": "first"})
        time.sleep(2.5)  # a cache younger than 2 s is checked in full (docs/reliability.md)
        found[side]["warm"] = best_of(WARM_RUNS, side, {**spec, "what": "first"})
        found[side]["resume"] = best_of(WARM_RUNS, side, {**spec, "what": "resume"})
        found[side]["workers"] = run_child(side, {**spec, "what": "workers"})
        if side == "ours" and len(prefixes) > 1:
            found[side]["exit"] = run_child(side, {**spec, "what": "exit"})
    # The cold build again, the sides taking turns, each side's fastest kept: a single cold build
    # moved by 2x between runs of the same hour (the page cache, the machine's neighbours).
    if args.cold_runs > 1:
        print(f"  {name}: {args.cold_runs - 1} more cold builds, the sides taking turns ...", file=sys.stderr,
              flush=True)
        again = interleaved_best(args.cold_runs - 1, sides, lambda side: {**specs[side], "what": "first"},
                                 before=lambda side: clear_caches(caches[side]))
        for side in sides:
            first = found[side]["cold"]
            if "error" not in first and "error" not in again[side] and again[side]["seconds"] < first["seconds"]:
                found[side]["cold"] = again[side]
    for side in sides:
        for key, value in found[side].items():
            if "error" in value:
                print(f"  {name} {side} {key}: {value['error']}", file=sys.stderr)

    def get(side, key, field):
        return found.get(side, {}).get(key, {}).get(field)

    rows = []

    def row(label, field, key, unit):
        ours, theirs = get("ours", key, field), get("megatron", key, field)
        rows.append((name, label, _fmt(ours, unit), _fmt(theirs, unit), _ratio(ours, theirs)))

    ours_cold, their_cold = found.get("ours", {}).get("cold", {}), found.get("megatron", {}).get("cold", {})
    rows.append((name, f"cold open + first sample (best of {args.cold_runs})", _with_load(ours_cold, "seconds", "s"),
                 _with_load(their_cold, "seconds", "s"), _ratio(ours_cold.get("seconds"), their_cold.get("seconds"))))
    row("warm open + first sample (first after the build)", "seconds", "warm1", "s")
    row("warm open + first sample", "seconds", "warm", "s")
    row(f"resume at consumed {consumed:,} + first row", "seconds", "resume", "s")
    row("peak memory, cold open", "peak", "cold", "GiB")
    rows += memory_rows(name, {side: found[side]["cold"] for side in sides})
    rows += disk_rows(name, {side: found[side]["disk"] for side in sides})
    row("open files after the warm open", "fds", "warm", "")
    pss = {side: get(side, "workers", "pss") for side in sides}
    means = {side: _mean(v) for side, v in pss.items()}
    rows.append((name, f"Pss_Anon per DataLoader worker ({args.workers}, fork)", _fmt(means.get("ours"), "MiB"),
                 _fmt(means.get("megatron"), "MiB"), _ratio(means.get("ours"), means.get("megatron"))))
    per = {side: (means[side] / num_samples if means.get(side) else None) for side in sides}
    rows.append((name, f"  same, bytes per sequence ({num_samples:,} sequences)",
                 f"{per['ours']:.3f}" if per.get("ours") else "-",
                 f"{per['megatron']:.3f}" if per.get("megatron") else "-", _ratio(per.get("ours"), per.get("megatron"))))
    if baseline:
        rows.append((name, f"  same, tiny corpus ({TINY_DOCUMENTS:,} documents: the worker's baseline)",
                     _fmt(baseline.get("ours"), "MiB"), _fmt(baseline.get("megatron"), "MiB"),
                     _ratio(baseline.get("ours"), baseline.get("megatron"))))
        extra = {side: (means[side] - baseline[side] if means.get(side) is not None and baseline.get(side) is not None
                        else None) for side in sides}
        rows.append((name, "  Pss_Anon per worker owed to this corpus (minus the tiny corpus's)",
                     _fmt(extra.get("ours"), "MiB"), _fmt(extra.get("megatron"), "MiB"),
                     _ratio(extra.get("ours"), extra.get("megatron"))))
        rows.append((name, "  same, bytes per sequence", _per_sequence(extra.get("ours"), num_samples),
                     _per_sequence(extra.get("megatron"), num_samples), _ratio(extra.get("ours"), extra.get("megatron"))))
        if baseline.get("floor") is not None:
            floor = baseline["floor"]
            rows.append((name, "  any DataLoader worker (torch imported, yielding plain ints), per sequence here",
                         f"{_fmt(floor, 'MiB')}, {floor / num_samples:.3f} B", "-", "-"))
    ranks = {side: get(side, "workers", "rank_pss") for side in sides}
    rows.append((name, "Pss_Anon of the rank (the process that opened it, after its workers ran)",
                 _fmt(ranks.get("ours"), "MiB"), _fmt(ranks.get("megatron"), "MiB"),
                 _ratio(ranks.get("ours"), ranks.get("megatron"))))
    if baseline:
        owed = {side: (ranks[side] - baseline[side + "_rank"] if ranks.get(side) is not None
                       and baseline.get(side + "_rank") is not None else None) for side in sides}
        rows.append((name, "  owed to this corpus (minus the tiny corpus's rank), bytes per sequence",
                     _per_sequence(owed.get("ours"), num_samples), _per_sequence(owed.get("megatron"), num_samples),
                     _ratio(owed.get("ours"), owed.get("megatron"))))
    if "exit" in found.get("ours", {}):
        rows.append((name, "exit tracebacks after streaming 200 rows", str(get("ours", "exit", "exit_tracebacks")),
                     "-", "-"))
    return rows, {"documents": None, "found": found, "num_samples": num_samples}


SURPLUS = 0.1  # mid_level_dataset_surplus of the --uneven-blend rows (measure_splits says why)


def uneven_sizes(count: int, low: int, high: int) -> list[int]:
    """``count`` document counts from ``low`` to ``high``, log-uniform (seeded): a few large
    prefixes and many small ones, as a pretraining blend of sources has."""
    rng = np.random.default_rng(43)
    sizes = np.rint(np.exp(rng.uniform(np.log(low), np.log(high), count))).astype(int)
    sizes[0], sizes[-1] = low, high  # both ends present
    return sizes.tolist()


def _with_load(result: dict, field: str, unit: str) -> str:
    value = result.get(field) if result else None
    if value is None:
        return "-"
    load = result.get("load")
    return _fmt(value, unit) + (f" (load {load:.2f})" if load is not None else "")


def measure_splits(name: str, prefixes: list[str], args, megatron: bool,
                   scratch: str) -> tuple[list[tuple], dict]:
    """A blend split as Megatron runs split it (``args.split``), its train stream: cold, warm and
    resume each side's best of WARM_RUNS, the sides taking turns, the load beside each figure;
    and the counts the load does not move (pairs opened, datasets sampled, files open). Returns
    the rows and each side's figures as ``measure`` gives them (``found[side][key]``)."""
    counts = [os.path.getsize(p + ".bin") // 2 for p in prefixes]
    # Weighted by tokens, a size for every split, as pretrain_gpt.py gives megatron-core's builder
    # (--train-samples, --eval-iters). megatron-core's blend of the small test split oversamples
    # its default 0.5% surplus here (IndexError "requests 23 samples ... in excess of its size
    # 22"), so both sides take mid_level_dataset_surplus=0.1; train asks for 80% of the samples
    # (one epoch of every prefix's train range with that surplus).
    weights = [c / sum(counts) for c in counts]
    num_samples = int(0.8 * (sum(counts) - 1) // args.seq_length)
    sizes = [num_samples, max(1, num_samples // 100), max(1, num_samples // 1000)]
    consumed = min(int(args.consumed), num_samples // 2)
    sides = ["ours"] + (["megatron"] if megatron else [])
    caches = {side: (os.path.join(scratch, f"{side}-hf"), os.path.join(scratch, f"{side}-indices")) for side in sides}

    def spec_of(what):
        return lambda side: dict(prefixes=prefixes, seq_length=args.seq_length, hf_cache=caches[side][0],
                                 index_cache=caches[side][1], num_samples=num_samples, consumed=consumed,
                                 workers=args.workers, split=args.split, what=what, weights=weights, sizes=sizes,
                                 surplus=SURPLUS,
                                 raise_nofile=side == "megatron" and args.raise_peer_nofile)

    print(f"  {name}: cold builds, the sides taking turns ...", file=sys.stderr, flush=True)
    cold = interleaved_best(WARM_RUNS, sides, spec_of("first"), before=lambda side: clear_caches(caches[side]))
    # Each side's last cold build left its caches (clear_caches runs before a side's build only); a
    # failed build's are partial: no figure.
    disk = {side: folder_bytes(caches[side][1]) if "error" not in cold[side] else {} for side in sides}
    warm1 = {side: run_child(side, spec_of("first")(side)) for side in sides}
    time.sleep(2.5)  # a cache younger than 2 s is checked in full (docs/reliability.md)
    print(f"  {name}: warm opens and resumes ...", file=sys.stderr, flush=True)
    warm = interleaved_best(WARM_RUNS, sides, spec_of("first"))
    resume = interleaved_best(WARM_RUNS, sides, spec_of("resume"))
    for key, found in (("cold", cold), ("warm1", warm1), ("warm", warm), ("resume", resume)):
        for side, value in found.items():
            if "error" in value:
                print(f"  {name} {side} {key}: {value['error']}", file=sys.stderr)
    rows = []

    def row(label, found, field, unit):
        ours, theirs = found.get("ours", {}), found.get("megatron", {})
        rows.append((name, label, _with_load(ours, field, unit), _with_load(theirs, field, unit),
                     _ratio(ours.get(field), theirs.get(field))))

    row(f"cold open + first sample (split {args.split}, train stream; best of {WARM_RUNS})", cold, "seconds", "s")
    row("warm open + first sample (first after the build)", warm1, "seconds", "s")
    row(f"warm open + first sample (best of {WARM_RUNS})", warm, "seconds", "s")
    row(f"resume at consumed {consumed:,} + first row (best of {WARM_RUNS})", resume, "seconds", "s")
    row("pairs opened (IndexedFile / IndexedDataset made), warm", warm, "opens", "")
    row("datasets sampled (indices built or loaded / GPTDataset made), warm", warm, "sampled", "")
    row("peak memory, cold open", cold, "peak", "GiB")
    rows += memory_rows(name, cold)
    rows += disk_rows(name, disk)
    row("open files after the warm open", warm, "fds", "")
    found = {side: {"cold": cold[side], "warm": warm[side], "resume": resume[side], "disk": disk[side]}
             for side in sides}
    return rows, found


# megatron-core's cold build holds, from the arrays core 0.19's gpt_dataset.py and
# blended_megatron_dataset_builder.py make (one epoch): the split's document range (int32) and
# the document_index (int32), 8 B a document, kept; while a prefix's document_index is built,
# numpy.mgrid over (epochs, documents) (an int64 pair) and its casts, 20 B a document more
# (tracemalloc: 24 B a document inside _build_document_index); the sample index (2 x int32) and
# the shuffle index (uint32), 12 B a sample, kept; a blend's dataset_index and
# dataset_sample_index (int16 + int64), 10 B a sample. Its .idx tables are memory maps (file
# pages the kernel may drop: not counted). Beside them what the interpreter, torch and
# megatron-core hold once a first sample is read: 0.42 GiB measured here, rounded up.
PEER_IMPORTS = 2**29
PEER_KEPT, PEER_BUILDING, PEER_SAMPLE, PEER_BLENDED = 8, 20, 12, 10


def peer_need(documents: list[int], samples: int) -> int:
    """megatron-core's estimated anonymous peak building the indices of ``documents`` (a count
    a prefix) into ``samples`` samples (the arrays above; one epoch)."""
    blended = PEER_BLENDED * samples if len(documents) > 1 else 0
    return (PEER_IMPORTS + PEER_KEPT * sum(documents) + PEER_BUILDING * max(documents)
            + PEER_SAMPLE * samples + blended)


def peer_skip_reason(args, megatron: bool, prefixes: list[str]) -> str | None:
    """Why megatron-core's side of a corpus is not run (None: it is): not importable,
    ``--ours-only``, or an estimated need past the machine's MemAvailable now."""
    if args.ours_only:
        return "--ours-only"
    if not megatron:
        return "megatron-core is not importable"
    documents = [_documents_of(p) for p in prefixes]
    samples = sum(os.path.getsize(p + ".bin") // 2 for p in prefixes) // args.seq_length
    need = peer_need(documents, samples)
    available = _proc_fields("/proc/meminfo", ("MemAvailable",))["MemAvailable"]
    if need <= available:
        return None
    return (f"its estimated anonymous peak {_fmt(need, 'GiB')} (imports {_fmt(PEER_IMPORTS, 'GiB')} + "
            f"{PEER_KEPT + PEER_BUILDING} B a document of the largest prefix, {PEER_KEPT} B of the others: "
            f"document_index built as an int64 mgrid pair, kept as int32, and the split's int32 range; "
            f"+ {PEER_SAMPLE + (PEER_BLENDED if len(prefixes) > 1 else 0)} B a sample: sample, shuffle"
            f"{' and blending' if len(prefixes) > 1 else ''} indices) exceeds MemAvailable "
            f"{_fmt(available, 'GiB')}")


def _documents_of(prefix: str) -> int:
    with open(prefix + ".idx", "rb") as f:
        return struct.unpack_from("<Q", f.read(34), 18)[0]


# Issue 43's goals: (the goal's corpus, figure, side's key, field, "ratio" or "ours", limit).
GOALS = {
    "uneven": ("1,000 uneven prefixes, split 969,30,1", [
        ("cold open + first sample", "cold", "seconds", "ratio", 1.0),
        ("warm open + first sample", "warm", "seconds", "ratio", 0.5),
        ("resume + first row", "resume", "seconds", "ratio", 0.5),
    ]),
    "200M": ("200M documents", [
        ("cold build + first sample", "cold", "seconds", "ratio", 0.7),
        ("peak RSS of the cold build (ru_maxrss)", "cold", "peak", "ratio", 0.8),
        ("index caches on disk (allocated)", "disk", "allocated", "ratio", 1.0),
    ]),
    "1B": ("1B documents", [
        ("anonymous peak of the cold build + first sample", "cold", "anon_peak", "ours", 4 * 2**30),
        ("warm open + first sample", "warm", "seconds", "ours", 0.3),
        ("resume + first row", "resume", "seconds", "ours", 0.3),
    ]),
}
GOAL_UNITS = {"seconds": "s", "peak": "GiB", "anon_peak": "GiB", "allocated": "size"}


def goal_rows(kind: str, corpus: str, exact: bool, found: dict) -> list[tuple]:
    """One line a goal of ``kind`` for a corpus run (``exact``: the goal's own corpus; else the
    nearest goal, marked indicative): the figure measured, the goal, met or not."""
    goal_corpus, goals = GOALS[kind]
    lines = []
    for label, key, field, how, limit in goals:
        ours = found.get("ours", {}).get(key, {}).get(field)
        theirs = found.get("megatron", {}).get(key, {}).get(field)
        unit = GOAL_UNITS[field]
        if how == "ratio":
            value = ours / theirs if ours and theirs and ours > 0 and theirs > 0 else None
            measured = f"{value:.2f}x ({_fmt(ours, unit)} / {_fmt(theirs, unit)})" if value is not None else "-"
            target = f"<= {limit:.1f}x megatron-core's"
        else:
            value, measured, target = ours, _fmt(ours, unit), f"<= {_fmt(limit, unit)}"
        verdict = "not measured" if value is None else ("met" if value <= limit else "not met")
        if value is not None and not exact:
            verdict += " (indicative: not the goal's corpus)"
        lines.append((f"{goal_corpus}: {label}", corpus, measured, target, verdict))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", default="10e6", help="documents of single-prefix corpora, comma-separated")
    parser.add_argument("--blend", default="", help="blends, PREFIXESxDOCUMENTS each, comma-separated (200x20000)")
    parser.add_argument("--uneven-blend", default="",
                        help="blends of uneven prefixes, PREFIXESxLOW-HIGH documents each (1000x1e3-2e6), "
                             "comma-separated: split --split, both sides best of 3 taking turns")
    parser.add_argument("--split", default="969,30,1", help="Megatron's --split for --uneven-blend")
    parser.add_argument("--seq-length", type=int, default=4096)
    parser.add_argument("--consumed", type=float, default=20e6, help="resume point (at most half the samples)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cold-runs", type=int, default=3,
                        help="cold builds of each single-prefix or --blend corpus, the sides taking turns after the "
                             "first (which also gives the memory and disk rows); each side's fastest is its figure")
    parser.add_argument("--workdir", default="/tmp/scale-bench")
    parser.add_argument("--keep", action="store_true", help="keep the corpora (they are sparse; the caches are not)")
    parser.add_argument("--raise-peer-nofile", action="store_true",
                        help="megatron-core's processes raise their soft limit of open files to the hard one "
                             "(run under `ulimit -Sn 1024`: this package within it, megatron-core beside it)")
    parser.add_argument("--ours-only", action="store_true",
                        help="this package's side only (megatron-core's side of a corpus is also left out, "
                             "with its reason, where its estimated need exceeds the machine's MemAvailable)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        side, spec = args.child
        child = {"ours": child_ours, "megatron": child_megatron, "floor": child_floor}[side]
        print(json.dumps(child(json.loads(spec))))
        return

    megatron = not args.ours_only and megatron_available()
    if not megatron and not args.ours_only:
        print("megatron-core is not importable: its columns are empty", file=sys.stderr)
    os.makedirs(args.workdir, exist_ok=True)
    corpora = []
    for text in filter(None, args.documents.split(",")):
        n = int(float(text))
        prefix = os.path.join(args.workdir, f"docs{n}", "corpus_text_document")
        print(f"writing {n:,} documents (sparse .bin) ...", file=sys.stderr, flush=True)
        write_sparse_prefix(prefix, n, seed=0)
        corpora.append((f"{n / 1e6:g}M documents", [prefix], n))
    for text in filter(None, args.blend.split(",")):
        count, n = (int(float(x)) for x in text.split("x"))
        prefixes = [os.path.join(args.workdir, f"blend{count}x{n}", f"part{i:04d}_text_document") for i in range(count)]
        print(f"writing {count} prefixes of {n:,} documents ...", file=sys.stderr, flush=True)
        for i, prefix in enumerate(prefixes):
            write_sparse_prefix(prefix, n, seed=i + 1)
        corpora.append((f"{count} prefixes x {n / 1e6:g}M", prefixes, count * n))

    uneven = []
    for text in filter(None, args.uneven_blend.split(",")):
        count, bounds = text.split("x")
        low, high = (int(float(x)) for x in bounds.split("-"))
        sizes = uneven_sizes(int(count), low, high)
        folder = os.path.join(args.workdir, f"uneven{count}x{low}-{high}")
        prefixes = [os.path.join(folder, f"part{i:04d}_text_document") for i in range(len(sizes))]
        print(f"writing {count} prefixes of {low:,} to {high:,} documents ({sum(sizes):,} in all) ...",
              file=sys.stderr, flush=True)
        for i, (prefix, n) in enumerate(zip(prefixes, sizes)):
            write_sparse_prefix(prefix, n, seed=i + 1)
        uneven.append((f"{count} prefixes of {low / 1e3:g}k-{high / 1e6:g}M documents ({sum(sizes):,} in all)",
                       prefixes, int(count)))

    def peer(name, prefixes) -> bool:
        """Whether megatron-core's side of this corpus runs; if not, a row says why."""
        reason = peer_skip_reason(args, megatron, prefixes)
        if reason is not None:
            print(f"  {name}: megatron-core not run: {reason}", file=sys.stderr, flush=True)
            table.append((name, f"megatron-core not run: {reason}", "-", "-", "-"))
        return reason is None

    table, growth, goals = [], [], []
    for name, prefixes, count in uneven:
        scratch = os.path.join(args.workdir, "caches")
        rows, found = measure_splits(name, prefixes, args, peer(name, prefixes), scratch)
        table += rows
        goals += goal_rows("uneven", name, count == 1000, found)
        shutil.rmtree(scratch, ignore_errors=True)
    baseline = baseline_pss(args, megatron, os.path.join(args.workdir, "caches")) if corpora else None
    for name, prefixes, n in corpora:
        scratch = os.path.join(args.workdir, "caches")
        rows, detail = measure(name, prefixes, args, peer(name, prefixes), scratch, baseline)
        table += rows
        if len(prefixes) == 1:
            growth.append((n, detail))
            kind = "1B" if n >= 500e6 else "200M"
            goals += goal_rows(kind, name, n == {"1B": 10**9, "200M": 200 * 10**6}[kind], detail["found"])
        shutil.rmtree(scratch, ignore_errors=True)

    print(f"seq_length {args.seq_length}, one epoch, seed {SEED}; uint16, lognormal lengths (median {MEDIAN}); "
          f"each figure in a fresh process, imports excluded")
    print("| corpus | figure | this project | megatron-core | ratio |")
    print("|---|---|---|---|---|")
    for line in table:
        print("| " + " | ".join(line) + " |")
    if len(growth) >= 2:
        (n0, d0), (n1, d1) = growth[0], growth[-1]
        print()
        print(f"growth from {n0 / 1e6:g}M to {n1 / 1e6:g}M documents, extrapolated linearly to 1B:")
        for side in ("ours", "megatron"):
            w0, w1 = (d["found"].get(side, {}).get("warm", {}).get("seconds") for d in (d0, d1))
            p0, p1 = (d["found"].get(side, {}).get("workers", {}).get("pss") for d in (d0, d1))
            if w0 is None or w1 is None:
                continue
            slope = (w1 - w0) / (n1 - n0)
            warm_1b = w1 + slope * (1e9 - n1)
            line = f"  {side}: warm open {w0:.2f} s -> {w1:.2f} s, at 1B ~{warm_1b:.1f} s"
            if p0 and p1:
                m0, m1 = _mean(p0), _mean(p1)
                per_doc = (m1 - m0) / (n1 - n0)
                node_1b = 64 * (m1 + per_doc * (1e9 - n1))
                line += (f"; Pss_Anon per worker {m0 / 2**20:.0f} -> {m1 / 2**20:.0f} MiB, per node (8x8) at 1B "
                         f"~{node_1b / 2**30:.1f} GiB")
            print(line)
    if goals:
        print()
        print("issue 43's goals, for the corpora run here (a goal measured on a corpus other than its own "
              "is indicative only):")
        print("| goal | corpus run | measured | goal | verdict |")
        print("|---|---|---|---|---|")
        for line in goals:
            print("| " + " | ".join(line) + " |")
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
