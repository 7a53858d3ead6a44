"""One process of tests/test_training_launchers.py, started by a launcher (torchrun or
``accelerate launch``) on 2 CPU processes (gloo). It runs docs/training.md's recipes for that
launcher and writes, per process, what each training step got:

    python launched_training.py LAUNCHER ROOT OUT_DIR

torchrun: ``loop`` (one megatron_rank_stream per rank in a plain loop, over the .bin/.idx pair),
``loop-mds`` (the same over MDS shards), ``mosaic`` (one mosaic_rank_stream per rank over MDS
token shards, two epochs). accelerate: ``accelerate`` (accelerator.prepare of a DataLoader over
megatron_global_stream, dispatched and sharded), ``trainer`` (the HF Trainer over
megatron_global_stream, a resume from its checkpoint, and a megatron_rank_stream handed to it,
which must be refused), ``mosaic-accelerate`` (accelerator.prepare and the HF Trainer over
mosaic_global_stream). Each with 0 and 2 loader workers. OUT_DIR/<LAUNCHER>.rank<r>.json:
``{recipe: {case: rows or an error}}``; the test compares them with MegatronPretrainingSampler
and with StreamingDataset.
"""

import json
import os
import sys

import torch
from datasets import load_dataset

import mmidx_builder
from mmidx_builder.errors import ParameterError

MICRO_BATCH = 2
CONSUMED = 6  # a resumed Megatron run's count, not a multiple of the global batch
STEPS = 4


def rows_of(batch):
    return [[int(t) for t in row] for row in batch["input_ids"]]


def collate(rows):
    return {"input_ids": torch.stack([torch.as_tensor(row["input_ids"], dtype=torch.long) for row in rows])}


def loop(stream, rank, world_size):
    """torchrun: each rank reads its own rank stream."""
    out = {}
    for workers in (0, 2):
        ranked = mmidx_builder.megatron_rank_stream(stream, rank=rank, world_size=world_size,
                                                    micro_batch_size=MICRO_BATCH, consumed_samples=CONSUMED)
        loader = torch.utils.data.DataLoader(ranked, batch_size=MICRO_BATCH, num_workers=workers, collate_fn=collate)
        out[f"workers{workers}"] = [row for step, batch in zip(range(STEPS), loader) for row in rows_of(batch)]
    return out


RESUME_STEPS = 3  # where the resumed MosaicML runs were stopped
MOSAIC = {"batch_size": 2, "shuffle": True, "shuffle_algo": "py1e", "shuffle_seed": 5, "shuffle_block_size": 7}


def mosaic(rows, rank, world_size):
    """torchrun over MDS shards: each rank's mosaic_rank_stream (its node from torchrun's
    LOCAL_WORLD_SIZE), two epochs running; each row named by its first token."""
    out = {}
    for workers in (0, 2):
        ranked = mmidx_builder.mosaic_rank_stream(rows, rank=rank, world_size=world_size, **MOSAIC)
        loader = torch.utils.data.DataLoader(ranked, batch_size=MOSAIC["batch_size"], num_workers=workers,
                                             collate_fn=list)
        out[f"workers{workers}"] = [[int(row["input_ids"][0]) for batch in loader for row in batch]
                                    for _epoch in range(2)]
    # A run stopped after RESUME_STEPS steps of epoch 0, resumed by a new stream from its state.
    stopped = mmidx_builder.mosaic_rank_stream(rows, rank=rank, world_size=world_size, **MOSAIC)
    loader = torch.utils.data.DataLoader(stopped, batch_size=MOSAIC["batch_size"], collate_fn=list)
    for _step, _batch in zip(range(RESUME_STEPS), loader):
        pass
    state = stopped.state_dict(num_samples=RESUME_STEPS * MOSAIC["batch_size"] * world_size)
    resumed = mmidx_builder.mosaic_rank_stream(rows, rank=rank, world_size=world_size, **MOSAIC)
    resumed.load_state_dict(state)
    loader = torch.utils.data.DataLoader(resumed, batch_size=MOSAIC["batch_size"], num_workers=2, collate_fn=list)
    out["resumed-workers2"] = [int(row["input_ids"][0]) for batch in loader for row in batch]
    return out


def first_token_of_each(rows):
    """A tensor (accelerate dispatches tensors only) naming each sample by its first token."""
    return torch.tensor([int(row["input_ids"][0]) for row in rows], dtype=torch.long)


def mosaic_accelerate(rows, rank, world_size, out_dir):
    """accelerate launch over MDS shards: accelerator.prepare of a loader over
    mosaic_global_stream (dispatched and sharded), then the HF Trainer over it past the end of
    epoch 0, and resumed from its checkpoint; each row named by its first token."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    batch = MOSAIC["batch_size"]
    settings = {name: value for name, value in MOSAIC.items() if name != "batch_size"}
    out = {}
    for dispatch in (True, False):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        for workers in (0, 2):
            dataset = mmidx_builder.mosaic_global_stream(rows, world_size=accelerator.num_processes,
                                                         batch_size=batch, **settings)
            loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=workers,
                                                                     collate_fn=first_token_of_each))
            out[f"{'dispatch' if dispatch else 'shard'}-workers{workers}"] = \
                [[int(token) for tokens in loader for token in tokens] for _epoch in range(2)]
        # A Composer-format state taken after RESUME_STEPS steps, resumed by a new stream.
        stopped = mmidx_builder.mosaic_global_stream(rows, world_size=world_size, batch_size=batch, **settings)
        loader = accelerator.prepare(torch.utils.data.DataLoader(stopped, batch_size=batch,
                                                                 collate_fn=first_token_of_each))
        for _step, _batch in zip(range(RESUME_STEPS), loader):
            pass
        resumed = mmidx_builder.mosaic_global_stream(rows, world_size=world_size, batch_size=batch, **settings)
        resumed.load_state_dict(stopped.state_dict(num_samples=RESUME_STEPS * batch * world_size))
        loader = accelerator.prepare(torch.utils.data.DataLoader(resumed, batch_size=batch, num_workers=2,
                                                                 collate_fn=first_token_of_each))
        out[f"{'dispatch' if dispatch else 'shard'}-resumed-workers2"] = [int(t) for tokens in loader for t in tokens]

    vocab = 1 + max(max(row["input_ids"]) for row in rows)
    seen = []

    def model():
        torch.manual_seed(0)
        made = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=64, n_embd=8, n_layer=1, n_head=1))
        made.register_forward_pre_hook(
            lambda module, args, kwargs: seen.extend(int(r[0]) for r in kwargs["input_ids"]), with_kwargs=True)
        return made

    def first_tokens(batch_rows):  # one token a sample: the samples are documents of uneven length
        ids = first_token_of_each(batch_rows)[:, None]
        return {"input_ids": ids, "labels": ids}

    def train(workers, max_steps, resume=None, save_steps=None):
        args = TrainingArguments(output_dir=os.path.join(out_dir, f"mosaic-trainer-workers{workers}"),
                                 per_device_train_batch_size=batch, dataloader_num_workers=workers,
                                 remove_unused_columns=False, max_steps=max_steps, report_to=[], use_cpu=True,
                                 save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                                 logging_strategy="no", disable_tqdm=True)
        dataset = mmidx_builder.mosaic_global_stream(rows, world_size=args.world_size, batch_size=batch, **settings)
        seen.clear()
        Trainer(model=model(), args=args, train_dataset=dataset, data_collator=first_tokens).train(
            resume_from_checkpoint=resume)
        return list(seen)

    for workers in (0, 2):
        # Past the end of epoch 0: the Trainer's set_epoch(1) starts StreamingDataset's epoch 1.
        per_epoch = len(mmidx_builder.mosaic_global_stream(rows, world_size=world_size, batch_size=batch, **settings)
                        .rank_sample_ids(0, rank, max(workers, 1))) // batch
        out[f"trainer-workers{workers}"] = train(workers, per_epoch + 2, save_steps=2)
        out[f"trainer-steps-workers{workers}"] = per_epoch
    out["trainer-resumed-workers2"] = train(2, out["trainer-steps-workers2"] + 2, resume=os.path.join(
        out_dir, "mosaic-trainer-workers2", "checkpoint-2"))
    return out


def accelerate(stream, rank, world_size):
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration

    out = {}
    for dispatch in (True, False):
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
        for workers in (0, 2):
            dataset = mmidx_builder.megatron_global_stream(stream, world_size=accelerator.num_processes,
                                                           micro_batch_size=MICRO_BATCH, consumed_samples=CONSUMED)
            loader = accelerator.prepare(torch.utils.data.DataLoader(dataset, batch_size=MICRO_BATCH,
                                                                     num_workers=workers, collate_fn=collate))
            out[f"{'dispatch' if dispatch else 'shard'}-workers{workers}"] = \
                [row for batch in loader for row in rows_of(batch)]
    return out


def trainer(stream, rank, world_size, out_dir):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    vocab = 1 + max(max(row["input_ids"]) for row in stream)
    seen = []

    def model():
        torch.manual_seed(0)
        made = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_positions=16, n_embd=8, n_layer=1, n_head=1))
        made.register_forward_pre_hook(lambda module, args, kwargs: seen.extend(rows_of(kwargs)), with_kwargs=True)
        return made

    def with_labels(rows):
        batch = collate(rows)
        return {**batch, "labels": batch["input_ids"]}

    def train(workers, resume=None, dataset=None, max_steps=STEPS, save_steps=None):
        args = TrainingArguments(output_dir=os.path.join(out_dir, f"trainer-workers{workers}"),
                                 per_device_train_batch_size=MICRO_BATCH, dataloader_num_workers=workers,
                                 remove_unused_columns=False, max_steps=max_steps, report_to=[], use_cpu=True,
                                 save_strategy="steps" if save_steps else "no", save_steps=save_steps or 500,
                                 logging_strategy="no", disable_tqdm=True)
        dataset = dataset or mmidx_builder.megatron_global_stream(stream, world_size=args.world_size,
                                                                  micro_batch_size=args.per_device_train_batch_size,
                                                                  consumed_samples=CONSUMED)
        seen.clear()
        Trainer(model=model(), args=args, train_dataset=dataset, data_collator=with_labels).train(
            resume_from_checkpoint=resume)
        return list(seen)

    out = {}
    for workers in (0, 2):
        out[f"workers{workers}"] = train(workers, save_steps=2)
    # A checkpoint at step 2 of the run above: the resumed run trains on steps 3 and 4 again.
    out["resumed-workers2"] = train(2, resume=os.path.join(out_dir, "trainer-workers2", "checkpoint-2"))
    ranked = mmidx_builder.megatron_rank_stream(stream, rank=rank, world_size=world_size, micro_batch_size=MICRO_BATCH)
    try:
        out["rank-stream"] = train(0, dataset=ranked, max_steps=1)
    except ParameterError as error:
        out["rank-stream"] = {"error": str(error)}
    return out


def main(launcher, root, out_dir):
    """Every recipe of ``launcher`` in one launch (a launch's start costs more than a recipe):
    ROOT/corpus holds the .bin/.idx pair, ROOT/mds the same documents as MDS shards."""
    corpus, mds = os.path.join(root, "corpus"), os.path.join(root, "mds")

    def samples(folder):
        return load_dataset(folder, seq_length=3, seed=11, split="train", streaming=True)

    def mds_rows():
        return load_dataset(mds, token_column="tokens", split="train", streaming=True)

    if launcher == "torchrun":
        torch.distributed.init_process_group("gloo")
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
        out = {"loop": loop(samples(corpus), rank, world_size), "loop-mds": loop(samples(mds), rank, world_size),
               "mosaic": mosaic(mds_rows(), rank, world_size)}
    else:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        out = {"accelerate": accelerate(samples(corpus), rank, world_size),
               "trainer": trainer(samples(corpus), rank, world_size, out_dir),
               "mosaic-accelerate": mosaic_accelerate(mds_rows(), rank, world_size, out_dir)}
    path = os.path.join(out_dir, f"{launcher}.rank{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
