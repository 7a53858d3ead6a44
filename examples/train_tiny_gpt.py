"""Train a tiny GPT on CPU from a stream, fed the way Megatron-LM feeds its models.

    python examples/train_tiny_gpt.py [--steps 40] [--workers 2] [--world-size 1 --rank 0]

What it does, top to bottom:
1. writes a small text corpus and converts it with `mmidx convert` (UTF-8 bytes, EOD 256
   after every document); the convert records the EOD id beside the files;
2. streams it with `load_dataset(..., streaming=True)`: Megatron's packed samples of
   seq_length + 1 tokens, in Megatron's order;
3. `megatron_rank_stream` gives this rank its micro-batches in the order of Megatron-LM's
   MegatronPretrainingSampler (any number of DataLoader workers; under torchrun each process
   reads its own rank's; with accelerate or the HF Trainer use megatron_global_stream instead,
   docs/training.md);
4. `MegatronCollator` turns rows into megatron-core GPTDataset batches: tokens, labels,
   loss_mask, position_ids restarting after each EOD, and an attention mask that keeps
   documents apart (Megatron's --reset-position-ids --reset-attention-mask --eod-mask-loss);
5. trains a 2-layer GPT written below (no other library), printing how long each step
   waited for the loader against how long the step itself took.

Needs torch (`pip install 'mmidx-builder[torch]'`); downloads nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from datasets import load_dataset
from torch import nn
from torch.utils.data import DataLoader

import mmidx_builder
from mmidx_builder.convert import convert

VOCAB_SIZE = 257  # byte tokens 0-255 and EOD 256 (the "bytes" tokenizer of mmidx convert)
WORDS = ("the quick brown fox jumps over a lazy dog while tokens flow from indexed files into "
         "packed samples and every rank reads its own micro batches in order").split()


def make_corpus(folder: Path, documents: int = 600) -> Path:
    """Sentences of random words, one JSON line each, converted to .bin/.idx with EOD."""
    generator = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(documents):
        n = int(torch.randint(4, 30, (1,), generator=generator))
        picks = torch.randint(0, len(WORDS), (n,), generator=generator).tolist()
        lines.append(json.dumps({"text": " ".join(WORDS[i] for i in picks) + "."}))
    source = folder / "corpus.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    convert([str(source)], str(folder / "data" / "train"), "bytes", append_eod=True)
    return folder / "data"


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, masked):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        # Megatron's mask is True where attention is *not* allowed; torch's is True where it is.
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=~masked)
        x = x + self.out(attended.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, seq_length: int, width: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB_SIZE, width)
        self.positions = nn.Embedding(seq_length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, VOCAB_SIZE)

    def forward(self, tokens, position_ids, attention_mask):
        x = self.tokens(tokens) + self.positions(position_ids)
        for block in self.blocks:
            x = block(x, attention_mask)
        return self.head(self.norm(x))


def megatron_loss(logits, labels, loss_mask):
    """Megatron's LM loss: per-token cross entropy averaged over the tokens loss_mask keeps."""
    losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    return (losses * loss_mask.flatten()).sum() / loss_mask.sum()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--seq-length", type=int, default=64)
    # Under torchrun (or any launcher that sets them) the rank and world size come from it.
    parser.add_argument("--world-size", type=int, default=int(os.environ.get("WORLD_SIZE", 1)),
                        help="data-parallel ranks (this process is --rank); default: $WORLD_SIZE or 1")
    parser.add_argument("--rank", type=int, default=int(os.environ.get("RANK", 0)),
                        help="default: $RANK (torchrun sets it) or 0")
    parser.add_argument("--workdir", help="where to write the corpus (default: a temporary folder)")
    args = parser.parse_args(argv)
    torch.manual_seed(1234)

    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(args.workdir or temporary)
        folder.mkdir(parents=True, exist_ok=True)
        data = make_corpus(folder)
        stream = load_dataset(str(data), seq_length=args.seq_length, seed=1234, split="train", streaming=True,
                              cache_dir=str(folder / "cache"))
        ranked = mmidx_builder.megatron_rank_stream(stream, rank=args.rank, world_size=args.world_size,
                                                    micro_batch_size=args.micro_batch_size)
        collate = mmidx_builder.MegatronCollator(dataset=stream, reset_position_ids=True, reset_attention_mask=True,
                                                 eod_mask_loss=True, create_attention_mask=True)
        print(f"{ranked.total_samples} samples of {args.seq_length} + 1 tokens; rank {args.rank} of "
              f"{args.world_size} reads {ranked.num_micro_batches()} micro-batches; EOD id {collate.eod_id} "
              f"(recorded by mmidx convert)")
        loader = DataLoader(ranked, batch_size=args.micro_batch_size, num_workers=args.workers,
                            collate_fn=collate)
        model = TinyGPT(args.seq_length)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

        waits, steps, losses = [], [], []
        batches = iter(loader)
        print(f"{'step':>5} {'loss':>7} {'loader wait ms':>15} {'step ms':>8}")
        for step in range(args.steps):
            started = time.perf_counter()
            batch = next(batches, None)
            if batch is None:
                print("the rank's micro-batches are used up")
                break
            got = time.perf_counter()
            logits = model(batch["tokens"], batch["position_ids"], batch["attention_mask"])
            loss = megatron_loss(logits, batch["labels"], batch["loss_mask"])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done = time.perf_counter()
            waits.append(got - started)
            steps.append(done - got)
            losses.append(loss.item())
            if step < 3 or (step + 1) % 10 == 0:
                print(f"{step + 1:>5} {losses[-1]:>7.3f} {1e3 * waits[-1]:>15.1f} {1e3 * steps[-1]:>8.1f}")
        state = ranked.state_dict() if args.workers == 0 else None
        del batches

    if waits:
        later = slice(1, None) if len(waits) > 1 else slice(None)  # the first wait includes starting workers
        wait, step = sum(waits[later]) / len(waits[later]), sum(steps[later]) / len(steps[later])
        print(f"mean after the first step: loader wait {1e3 * wait:.1f} ms, step {1e3 * step:.1f} ms "
              f"(wait/step {wait / step:.2f}); loss {losses[0]:.3f} -> {losses[-1]:.3f} "
              f"(uniform guess: {math.log(VOCAB_SIZE):.3f})")
    if state is not None:
        print(f"state to resume from (any world size): consumed_samples={state['consumed_samples']}")


if __name__ == "__main__":
    main()
