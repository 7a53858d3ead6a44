"""The Megatron-LM side of the Megatron-LM differential tests: one data-parallel rank of
Megatron-LM's own ``pretrain_gpt.py`` data path, run by tests/test_megatron_lm_oracle.py in a
subprocess under the python of a venv with megatron-core (0.16.1 or 0.19.2) and with an
extracted Megatron-LM archive (shared/oracles/megatron-lm/) first on PYTHONPATH. It never
imports mmidx_builder.

    RANK=r WORLD_SIZE=W MASTER_ADDR=127.0.0.1 MASTER_PORT=P python megatron_lm_oracle.py REQUEST.json OUT_DIR

REQUEST.json: ``{"cases": [{"name", "argv": [...], "consumed": C or null, "micro_batches": N}]}``.
For each case, in order, the rank does what ``pretrain_gpt.py`` does before its first step
(``shared/oracles/megatron-lm/README.md``): ``parse_args`` on the argv, ``validate_args``
with pretrain_gpt's defaults, ``set_global_variables(build_tokenizer=False)``, the model
parallel groups, ``args.iteration = 0`` (what ``setup_model_and_optimizer`` sets without a
checkpoint), ``args.consumed_train_samples = C`` (as a checkpoint load sets it),
``update_train_iters`` when ``--train-samples`` is given, ``get_train_valid_test_num_samples``,
``pretrain_gpt.train_valid_test_datasets_provider`` and ``build_pretraining_data_loader`` per
split (train at C, validation and test at 0, as ``build_train_valid_test_data_loaders`` does
without ``--skip-train``). It writes, atomically, ``OUT_DIR/<name>.rank<r>.npz``: every key of
the first N micro-batches of each split's loader (``<split>/<i>/<key>``), and a JSON
``meta`` entry (the sizes, ``train_iters``, ``len`` of each dataset, the tokenizer's EOD),
or ``<name>.rank<r>.error.json`` when Megatron-LM raises. Megatron's globals are unset
between cases; the process group is kept (same world size).

Loader workers (``--num-workers``, default 2) are set to 0: they change when items are made,
not which, and each would be a process on a 2-core machine.
"""

import json
import os
import sys
import traceback
import typing
import warnings

warnings.simplefilter("ignore")  # no Transformer Engine / Apex on CPU, and the like
if not hasattr(typing, "override"):  # core_v0.19.0's training code uses Python 3.12's typing.override
    import typing_extensions

    typing.override = typing_extensions.override

import numpy as np  # noqa: E402
import torch  # noqa: E402

import pretrain_gpt  # noqa: E402
from megatron.core import mpu  # noqa: E402
from megatron.training import global_vars  # noqa: E402
from megatron.training.arguments import parse_args, validate_args  # noqa: E402
from megatron.training.datasets.data_samplers import build_pretraining_data_loader  # noqa: E402
from megatron.training.training import get_train_valid_test_num_samples, update_train_iters  # noqa: E402

SPLITS = ("train", "validation", "test")


def run_case(case, rank):
    sys.argv = ["pretrain_gpt.py", *case["argv"]]
    args = parse_args()
    validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})
    args.num_workers = 0
    global_vars.set_global_variables(args, build_tokenizer=False)
    mpu.initialize_model_parallel()
    args.iteration = 0  # setup_model_and_optimizer without a checkpoint; --phase-transition-iterations reads it
    if case.get("consumed") is not None:
        args.consumed_train_samples = case["consumed"]
    if args.train_samples:
        update_train_iters(args)
    sizes = get_train_valid_test_num_samples()
    datasets = pretrain_gpt.train_valid_test_datasets_provider(sizes)
    consumed = {"train": args.consumed_train_samples, "validation": 0, "test": 0}
    arrays = {}
    meta = {"sizes": list(sizes), "train_iters": args.train_iters, "splits": {}}
    for name, dataset in zip(SPLITS, datasets):
        if dataset is None:
            meta["splits"][name] = None
            continue
        loader = build_pretraining_data_loader(dataset, consumed[name])
        meta["splits"][name] = {"dataset_len": len(dataset)}
        if hasattr(dataset, "config"):
            meta["eod"] = int(dataset.config.tokenizer.eod)
        elif hasattr(dataset, "datasets"):
            meta["eod"] = int(dataset.datasets[0].config.tokenizer.eod)
        for i, batch in enumerate(loader):
            if i >= case["micro_batches"]:
                break
            for key, value in batch.items():
                arrays[f"{name}/{i}/{key}"] = value.numpy() if torch.is_tensor(value) else np.asarray(value)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    return arrays


def _reset():
    global_vars.unset_global_variables()
    mpu.destroy_model_parallel()


def main(request_path, out_dir):
    rank = int(os.environ["RANK"])
    with open(request_path, encoding="utf-8") as f:
        request = json.load(f)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
    for case in request["cases"]:
        stem = os.path.join(out_dir, f"{case['name']}.rank{rank}")
        try:
            arrays = run_case(case, rank)
        except BaseException as error:  # SystemExit from argparse and asserts are Megatron's answers too
            _write(stem + ".error.json", json.dumps({"type": type(error).__name__, "message": str(error),
                                                     "traceback": traceback.format_exc()}).encode())
        else:
            tmp = stem + ".tmp.npz"
            np.savez(tmp, **arrays)
            os.replace(tmp, stem + ".npz")
        finally:
            _reset()
    torch.distributed.destroy_process_group()


def _write(path, data):
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
