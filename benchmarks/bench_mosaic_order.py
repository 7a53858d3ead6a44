"""MosaicML's sample order at pretraining scale: ``mmidx_builder.mosaic.order`` against
mosaicml-streaming 0.13.0's own ``StreamingDataset``, side by side in one run (issue 44 item 4).

    .venv/bin/python benchmarks/bench_mosaic_order.py [--samples 100e6] [--shards 10000]
        [--nodes 8] [--ranks-per-node 8] [--workers 8] [--batch-size 8] [--repeats 1]
        [--batching random,stratified] [--workdir /tmp/mosaic-order-bench] [--cache-dir DIR] [--no-cache]
        [--global-stream]

Quick run: ``--samples 1e6 --shards 1000``.

Corpus. One MDS ``index.json`` of --shards shards holding --samples samples between them (the
first ``samples % shards`` shards one more), written directly: StreamingDataset computes its
order from the index alone, and opens no shard before it fetches the first sample's bytes, so
the shard files are absent (it records each as "remote"; nothing here downloads).

World. 64 ranks = 8 nodes x 8 ranks per node, 8 DataLoader workers per rank: 64 workers per
node. 512 processes cannot run on this machine, so one node's two kinds of worker are
measured, each in a fresh process, with the environment StreamingDataset reads (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and torch's ``get_worker_info`` answering the
worker's id and count:

  the local leader   node 0, rank 0, worker 0. StreamingDataset: construction (the index
                     read, the shard table, its shared-memory registry), then ``_get_work`` as
                     the leader runs it in a DataLoader worker: ``_resume``, ``generate_work``
                     (the whole epoch, 5-D), ``_share_work`` (a copy into shared memory), the
                     worker's row flattened; the barriers are left out (no peers to wait for).
                     Ours: the index parsed, ``MosaicOrder(...)``, ``resume_point``,
                     ``worker_sample_ids``.
  another worker     node 0, rank 1, worker 0, started while the leader holds its epoch.
                     StreamingDataset: construction, ``_attach_work`` (the leader's shared
                     epoch), its row; it cannot start before the leader has shared the epoch, so
                     its time to the first sample is the leader's. Ours: the same steps as the
                     leader, with the same ``cache_dir`` (a folder of the node's disk): the
                     leader built and saved the epoch's array, this worker maps it (it would
                     wait on the leader's lock meanwhile). With --no-cache, every worker builds
                     its own epoch (the leader's figures are every worker's).

Torch's ``dist`` is not initialised (``maybe_init_dist`` answers False: WORLD_SIZE=64 would
otherwise wait for 63 peers); StreamingDataset reads its world from the environment anyway.

Measures, per batching method (shuffle=True, py1e, relaxed partition: StreamingDataset's
defaults otherwise; --batch-size samples per rank's batch):

  first sample id      seconds from construction to the worker's first sample id (imports
                       excluded); the two sides' ids are compared (first id, count, sum)
  memory per worker    Pss_Anon added since the imports (/proc/self/smaps_rollup, at the first
                       sample id: what the worker holds while it iterates, anonymous pages being
                       private here), plus the worker's share of memory shared across the node:
                       StreamingDataset's shared epoch array (nodes x ranks x workers x batches
                       x batch int64) divided by the 64 workers of the node, which all map it
                       at the barrier (that is what Pss counts with 64 sharers; it is computed
                       from the array's size rather than read, as 64 processes are not running);
                       ours: the cached epoch file / 64 in the same way (page-cache pages the
                       node's workers map; an upper bound, as a worker touches only the pages of
                       its own places)
  node mean            (leader + 63 other workers) / 64: the memory per worker of a node
  leader peak          the leader's peak RSS (VmHWM) minus its RSS after the imports: what
                       the node must fit once while the epoch is built

--global-stream adds rows: a third fresh process of ours, as mosaic_global_stream's worker
(accelerate's process 0, which deals every rank's ids of the epoch, epoch_work, building the
node's epoch file): its time to the first batch and its peak, against StreamingDataset's
leader's time to its first sample id and its peak.

Ratios are ours / StreamingDataset's: the goal is <= 1.0 on time and memory per worker.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LEADER = {"node": 0, "rank_of_node": 0, "worker_of_rank": 0}
OTHER = {"node": 0, "rank_of_node": 1, "worker_of_rank": 0}
WAIT_SECONDS = 1800


# --- corpus -------------------------------------------------------------------------------------

def write_index(folder: str, samples: int, shards: int) -> None:
    """An MDS index.json of ``shards`` shard entries holding ``samples`` samples; no shard files."""
    os.makedirs(folder, exist_ok=True)
    base, extra = divmod(samples, shards)
    entries = []
    for shard in range(shards):
        count = base + (shard < extra)
        entries.append({
            "column_encodings": ["ndarray:int32"], "column_names": ["tokens"], "column_sizes": [None],
            "compression": None, "format": "mds", "hashes": [], "samples": count, "size_limit": 1 << 26,
            "version": 2, "zip_data": None,
            "raw_data": {"basename": f"shard.{shard:05d}.mds", "bytes": 8 * count + 8192, "hashes": {}},
        })
    with open(os.path.join(folder, "index.json.part"), "w") as f:
        json.dump({"version": 2, "shards": entries}, f)
    os.replace(os.path.join(folder, "index.json.part"), os.path.join(folder, "index.json"))


# --- what a child process measures --------------------------------------------------------------

def _rollup() -> dict:
    values = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                values[parts[0].rstrip(":")] = int(parts[1]) * 1024
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                values[line.split(":")[0]] = int(line.split()[1]) * 1024
    return values


def _summary(ids, seconds: float, before: dict, shared_bytes: int) -> dict:
    after = _rollup()
    return {"seconds": seconds, "first": int(ids[0]) if len(ids) else -1, "count": int(len(ids)),
            "sum": int(ids.sum()), "anon_added": after["Pss_Anon"] - before["Pss_Anon"],
            "peak_added": after["VmHWM"] - before["VmRSS"], "shared_bytes": shared_bytes}


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT_SECONDS} s")
        time.sleep(0.05)


def _look_up_leaders_prefix(dataset_module, spec: dict) -> None:
    """``get_shm_prefix`` has every rank pick the first free prefix before the local leader
    registers it (dist barriers keep them in step); started after the leader, a rank would pick
    the next one. So this rank opens the prefix the leader registered, as the original does
    after its barrier."""
    from streaming.base.shared import SharedMemory, _get_path
    from streaming.base.constant import LOCALS

    with open(spec["ready"]) as f:
        prefix = int(f.read())

    def registered(streams_local, streams_remote, world, retry=100):
        return prefix, SharedMemory(_get_path(prefix, LOCALS), False)

    dataset_module.get_shm_prefix = registered


def child_theirs(spec: dict) -> dict:
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from types import SimpleNamespace

    import mosaic_oracle

    streaming = mosaic_oracle.streaming_or_skip()
    import streaming.base.dataset as dataset_module
    import streaming.base.world as world_module
    from streaming.base.batching import generate_work

    dataset_module.maybe_init_dist = lambda: False  # no peers to rendezvous with (see the docstring)
    if spec["role"] != "leader":
        _look_up_leaders_prefix(dataset_module, spec)
    place = spec["place"]
    world_module.get_worker_info = lambda: SimpleNamespace(id=place["worker_of_rank"], num_workers=spec["workers"])
    before = _rollup()
    start = time.perf_counter()
    ds = streaming.StreamingDataset(local=spec["folder"], shuffle=True, batch_size=spec["batch_size"],
                                    batching_method=spec["batching"])
    ds._unique_worker_world = ds._unique_rank_world.detect_workers()
    ds._parallel_worker_world = world = ds._parallel_rank_world.detect_workers()
    epoch, sample_in_epoch = ds._resume(world, 0)
    if spec["role"] == "leader":
        epoch_ids = generate_work(ds.batching_method, ds, world, epoch, sample_in_epoch)
        shape_shm, data_shm = ds._share_work(epoch_ids)
    else:
        epoch_ids, shape_shm, data_shm = ds._attach_work()
    row = epoch_ids[world.node, world.rank_of_node, world.worker_of_rank].flatten()
    ids = row[row != -1]  # _each_sample_id skips the padding
    seconds = time.perf_counter() - start
    result = _summary(ids, seconds, before, epoch_ids.nbytes)
    if spec["role"] == "leader":
        with open(spec["ready"] + ".part", "w") as f:
            f.write(str(ds._shm_prefix_int))
        os.replace(spec["ready"] + ".part", spec["ready"])
        _wait_for(spec["done"])  # the other worker attaches meanwhile
    else:
        open(spec["done"], "w").close()
    shape_shm.cleanup()
    if data_shm is not None:
        data_shm.cleanup()
    return result


def child_ours(spec: dict) -> dict:
    sys.path.insert(0, ROOT)
    from mmidx_builder.mosaic.index import parse_index
    from mmidx_builder.mosaic.order import MosaicOrder, OrderSettings, OrderWorld

    import numpy as np

    if spec.get("global_stream"):
        from mmidx_builder.training.mosaic_global import every_rank_steps  # imports torch: before the clock
    before = _rollup()
    start = time.perf_counter()
    path = os.path.join(spec["folder"], "index.json")
    with open(path, "rb") as f:
        index = parse_index(path, f.read())
    samples = np.array([shard.samples for shard in index.shards], np.int64)
    cache_dir = spec["cache_dir"]
    order = MosaicOrder([samples], settings=OrderSettings(shuffle=True, batch_size=spec["batch_size"],
                                                          batching_method=spec["batching"]), cache_dir=cache_dir)
    world = OrderWorld(spec["nodes"], spec["ranks_per_node"], spec["workers"])
    plan = order.resume_point(world, None, 0)
    if spec["role"] == "global":
        # mosaic_global_stream's worker (accelerate's process 0) deals every rank's ids before its first batch.
        steps = every_rank_steps(order, plan, spec["batch_size"])
        ids = np.concatenate([steps.batch(rank, 0) for rank in range(world.num_ranks)])
    else:
        ids = order.worker_sample_ids(plan, **spec["place"])
    seconds = time.perf_counter() - start
    shared = sum(entry.stat().st_size for entry in os.scandir(cache_dir) if entry.name.endswith(".npy")) \
        if cache_dir else 0
    return _summary(ids, seconds, before, shared)


def run_child(side: str, spec: dict, place: dict, role: str):
    """Starts a child for ``side`` at ``place`` with the world's environment; returns the process."""
    env = dict(os.environ)
    rank = place["node"] * spec["ranks_per_node"] + place["rank_of_node"]
    env.update(RANK=str(rank), WORLD_SIZE=str(spec["nodes"] * spec["ranks_per_node"]),
               LOCAL_RANK=str(place["rank_of_node"]), LOCAL_WORLD_SIZE=str(spec["ranks_per_node"]),
               NODE_RANK=str(place["node"]), PYTHONPATH=ROOT)
    child_spec = dict(spec, place=place, role=role)
    return subprocess.Popen([sys.executable, __file__, "--child", side, json.dumps(child_spec)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def collect(process) -> dict:
    out, err = process.communicate()
    if process.returncode:
        raise RuntimeError(f"child failed ({process.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def measure(side: str, spec: dict) -> dict:
    """The leader and another worker of node 0, each in a fresh process."""
    for name in ("ready", "done"):
        if os.path.exists(spec[name]):
            os.remove(spec[name])
    if side == "theirs":
        leader = run_child(side, spec, LEADER, "leader")
        while not os.path.exists(spec["ready"]):
            if leader.poll() is not None:
                return {"leader": collect(leader)}  # raises with the child's error
            time.sleep(0.05)
        try:
            other = collect(run_child(side, spec, OTHER, "worker"))
        except BaseException:
            leader.kill()  # it waits for the other worker, which failed
            raise
        return {"leader": collect(leader), "other": other}
    if spec["cache_dir"]:
        shutil.rmtree(spec["cache_dir"], ignore_errors=True)  # the leader builds, the other maps
    leader = collect(run_child(side, spec, LEADER, "leader"))
    result = {"leader": leader, "other": collect(run_child(side, spec, OTHER, "worker"))}
    if spec["global_stream"]:
        if spec["cache_dir"]:
            shutil.rmtree(spec["cache_dir"], ignore_errors=True)  # it builds the node's epoch itself
        result["global"] = collect(run_child(side, spec, LEADER, "global"))
    return result


# --- the table ---------------------------------------------------------------------------------

def per_worker(result: dict, workers_per_node: int) -> tuple[float, float, float]:
    """(leader, another worker, node mean) bytes per worker: Pss_Anon added + shared share."""
    share = result["leader"]["shared_bytes"] / workers_per_node
    leader = result["leader"]["anon_added"] + share
    other = result["other"]["anon_added"] + share
    return leader, other, (leader + (workers_per_node - 1) * other) / workers_per_node


def table(results: dict, spec: dict) -> list[tuple]:
    workers_per_node = spec["ranks_per_node"] * spec["workers"]
    rows = []
    for batching, sides in results.items():
        ours, theirs = sides["ours"], sides["theirs"]
        same = all(ours[role][key] == theirs[role][key] for role in ("leader", "other")
                   for key in ("first", "count", "sum"))
        mib = 2 ** 20
        o_mem, t_mem = per_worker(ours, workers_per_node), per_worker(theirs, workers_per_node)
        pairs = [
            ("first sample id, s (the node's workers wait for the leader)", ours["leader"]["seconds"],
             theirs["leader"]["seconds"], 2),
            ("memory per worker, node mean, MiB", o_mem[2] / mib, t_mem[2] / mib, 1),
            ("memory, the local leader, MiB", o_mem[0] / mib, t_mem[0] / mib, 1),
            ("memory, another worker, MiB", o_mem[1] / mib, t_mem[1] / mib, 1),
            ("peak RSS added, the local leader, MiB", ours["leader"]["peak_added"] / mib,
             theirs["leader"]["peak_added"] / mib, 0),
        ]
        if "global" in ours:
            pairs += [("mosaic_global_stream: a worker's first batch (every rank's ids), s",
                       ours["global"]["seconds"], theirs["leader"]["seconds"], 2),
                      ("mosaic_global_stream: peak RSS added, MiB", ours["global"]["peak_added"] / mib,
                       theirs["leader"]["peak_added"] / mib, 0)]
        for name, o, t, digits in pairs:
            rows.append((batching, name, f"{o:,.{digits}f}", f"{t:,.{digits}f}", f"{o / t:.2f}" if t else "-"))
        rows.append((batching, "same ids (first, count, sum; both workers)", "yes" if same else "NO", "", ""))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=float, default=100e6)
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8, help="DataLoader workers per rank")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch of each rank")
    parser.add_argument("--batching", default="random,stratified", help="batching methods, comma-separated")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each side; the fastest leader's run is kept")
    parser.add_argument("--workdir", default="/tmp/mosaic-order-bench")
    parser.add_argument("--no-cache", action="store_true",
                        help="ours without cache_dir: every worker builds the epoch itself")
    parser.add_argument("--cache-dir", help="ours' cache_dir (cleared before each side's run; default: "
                        "WORKDIR/order-cache, on the disk; /dev/shm/... is where StreamingDataset's epoch lives)")
    parser.add_argument("--global-stream", action="store_true",
                        help="also time mosaic_global_stream's worker, which deals every rank's ids (accelerate)")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        side, spec = args.child[0], json.loads(args.child[1])
        print(json.dumps((child_theirs if side == "theirs" else child_ours)(spec)))
        return
    samples = int(args.samples)
    folder = os.path.join(args.workdir, f"index-{samples}x{args.shards}")
    write_index(folder, samples, args.shards)
    spec = {"folder": folder, "nodes": args.nodes, "ranks_per_node": args.ranks_per_node, "workers": args.workers,
            "batch_size": args.batch_size, "ready": os.path.join(args.workdir, "leader.ready"),
            "done": os.path.join(args.workdir, "other.done"),
            "cache_dir": None if args.no_cache else args.cache_dir or os.path.join(args.workdir, "order-cache"),
            "global_stream": args.global_stream}
    results = {}
    for batching in args.batching.split(","):
        spec["batching"] = batching
        results[batching] = {}
        for _ in range(args.repeats):  # the sides take turns: a busy spell slows a pass of each
            for side in ("theirs", "ours"):
                result = measure(side, spec)
                best = results[batching].get(side)
                if best is None or result["leader"]["seconds"] < best["leader"]["seconds"]:
                    results[batching][side] = result
    print(f"{samples:,} samples in {args.shards:,} shards; {args.nodes} nodes x {args.ranks_per_node} ranks x "
          f"{args.workers} workers; batch size {args.batch_size}; shuffle py1e, relaxed; best of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.2f}; ours "
          + ("without cache_dir" if args.no_cache else f"with cache_dir={spec['cache_dir']} (one epoch file a node)"))
    print("| batching | measure | ours | StreamingDataset | ours / theirs |")
    print("|---|---|---|---|---|")
    for row in table(results, spec):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
