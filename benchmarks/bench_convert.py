"""mmidx convert against the tokenizer's own batch encode (the ceiling), in one run.

Writes ~MB of random-word JSON lines, trains a byte-level BPE (tokenizers) on a sample,
then times:
  ceiling    tokenizer.encode_batch over the same texts, already in memory, in batches
             of the size convert uses (no reading, no JSON, no writing)
  convert    mmidx_builder.convert.convert with 1 and 2 workers: read, parse, encode, write
Goal: 1 worker at least 0.8x the ceiling's tokens/s.

    .venv/bin/python benchmarks/bench_convert.py [--megabytes 30]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

from mmidx_builder.convert.readers.base import BATCH_RECORDS
from mmidx_builder.convert import convert


def write_corpus(path: str, megabytes: float, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    # A Zipf-like vocabulary of 5,000 made-up words, so that BPE has something to merge.
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    words = ["".join(rng.choices(letters, weights=range(26, 0, -1), k=rng.randint(2, 10))) for _ in range(5000)]
    weights = [1 / (r + 1) for r in range(len(words))]
    texts, size = [], 0
    with open(path, "w") as f:
        while size < megabytes * 1e6:
            # Documents of a few words to a few thousand (mean about 1.5 KB).
            text = " ".join(rng.choices(words, weights, k=int(rng.expovariate(1 / 250)) + 1))
            line = json.dumps({"text": text}) + "\n"
            f.write(line)
            texts.append(text)
            size += len(line)
    return texts


def train_bpe(texts: list[str], path: str) -> None:
    import tokenizers

    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>"],
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
                                             show_progress=False)
    tokenizer.train_from_iterator(texts[:3000], trainer)
    tokenizer.save(path)


def ceiling(tokenizer_path: str, texts: list[str]) -> tuple[float, int]:
    import tokenizers

    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
    batch = BATCH_RECORDS
    started = time.perf_counter()
    tokens = 0
    for i in range(0, len(texts), batch):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(texts[i:i + batch]))
    return time.perf_counter() - started, tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--megabytes", type=float, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "corpus.jsonl")
        texts = write_corpus(source, args.megabytes)
        tokenizer_path = os.path.join(tmp, "tokenizer.json")
        train_bpe(texts, tokenizer_path)
        megabytes = os.path.getsize(source) / 1e6
        print(f"{len(texts):,} documents, {megabytes:.1f} MB of JSON lines, BPE vocab 8,000, "
              f"{os.cpu_count()} CPUs\n")

        seconds, tokens = ceiling(tokenizer_path, texts)
        rows = [("ceiling: tokenizers encode_batch", seconds, tokens)]
        for workers in (1, 2):
            summary = convert([source], os.path.join(tmp, f"out{workers}"), tokenizer_path, append_eod=True,
                              workers=workers)
            # EODs are not the tokenizer's work; count the same tokens as the ceiling.
            rows.append((f"mmidx convert, {workers} worker{'s' if workers > 1 else ''}", summary.seconds,
                         sum(summary.tokens.values()) - (summary.documents - summary.empty_documents)))

        ceiling_rate = rows[0][2] / rows[0][1]
        print(f"{'path':<34} {'seconds':>8} {'docs/s':>10} {'M tokens/s':>11} {'MB/s':>7} {'x ceiling':>10}")
        for name, seconds, tokens in rows:
            print(f"{name:<34} {seconds:>8.2f} {len(texts) / seconds:>10,.0f} {tokens / seconds / 1e6:>11.2f} "
                  f"{megabytes / seconds:>7.1f} {tokens / seconds / ceiling_rate:>10.2f}")
        print("\ngoal: 1 worker >= 0.80x ceiling")


if __name__ == "__main__":
    main()
