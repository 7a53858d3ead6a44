"""The fairseq side of the fairseq differential tests: run by tests/test_fairseq_oracle.py
under the python of fairseq's own venv (scripts/install_fairseq_oracle.sh), never under the
project's, and never importing mmidx_builder.

    python fairseq_oracle.py REQUEST.json RESPONSE.json

The request names text corpora, the datasets to load from them and the batch iterators to
make; the response holds, in the same order:

- ``corpora``: for each, the data-bin folder ``fairseq-preprocess`` wrote from the text
  (extra training shards ``train1``, ``train2``... binarized with the first shard's
  dictionaries, as one binarizes shards for ``combine``);
- ``datasets``: for each, ``TranslationTask.load_dataset``'s source and target sizes, and
  with ``items`` every ``dataset[i]``'s source and target ids;
- ``iterators``: for each, ``{"epochs": [{"epoch", "batches", "served"}...]}`` from
  ``task.get_batch_iterator(...).next_epoch_itr(shuffle)`` epoch after epoch (``batches``
  in the sampler's order, ``served`` the sorted ids of what the loader fetched), or
  ``{"error": ..., "type": ...}`` where fairseq refuses;
- ``vectors``: for each token-count vector, ``data_utils.batch_by_size`` and the Cython
  ``batch_by_size_vec`` under it;
- ``preprocess``: for each job, ``fairseq-preprocess`` run with each of its argument lists
  in turn, then its files moved (``{"ok": true}``, or the error fairseq raised);
- ``langpairs``: for each, ``load_langpair_dataset`` with the item options given
  (``prepend_bos``, ``truncate_source``, ``append_source_id``...): its sizes, every item,
  and ``dataset.collater`` of each listed batch, tensors as lists.

``"fairseq_version": "0.12.2"`` iterators are fairseq 0.12.2's ``get_batch_iterator``: its
``ordered_indices``, ``filter_indices_by_size``, ``batch_by_size_vec`` and
``EpochBatchIterator`` are the code installed here unchanged (the 0.12.2 and 0.12.3.1
sources differ, in these, only in the lines this script re-does as 0.12.2 has them: numpy
seeded with ``seed`` rather than ``seed + epoch``, and no dropping of a last batch whose size
is not a multiple).
"""

import json
import logging
import os
import shutil
import sys
import warnings

warnings.simplefilter("ignore")          # pin_memory without an accelerator, and the like
logging.disable(logging.WARNING)         # fairseq logs every step at INFO

import numpy as np  # noqa: E402
from fairseq import options  # noqa: E402
from fairseq.data import data_utils, iterators  # noqa: E402
from fairseq.data.data_utils_fast import batch_by_size_vec  # noqa: E402
from fairseq.data import Dictionary  # noqa: E402
from fairseq.tasks.translation import TranslationConfig, TranslationTask, load_langpair_dataset  # noqa: E402
from fairseq_cli import preprocess  # noqa: E402


def _preprocess(argv):
    args = options.get_preprocessing_parser().parse_args(argv)
    handlers = list(preprocess.logger.handlers)
    try:
        preprocess.main(args)
    finally:
        for handler in preprocess.logger.handlers[len(handlers):]:  # main adds a log file each call
            handler.close()
            preprocess.logger.removeHandler(handler)


def binarize(corpus):
    src, tgt, dest = corpus["src"], corpus["tgt"], corpus["dest"]
    common = ["--source-lang", src, "--target-lang", tgt, "--workers", "1"]
    argv = common + ["--destdir", dest, "--trainpref", corpus["train"]]
    for split in ("valid", "test"):
        if corpus.get(split):
            argv += [f"--{split}pref", corpus[split]]
    _preprocess(argv)
    for k, prefix in enumerate(corpus.get("extra_train", []), 1):
        scratch = os.path.join(dest, f"_shard{k}")
        _preprocess(common + ["--destdir", scratch, "--trainpref", prefix,
                              "--srcdict", os.path.join(dest, f"dict.{src}.txt"),
                              "--tgtdict", os.path.join(dest, f"dict.{tgt}.txt")])
        for lang in (src, tgt):
            for ext in ("bin", "idx"):
                os.replace(os.path.join(scratch, f"train.{src}-{tgt}.{lang}.{ext}"),
                           os.path.join(dest, f"train{k}.{src}-{tgt}.{lang}.{ext}"))
        shutil.rmtree(scratch)
    return {"data_bin": dest}


def load(spec):
    # The three fields TranslationConfig takes from the global config (II(...)), at
    # fairseq-train's defaults.
    cfg = TranslationConfig(data=spec["data_bin"], source_lang=spec["src"], target_lang=spec["tgt"],
                            upsample_primary=spec.get("upsample_primary", 1), train_subset="train",
                            dataset_impl=None, required_seq_len_multiple=1)
    task = TranslationTask.setup_task(cfg)
    # fairseq-train combines the training split's shards, not the validation ones.
    task.load_dataset(spec["split"], combine=spec["split"] == "train")
    return task, task.dataset(spec["split"])


def dataset_report(dataset, with_items):
    report = {"src_sizes": dataset.src_sizes.tolist(), "tgt_sizes": dataset.tgt_sizes.tolist()}
    if with_items:
        report["items"] = [[dataset[i]["source"].tolist(), dataset[i]["target"].tolist()]
                           for i in range(len(dataset))]
    return report


def iterator_0_12_2(task, dataset, max_tokens=None, max_sentences=None, max_positions=None,
                    ignore_invalid_inputs=False, required_batch_size_multiple=1, seed=1, epoch=1, **sharding):
    with data_utils.numpy_seed(seed):
        indices = dataset.ordered_indices()
    if max_positions is not None:
        indices = task.filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)
    batches = batch_by_size_vec(indices, dataset.num_tokens_vec(indices).astype("int64"),
                                -1 if max_tokens is None else int(max_tokens),
                                -1 if max_sentences is None else max_sentences, required_batch_size_multiple)
    return iterators.EpochBatchIterator(dataset=dataset, collate_fn=dataset.collater, batch_sampler=batches,
                                        seed=seed, epoch=epoch, **sharding)


def serve(task, dataset, case):
    kwargs = dict(case["kwargs"])
    if kwargs.get("max_positions") is not None and not isinstance(kwargs["max_positions"], int):
        kwargs["max_positions"] = tuple(kwargs["max_positions"])
    try:
        if case.get("fairseq_version") == "0.12.2":
            itr = iterator_0_12_2(task, dataset, **kwargs)
        else:
            itr = task.get_batch_iterator(dataset, disable_iterator_cache=True, **kwargs)
    except Exception as error:  # fairseq raises Exception / AssertionError on bad sizes
        return {"error": str(error), "type": type(error).__name__}
    # The loader still fetches every dataset[i] of every batch; only the padding into
    # tensors (dataset.collater, most of the time here, and no part of batching) is skipped.
    itr.collate_fn = lambda samples: sorted(int(sample["id"]) for sample in samples)
    epochs = []
    for _ in range(case["epochs"]):
        served_itr = itr.next_epoch_itr(shuffle=case.get("shuffle", True))
        batches = [[int(i) for i in batch] for batch in itr.epoch_batch_sampler]
        served = list(served_itr)  # to the end, as a training epoch: only then does the epoch advance
        epochs.append({"epoch": itr.epoch, "batches": batches, "served": served})
    return {"epochs": epochs}


def batch_vector(vector):
    indices = np.asarray(vector["indices"], np.int64)
    num_tokens = np.asarray(vector["num_tokens"], np.int64)
    max_tokens, max_sentences, multiple = vector["max_tokens"], vector["max_sentences"], vector["multiple"]
    released = batch_by_size_vec(indices, num_tokens, -1 if max_tokens is None else max_tokens,
                                 -1 if max_sentences is None else max_sentences, multiple)
    current = data_utils.batch_by_size(indices, None, num_tokens_vec=num_tokens, max_tokens=max_tokens,
                                       max_sentences=max_sentences, required_batch_size_multiple=multiple)
    return {"0.12.2": [b.tolist() for b in released], "0.12.3.1": [b.tolist() for b in current]}


def preprocess_job(job):
    try:
        for argv in job["runs"]:
            _preprocess(argv)
        for source, destination in job.get("moves", []):
            os.replace(source, destination)
    except BaseException as error:  # fairseq asserts, raises FileExistsError, or exits (argparse)
        return {"error": str(error), "type": type(error).__name__}
    return {"ok": True}


def _plain(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def langpair(spec):
    data_bin, src, tgt = spec["data_bin"], spec["src"], spec["tgt"]
    src_dict = Dictionary.load(os.path.join(data_bin, f"dict.{src}.txt"))
    tgt_dict = Dictionary.load(os.path.join(data_bin, f"dict.{tgt}.txt"))
    options = dict(spec.get("options", {}))
    dataset = load_langpair_dataset(
        data_bin, spec["split"], src, src_dict, tgt, tgt_dict, combine=spec.get("combine", True), dataset_impl=None,
        upsample_primary=spec.get("upsample_primary", 1), left_pad_source=options.pop("left_pad_source", True),
        left_pad_target=options.pop("left_pad_target", False),
        max_source_positions=options.pop("max_source_positions", 1024), max_target_positions=1024,
        pad_to_multiple=options.pop("pad_to_multiple", 1), **options)
    report = {"src_sizes": dataset.src_sizes.tolist(), "tgt_sizes": dataset.tgt_sizes.tolist(),
              "items": [[dataset[i]["source"].tolist(), dataset[i]["target"].tolist()] for i in range(len(dataset))],
              "collated": []}
    for batch in spec.get("batches", []):
        report["collated"].append(_plain(dataset.collater([dataset[i] for i in batch])))
    return report


def main(request_path, response_path):
    with open(request_path) as f:
        request = json.load(f)
    response = {"corpora": [binarize(c) for c in request.get("corpora", [])], "datasets": [], "iterators": [],
                "vectors": [batch_vector(v) for v in request.get("vectors", [])],
                "preprocess": [preprocess_job(job) for job in request.get("preprocess", [])]}
    response["langpairs"] = [langpair(spec) for spec in request.get("langpairs", [])]
    loaded = []
    for spec in request.get("datasets", []):
        loaded.append(load(spec))
        response["datasets"].append(dataset_report(loaded[-1][1], spec.get("items", False)))
    for case in request.get("iterators", []):
        response["iterators"].append(serve(*loaded[case["dataset"]], case))
    tmp = f"{response_path}.tmp"
    with open(tmp, "w") as f:
        json.dump(response, f)
    os.replace(tmp, response_path)


if __name__ == "__main__":
    main(*sys.argv[1:3])
