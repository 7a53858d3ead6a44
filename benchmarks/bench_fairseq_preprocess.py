"""mmidx fairseq-preprocess against the least any preprocessor must do (the ceiling), and
against fairseq-preprocess itself when its venv is there, in one run.

Writes ~MB of de/en text (a Zipf-like vocabulary of 20,000 words), then times:
  ceiling        read both files, split every line into words, look every word up in a
                 dict (no counting, no sorting, no writing): the Python floor of the job
  ours           fairseq_preprocess.preprocess: dictionaries, then train .bin/.idx, 1 and 2 workers
  fairseq        .venv-fairseq/bin/fairseq-preprocess --workers 1 (process start and
                 fairseq's import included; skipped without it)
Goal: 1 worker within 4x the ceiling (the text is read twice, to count the words and
then to number them, so 2x is the floor; we also sort and write). Workers pay off only
with free cores: the load average of the machine decides what 2 workers show.

    .venv/bin/python benchmarks/bench_fairseq_preprocess.py [--megabytes 20]
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import tempfile
import time

from mmidx_builder.fairseq.preprocess import preprocess

FAIRSEQ = os.path.join(os.path.dirname(__file__), os.pardir, ".venv-fairseq", "bin", "fairseq-preprocess")


def write_text(prefix: str, megabytes: float, seed: int = 0) -> None:
    rng = random.Random(seed)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    for lang in ("de", "en"):
        words = ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(20_000)]
        weights = [1 / (r + 1) for r in range(len(words))]
        size = 0
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as f:
            while size < megabytes * 1e6 / 2:
                line = " ".join(rng.choices(words, weights, k=rng.randint(1, 60))) + "\n"
                f.write(line)
                size += len(line)


def ceiling(prefix: str) -> float:
    start = time.perf_counter()
    for lang in ("de", "en"):
        index: dict[str, int] = {}
        with open(f"{prefix}.{lang}", encoding="utf-8") as f:
            for line in f:
                for word in line.split():
                    index.get(word, 3)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        prefix = os.path.join(folder, "train")
        write_text(prefix, args.megabytes)
        megabytes = sum(os.path.getsize(f"{prefix}.{lang}") for lang in ("de", "en")) / 1e6
        rows = [("ceiling", ceiling(prefix))]
        for workers in (1, 2):
            start = time.perf_counter()
            destdir = os.path.join(folder, f"w{workers}")
            preprocess(source_lang="de", target_lang="en", trainpref=prefix, destdir=destdir, workers=workers)
            rows.append((f"ours, {workers} worker(s)", time.perf_counter() - start))
        if os.path.exists(FAIRSEQ):
            start = time.perf_counter()
            subprocess.run([FAIRSEQ, "-s", "de", "-t", "en", "--trainpref", prefix, "--workers", "1",
                            "--destdir", os.path.join(folder, "fairseq")], check=True, capture_output=True)
            rows.append(("fairseq-preprocess, 1 worker", time.perf_counter() - start))
    print(f"{megabytes:.1f} MB of text (de + en)")
    print(f"{'':<30} {'seconds':>8} {'MB/s':>7} {'x ceiling':>10}")
    for name, seconds in rows:
        print(f"{name:<30} {seconds:>8.2f} {megabytes / seconds:>7.1f} {seconds / rows[0][1]:>10.2f}")


if __name__ == "__main__":
    main()
