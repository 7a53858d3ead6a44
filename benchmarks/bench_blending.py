"""Blending indices (BlendedDataset's dataset_index / dataset_sample_index): ours against
megatron-core's C++ ``helpers.build_blending_indices``, in the same run.

    .venv/bin/python benchmarks/bench_blending.py [--cases 100e6x10,1e9x3] [--repeats 3]

Each build runs in a child process of its own, so that its peak memory (ru_maxrss of the
child, minus the interpreter's baseline measured the same way) is its own. The outputs are
compared for equality; the table gives the time ratio and the peak memory against the two
output arrays (int16 + int64: 10 bytes a sample). Goal: at most 1.5x the C++ time, memory
within 2x of the outputs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import hashlib, json, resource, sys, time, warnings
    warnings.simplefilter("ignore")
    import numpy as np
    which, size, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    weights = np.random.default_rng(n).random(n) + 0.05
    weights = (weights / weights.sum()).tolist()
    if which == "baseline":
        if n:
            from megatron.core.datasets import helpers  # noqa: F401
        else:
            from mmidx_builder.megatron import blending_indices as blending  # noqa: F401
        print(json.dumps({"rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
        sys.exit()
    if which == "megatron-core":
        from megatron.core.datasets import helpers
        start = time.perf_counter()
        index = np.zeros(size, np.int16); sample = np.zeros(size, np.int64)
        helpers.build_blending_indices(index, sample, weights, n, size, False)
    else:
        from mmidx_builder.megatron import blending_indices as blending
        start = time.perf_counter()
        result = blending.build_blending_indices(weights, size)
        index, sample = result.dataset_index, result.dataset_sample_index
    seconds = time.perf_counter() - start
    digest = hashlib.sha256(np.ascontiguousarray(index).data)
    digest.update(np.ascontiguousarray(sample).data)
    print(json.dumps({"seconds": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "digest": digest.hexdigest()}))
""")


def run(which: str, size: int, n: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, which, str(size), str(n)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{which} {size}x{n} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="100e6x10,1e9x3", help="SIZExDATASETS, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs each")
    args = parser.parse_args()
    rows = []
    baselines = {name: run("baseline", 0, flag)["rss"] for name, flag in (("megatron-core", 1), ("ours", 0))}
    for case in args.cases.split(","):
        size_text, n_text = case.split("x")
        size, n = int(float(size_text)), int(n_text)
        results = {}
        for which in ("megatron-core", "ours"):
            runs = [run(which, size, n) for _ in range(args.repeats)]
            best = min(runs, key=lambda r: r["seconds"])
            results[which] = dict(best, rss=max(r["rss"] for r in runs) - baselines[which])
        same = results["ours"]["digest"] == results["megatron-core"]["digest"]
        outputs = size * 10
        for which, r in results.items():
            rows.append((f"{size:,} samples x {n} datasets", which, r["seconds"],
                         r["seconds"] / results["megatron-core"]["seconds"], r["rss"] / 2**20, r["rss"] / outputs,
                         "equal" if same else "DIFFERENT"))
    print(f"| case | implementation | seconds | x C++ time | peak MiB | x outputs (10 B/sample) | outputs |")
    print("|---|---|---|---|---|---|---|")
    for case, which, seconds, ratio, mib, memory, same in rows:
        print(f"| {case} | {which} | {seconds:.2f} | {ratio:.2f} | {mib:,.0f} | {memory:.2f} | {same} |")


if __name__ == "__main__":
    main()
